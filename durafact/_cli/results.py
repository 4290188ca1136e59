"""How a run's outcome reads on the command line: a ready workflow's result in a layout
of its own (the texts behind it read from the run's ledger), and a failure as
`Type: message`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError, FailureError

from durafact._cli.output import assignments, indent, one_line, quoted, say, say_json, usage_line
from durafact._core.approval import ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.sources import SourceFailure
from durafact._recipes.answer_flow import AnswerFlowResult, ItemAnswer
from durafact._recipes.plan_execute import PlanExecuteResult, PlanStep, StepResult
from durafact._recipes.react import ReActResult
from durafact._recipes.reflection import ReflectionResult
from durafact._recipes.research import ResearchResult
from durafact._recipes.router import Task
from durafact._recipes.supervisor import Facts, Report, SupervisorResult


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
