"""Human approval: questions that wait durably, answered by the `answer` signal or the
`decide` update, with timeouts on the time-skipping server and restarts of the worker
and of the dev server."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import workflow

from durafact._core.approval import (
    ApprovalAnswer,
    ApprovalOutcome,
    ApprovalPolicy,
    ApprovalQuestion,
)
from durafact._recipes.recipe import Recipe, RecipeContext

# The workflow sandbox re-imports this module; the worker side is not workflow code.
with workflow.unsafe.imports_passed_through():
    import asyncio
    import json
    import uuid
    from collections.abc import Awaitable, Callable
    from datetime import timedelta
    from pathlib import Path
    from typing import Any, TypeVar

    import pytest
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.exceptions import ApplicationError
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Replayer

    from durafact._core.approval import validate_answer
    from durafact._core.ids import approval_id
    from durafact._recipes.recipe import STATUS_ATTRIBUTE
    from durafact._runtime.plugin import with_passthrough
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from tests.helpers import clean_env, free_port, own_dev_server, starter

T = TypeVar("T")


class Ask(BaseModel):
    thread: str = "release"
    text: str = "Ship version 2?"
    policy: ApprovalPolicy | None = None
    # Ask again after a rejection, up to this many times in all.
    attempts: int = 1


class Asked(BaseModel):
    outcomes: list[ApprovalOutcome]
    history: list[ApprovalQuestion]


@workflow.defn
class AskWorkflow(Recipe[Ask, Asked]):
    """Asks one question, again after each rejection up to `attempts`; returns the outcomes
    and the thread's whole history."""

    recipe_name = "ask"

    @workflow.run
    async def run(self, ask: Ask) -> Asked:
        return await self.execute(ask)

    async def lifecycle(self, ctx: RecipeContext, ask: Ask) -> Asked:
        outcomes: list[ApprovalOutcome] = []
        for attempt in range(ask.attempts):
            text = ask.text if attempt == 0 else f"{ask.text} (attempt {attempt + 1})"
            outcome = await ctx.ask_approval(ask.thread, text, ask.policy)
            outcomes.append(outcome)
            if outcome.approved:
                break
        ctx.set_status("completed")
        return Asked(outcomes=outcomes, history=ctx.approval_history(ask.thread))


class AskTwo(BaseModel):
    legal: str = "Is the licence fine?"
    budget: str = "Is 5000 fine?"


@workflow.defn
class AskTwoWorkflow(Recipe[AskTwo, list[ApprovalOutcome]]):
    """Asks two questions in two threads at once and waits for both."""

    recipe_name = "ask_two"

    @workflow.run
    async def run(self, ask: AskTwo) -> list[ApprovalOutcome]:
        return await self.execute(ask)

    async def lifecycle(self, ctx: RecipeContext, ask: AskTwo) -> list[ApprovalOutcome]:
        outcomes = await asyncio.gather(
            ctx.ask_approval("legal", ask.legal), ctx.ask_approval("budget", ask.budget)
        )
        ctx.set_status("completed")
        return list(outcomes)


Handle = WorkflowHandle[AskWorkflow, Asked]
QUESTION = "approval:release:1"


async def start_ask(client: Client, task_queue: str, ask: Ask | None = None) -> Handle:
    return await client.start_workflow(
        AskWorkflow.run, ask or Ask(), id=f"ask-{uuid.uuid4().hex[:8]}", task_queue=task_queue
    )


async def eventually(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], what: str, limit: float = 30
) -> T:
    """Poll `probe` until `done` says yes, for at most `limit` seconds."""
    value: T | None = None
    try:
        async with asyncio.timeout(limit):
            while True:
                value = await probe()
                if done(value):
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"no {what} within {limit} s; last seen: {value!r}") from None


async def waiting(
    handle: WorkflowHandle[Any, Any], count: int = 1, limit: float = 30
) -> list[ApprovalQuestion]:
    """The pending questions, once there are `count` of them."""

    async def questions() -> list[ApprovalQuestion] | None:
        # On a starved machine (fifty first tasks at once) a query can find no workflow
        # task to answer it before its deadline, or find the first task failed by the
        # SDK's 2 s deadlock detector and waiting for its retry: all mean "not yet".
        try:
            return await handle.query(AskWorkflow.pending_questions)
        except RPCError as exc:
            timed_out = exc.status == RPCStatusCode.DEADLINE_EXCEEDED
            task_retrying = "Workflow Task in failed state" in str(exc)
            # The client's connection to the server dropped a stream under the same load.
            dropped = "h2 protocol error" in str(exc)
            if not (timed_out or task_retrying or dropped or "Timeout expired" in str(exc)):
                raise
            return None

    return await eventually(
        questions,
        lambda questions: questions is not None and len(questions) == count,
        f"{count} pending questions",
        limit,
    )


