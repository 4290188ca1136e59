"""`eval`: closed runs re-run on the current code, and what changed (the operation:
durafact/_service/evaluation.py).

    durafact eval ID ... | --recipe R [--since D] [--limit N]
                  [--offline] [--live-tools] [--score MODULE:FUNCTION] [--timeout DURATION]
                  [--json] [--recipes MODULE[,MODULE...]]

Each run is one paragraph: how many model calls were answered from the recording and
how many were sent, each call that changed and why, how many of its questions for a
person got the recorded answers (and the question it was stopped at, when the recorded
run did not ask it), what the new calls used, and the old and new output side by side
(or that they are the same). `--json` prints the report as one object for CI, with the
totals. What was given wrong is one line and exit code 2, before anything connects.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

from durafact._cli.arguments import MAX_LIMIT
from durafact._cli.listing import name_filter
from durafact._cli.output import Failed, say, say_json, usage_line
from durafact._core.evals import CallEval, EvalReport, RunEval
from durafact._core.llm import Usage
from durafact._core.text import one_line
from durafact._runtime.plugin import DurafactPlugin, NoModelEndpoint
from durafact._runtime.registry import RegistrationError, recipe_modules
from durafact._service.evaluation import DEFAULT_TIMEOUT, EvalOptions, closed_runs, evaluate

Connect = Callable[[], Awaitable[tuple[Any, Any]]]
# The side-by-side output: at most this wide, whatever the terminal.
WIDEST = 160
# An activity id an encrypted run keeps opaque (durafact/_core/ids.py, `opaque_id`).
OPAQUE = re.compile(r"[a-z_]+:[0-9a-f]{20}")


async def eval_runs(args: argparse.Namespace, connect: Connect) -> int:
    """`eval`: the arguments checked, the recipes loaded, then the runs re-run."""
    ids = list(dict.fromkeys(args.ids))
    recipe = name_filter(args.recipe, "--recipe")
    if bool(ids) == bool(recipe):
        raise Failed("eval: give the ids of closed runs, or --recipe R (not both)", code=2)
    if not ids and not 1 <= args.limit <= MAX_LIMIT:
        raise Failed(f"--limit {args.limit}: from 1 to {MAX_LIMIT}", code=2)
    if ids and args.since is not None:
        raise Failed("--since goes with --recipe, not with run ids", code=2)
    options = EvalOptions(
        offline=args.offline,
        live_tools=args.live_tools,
        timeout=args.timeout or DEFAULT_TIMEOUT,
        score=scorer(args.score) if args.score else None,
    )
    plugin = plugin_of(args)
    client, _ = await connect()
    if recipe:
        ids = await closed_runs(client, recipe, args.since, args.limit)
        if not ids:
            since = f" since {args.since:%Y-%m-%d %H:%M} UTC" if args.since else ""
            raise Failed(f"eval: no closed run of {recipe}{since}")
    report = await evaluate(client, plugin, ids, options)
    if args.json:
        say_json(document(report))
    else:
        show(report)
    return 0


def plugin_of(args: argparse.Namespace) -> DurafactPlugin:
    """The plugin whose registry, model endpoints and prices the re-runs use, as
    `durafact-worker` builds it; a changed request needs a model endpoint unless
    offline."""
    try:
        plugin = DurafactPlugin(recipes=recipe_modules(args.recipes))
        plugin.registry  # noqa: B018 - a registration mistake is one line, before connecting
        if not args.offline:
            plugin.check_model_endpoint()
    except RegistrationError as exc:
        raise Failed(str(exc), code=2) from None
    except NoModelEndpoint as exc:
        raise Failed(f"eval: changed requests go to a model: {exc}; or --offline") from None
    except ValueError as exc:  # an endpoint or MCP setting
        raise Failed(str(exc), code=2) from None
    return plugin


def scorer(given: str) -> Callable[[Any, Any], Any]:
    """The function `MODULE:FUNCTION` names (imported from the current directory too);
    one line when it is not there."""
    module_name, sep, name = given.partition(":")
    if not sep or not module_name or not name.isidentifier():
        raise Failed(f"--score {given!r}: MODULE:FUNCTION, e.g. my_evals:score", code=2)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise Failed(
            f"--score {given}: {module_name} cannot be imported: {type(exc).__name__}: "
            f"{one_line(str(exc))}",
            code=2,
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise Failed(f"--score {given}: {module_name} has no function {name}", code=2)
    return function


# --- the report -----------------------------------------------------------------------


def document(report: EvalReport) -> dict[str, Any]:
    """The `--json` document: the report and its totals."""
    return {
        **report.model_dump(mode="json"),
        "totals": {
            "runs": len(report.runs),
            "changed_outputs": sum(not run.identical for run in report.runs if not run.skipped),
            "replayed": report.count("recording"),
            "sent": report.count("model"),
            "not_sent": report.count("not sent"),
            "questions_answered": sum(run.questions_answered for run in report.runs),
            "sent_usage": usage_totals(report.usage("model")),
            "replayed_usage": usage_totals(report.usage("recording")),
        },
    }


def usage_totals(usage: Usage) -> dict[str, Any]:
    """Every count, zeros too; the cost None when not every call was priced."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cost": None if usage.cost is None else f"{usage.cost:f}",
        "currency": usage.currency,
    }


