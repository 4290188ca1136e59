"""Workflow code stays deterministic: no clock, randomness, network, processes or
activity code reachable from `workflows/`.

`DurafactPlugin` passes the `durafact` and `workflows` packages through the Temporal
sandbox (durafact/_runtime/plugin.py says why), so the sandbox no longer intercepts what those
modules import. This test takes its place for them, statically, on every module
a workflow module imports from this project; the committed histories in
tests/histories/ cover behaviour (tests/workflows/test_replay.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

# Nothing a workflow can reach may import these: clocks, randomness, the network,
# processes, threads, or the activities themselves.
NONDETERMINISTIC = {
    "httpx",
    "openai",
    "random",
    "requests",
    "secrets",
    "signal",
    "socket",
    "subprocess",
    "threading",
    "time",
    "urllib",
    "uuid",
}
# Nor the activities, durafact's runtime, commands and test kit, which do all of that.
RUNTIME = (
    "durafact._activities",
    "durafact._runtime",
    "durafact._cli",
    "durafact._api",
    "durafact._local",
    "durafact.testing",
)
# Nor file access (the core's purity test, tests/durafact/test_purity.py, is stricter
# still for `durafact/`).
FILE_ACCESS = {"os", "pathlib", "shutil", "yaml"}
# Clock reads that bypass workflow.now().
FORBIDDEN_CALLS = {"now", "utcnow", "today"}


def module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def imported_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def workflow_closure() -> dict[str, ast.AST]:
    """Every project module reachable by imports from the workflow modules."""
    seen: dict[str, ast.AST] = {}
    todo = [f"durafact._recipes.{p.stem}" for p in (ROOT / "durafact/_recipes").glob("*.py")]
    while todo:
        name = todo.pop()
        path = module_path(name)
        if name in seen or path is None:
            continue
        seen[name] = tree = ast.parse(path.read_text(), filename=str(path))
        todo += [n for n in imported_names(tree) if n.split(".")[0] == "durafact"]
    return seen


MODULES = workflow_closure()


def test_the_closure_covers_the_workflows_and_the_core_they_use() -> None:
    assert {
        "durafact._recipes.plan_execute",
        "durafact._recipes.recipe",
        "durafact._core.ledger",
    } <= set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_workflow_code_imports_nothing_nondeterministic(name: str) -> None:
    tree = MODULES[name]
    bad = {
        n
        for n in imported_names(tree)
        if n.split(".")[0] in NONDETERMINISTIC | FILE_ACCESS or n.startswith(RUNTIME)
    }
    assert not bad, f"{name} imports {sorted(bad)}"
    clock = [
        f"line {node.lineno}: .{node.func.attr}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in FORBIDDEN_CALLS
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "workflow")
    ]
    assert not clock, f"{name} reads the clock outside workflow.now(): {clock}"
