"""The documentation site builds in strict mode (a broken link, anchor or reference
fails), and its API reference lists exactly the public names: `durafact.__all__` on one
page, `durafact.testing.__all__` on the other."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import durafact
import durafact.testing
from tests.helpers import ROOT

DIRECTIVE = re.compile(r"^::: (durafact[\w.]*)$", re.MULTILINE)


def documented(page: str) -> list[str]:
    """The names a reference page renders, in its order (`::: durafact.NAME`)."""
    return DIRECTIVE.findall((ROOT / "docs" / "reference" / page).read_text())


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)]
    done = subprocess.run(
        build, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reference" / "durafact" / "index.html").is_file()


def test_the_reference_lists_exactly_the_public_names() -> None:
    names = documented("durafact.md")
    assert len(names) == len(set(names)), "a name is documented once"
    assert sorted(names) == [f"durafact.{name}" for name in durafact.__all__]


def test_the_testing_reference_lists_exactly_its_public_names() -> None:
    names = [name for name in documented("testing.md") if name != "durafact.testing"]
    assert sorted(names) == sorted(f"durafact.testing.{n}" for n in durafact.testing.__all__)
