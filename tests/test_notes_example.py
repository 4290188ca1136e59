"""examples/notes_mcp.py, the MCP server the tools page runs as `notes` (its sample notes,
through a worker and a ReAct run: tests/docs), here on a directory of notes, over stdio
through durafact's own MCP client: searched, read, and added to, never overwritten."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from durafact._activities.mcp import McpServer, McpToolError
from tests.helpers import ROOT

EXAMPLE = ROOT / "examples" / "notes_mcp.py"


async def test_the_notes_example_serves_a_directorys_notes_and_adds_one_without_overwriting(
    tmp_path: Path,
) -> None:
    (tmp_path / "plan.md").write_text("Ship it by the Deadline.\nThen rest.\n")
    (tmp_path / "shopping.txt").write_text("milk\n")
    (tmp_path / "settings.json").write_text('{"deadline": "not a note"}')

    async with McpServer("notes", command=[sys.executable, str(EXAMPLE), str(tmp_path)]) as notes:
        specs = {spec.name: spec for spec in await notes.specs()}
        found = await notes.call("search", {"text": "deadline"}, "k1")
        added = await notes.call("add", {"name": "call", "text": "Call Ana: deadline"}, "k2")
        again = await notes.call("search", {"text": "DEADLINE"}, "k3")
        with pytest.raises(McpToolError, match="a note named 'plan' is already there"):
            await notes.call("add", {"name": "plan", "text": "overwritten"}, "k4")
        with pytest.raises(McpToolError, match="no note named 'nope'; the notes: call, plan, "):
            await notes.call("read", {"name": "nope"}, "k5")
        read = await notes.call("read", {"name": "shopping"}, "k6")

    assert sorted(specs) == ["add", "read", "search"]
    assert not any(spec.destructive for spec in specs.values())
    assert found == "plan: Ship it by the Deadline."
    assert added == "added call"
    assert again == "call: Call Ana: deadline\nplan: Ship it by the Deadline."
    assert (tmp_path / "call.md").read_text() == "Call Ana: deadline"
    assert (tmp_path / "plan.md").read_text() == "Ship it by the Deadline.\nThen rest.\n"
    assert read == "milk\n"
