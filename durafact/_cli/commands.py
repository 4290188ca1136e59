"""The commands about workflows that already run: `status`, `result`, `cancel`, `steer`,
and answering a person's question (`pending`, `approve`, `decide`)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import re
from typing import Any

from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from durafact._cli.chat import chat_result
from durafact._cli.follow import (
    QUERY_TIMEOUT,
    canceled_line,
    unanswered,
    wait_and_print,
    warn_if_no_worker,
)
from durafact._cli.output import (
    ANSWER_HINT,
    Failed,
    NotFound,
    assignments,
    cost_text,
    decide_hint,
    indent,
    quoted,
    say,
    say_json,
    state_name,
    usage_line,
)
from durafact._cli.registered import NOT_REGISTERED, registration_fix
from durafact._cli.results import failure_text
from durafact._cli.trouble import RESUMABLE, end_failure, troubles
from durafact._core.approval import ApprovalAnswer, ApprovalOutcome, ApprovalQuestion, RememberScope
from durafact._core.budget import LIMITS, parse_cost, parse_tokens
from durafact._core.llm import Usage
from durafact._recipes.approvals import AWAITING_APPROVAL
from durafact._recipes.chat import ChatWorkflow
from durafact._recipes.recipe import (
    COST_ATTRIBUTE,
    FALLBACK,
    STATUS_ATTRIBUTE,
    TOKENS_ATTRIBUTE,
    Progress,
)
from durafact._recipes.spending import OVER_BUDGET_ERROR
from durafact._recipes.supervisor import Facts
from durafact._runtime.codec import PayloadDecryptError
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings

# How many of a run's calls answered by a fallback endpoint `status` names, the last ones.
SHOWN_FALLBACKS = 5
# The facts a rejection may correct (`approve --reject --set FIELD=VALUE`), per workflow type.
CORRECTABLE: dict[str, tuple[str, ...]] = {"SupervisorWorkflow": tuple(Facts.model_fields)}


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
    attribute = description.typed_search_attributes.get(STATUS_ATTRIBUTE) or "unknown"
    recipe = None
    if any(trouble.task and NOT_REGISTERED in trouble.line for trouble in found):
        say(f"  fix: {registration_fix(description.workflow_type)}")
    elif any(trouble.task for trouble in found):
        say("  Temporal retries the task: the run goes on once a worker with fixed code runs it")
    if any(trouble.task for trouble in found):
        say(f"recipe status: {attribute} (the workflow answers no query while its task fails)")
    else:
        try:
            recipe = await handle.query("status", result_type=str, rpc_timeout=QUERY_TIMEOUT)
            say(f"recipe status: {recipe}")
        except Exception as exc:
            say(f"recipe status: {attribute} ({unanswered('status', exc)})")
    say(await usage_of(handle, description, answering=recipe is not None))
    if recipe is not None:  # which calls another endpoint answered, from the progress
        with contextlib.suppress(Exception):
            progress = await handle.query(
                "progress", 0, result_type=Progress, rpc_timeout=QUERY_TIMEOUT
            )
            fallbacks = [event.message for event in progress.events if event.kind == FALLBACK]
            if len(fallbacks) > SHOWN_FALLBACKS:
                earlier = len(fallbacks) - SHOWN_FALLBACKS
                say(f"model fallback: {earlier} earlier calls too (`durafact artifacts` lists all)")
            for message in fallbacks[-SHOWN_FALLBACKS:]:
                say(f"model fallback: {message}")
    if recipe == AWAITING_APPROVAL:
        with contextlib.suppress(Exception):
            for question in await pending_questions(handle):
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


async def result(
    client: Any, settings: Settings, registry: Registry, workflow_id: str, as_json: bool
) -> int:
    """Wait for a workflow's result; decoded as its registered type's result, else as JSON."""
    handle = client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    url = settings.workflow_url(workflow_id, description.run_id)
    running = description.status is not None and description.status.name == "RUNNING"
    if description.workflow_type == ChatWorkflow.__name__ and running:
        return await chat_result(handle, description, url, as_json)
    recipe = registry.get(description.workflow_type)
    return await wait_and_print(
        client,
        settings,
        handle,
        description,
        description.run_id,
        url,
        as_json,
        recipe.result_type if recipe else None,
    )


async def cancel(client: Any, workflow_id: str, reason: str, no_wait: bool) -> int:
    """Temporal's cancellation, with `reason`; then, unless `no_wait`, wait for the run
    to end and say how. A run that is not running is one line and exit 1."""
    handle = client.get_workflow_handle(workflow_id)
    await running(handle, "there is nothing to cancel")
    await handle.cancel(reason=reason)
    if no_wait:
        say(f"cancel requested: durafact status {quoted(workflow_id)}")
        return 0
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    ended = await describe(handle)
    state = state_name(ended)
    if state != "CANCELED":  # it ended another way before it saw the request
        raise Failed(f"workflow {workflow_id} ended {state} before it saw the cancellation")
    say(await canceled_line(handle))
    return 0


async def queried_usage(handle: Any) -> Usage | None:
    """The `usage` query's answer; None when none came (no worker, or a worker from before
    the query)."""
    try:
        return await handle.query("usage", result_type=Usage, rpc_timeout=QUERY_TIMEOUT)
    except Exception:
        return None


async def usage_of(handle: Any, description: Any, answering: bool) -> str:
    """The run's usage line: from the `usage` query when a worker is `answering`, else
    from the search attributes, as of the run's last phase."""
    usage = await queried_usage(handle) if answering else None
    if usage is not None:
        return usage_line(usage)
    attributes = description.typed_search_attributes
    tokens, cost = attributes.get(TOKENS_ATTRIBUTE), attributes.get(COST_ATTRIBUTE)
    if tokens is None:
        return "usage: not recorded"
    spent = "unknown" if cost is None else cost_text(cost)
    return f"usage: {tokens:,} tokens; cost: {spent} (as of the run's last phase)"


