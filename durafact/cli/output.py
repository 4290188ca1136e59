"""What the command line prints: one-line errors, results, and the `--json` document."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
from decimal import Decimal
from typing import Any, NoReturn, TextIO

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError, FailureError

from durafact.approval import ApprovalQuestion
from durafact.ledger import Ledger
from durafact.llm import Usage
from durafact.sources import SourceFailure
from durafact.text import shorten
from workflows.answer_flow import AnswerFlowResult, ItemAnswer
from workflows.plan_execute import PlanExecuteResult, PlanStep, StepResult
from workflows.react import ReActResult
from workflows.reflection import ReflectionResult
from workflows.research import ResearchResult
from workflows.router import Task
from workflows.supervisor import Facts, Report, SupervisorResult

# How to answer a pending question, wherever the command line mentions one.
ANSWER_HINT = "[--reject] [--reason TEXT] [--set FIELD=VALUE ...]"


def quoted(word: str) -> str:
    """`word` as one shell word, so an id with spaces, quotes or newlines in a suggested
    command can be pasted as it is."""
    return shlex.quote(word)


def decide_hint(workflow_id: str, question_id: str) -> str:
    """The command that answers one named question."""
    return (
        f"durafact decide {quoted(workflow_id)} {quoted(question_id)} "
        "--approve|--reject [--reason TEXT]"
    )


def state_name(execution: Any) -> str:
    """Temporal's status of a described or listed run, by name (`RUNNING`, ...)."""
    return execution.status.name if execution.status else "UNKNOWN"


class Failed(Exception):
    """A one-line reason to stop, printed as `starter: <reason>`; code 2 for bad input."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class NotFound(Failed):
    """What the command names does not exist: a workflow id, a workflow type (the HTTP
    API answers 404)."""


class Unanswered(Failed):
    """A query no worker answered in time: none runs, or none took it (the HTTP API
    answers 503)."""


# Control characters but newline and tab. Model or tool text holding them would act on
# the terminal that prints it: `\x1b]0;...\x07` retitles it, `\x1b[2J` clears it.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The ones json.dumps leaves as they are (it escapes those below 0x20).
CONTROL_IN_JSON = re.compile(r"[\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with each control character but newline and tab shown as `\\xNN`."""
    return CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def say(line: str, stream: TextIO | None = None, end: str = "\n") -> None:
    """`line` on stdout (or `stream`) as `printable` text: whatever a model, a tool or a
    person wrote reaches the terminal through here, and only here."""
    print(printable(line), file=stream or sys.stdout, end=end, flush=True)


def say_json(value: Any, indent: int | None = None) -> None:
    """`value` as JSON, every control character escaped (`\\u009b`), so that `say`
    prints it unchanged and it reads back as the same value."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    say(CONTROL_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text))


def note(line: str) -> None:
    say(line, sys.stderr)


def fail(message: str) -> None:
    say(f"starter: {one_line(message)}", sys.stderr)


def one_line(text: str) -> str:
    return " ".join(text.split())


def brief(text: str, limit: int = 100) -> str:
    """A progress line of the tool loop: one line, its label capitalized, cut to `limit`."""
    return summarize(text[:1].upper() + text[1:], limit)


def summarize(text: str, limit: int = 100) -> str:
    return shorten(text, limit, one_line=True)


def indent(text: str, first: str) -> str:
    """`text` under a label: `first` before its first line, the others indented as far.
    A blank line inside keeps the indentation, so the block stays one paragraph."""
    lines = text.strip().splitlines() or [""]
    rest = " " * len(first)
    return "\n".join([first + lines[0], *((rest + line).rstrip() or rest for line in lines[1:])])


def assignments(changes: dict[str, str]) -> str:
    return ", ".join(f"{field}={value}" for field, value in changes.items())


def emit_json(workflow_id: str, run_id: str, state: str, value: Any, url: str) -> None:
    """The `--json` document: the whole of stdout, one object."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    document = {
        "workflow_id": workflow_id,
        "run_id": run_id,
        "status": state,
        "result": data,
        "ui_url": url,
    }
    say_json(document)


