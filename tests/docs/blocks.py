"""The fenced code blocks of the documentation (docs/**/*.md and README.md), and what
each one says about how it is checked.

A block is run by tests/docs/test_blocks.py when its language is one of RUN (python
programs, shell commands, terminal sessions), unless the HTML comment on the line right
before its fence says otherwise. That comment holds `key: value` pairs, `;`-separated:

- `not run: REASON`: the block cannot run here (a Docker engine, Temporal Cloud, a
  key of a real model...); the reason (the rest of the comment) is required, and
  counted by the tests.
- `run by: tests/PATH.py`: another test runs this block; that file must name the page.
- `file: PATH`: the block is the file PATH of the page's project (a module a later
  block imports or runs, a price table...); written, and for python run as a module.
- `model: NAME`: what the scripted model answers while the block runs
  (tests/docs/models.py, NAME).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import ROOT

RUN = {"python", "sh", "bash", "console"}
# Every block says its language; these are the ones that are shown, never run.
SHOWN = {"json", "toml", "text", "yaml"}
KEYS = {"not run", "run by", "file", "model"}

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<body>.*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path  # relative to ROOT: docs/guides/your-recipe.md, README.md
    line: int  # the fence's line, 1-based
    lang: str
    text: str
    marks: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN and "not run" not in self.marks and "run by" not in self.marks


def pages() -> list[Path]:
    """README.md and every page of the site, relative to ROOT."""
    docs = sorted(p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md"))
    return [Path("README.md"), *docs]


def parse_marks(body: str) -> dict[str, str]:
    if body.startswith("not run:"):  # the reason is the rest, whatever it holds
        return {"not run": body.removeprefix("not run:").strip()}
    marks = {}
    for part in body.split(";"):
        key, sep, value = part.partition(":")
        if sep:
            marks[key.strip()] = value.strip()
    return marks


def blocks_of(page: Path) -> list[Block]:
    lines = (ROOT / page).read_text().splitlines()
    found: list[Block] = []
    k = 0
    while k < len(lines):
        opening = FENCE.match(lines[k])
        if not opening:
            k += 1
            continue
        indent = len(opening["indent"])
        end = next(j for j in range(k + 1, len(lines)) if lines[j].strip() == "```")
        body = "\n".join(line[indent:] for line in lines[k + 1 : end]) + "\n"
        before = MARKER.match(lines[k - 1]) if k else None
        marks = parse_marks(before["body"]) if before else {}
        found.append(Block(page, k + 1, opening["lang"], body, marks))
        k = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks_of(page)]


def page_file(page: str, path: str) -> str:
    """The text of the block of `page` marked `file: PATH`: what a test of its own runs."""
    found = [b.text for b in blocks_of(Path(page)) if b.marks.get("file") == path]
    assert len(found) == 1, f"{page} shows {path} once"
    return found[0]


def run_by(page: str, test: str) -> str:
    """The text of the one python block of `page` marked `run by: TEST` and no `file:`
    (a file the test writes is read with `page_file`)."""
    found = [
        b.text
        for b in blocks_of(Path(page))
        if b.lang == "python" and b.marks.get("run by") == test and "file" not in b.marks
    ]
    assert len(found) == 1, f"{page} shows one python block that {test} runs"
    return found[0]