# --- human approval ---------------------------------------------------------------------


async def pending_questions(handle: Any) -> list[ApprovalQuestion]:
    return await handle.query(
        "pending_questions", result_type=list[ApprovalQuestion], rpc_timeout=QUERY_TIMEOUT
    )


async def waiting(
    client: Any, where: str = ""
) -> list[tuple[Any, list[ApprovalQuestion], str | None]]:
    """Every running workflow whose DurafactStatus is awaiting_approval (visibility, so it
    survives restarts; `where` narrows the query), with its pending questions (the
    query) or why they could not be read."""
    query = f'{STATUS_ATTRIBUTE.name}="{AWAITING_APPROVAL}" AND ExecutionStatus="Running"'
    executions = [e async for e in client.list_workflows(f"{query} {where}".strip())]

    async def questions_of(execution: Any) -> tuple[list[ApprovalQuestion], str | None]:
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            return await pending_questions(handle), None
        except Exception as exc:
            return [], unanswered("pending_questions", exc)

    answers = await asyncio.gather(*(questions_of(e) for e in executions))
    # Answered since the visibility store saw them: nothing waits any more.
    return [(e, qs, err) for e, (qs, err) in zip(executions, answers, strict=True) if qs or err]


async def pending(client: Any, as_json: bool) -> int:
    """`pending`: every question that waits for a person (see `waiting`)."""
    rows = await waiting(client)
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
    workflow_id: str,
    reject: bool,
    reason: str,
    changes: dict[str, str],
    remember: RememberScope | None = None,
) -> int:
    """The `answer` signal for the workflow's oldest pending question, after checking that
    something waits, so a wrong id or a settled workflow is one clear line. An answer to
    remember goes by the `decide` update: a question that cannot remember it says so."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle)
    try:
        questions = await pending_questions(handle)
    except Exception as exc:
        raise Failed(f"workflow {workflow_id}: {unanswered('pending_questions', exc)}") from None
    if not questions:
        raise Failed(f"workflow {workflow_id} has no pending question")
    question = questions[0]
    if changes and not reject:  # new limits: for the budget question, whichever is oldest
        budget = next((q for q in questions if q.settable), question)
        return await approve_with_limits(handle, budget, reason, changes, remember)
    check_changes(description.workflow_type, changes)
    answer = ApprovalAnswer(
        question_id=question.id,
        approved=not reject,
        reason=reason,
        changes=changes,
        by=person(),
        remember=remember,
    )
    verdict = "rejected" if reject else "approved"
    edits = f" with {assignments(changes)}" if changes else ""
    if remember is None:
        await handle.signal("answer", answer)
        say(f"{verdict} {question.id} of workflow {workflow_id}{edits} (signal sent)")
    else:
        await send_decision(handle, answer)
        say(f"{verdict} {question.id} of workflow {workflow_id}{edits}, {REMEMBERED[remember]}")
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


async def approve_with_limits(
    handle: Any,
    question: ApprovalQuestion,
    reason: str,
    changes: dict[str, str],
    remember: RememberScope | None = None,
) -> int:
    """Approve a budget question with new limits, by the `decide` update: a limit the
    run cannot take (below what it spent) is refused here, not dropped by the run."""
    if not question.settable:
        raise Failed(
            f"{question.id} is not a budget question: --set goes with --reject there", code=2
        )
    answer = ApprovalAnswer(
        question_id=question.id,
        approved=True,
        reason=reason,
        changes=changes,
        by=person(),
        remember=remember,  # the run refuses it: a budget question remembers nothing
    )
    outcome = await send_decision(handle, answer)
    say(f"approved {outcome.question_id} of workflow {handle.id} with {assignments(changes)}")
    say(f"result: durafact result {quoted(handle.id)}")
    return 0


def check_changes(workflow_type: str, changes: dict[str, str], where: str = "--set") -> None:
    """Refuse (exit code 2) a correction to what is not a fact of `workflow_type`."""
    fields = CORRECTABLE.get(workflow_type)
    unknown = sorted(set(changes) - set(fields)) if fields is not None else []
    if unknown:
        raise Failed(
            f"{where} {unknown[0]}: not a fact of {workflow_type} "
            f"(facts: {', '.join(fields or ())})",
            code=2,
        )


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
        question_id = await numbered(handle, workflow_id, int(question_id))
    answer = ApprovalAnswer(
        question_id=question_id, approved=approved, reason=reason, by=person(), remember=remember
    )
    outcome = await send_decision(handle, answer)
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


async def numbered(handle: Any, workflow_id: str, n: int) -> str:
    """The id of the pending question that is number `n` of its thread; Failed when
    none is, or when questions of several threads are."""
    try:
        matching = [q.id for q in await pending_questions(handle) if q.n == n]
    except (RPCError, PayloadDecryptError) as exc:
        raise Failed(f"workflow {workflow_id}: {unanswered('pending_questions', exc)}") from None
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise Failed(f"workflow {workflow_id}: no pending question is number {n} of its thread")
    raise Failed(
        f"workflow {workflow_id}: question {n} of several threads waits "
        f"({', '.join(matching)}): name it by its id"
    )


async def send_decision(handle: Any, answer: ApprovalAnswer) -> ApprovalOutcome:
    """The `decide` update's outcome; Failed with the workflow's reason when it refuses,
    or, when the run closed while the answer was on its way (another answer to the same
    question was taken first, and the run ended), the reason an answer to a closed run
    gets: Temporal's NOT_FOUND would say that the run does not exist."""
    try:
        return await handle.execute_update("decide", answer, result_type=ApprovalOutcome)
    except WorkflowUpdateFailedError as exc:
        raise Failed(f"decide refused: {failure_text(exc)}") from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            await running(handle)  # Failed: "workflow ID is COMPLETED: nothing waits ..."
        raise


async def running(handle: Any, nothing: str = "nothing waits for an answer") -> Any:
    """The workflow's description; a one-line reason, ending with `nothing` (what there
    is not to do), when it is not running."""
    description = await describe(handle)
    state = state_name(description)
    if state != "RUNNING":
        raise Failed(f"workflow {handle.id} is {state}: {nothing}")
    return description


def person() -> str:
    """Who answers, as recorded with the answer: the login name."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


async def describe(handle: Any) -> Any:
    # Temporal's own answer to an empty id is an InvalidArgument about a missing field.
    if not handle.id:
        raise NotFound("no workflow with an empty id")
    try:
        return await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"no workflow with id {handle.id!r}") from None
        raise


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