def failure_text(exc: BaseException) -> str:
    """`Type: message` of what failed: the first ApplicationError under the wrappers
    (workflow, activity or child failure); its own causes are detail."""
    chain = []
    node: BaseException | None = exc
    while node is not None and len(chain) < 20:
        chain.append(node)
        node = node.__cause__
    app = next((e for e in chain if isinstance(e, ApplicationError)), None)
    if app is not None:
        return f"{app.type or 'ApplicationError'}: {one_line(app.message)}"
    root = chain[-1]
    message = root.message if isinstance(root, FailureError) else str(root)
    return f"{type(root).__name__}: {one_line(message)}"


def cost_text(cost: Decimal | float) -> str:
    """A cost without trailing zeros (`0.00123`, `12.5`, `0`): as computed, or as the
    search attribute DurafactCost (a float) holds it."""
    exact = Decimal(repr(cost)) if isinstance(cost, float) else cost
    return f"{exact.normalize():f}"


def usage_line(usage: Usage) -> str:
    """`usage: 1,234 tokens (1,000 in, 800 of them cached; 234 out); cost: 0.00123 USD`,
    the cost `unknown` when a call's model has no price on the worker."""
    cached = f", {usage.cached_tokens:,} of them cached" if usage.cached_tokens else ""
    if usage.cost is None:
        cost = "unknown (a model without a price in the worker's DURAFACT_PRICES)"
    else:
        cost = f"{cost_text(usage.cost)} {usage.currency}".rstrip()
    return (
        f"usage: {usage.total_tokens:,} tokens ({usage.prompt_tokens:,} in{cached}; "
        f"{usage.completion_tokens:,} out); cost: {cost}"
    )


# --- results ----------------------------------------------------------------------------


def has_layout(value: Any) -> bool:
    """Whether `print_result` prints `value` in a layout of its own (else as JSON)."""
    return _printer(value) is not None


def _printer(value: Any) -> Any:
    return next((p for kind, p in PRINTERS.items() if isinstance(value, kind)), None)


def print_result(value: Any, workflow_id: str, ledger: Ledger | None) -> None:
    """A ready workflow's result in its own layout; any other result as JSON.

    A result names the texts behind its answer (steps, quotes, the report, provenance)
    instead of carrying them: they are printed from the run's `ledger` (the `artifacts`
    query), or, when no worker answered it (None), left out with the command that
    shows them.
    """
    printer = _printer(value)
    if printer is not None:
        printer(value, ledger)
        say(usage_line(value.usage))
        command = f"durafact artifacts {quoted(workflow_id)}"
        if ledger is None:
            command = f"not shown (no worker answered the artifacts query); later: {command}"
        say(f"artifacts: {command}")
    else:
        say_json(value.model_dump(mode="json") if isinstance(value, BaseModel) else value, 2)


def _plan(value: PlanExecuteResult, ledger: Ledger | None) -> None:
    if ledger is not None:
        results = [ledger.resolve(ref, StepResult) for ref in value.results]
        texts = {r.index: r.text for r in results}
        say("steps:")
        for step in (ledger.resolve(ref, PlanStep) for ref in value.steps):
            say(indent(step.description, f"  {step.index + 1}. "))
            if step.index in texts:
                say(indent(texts[step.index], "     -> "))
    else:
        say(f"steps: {len(value.steps)} (their texts: see artifacts)")
    say("answer:")
    say(indent(value.answer.text, "  "))


def _reflection(value: ReflectionResult, ledger: Ledger | None) -> None:
    # Counted as --max-rounds counts: rewrites; each version was critiqued once.
    scores = ", ".join(f"{score:.2f}" for score in value.scores)
    rewrites, critiques = value.rounds - 1, value.rounds
    say(f"{value.ending} after {rewrites} rewrite(s) and {critiques} critique(s); scores: {scores}")
    if value.final.rounds != value.rounds:
        say(f"kept the text of round {value.final.rounds}, the best scored")
    say("text:")
    say(indent(value.final.text, "  "))