def show(report: EvalReport) -> None:
    where = "offline" if report.offline else f"changed requests to model {report.model}"
    say(f"{len(report.runs)} run{plural(report.runs)} re-run on the current code ({where})")
    for run in report.runs:
        say("")
        show_run(run)
    if len(report.runs) > 1:
        say("")
        counts = (report.count("recording"), report.count("model"), report.count("not sent"))
        say(f"all runs: {calls_line(*counts)}")
        show_usage("new calls", report.usage("model"))


def show_run(run: RunEval) -> None:
    say(f"{run.workflow_id} ({run.workflow_type})")
    if run.skipped:
        say(f"  not re-run: {run.skipped}")
        return
    say(f"  {calls_line(run.count('recording'), run.count('model'), run.count('not sent'))}")
    names = readable_names(run.calls)
    for call in run.calls:
        if call.answered != "recording":
            say(f"  {call_line(call, names)}")
    for dropped in run.dropped:
        say(f"  {dropped}: no longer made")
    if run.tools.replayed or run.tools.missing:
        missing = f", {run.tools.missing} not in the recording" if run.tools.missing else ""
        say(f"  tools and sources: {run.tools.replayed} answered from the recording{missing}")
    if run.questions_answered:
        say(f"  questions for a person: {run.questions_answered} answered from the recording")
    if run.stopped_at is not None:
        say(f"  stopped at a question for a person, {run.stopped_at.id} ({run.stopped_at.kind}):")
        say(textwrap.indent(run.stopped_at.text, "    "))
    if run.count("model"):
        show_usage("  new calls", run.usage("model"))
    if run.replay_note:
        say(f"  note: {run.replay_note}")
    if run.new_output is None:
        say(f"  new output: none ({run.new_end})")
        say("  old output:")
        say(textwrap.indent(run.old_output, "    "))
    elif run.identical:
        say("  output: the same as recorded")
    else:
        say("  output changed (old | new):")
        for line in side_by_side(run.old_output, run.new_output):
            say(f"    {line}")
    if run.score is not None or run.score_error:
        say(f"  score: {run.score:g}" if run.score is not None else f"  score: {run.score_error}")


def calls_line(replayed: int, sent: int, not_sent: int) -> str:
    total = replayed + sent + not_sent
    parts = [f"{replayed} answered from the recording"]
    if sent or not not_sent:
        parts.append(f"{sent} sent to the model")
    if not_sent:
        parts.append(f"{not_sent} changed, not sent (offline)")
    return f"{total} model call{'' if total == 1 else 's'}: {', '.join(parts)}"


def call_line(call: CallEval, names: dict[str, str]) -> str:
    verb = "sent" if call.answered == "model" else "not sent"
    why = ", ".join(call.reasons) or "changed"
    because = [names.get(name, name) for name in call.because]
    after = f": {', '.join(because)}" if because else ""
    return f"{names.get(call.activity_id, call.activity_id)}: {verb}, {why} changed{after}"


def readable_names(calls: list[CallEval]) -> dict[str, str]:
    """The Web UI summary of each call whose activity id is opaque (an encrypted run's,
    `llm:` and a hash): what a person can tell apart."""
    return {
        c.activity_id: c.summary for c in calls if OPAQUE.fullmatch(c.activity_id) and c.summary
    }


def show_usage(label: str, usage: Usage) -> None:
    say(f"{label}: {usage_line(usage).removeprefix('usage: ')}")


def side_by_side(old: str, new: str) -> list[str]:
    """The two texts in two columns, each wrapped to half the terminal."""
    width = min(shutil.get_terminal_size((80, 24)).columns, WIDEST)
    half = max((width - 4 - 3) // 2, 20)
    left, right = column(old, half), column(new, half)
    rows = max(len(left), len(right))
    left += [""] * (rows - len(left))
    right += [""] * (rows - len(right))
    return [f"{a.ljust(half)} | {b}".rstrip() for a, b in zip(left, right, strict=True)]


def column(text: str, width: int) -> list[str]:
    lines = []
    for line in text.splitlines() or [""]:
        indent = line[: len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line, width, subsequent_indent=indent) or [""]
    return lines


def plural(items: list[Any]) -> str:
    return "" if len(items) == 1 else "s"
