"""The core is pure: the modules of `durafact/_core/` import nothing that does I/O,
so workflows can use all of them inside the sandbox, and activities, the runtime and
the commands depend on them, never the other way round. The other packages assemble
and run things: `durafact._runtime` (the plugin, converter, codec, payload store,
registry, settings, endpoints, connection), `durafact._local` (the embedded stack,
the local model), `durafact._cli` and `durafact._api` (the front doors), and
`durafact.testing` (the scripted model)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

CORE = sorted(
    f"durafact._core.{p.stem}" if p.stem != "__init__" else "durafact._core"
    for p in (ROOT / "durafact/_core").glob("*.py")
)
# What a core module may import: pure standard-library modules, pydantic, the
# stemmer, and the core itself. Anything else (files, processes, sockets, HTTP,
# the model client, the Temporal client, the other packages) fails here by name.
ALLOWED = {
    "__future__",
    "base64",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "functools",
    "hashlib",
    "inspect",
    "itertools",
    "json",
    "logging",
    "math",
    "pydantic",
    "re",
    "snowballstemmer",
    "struct",
    "typing",
    "unicodedata",
    "durafact._core",
}
# Must not be loaded, even indirectly, by importing the whole core.
NEVER_LOADED = [
    "durafact._activities",
    "durafact._recipes",
    "durafact._runtime",
    "durafact._cli",
    "durafact._api",
    "durafact._local",
    "durafact.testing",
    "subprocess",
    "socket",
    "ssl",
    "http.client",
    "urllib.request",
    "httpx",
    "openai",
    "yaml",
    "temporalio.client",
    "temporalio.service",
]


def imports_of(module: str) -> set[str]:
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_the_core_modules_are_all_checked() -> None:
    assert {
        "durafact._core",
        "durafact._core.ledger",
        "durafact._core.ids",
        "durafact._core.sources",
    } <= set(CORE)
    assert len(CORE) > 20


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_imports_only_pure_modules(module: str) -> None:
    impure = sorted(
        name
        for name in imports_of(module)
        if (name.split(".")[0] not in ALLOWED and not name.startswith("durafact._core"))
        or name.startswith(tuple(NEVER_LOADED))
    )
    assert not impure, (
        f"{module} imports {impure}: I/O belongs in durafact/_activities/ or durafact/_runtime/"
    )


def test_importing_the_whole_core_loads_no_io_module() -> None:
    # A fresh interpreter: what importing the core pulls in, transitively, beyond what
    # pydantic itself loads once it builds a model (it reaches `socket` through `email`).
    code = (
        "import importlib, json, sys, pydantic\n"
        "class Probe(pydantic.BaseModel):\n    x: int\n"
        "before = set(sys.modules)\n"
        f"for name in {CORE!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {NEVER_LOADED!r} if m in set(sys.modules) - before]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == []
