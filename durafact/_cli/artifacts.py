"""`durafact artifacts ID [--json]`: the whole ledger of a run, texts included.

A ready workflow's result names the artifacts behind its answer by id and version
instead of carrying their texts again (each text is stored in history once); this
command shows them all, read with the workflow's `artifacts` query. It works on a
running run and on a closed one, as long as a worker runs: a closed run's query is
answered by a worker replaying its history. A tool loop that continued as new holds
its earlier runs' artifacts in those runs: the latest run's ledger names each
(`run:RUN_ID`, with the observations it holds), and `--run RUN_ID` shows one.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from durafact._cli.output import say, say_json
from durafact._core.ledger import Ledger
from durafact._core.text import indent
from durafact._service.ledger import earlier_runs, read_ledger
from durafact._service.runs import state_name


async def artifacts(client: Any, workflow_id: str, as_json: bool, run_id: str | None = None) -> int:
    description, ledger = await read_ledger(client, workflow_id, run_id)
    state = state_name(description)
    if as_json:
        document = {
            "workflow_id": workflow_id,
            "run_id": description.run_id,
            "workflow_type": description.workflow_type,
            "status": state,
            "ledger": ledger.model_dump(mode="json"),
        }
        say_json(document)
        return 0
    say(
        f"workflow {workflow_id} ({description.workflow_type}): {state}; "
        f"{len(ledger)} artifacts, {len(ledger.links)} links"
    )
    for run in earlier_runs(ledger):
        say(
            f"earlier run {run.run_id} (turns {run.first_turn} to {run.last_turn}, "
            f"{len(run.observations)} observations): durafact artifacts {workflow_id} "
            f"--run {run.run_id}"
        )
    for block in render(ledger):
        say("")
        say(block)
    return 0


def render(ledger: Ledger) -> list[str]:
    """One block per artifact, in creation order: its id, type and version, its text (the
    `text` field, else its data as JSON) and the links that go out of it."""
    links_from: dict[str, list[str]] = defaultdict(list)
    for link in ledger.links:
        links_from[link.source].append(f"{link.relation} -> {link.target}")
    blocks = []
    for artifact in ledger.all():
        lines = [f"{artifact.id} ({artifact.type}, version {artifact.version})"]
        lines.append(indent(artifact.text(), "  text:  "))
        links = links_from[artifact.id]
        if links:
            lines.append(indent("\n".join(links), "  links: "))
        blocks.append("\n".join(lines))
    return blocks