async def event_count(handle: Handle) -> int:
    return len((await handle.fetch_history()).events)


async def messages(handle: Handle, kind: str) -> list[str]:
    page = await handle.query(AskWorkflow.progress, 0)
    return [e.message for e in page.events if e.kind == kind]


async def replays(handle: WorkflowHandle[Any, Any], workflow_type: type = AskWorkflow) -> None:
    """The run's history replays against the workflow code: the handlers, the questions and
    the timers are deterministic."""
    replayer = Replayer(
        workflows=[workflow_type],
        data_converter=pydantic_data_converter,
        workflow_runner=with_passthrough(None),
    )
    await replayer.replay_workflow(await handle.fetch_history())


def awaiting_query(task_queue: str) -> str:
    return f'DurafactStatus="awaiting_approval" AND TaskQueue="{task_queue}"'


async def listed(client: Client, query: str) -> set[str]:
    return {w.id async for w in client.list_workflows(query)}


def answer(**fields: Any) -> ApprovalAnswer:
    return ApprovalAnswer(**{"approved": True, **fields})


# --- the pure validator ------------------------------------------------------------------


def question(n: int, status: str = "pending") -> ApprovalQuestion:
    return ApprovalQuestion(
        id=f"approval:t:{n}",
        thread="t",
        n=n,
        text=f"q{n}",
        status=status,
    )


def test_an_answer_without_an_id_is_for_the_oldest_pending_question() -> None:
    questions = [question(1, "rejected"), question(2), question(3)]
    assert validate_answer(questions, answer()).id == "approval:t:2"
    assert validate_answer(questions, answer(question_id="approval:t:3")).id == "approval:t:3"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (answer(question_id="approval:t:9"), "no question 'approval:t:9' was asked"),
        (answer(question_id="approval:t:1"), "already answered (rejected)"),
        (answer(question_id="approval:t:2"), "already closed (timed_out)"),
        (answer(question_id="  "), "the question id is blank"),
        (answer(changes={"budget": "5000"}), "changes go with a rejection only"),
        (answer(approved=False, changes={" ": "5000"}), "a change needs a field name"),
    ],
    ids=["unknown", "answered", "timed-out", "blank-id", "approval-with-changes", "empty-key"],
)
def test_the_validator_refuses_with_a_reason(bad: ApprovalAnswer, reason: str) -> None:
    questions = [question(1, "rejected"), question(2, "timed_out"), question(3)]
    with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        validate_answer(questions, bad)


def test_without_a_pending_question_an_answer_without_an_id_is_refused() -> None:
    with pytest.raises(ValueError, match="no question is pending"):
        validate_answer([question(1, "approved")], answer())


def test_a_policy_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ApprovalPolicy(timeout=timedelta(0))
    with pytest.raises(ValueError, match="must be positive"):
        ApprovalPolicy(timeout=timedelta(hours=1), escalation_timeout=timedelta(seconds=-1))


# --- signal and update on a dev server ---------------------------------------------------


