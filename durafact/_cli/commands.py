"""The commands about workflows that already run: `status`, `result`, `cancel`, and
answering a person's question (`pending`, `approve`, `decide`): each an operation of
the service layer (durafact/_service/), said as lines."""

from __future__ import annotations

import getpass
import re
from typing import Any

from durafact._cli.chat import chat_result
from durafact._cli.follow import canceled_line, wait_and_print, warn_if_no_worker
from durafact._cli.output import (
    ANSWER_HINT,
    Failed,
    cost_text,
    decide_hint,
    quoted,
    say,
    say_json,
    usage_line,
)
from durafact._core.approval import ApprovalAnswer, RememberScope
from durafact._core.budget import LIMITS, parse_cost, parse_tokens
from durafact._core.text import assignments, indent
from durafact._runtime.codec import PayloadDecryptError
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings
from durafact._service import approvals
from durafact._service import cancel as cancelling
from durafact._service.registration import NOT_REGISTERED, registration_fix
from durafact._service.runs import (
    AWAITING_APPROVAL,
    OVER_BUDGET_ERROR,
    describe,
    fallbacks,
    pending_questions,
    queried_usage,
    recipe_status,
    recorded_status,
    recorded_usage,
    running,
    state_name,
)
from durafact._service.troubles import RESUMABLE, end_failure, troubles

# How many of a run's calls answered by a fallback endpoint `status` names, the last ones.
SHOWN_FALLBACKS = 5


async def status(client: Any, settings: Settings, workflow_id: str) -> int:
    handle = client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    state = state_name(description)
    say(f"workflow {workflow_id}: {state} ({description.workflow_type}, run {description.run_id})")
    try:
        summary = await description.static_summary()
    except PayloadDecryptError as exc:  # other keys than the worker's: the lines below say
        summary = f"not shown: encrypted with key {exc.key_id!r}, which does not decrypt here"
    if summary:
        say(f"summary: {summary}")
    # What holds a running run, from Temporal itself: the workflow cannot tell.
    found = await troubles(client, description) if state == "RUNNING" else []
    for trouble in found:
        say(trouble.line)
    recipe = None
    if any(trouble.task and NOT_REGISTERED in trouble.line for trouble in found):
        say(f"  fix: {registration_fix(description.workflow_type)}")
    elif any(trouble.task for trouble in found):
        say("  Temporal retries the task: the run goes on once a worker with fixed code runs it")
    if any(trouble.task for trouble in found):
        attribute = recorded_status(description) or "unknown"
        say(f"recipe status: {attribute} (the workflow answers no query while its task fails)")
    else:
        asked = await recipe_status(handle, description)
        if asked.unanswered is None:
            recipe = asked.value
            say(f"recipe status: {recipe}")
        else:
            say(f"recipe status: {asked.value or 'unknown'} ({asked.unanswered})")
    say(await usage_of(handle, description, answering=recipe is not None))
    if recipe is not None:  # which calls another endpoint answered, from the progress
        answered_by_fallback = await fallbacks(handle)
        if len(answered_by_fallback) > SHOWN_FALLBACKS:
            earlier = len(answered_by_fallback) - SHOWN_FALLBACKS
            say(f"model fallback: {earlier} earlier calls too (`durafact artifacts` lists all)")
        for message in answered_by_fallback[-SHOWN_FALLBACKS:]:
            say(f"model fallback: {message}")
    if recipe == AWAITING_APPROVAL:
        try:
            questions = await pending_questions(handle)
        except Exception:
            questions = []
        for question in questions:
            say(f"waiting for a person: {question.id} ({question.kind})")
            if question.rule:
                say(f"  asked by: {question.rule}")
            say(f"  decide: {decide_hint(workflow_id, question.id)}")
        say(f"answer: durafact approve {quoted(workflow_id)} {ANSWER_HINT}")
    if state in RESUMABLE:
        failure = await end_failure(client, workflow_id, description.run_id)
        stopped = f"{OVER_BUDGET_ERROR}: "
        if failure and failure.startswith(stopped):  # resuming would stop it again at once
            say(failure.removeprefix(stopped))
            say(f"what it made: durafact artifacts {quoted(workflow_id)}")
        else:
            if failure:
                say(f"failure: {failure}")
            say(f"resume: durafact resume {quoted(workflow_id)}")
    say(f"Web UI: {settings.workflow_url(workflow_id, description.run_id)}")
    return 0


async def usage_of(handle: Any, description: Any, answering: bool) -> str:
    """The run's usage line: from the `usage` query when a worker is `answering`, else
    from the search attributes, as of the run's last phase."""
    usage = await queried_usage(handle) if answering else None
    if usage is not None:
        return usage_line(usage)
    tokens, cost = recorded_usage(description)
    if tokens is None:
        return "usage: not recorded"
    # DurafactCost is unset both when nothing was priced and when not every call was:
    # no cost is shown for either.
    spent = "" if cost is None else f"; cost: {cost_text(cost)}"
    return f"usage: {tokens:,} tokens{spent} (as of the run's last phase)"


async def result(
    client: Any, settings: Settings, registry: Registry, workflow_id: str, as_json: bool
) -> int:
    """Wait for a workflow's result; shown as its recipe declares, else as JSON. A
    running chat has no result: its last reply."""
    handle = client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    url = settings.workflow_url(workflow_id, description.run_id)
    recipe = registry.get(description.workflow_type)
    if recipe is not None and recipe.chat and state_name(description) == "RUNNING":
        return await chat_result(handle, description, url, as_json)
    return await wait_and_print(
        client, settings, handle, description, description.run_id, url, as_json, recipe
    )