def _answers(value: AnswerFlowResult, ledger: Ledger | None) -> None:
    for item in value.results:
        say(f"{item.item_id}: {item.status} after {item.rounds} round(s)")
        if item.answer is not None:
            say(indent(item.answer, "  answer: "))
        if item.accepted is not None and ledger is not None:
            say(indent(ledger.resolve(item.accepted, ItemAnswer).quote, "  quote:  "))
        for issue in item.issues:
            say(indent(issue.message, f"  {issue.code}: "))
    say(", ".join(f"{n} {status}" for status, n in value.counts.items()))


def _supervisor(value: SupervisorResult, ledger: Ledger | None) -> None:
    if ledger is None:
        say(f"route: {value.route} ({value.route_source})")
    else:
        task = ledger.resolve(value.task, Task)
        how = f"fallback: {task.reason}" if task.source == "fallback" else "model"
        say(f"route: {value.route} ({how})")
        say(f"facts: {ledger.resolve(value.facts, Facts).line()}")
        report = ledger.resolve(value.report, Report)
        say(f"report (attempt {report.attempt}):")
        say(indent(report.text, "  "))
        say("approvals:")
        for question in (ledger.resolve(ref, ApprovalQuestion) for ref in value.approvals):
            answer = question.answer
            by = f" by {answer.by}" if answer and answer.by else ""
            why = f": {answer.reason}" if answer and answer.reason else ""
            edits = assignments(answer.changes) if answer else ""
            changed = f" (changes: {edits})" if edits else ""
            say(f"  {question.id} ({question.kind}) {question.status}{by}{why}{changed}")
    say("reply:")
    say(indent(value.reply.text, "  "))


def _research(value: ResearchResult, ledger: Ledger | None) -> None:
    if value.answer is not None:
        say("answer:")
        say(indent(value.answer, "  "))
        provenance = value.provenance(ledger) if ledger is not None else None
        if provenance is not None:
            say("provenance:")
            say(indent(provenance.render(), "  "))
    else:
        say(f"insufficient: {value.reason}")
    for failure in ledger.find_all(SourceFailure) if ledger is not None else []:
        f = failure.data
        where = f.uid or f.source_id
        say(f"  {f.stage} failed: {where}: {f.error_type}: {one_line(f.message)}")


def _react(value: ReActResult, ledger: Ledger | None) -> None:
    if value.answer is not None:
        say("answer:")
        say(indent(value.answer, "  "))
    elif value.ending == "looping":
        failing = [c for c in value.tool_calls if not c.ok]
        last = failing[-1] if failing else None
        what = f"{last.tool} failed ({last.error_type or 'error'})" if last else "a call failed"
        say(f"no answer: looping: {what} the same way again and again, so the run stopped")
    else:
        say(f"no answer: turn_limit: the model did not answer within {value.turns} turns")
    say(f"turns: {value.turns}")
    if not value.tool_calls:
        say("tool calls: none")
        return
    say("tool calls:")
    for call in value.tool_calls:
        turn = call.id.rsplit(":", 2)[-2] if call.id.count(":") >= 2 else "?"
        outcome = "ok" if call.ok else f"failed ({call.error_type or 'error'})"
        say(f"  turn {turn}: {call.tool} {outcome}")


PRINTERS: dict[type, Any] = {
    PlanExecuteResult: _plan,
    ReflectionResult: _reflection,
    AnswerFlowResult: _answers,
    SupervisorResult: _supervisor,
    ResearchResult: _research,
    ReActResult: _react,
}


def exit_now(message: str | None, code: int = 1) -> NoReturn:
    """Print `message` (if any) on stderr and end the process without interpreter
    finalization: once a client exists, temporalio's Rust threads can abort it
    ("PyGILState_Release", temporalio/sdk-python#300), even after a clean stop."""
    if message is not None:
        print(message, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