async def test_the_signal_approves_the_oldest_pending_question(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        [pending] = await waiting(handle)
        await handle.signal(AskWorkflow.answer, ApprovalAnswer(approved=True, by="ana"))
        result = await handle.result()
        announced = await messages(handle, "approval")

    assert (pending.id, pending.kind, pending.text) == (QUESTION, "approve", "Ship version 2?")
    assert result.outcomes == [ApprovalOutcome(question_id=QUESTION, approved=True, reason="")]
    [closed] = result.history
    assert closed.status == "approved"
    assert closed.answer == ApprovalAnswer(question_id=QUESTION, approved=True, by="ana")
    assert announced == [f"{QUESTION} approved by ana"]


async def test_the_signal_rejects_with_a_reason_and_edited_facts(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        await waiting(handle)
        rejection = ApprovalAnswer(
            question_id=QUESTION, approved=False, reason="over budget", changes={"budget": "5000"}
        )
        await handle.signal(AskWorkflow.answer, rejection)
        result = await handle.result()

    assert result.outcomes == [
        ApprovalOutcome(
            question_id=QUESTION, approved=False, reason="over budget", changes={"budget": "5000"}
        )
    ]
    assert result.history[0].status == "rejected"


async def test_the_update_approves_and_returns_the_outcome(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        await waiting(handle)
        outcome = await handle.execute_update(
            AskWorkflow.decide, ApprovalAnswer(question_id=QUESTION, approved=True, reason="ok")
        )
        result = await handle.result()

    assert outcome == ApprovalOutcome(question_id=QUESTION, approved=True, reason="ok")
    assert result.outcomes == [outcome]


async def test_the_update_rejects_and_returns_the_outcome(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        await waiting(handle)
        outcome = await handle.execute_update(
            AskWorkflow.decide,
            ApprovalAnswer(
                question_id=QUESTION, approved=False, reason="too early", changes={"date": "May"}
            ),
        )
        result = await handle.result()

    assert outcome == ApprovalOutcome(
        question_id=QUESTION, approved=False, reason="too early", changes={"date": "May"}
    )
    assert result.outcomes == [outcome]


async def test_the_validator_refuses_bad_answers_before_they_reach_history(
    client: Client, settings: Settings
) -> None:
    refusals = {
        "no question 'approval:release:9' was asked": answer(question_id="approval:release:9"),
        "question 'approval:release:1' is already answered (rejected)": answer(
            question_id=QUESTION
        ),
        "changes go with a rejection only": answer(
            question_id="approval:release:2", changes={"budget": "1"}
        ),
        "the question id is blank": answer(question_id=" "),
        "a change needs a field name": answer(
            question_id="approval:release:2", approved=False, changes={"": "1"}
        ),
        "decide needs a question id": answer(),
    }
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue, Ask(attempts=2))
        await waiting(handle)
        await handle.execute_update(
            AskWorkflow.decide, ApprovalAnswer(question_id=QUESTION, approved=False)
        )
        [second] = await eventually(
            lambda: handle.query(AskWorkflow.pending_questions),
            lambda questions: [q.id for q in questions] == ["approval:release:2"],
            "the second question",
        )
        before = await event_count(handle)
        for reason, bad in refusals.items():
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(AskWorkflow.decide, bad)
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError)
            assert cause.type == "InvalidAnswer"
            assert reason in cause.message
        after = await event_count(handle)
        # The question still waits and takes a good answer.
        outcome = await handle.execute_update(
            AskWorkflow.decide, ApprovalAnswer(question_id=second.id, approved=True)
        )
        await handle.result()

    assert after == before
    assert outcome.approved


async def test_a_raw_answer_with_a_wrong_field_is_refused_in_one_line_naming_it(
    client: Client, settings: Settings
) -> None:
    # What a person writes by hand: a dict, with the HTTP API's old field name or a typo.
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        await waiting(handle)
        before = await event_count(handle)
        refusals = []
        for bad in (
            {"question_id": QUESTION, "approve": True},
            {"question_id": QUESTION, "approved": True, "reasn": "fine"},
            {"question_id": QUESTION, "approved": "maybe"},
        ):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("decide", bad)
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError), repr(cause)
            refusals.append((cause.type, cause.message, cause.cause))
        after = await event_count(handle)
        # The signal drops the same answer with the same reason, as a warning.
        await handle.signal("answer", {"approve": True})
        warnings = await eventually(
            lambda: messages(handle, "warning"), lambda found: len(found) == 1, "a warning"
        )
        outcome = await handle.execute_update(
            "decide", {"question_id": QUESTION, "approved": True}, result_type=ApprovalOutcome
        )
        await handle.result()
        await replays(handle)

    assert refusals == [
        (
            "InvalidAnswer",
            "decide: 'approve' is not a field of an answer (did you mean 'approved'?)",
            None,
        ),
        (
            "InvalidAnswer",
            "decide: 'reasn' is not a field of an answer (did you mean 'reason'?)",
            None,
        ),
        (
            "InvalidAnswer",
            "decide: 'approved': Input should be a valid boolean, unable to interpret input",
            None,
        ),
    ]
    assert warnings == [
        "answer dropped: 'approve' is not a field of an answer (did you mean 'approved'?)"
    ]
    assert after == before
    assert outcome.approved


async def test_two_updates_for_one_question_close_it_once(
    client: Client, settings: Settings
) -> None:
    legal = "approval:legal:1"
    # The other question keeps the run open, so the losing update is refused by the
    # validator rather than cut short by the workflow completing.
    async with build_worker(client, settings, workflows=[AskTwoWorkflow]):
        handle = await client.start_workflow(
            AskTwoWorkflow.run,
            AskTwo(),
            id=f"ask-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        await waiting(handle, count=2)
        results = await asyncio.gather(
            handle.execute_update(
                AskTwoWorkflow.decide, answer(question_id=legal, approved=True, by="a")
            ),
            handle.execute_update(
                AskTwoWorkflow.decide, answer(question_id=legal, approved=False, by="b")
            ),
            return_exceptions=True,
        )
        await handle.signal(AskTwoWorkflow.answer, answer(question_id="approval:budget:1"))
        outcomes = await handle.result()
        await replays(handle, AskTwoWorkflow)

    won = [r for r in results if isinstance(r, ApprovalOutcome)]
    lost = [r for r in results if isinstance(r, WorkflowUpdateFailedError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert f"question {legal!r} is already answered" in str(lost[0].cause)
    assert outcomes[0] == won[0]


async def test_a_signal_that_cannot_be_taken_is_dropped_with_a_warning(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        await waiting(handle)
        await handle.signal(AskWorkflow.answer, answer(question_id="approval:release:7"))
        await handle.signal(AskWorkflow.answer, answer(changes={"budget": "1"}))
        warnings = await eventually(
            lambda: messages(handle, "warning"), lambda found: len(found) == 2, "two warnings"
        )
        still = await handle.query(AskWorkflow.pending_questions)
        await handle.signal(AskWorkflow.answer, answer())
        result = await handle.result()
        await replays(handle)

    assert warnings == [
        "answer dropped: no question 'approval:release:7' was asked",
        "answer dropped: changes go with a rejection only; an approval cannot carry them",
    ]
    assert [q.id for q in still] == [QUESTION]
    assert result.outcomes[0].approved


async def test_an_answer_sent_before_the_question_is_asked_is_refused(
    client: Client, settings: Settings
) -> None:
    # Signal-with-start: the answer is handled before the workflow asks, when nothing is
    # pending, so it is dropped (with a warning) rather than kept for a future question.
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await client.start_workflow(
            AskWorkflow.run,
            Ask(),
            id=f"ask-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            start_signal="answer",
            start_signal_args=[answer()],
        )
        [pending] = await waiting(handle)
        warnings = await messages(handle, "warning")
        await handle.signal(AskWorkflow.answer, answer())
        await handle.result()

    assert pending.id == QUESTION
    assert warnings == ["answer dropped: no question is pending"]


async def test_pending_questions_status_and_visibility_show_a_waiting_workflow(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        [pending] = await waiting(handle)
        described = await handle.describe()
        found = await eventually(
            lambda: listed(client, awaiting_query(settings.task_queue)),
            lambda ids: handle.id in ids,
            "the waiting workflow in visibility",
        )
        await handle.signal(AskWorkflow.answer, answer())
        await handle.result()
        after = await handle.describe()

    assert pending == ApprovalQuestion(id=QUESTION, thread="release", n=1, text="Ship version 2?")
    assert described.typed_search_attributes.get(STATUS_ATTRIBUTE) == "awaiting_approval"
    assert found == {handle.id}
    assert after.typed_search_attributes.get(STATUS_ATTRIBUTE) == "completed"


async def test_two_questions_wait_at_once_and_the_status_waits_for_both(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskTwoWorkflow]):
        handle = await client.start_workflow(
            AskTwoWorkflow.run,
            AskTwo(),
            id=f"ask-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        both = await waiting(handle, count=2)
        # A signal without an id answers the oldest pending question.
        await handle.signal(AskTwoWorkflow.answer, answer(by="ana"))
        left = await waiting(handle, count=1)
        between = (await handle.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE)
        await handle.execute_update(
            AskTwoWorkflow.decide, answer(question_id="approval:budget:1", approved=False)
        )
        outcomes = await handle.result()
        statuses = [
            e.message
            for e in (await handle.query(AskTwoWorkflow.progress, 0)).events
            if e.kind == "status"
        ]

    assert [q.id for q in both] == ["approval:legal:1", "approval:budget:1"]
    assert between == "awaiting_approval"
    assert [q.id for q in left] == ["approval:budget:1"]
    assert [(o.question_id, o.approved) for o in outcomes] == [
        ("approval:legal:1", True),
        ("approval:budget:1", False),
    ]
    assert statuses == ["awaiting approval of approval:legal:1", "rejected", "completed"]


async def test_asking_again_after_a_rejection_continues_the_thread(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue, Ask(attempts=3))
        for n, verdict in [(1, False), (2, False), (3, True)]:
            [pending] = await waiting(handle)
            assert pending.id == f"approval:release:{n}"
            await handle.execute_update(
                AskWorkflow.decide,
                ApprovalAnswer(question_id=pending.id, approved=verdict, reason=f"round {n}"),
            )
        result = await handle.result()
        ledger = await handle.query(AskWorkflow.artifacts)
        await replays(handle)

    assert [(q.id, q.n, q.status) for q in result.history] == [
        ("approval:release:1", 1, "rejected"),
        ("approval:release:2", 2, "rejected"),
        ("approval:release:3", 3, "approved"),
    ]
    assert result.history[1].text == "Ship version 2? (attempt 2)"
    assert [o.reason for o in result.outcomes] == ["round 1", "round 2", "round 3"]
    # One artifact per question, each written twice (asked, answered): no duplicates.
    questions = ledger.find_all(ApprovalQuestion)
    assert [(a.id, a.version) for a in questions] == [
        (f"approval:release:{n}", 2) for n in (1, 2, 3)
    ]


# --- timeouts on the time-skipping server ------------------------------------------------


async def timers(handle: Handle, client: Client) -> list[tuple[timedelta, str]]:
    """Each durable timer the workflow started: its duration and its Web UI summary."""
    history = await handle.fetch_history()
    converter = client.data_converter.payload_converter
    return [
        (
            e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta(),
            converter.from_payload(e.user_metadata.summary, str),
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]


async def test_a_timeout_rejects_with_the_reason_timed_out(
    time_skipping_env: WorkflowEnvironment, settings: Settings
) -> None:
    client = time_skipping_env.client
    policy = ApprovalPolicy(timeout=timedelta(days=3))
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue, Ask(policy=policy))
        await waiting(handle)
        waiting_status = (await handle.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE)
        result = await handle.result()  # the server skips the three days
        started = await timers(handle, client)

    assert waiting_status == "awaiting_approval"
    assert result.outcomes == [
        ApprovalOutcome(question_id=QUESTION, approved=False, reason="timed out", timed_out=True)
    ]
    [closed] = result.history
    assert closed.status == "timed_out" and closed.answer and closed.answer.reason == "timed out"
    assert started == [(timedelta(days=3), f"approval timeout: {QUESTION}")]


async def test_a_timeout_escalates_and_the_escalation_is_answered(
    time_skipping_env: WorkflowEnvironment, settings: Settings
) -> None:
    client = time_skipping_env.client
    policy = ApprovalPolicy(
        timeout=timedelta(hours=8), on_timeout="escalate", escalation_timeout=timedelta(days=2)
    )
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue, Ask(policy=policy))
        await waiting(handle)
        await time_skipping_env.sleep(timedelta(hours=9))
        [escalation] = await eventually(
            lambda: handle.query(AskWorkflow.pending_questions),
            lambda questions: [q.kind for q in questions] == ["escalate"],
            "the escalation",
        )
        # The first question is closed: an answer to it now is refused.
        with pytest.raises(WorkflowUpdateFailedError) as late:
            await handle.execute_update(AskWorkflow.decide, answer(question_id=QUESTION))
        outcome = await handle.execute_update(
            AskWorkflow.decide,
            ApprovalAnswer(question_id=escalation.id, approved=True, by="lead"),
        )
        result = await handle.result()
        ledger = await handle.query(AskWorkflow.artifacts)
        started = await timers(handle, client)
        await replays(handle)

    assert "already closed (timed_out)" in str(late.value.cause)
    assert escalation.id == "approval:release:2"
    assert escalation.escalates == QUESTION and escalation.text == "Ship version 2?"
    assert outcome == ApprovalOutcome(question_id=escalation.id, approved=True, reason="")
    assert result.outcomes == [outcome]
    first, second = result.history
    assert (first.status, first.answer) == ("timed_out", None)
    assert (second.kind, second.status) == ("escalate", "approved")
    assert [(link.source, link.target) for link in ledger.links_from(second.id, "escalates")] == [
        (second.id, QUESTION)
    ]
    assert started == [
        (timedelta(hours=8), f"approval timeout: {QUESTION}"),
        (timedelta(days=2), f"approval timeout: {escalation.id}"),
    ]


async def test_an_escalation_that_times_out_too_is_rejected_as_timed_out(
    time_skipping_env: WorkflowEnvironment, settings: Settings
) -> None:
    client = time_skipping_env.client
    policy = ApprovalPolicy(
        timeout=timedelta(days=1), on_timeout="escalate", escalation_timeout=timedelta(days=1)
    )
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue, Ask(policy=policy))
        result = await handle.result()
        escalated = await messages(handle, "escalation")

    assert result.outcomes == [
        ApprovalOutcome(
            question_id="approval:release:2", approved=False, reason="timed out", timed_out=True
        )
    ]
    assert [(q.kind, q.status) for q in result.history] == [
        ("approve", "timed_out"),
        ("escalate", "timed_out"),
    ]
    assert escalated == [f"{QUESTION} timed out; escalated to approval:release:2"]


# --- restarts ------------------------------------------------------------------------------


async def test_a_waiting_workflow_survives_a_worker_restart(
    client: Client, settings: Settings
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handle = await start_ask(client, settings.task_queue)
        await waiting(handle)
    # No worker now; a new one (with an empty cache) rebuilds the wait from history.
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        [pending] = await waiting(handle)
        outcome = await handle.execute_update(
            AskWorkflow.decide, ApprovalAnswer(question_id=pending.id, approved=True)
        )
        result = await handle.result()

    assert pending.id == QUESTION
    assert result.outcomes == [outcome] and outcome.approved


async def test_a_waiting_workflow_survives_a_dev_server_restart(
    tmp_path: Path, settings: Settings
) -> None:
    database, port = tmp_path / "temporal.db", free_port()
    first = await own_dev_server(database, port)
    try:
        async with build_worker(first.client, settings, workflows=[AskWorkflow]):
            handle = await start_ask(first.client, settings.task_queue)
            await waiting(handle)
    finally:
        await first.shutdown()

    second = await own_dev_server(database, port)
    try:
        client = second.client
        async with build_worker(client, settings, workflows=[AskWorkflow]):
            again = client.get_workflow_handle_for(AskWorkflow.run, handle.id)
            [pending] = await waiting(again)
            found = await eventually(
                lambda: listed(client, awaiting_query(settings.task_queue)),
                lambda ids: handle.id in ids,
                "the waiting workflow in the restarted server's visibility",
            )
            outcome = await again.execute_update(
                AskWorkflow.decide, ApprovalAnswer(question_id=pending.id, approved=True)
            )
            result = await again.result()
    finally:
        await second.shutdown()

    assert pending.id == QUESTION and found == {handle.id}
    assert result.outcomes == [outcome] and outcome.approved


# --- many at once ----------------------------------------------------------------------------


@pytest.mark.long_running
async def test_fifty_waiting_workflows_are_listed_and_all_complete_when_approved(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        handles = await asyncio.gather(
            *(start_ask(client, settings.task_queue, Ask(thread=f"release {i}")) for i in range(50))
        )
        # Fifty first workflow tasks at once on 2 cores, beside the other test process:
        # the first answer to a query can take a while; a patient poll, not a timing.
        await asyncio.gather(*(waiting(h, limit=180) for h in handles))
        found = await eventually(
            lambda: listed(client, awaiting_query(settings.task_queue)),
            lambda ids: len(ids) == 50,
            "fifty waiting workflows in visibility",
        )
        # `starter.py pending` finds them the way a person would, across the namespace.
        listing = await starter(
            "pending",
            "--json",
            env=clean_env(TEMPORAL_ADDRESS=client.service_client.config.target_host),
            cwd=tmp_path,
        )
        assert listing.code == 0, listing.err
        shown = {
            w["workflow_id"]: [q["id"] for q in w["questions"]]
            for w in json.loads(listing.out)["workflows"]
        }
        await asyncio.gather(*(h.signal(AskWorkflow.answer, answer()) for h in handles))
        results = await asyncio.gather(*(h.result() for h in handles))
        left = await eventually(
            lambda: listed(client, awaiting_query(settings.task_queue)),
            lambda ids: not ids,
            "no waiting workflow left in visibility",
        )

    assert found == {h.id for h in handles}
    assert {h.id: shown.get(h.id) for h in handles} == {
        h.id: [approval_id(f"release {i}", 1)] for i, h in enumerate(handles)
    }
    assert [r.outcomes[0].question_id for r in results] == [
        approval_id(f"release {i}", 1) for i in range(50)
    ]
    assert all(r.outcomes[0].approved for r in results)
    assert left == set()
