"""`durafact fork ID --set ARTIFACT=VALUE | --edit ARTIFACT | --drop ARTIFACT`: a what-if from
a finished run, started by the service layer (durafact/_service/forks.py), then followed
as `start` follows a run.

The new run keeps every artifact the old one made upstream of the edit (no model call)
and reruns only what depends on it. `--set` gives a text artifact its new text (a JSON
object of fields for another); `--edit` opens the artifact's JSON in $VISUAL or $EDITOR
and forks with what was saved; `--drop` leaves a quote or a claim out. A mistake is one
line before anything starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durafact._cli.follow import wait_and_print, warn_if_no_worker
from durafact._cli.output import Failed, emit_json, quoted, say
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings
from durafact._service.forks import editable_data, fork_run
from durafact._service.runs import state_name


@dataclass
class Edits:
    """What `fork` was told to change: new values, an artifact to edit, ones to leave out."""

    values: dict[str, str] = field(default_factory=dict)
    edit: str | None = None
    drop: list[str] = field(default_factory=list)


def fork_edits(pairs: list[str], edit: str | None, drop: list[str]) -> Edits:
    """The options as `Edits`; none given, a malformed one, or an artifact named twice is
    a one-line error (exit code 2)."""
    if not pairs and edit is None and not drop:
        raise Failed(
            "fork: say what changes: --set ARTIFACT=VALUE, --edit ARTIFACT or --drop ARTIFACT "
            "(durafact artifacts ID lists them)",
            code=2,
        )
    edits = Edits(edit=edit, drop=list(drop))
    for pair in pairs:
        artifact_id, sep, value = pair.partition("=")
        if not sep or not artifact_id.strip():
            raise Failed(f"--set {pair!r}: expected ARTIFACT=VALUE", code=2)
        edits.values[artifact_id.strip()] = value
    named = [*edits.values, *([edit] if edit else []), *drop]
    twice = sorted({i for i in named if named.count(i) > 1})
    if twice:
        raise Failed(f"fork: {twice[0]} is named twice", code=2)
    return edits


async def fork(
    client: Any, settings: Settings, registry: Registry, args: argparse.Namespace, edits: Edits
) -> int:
    values: dict[str, Any] = dict(edits.values)
    if edits.edit is not None:
        values[edits.edit] = await edited(client, registry, args.id, edits.edit)
    forked = await fork_run(
        client,
        settings,
        registry,
        args.id,
        values,
        edits.drop,
        new_id=args.new_id,
        started_by="`durafact fork`",
    )
    run = forked.started
    new_id, description = forked.workflow_id, run.description
    url = settings.workflow_url(new_id, run.run_id)
    recipe = registry.get(description.workflow_type)
    if args.json and args.no_wait:
        emit_json(new_id, run.run_id, state_name(description), None, url)
        return 0
    if not args.json:
        changed = [*forked.fork.edited, *(f"{i} removed" for i in forked.fork.removed)]
        say(f"forked workflow {new_id} (run {run.run_id}) from {args.id}: {', '.join(changed)}")
        say(f"Web UI: {url}")
    if args.no_wait:
        await warn_if_no_worker(client, settings, description.task_queue)
        say(f"result: durafact result {quoted(new_id)}")
        return 0
    return await wait_and_print(
        client, settings, run.handle, description, run.run_id, url, args.json, recipe
    )


async def edited(client: Any, registry: Registry, workflow_id: str, artifact_id: str) -> Any:
    """The artifact's JSON as the person saved it in their editor."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor:
        raise Failed("--edit: set EDITOR (or VISUAL) to the command of your editor", code=2)
    data = await editable_data(client, registry, workflow_id, artifact_id)
    with tempfile.TemporaryDirectory(prefix="durafact-fork-") as folder:
        path = Path(folder) / "artifact.json"
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        process = await asyncio.create_subprocess_exec(*shlex.split(editor), str(path))
        if await process.wait() != 0:
            raise Failed(f"--edit: the editor exited {process.returncode}: nothing was forked")
        text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failed(
            f"--edit: {artifact_id} is no longer JSON ({exc.msg}, line {exc.lineno} column "
            f"{exc.colno}): nothing was forked",
            code=2,
        ) from None
