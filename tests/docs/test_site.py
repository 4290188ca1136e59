"""The documentation site builds in strict mode: a broken link, anchor or reference
fails. (That its API reference lists exactly the public names is tests/test_public_api.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)]
    done = subprocess.run(
        build, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reference" / "durafact" / "index.html").is_file()
