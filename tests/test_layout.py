"""The imports point one way: the front doors (the command line `durafact._cli`, the
HTTP API `durafact._api`) present the operations of the service layer
(`durafact._service`), which uses the plugin and the runtime, which use the recipes
(`durafact._recipes`) and the activities (`durafact._activities`), which use the core
(`durafact._core`); no two modules import each other. Neither front door imports the
other, nor a workflow module: what a recipe can do is read from the registry, never
from its type (`durafact._main` joins the two doors). (The core's own rule is
tests/durafact/test_purity.py; workflow code's is tests/workflows/test_determinism.py.)"""

from __future__ import annotations

import ast
import itertools

import pytest

from tests.helpers import ROOT

PACKAGES = ("durafact",)


def module_name(path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


MODULES = {
    module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
}


def imports_of(name: str) -> set[str]:
    """The project modules `name` imports (`from a import b` counts a.b when b is one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return {module for module in found if module in MODULES and module != name}


IMPORTS = {name: imports_of(name) for name in MODULES}


def test_no_two_modules_import_each_other() -> None:
    pairs = [
        (a, b)
        for a, b in itertools.combinations(sorted(MODULES), 2)
        if b in IMPORTS[a] and a in IMPORTS[b]
    ]
    assert pairs == []


@pytest.mark.parametrize(
    ("package", "never"),
    [
        (
            "durafact._activities",
            (
                "durafact._recipes",
                "durafact._runtime",
                "durafact._cli",
                "durafact._api",
                "durafact._local",
            ),
        ),
        (
            "durafact._core",
            (
                "durafact._recipes",
                "durafact._activities",
                "durafact._runtime",
                "durafact._cli",
                "durafact._api",
                "durafact._local",
            ),
        ),
        # The demo stack (the `local` extra) is the command line's, never a worker's.
        (
            "durafact._runtime",
            ("durafact._cli", "durafact._api", "durafact._service", "durafact._local"),
        ),
        ("durafact._runtime.plugin", ("durafact._cli",)),
        (
            "durafact._recipes",
            ("durafact._local", "durafact._service", "durafact._cli", "durafact._api"),
        ),
        ("durafact._service", ("durafact._cli", "durafact._api")),
        ("durafact._cli", ("durafact._api", "durafact._recipes")),
        ("durafact._api", ("durafact._cli", "durafact._recipes")),
    ],
)
def test_a_package_never_imports_what_is_above_it(package: str, never: tuple[str, ...]) -> None:
    upward = {
        (name, imported)
        for name in MODULES
        if name == package or name.startswith(f"{package}.")
        for imported in IMPORTS[name]
        if imported.startswith(never)
    }
    assert upward == set()
