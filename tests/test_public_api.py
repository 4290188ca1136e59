"""What users import is listed once (`durafact.__all__`), small, and everything else is
private: every other module lives in a `durafact._*` package, and what README, the
documentation (docs/) and the root app (workflows/, activities/, worker.py, starter.py)
import is public."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import durafact
import durafact.testing
from tests.docs.blocks import all_blocks
from tests.helpers import ROOT

APP = ["workflows", "activities", "worker.py", "starter.py"]


def test_every_public_name_resolves_and_says_what_it_is() -> None:
    assert 0 < len(durafact.__all__) <= 60
    for name in durafact.__all__:
        value = getattr(durafact, name)
        assert (value.__doc__ or "").strip(), f"durafact.{name} has no docstring"
    assert durafact.__all__ == sorted(set(durafact.__all__))


def test_the_type_checkers_list_is_the_exported_list() -> None:
    tree = ast.parse((ROOT / "durafact/__init__.py").read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("durafact.")
        for alias in node.names
    }
    assert imported == set(durafact.__all__)


def test_every_module_but_the_public_two_is_private() -> None:
    public = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "durafact").rglob("*.py")
        if not any(part.startswith("_") for part in path.relative_to(ROOT / "durafact").parts)
    )
    assert public == ["durafact.testing"]


def test_importing_durafact_loads_none_of_its_modules() -> None:
    code = (
        "import durafact, json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('durafact'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == ["durafact"]


def imports_in(text: str) -> set[str]:
    """The durafact modules a program or the documentation's python blocks import from."""
    return set(re.findall(r"^\s*(?:from|import) (durafact[\w.]*)", text, re.M))


def test_readme_the_docs_and_the_app_import_only_public_names() -> None:
    blocks = [block.text for block in all_blocks() if block.lang == "python"]
    assert any("from durafact import" in text for text in blocks)
    texts = blocks + [
        path.read_text()
        for name in APP
        for path in ([ROOT / name] if name.endswith(".py") else (ROOT / name).rglob("*.py"))
    ]
    used = set().union(*(imports_in(text) for text in texts))
    assert used <= {"durafact", "durafact.testing"}, used


DIRECTIVE = re.compile(r"^::: (durafact[\w.]*)$", re.MULTILINE)


def documented(page: str) -> list[str]:
    """The names an API reference page renders (`::: durafact.NAME`), in its order."""
    return DIRECTIVE.findall((ROOT / "docs" / "reference" / page).read_text())


def test_the_reference_lists_exactly_the_public_names() -> None:
    names = documented("durafact.md")
    assert len(names) == len(set(names)), "a name is documented once"
    assert sorted(names) == [f"durafact.{name}" for name in durafact.__all__]


def test_the_testing_reference_lists_exactly_its_public_names() -> None:
    names = [name for name in documented("testing.md") if name != "durafact.testing"]
    assert sorted(names) == sorted(f"durafact.testing.{n}" for n in durafact.testing.__all__)
