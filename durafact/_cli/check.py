"""`check`: before a deploy, replay the runs of the namespace (or exported histories)
against the recipes registered here, and name each run this code would break: the first
event that does not match and the likely cause (durafact/_service/check.py).

Exit code 0 when every run matches ("12 runs replayed, all match"), 1 when one does not
(it diverges, the code raises on it, or its workflow type is not registered here), 2 for
bad input, said before anything runs. `--json` prints the report as one object, for CI.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from durafact._cli.arguments import CHECK_LIMIT, MAX_LIMIT
from durafact._cli.output import Failed, say, say_json
from durafact._core.text import counted
from durafact._runtime.registry import recipe_modules
from durafact._service.check import (
    DIVERGES,
    FAILS,
    MATCH,
    NOT_REGISTERED,
    Report,
    Verdict,
    check_files,
    check_runs,
    replaying_plugin,
    runs_filter,
)

# How each outcome reads after the run's name, and in the summary (one, several).
HEADS = {DIVERGES: "diverges", FAILS: "fails to replay", NOT_REGISTERED: "is not registered here"}
COUNTED = {
    DIVERGES: ("diverges", "diverge"),
    FAILS: ("fails to replay", "fail to replay"),
    NOT_REGISTERED: ("not registered", "not registered"),
    MATCH: ("matches", "match"),
}


def check_options(args: argparse.Namespace) -> int:
    """The options that go together, else a one-line reason (exit code 2); the limit."""
    if args.history:
        given = [name for name in ("recipe", "since", "limit") if getattr(args, name) is not None]
        if given:
            raise Failed(
                f"--history replays the files it names: --{given[0]} chooses runs of the "
                "server, leave it out",
                code=2,
            )
    limit = CHECK_LIMIT if args.limit is None else args.limit
    if not 1 <= limit <= MAX_LIMIT:
        raise Failed(f"--limit {limit}: from 1 to {MAX_LIMIT}", code=2)
    return limit


async def check(args: argparse.Namespace, connect: Any) -> int:
    """`check`, on the server `connect()` reaches, or on `--history` files without one."""
    limit = check_options(args)
    plugin = replaying_plugin(recipe_modules(args.recipes))
    if args.history:
        report = await check_files(plugin, [Path(name) for name in args.history])
    else:
        query = runs_filter(plugin.registry, args.recipe)
        client, _ = await connect()
        report = await check_runs(client, plugin, query, args.since, limit)
    if args.json:
        say_json(document(report))
    else:
        for verdict in report.verdicts:
            for line in lines(verdict):
                say(line)
        say(summary(report))
        if report.more:
            say(f"the first {limit} runs; more with --limit")
    return 0 if report.ok else 1


def lines(verdict: Verdict) -> list[str]:
    """A run that does not match, in a few lines; nothing for one that does."""
    why = verdict.divergence
    if verdict.outcome == MATCH or why is None:
        return []
    source = verdict.source
    name = source.file or source.workflow_id
    facts = [source.workflow_type, *([source.state.lower()] if source.state else [])]
    facts.append(f"run {source.run_id}")
    head = f"{name} ({', '.join(facts)}) {HEADS[verdict.outcome]}"
    if why.event_id is not None:
        head += f" at event {why.event_id} ({why.event_type})"
    found = [head]
    if why.recorded:
        found.append(f"  the run recorded: {why.recorded}")
    if why.now:
        found.append(f"  the code now: {why.now}")
    found.append(f"  likely cause: {why.cause}")
    return found


def summary(report: Report) -> str:
    total = len(report.verdicts)
    if not total:
        return "no runs to check"
    if report.ok:
        return f"{counted(total, 'run')} replayed, all match"
    counts = [
        f"{count} {COUNTED[outcome][count != 1]}"
        for outcome in (DIVERGES, FAILS, NOT_REGISTERED, MATCH)
        if (count := report.count(outcome))
    ]
    return f"{counted(total, 'run')} checked: {', '.join(counts)}"


def document(report: Report) -> dict[str, Any]:
    """The report as `--json` prints it."""
    runs = []
    for verdict in report.verdicts:
        source, why = verdict.source, verdict.divergence
        runs.append(
            {
                "workflow_id": source.workflow_id,
                "run_id": source.run_id,
                "workflow_type": source.workflow_type,
                "state": source.state,
                "file": source.file,
                "outcome": verdict.outcome,
                "event_id": why.event_id if why else None,
                "event_type": why.event_type if why else None,
                "recorded": why.recorded if why else None,
                "now": why.now if why else None,
                "cause": why.cause if why else None,
                "error": why.error if why else None,
            }
        )
    counts = {o: report.count(o) for o in (MATCH, DIVERGES, FAILS, NOT_REGISTERED)}
    return {"ok": report.ok, "counts": counts, "more": report.more, "runs": runs}
