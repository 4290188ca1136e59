"""A small MCP server of notes, for `durafact react ... --mcp notes` (docs/guides/tools.md).

    durafact-worker --mcp notes="python examples/notes_mcp.py"          three sample notes
    durafact-worker --mcp notes="python examples/notes_mcp.py ~/notes"  your own

The notes are the `.md` and `.txt` files of the directory given (a note's name is its
file's name without the suffix), or three sample notes. A run sees the tools as
`notes__search`, `notes__read` and `notes__add`. It speaks MCP over stdio, written with
the `mcp` package's server API, which durafact installs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

SAMPLES = {
    "launch": "Launch checklist. The deadline for the release notes is Friday 12 December.",
    "groceries": "Milk, eggs, bread, coffee.",
    "report": "Quarterly report: the draft goes to Ana by the deadline, 15 December.",
}
READ_ONLY = ToolAnnotations(read_only_hint=True)

server = MCPServer("notes", log_level="WARNING")
folder: Path | None = None  # the directory given; None: the samples, in memory
added: dict[str, str] = {}  # notes added to the samples while the process runs


def notes() -> dict[str, str]:
    """Every note by name, read afresh: a file edited meanwhile is seen."""
    if folder is None:
        return {**SAMPLES, **added}
    files = sorted([*folder.glob("*.md"), *folder.glob("*.txt")])
    return {path.stem: path.read_text(errors="replace") for path in files}


@server.tool(annotations=READ_ONLY)
def search(text: str) -> str:
    """The notes that mention `text` (any case), each with its lines that do."""
    found = [
        f"{name}: " + " / ".join(line for line in note.splitlines() if text.lower() in line.lower())
        for name, note in notes().items()
        if text.lower() in note.lower()
    ]
    return "\n".join(found) or f"no note mentions {text!r}"


@server.tool(annotations=READ_ONLY)
def read(name: str) -> str:
    """The whole text of the note `name`."""
    everything = notes()
    if name not in everything:
        raise ToolError(f"no note named {name!r}; the notes: {', '.join(everything)}")
    return everything[name]


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def add(name: str, text: str) -> str:
    """A new note `name`; a note of that name already there is kept, never overwritten."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ToolError("a note's name is letters, digits, - and _")
    if name in notes():
        raise ToolError(f"a note named {name!r} is already there")
    if folder is None:
        added[name] = text
    else:
        (folder / f"{name}.md").write_text(text)
    return f"added {name}"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        folder = Path(sys.argv[1]).expanduser()
        if not folder.is_dir():
            sys.exit(f"notes_mcp: {folder} is not a directory")
    server.run("stdio")