async def cancel(client: Any, workflow_id: str, reason: str, no_wait: bool) -> int:
    """Temporal's cancellation, with `reason`; then, unless `no_wait`, wait for the run
    to end and say how. A run that is not running is one line and exit 1."""
    await cancelling.cancel(client, workflow_id, reason)
    if no_wait:
        say(f"cancel requested: durafact status {quoted(workflow_id)}")
        return 0
    handle = client.get_workflow_handle(workflow_id)
    state, why = await cancelling.ended(handle)
    if state != "CANCELED":  # it ended another way before it saw the request
        raise Failed(f"workflow {workflow_id} ended {state} before it saw the cancellation")
    say(canceled_line(workflow_id, why))
    return 0


# --- human approval ---------------------------------------------------------------------


async def pending(client: Any, as_json: bool) -> int:
    """`pending`: every question that waits for a person."""
    rows = await approvals.waiting(client)
    if as_json:
        document = {
            "workflows": [
                {
                    "workflow_id": e.id,
                    "run_id": e.run_id,
                    "workflow_type": e.workflow_type,
                    "questions": [q.model_dump(mode="json") for q in qs],
                    "error": err,
                }
                for e, qs, err in rows
            ]
        }
        say_json(document)
        return 0
    if not rows:
        say("nothing waits for a person")
        return 0
    count = 0
    for execution, questions, error in rows:
        if error:
            say(f"{execution.id} ({execution.workflow_type}): {error}")
        for question in questions:
            count += 1
            say(f"{execution.id}  {question.id}  {question.kind}")
            say(indent(question.text, "  "))
            if question.rule:
                say(f"  asked by: {question.rule}")
            say(f"  decide: {decide_hint(execution.id, question.id)}")
    say(
        f"{count} question(s) in {len(rows)} workflow(s) wait; answer one: "
        f"durafact approve ID {ANSWER_HINT}"
    )
    return 0


async def approve(
    client: Any,
    registry: Registry,
    workflow_id: str,
    reject: bool,
    reason: str,
    changes: dict[str, str],
    remember: RememberScope | None = None,
) -> int:
    """The workflow's oldest pending question, answered (durafact/_service/approvals.py)."""
    answer = ApprovalAnswer(
        approved=not reject, reason=reason, changes=changes, by=person(), remember=remember
    )
    answered = await approvals.approve(client, registry, workflow_id, answer)
    verdict = "approved" if answered.approved else "rejected"
    edits = f" with {assignments(changes)}" if changes else ""
    if answered.limits:
        how = ""
    elif remember is None:
        how = " (signal sent)"
    else:
        how = f", {REMEMBERED[remember]}"
    say(f"{verdict} {answered.question_id} of workflow {workflow_id}{edits}{how}")
    say(f"result: durafact result {quoted(workflow_id)}")
    return 0


def check_new_limits(changes: dict[str, str]) -> None:
    """`approve --set` without `--reject`: only a budget question's new limits, each a
    number (exit code 2 before connecting)."""
    other = sorted(set(changes) - set(LIMITS))
    if other:
        raise Failed(
            f"--set goes with --reject: corrected facts ask for a rebuild ({other[0]}); "
            f"an approval sets only a budget question's {' and '.join(LIMITS)}",
            code=2,
        )
    try:
        for field, value in changes.items():
            (parse_tokens if field == "tokens" else parse_cost)(value, f"--set {field}")
    except ValueError as exc:
        raise Failed(str(exc), code=2) from None


async def decide(
    client: Any,
    settings: Settings,
    workflow_id: str,
    question_id: str,
    approved: bool,
    reason: str,
    remember: RememberScope | None = None,
) -> int:
    """The `decide` update: the outcome, or the validator's reason for refusing."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle)
    await warn_if_no_worker(client, settings, description.task_queue)
    if question_id.isdigit():
        question_id = await approvals.numbered(handle, workflow_id, int(question_id))
    answer = ApprovalAnswer(
        question_id=question_id, approved=approved, reason=reason, by=person(), remember=remember
    )
    outcome = await approvals.send_decision(handle, answer)
    verdict = "approved" if outcome.approved else "rejected"
    why = f": {outcome.reason}" if outcome.reason else ""
    kept = f" ({REMEMBERED[remember]})" if remember else ""
    say(f"{outcome.question_id} {verdict}{why}{kept}")
    say(f"result: durafact result {quoted(workflow_id)}")
    return 0


REMEMBERED = {
    "call": "remembered for this call (the same tool and arguments)",
    "tool": "remembered for this tool in this run",
    "chat": "remembered for this tool in this chat",
}


def person() -> str:
    """Who answers, as recorded with the answer: the login name."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


def corrections(pairs: list[str]) -> dict[str, str]:
    """`--set FIELD=VALUE` options as a dict; a malformed or repeated one is a one-line error."""
    changes: dict[str, str] = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        field = field.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", field):
            raise Failed(f"--set {pair!r}: expected FIELD=VALUE (e.g. budget=5000)", code=2)
        if not value.strip():
            raise Failed(f"--set {field}: the value is empty", code=2)
        if field in changes:
            raise Failed(f"--set {field}: given twice", code=2)
        changes[field] = value.strip()
    return changes
