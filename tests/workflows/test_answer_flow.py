"""AnswerFlow on a real dev server: a user's own AnswerFlow recipe with deterministic
hooks, then AnswerFlowWorkflow end to end with the scripted model: repair rounds that
regenerate only what failed, the three endings, review policies, the token budget, bad
batches, status, and a worker killed in the middle of a round."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import Counter
from decimal import Decimal

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durafact._core.answer_flow import (
    BUDGET,
    NO_SOURCE,
    REVIEW_UNRESOLVED,
    SOURCE_UNAVAILABLE,
    AnswerBatchError,
    AnswerCheck,
    AnswerIssue,
    AnswerItem,
    AnswerResult,
    RecoveryResult,
)
from durafact._core.budget import Budget
from durafact._core.grounding import NOT_IN_SOURCE, QUOTE_TOO_SHORT, grounding_issues
from durafact._core.ledger import ArtifactRef, Ledger
from durafact._recipes.answer_flow import (
    NOT_ENOUGH_INFORMATION,
    REVIEW_FAILED,
    AnswerBatchInput,
    AnswerFlow,
    AnswerFlowResult,
    AnswerFlowSettings,
    AnswerFlowWorkflow,
    ItemAnswer,
    ItemVerdict,
    Question,
    check_answer_batch,
    load_answer_batch,
)
from durafact._recipes.recipe import RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE, RecipeContext
from durafact._recipes.spending import OVER_BUDGET

# The workflow sandbox re-imports this module; the worker side is not workflow code.
with workflow.unsafe.imports_passed_through():
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from durafact.testing import Call, ScriptedModel
    from tests.helpers import ledger_of, result_despite_worker_crash, scheduled_activities
    from tests.scripted_answers import answerer, context_of, questions


# --- a user's own AnswerFlow: deterministic hooks, no model --------------------------


class Term(BaseModel):
    term: str
    source: str | None = None
    right_from: int = 0  # the first attempt whose definition passes the check


class Terms(BaseModel):
    terms: list[Term]


class Definition(BaseModel):
    term: str
    attempt: int
    text: str
    fixes: list[str] = []  # the issue codes this attempt was asked to fix
    revises: str | None = None  # the rejected text it was shown


class Glossary(BaseModel):
    entries: dict[str, str]
    endings: dict[str, str]


@workflow.defn
class GlossaryFlow(AnswerFlow[Terms, Glossary]):
    @workflow.run
    async def run(self, terms: Terms) -> Glossary:
        return await self.execute(terms)

    def settings(self, terms: Terms) -> AnswerFlowSettings:
        return AnswerFlowSettings(max_repairs=2)

    def questions(self, terms: Terms) -> dict[str, Term]:
        return {t.term: t for t in terms.terms}

    def items(self, terms: Terms, questions: dict[str, Term]) -> list[AnswerItem]:
        return [
            AnswerItem(
                id=term,
                input_ids=[term],
                data=q,
                source_status="ready" if q.source else "unavailable",
            )
            for term, q in questions.items()
        ]

    async def generate(
        self,
        ctx: RecipeContext,
        items: list[AnswerItem],
        repairs: dict[str, list[AnswerIssue]] | None,
        previous: dict[str, Definition] | None,
    ) -> dict[str, Definition]:
        values = {}
        for item in items:
            before = (previous or {}).get(item.id)
            attempt = before.attempt + 1 if before else 0
            values[item.id] = Definition(
                term=item.id,
                attempt=attempt,
                text=f"{item.data.source} (attempt {attempt})",
                fixes=[issue.code for issue in (repairs or {}).get(item.id, [])],
                revises=before.text if before else None,
            )
        return values

    def check(self, item: AnswerItem, value: Definition) -> AnswerCheck:
        if value.attempt >= item.data.right_from:
            return AnswerCheck(status="passed")
        vague = AnswerIssue(code="VAGUE", message=f"attempt {value.attempt} is vague")
        return AnswerCheck(status="failed", issues=[vague])

    def fallback(self, item: AnswerItem, issues: list[AnswerIssue]) -> RecoveryResult:
        if item.source_status == "unavailable":
            return RecoveryResult(handled=True, value=f"{item.id}: see the index")
        return RecoveryResult(handled=False)

    async def observe(self, ctx: RecipeContext, stage_id: str, results: list[AnswerResult]):
        ctx.announce(f"{stage_id} " + " ".join(f"{r.item_id}={r.status}" for r in results))

    async def finish(
        self, ctx: RecipeContext, terms: Terms, results: list[AnswerResult]
    ) -> Glossary:
        entries = {
            r.item_id: r.value.text if r.status == "accepted" else r.value
            for r in results
            if r.status != "blocked"
        }
        return Glossary(entries=entries, endings={r.item_id: r.status for r in results})


@workflow.defn
class StrictGlossaryFlow(GlossaryFlow):
    @workflow.run
    async def run(self, terms: Terms) -> Glossary:
        return await self.execute(terms)

    def settings(self, terms: Terms) -> AnswerFlowSettings:
        # And no review hook: no item could ever be accepted.
        return AnswerFlowSettings(max_repairs=2, review_policy="required")


TERMS = Terms(
    terms=[
        Term(term="alpha", source="first letter"),
        Term(term="beta", source="second letter", right_from=1),
        Term(term="gamma", source="third letter", right_from=99),
        Term(term="delta"),
    ]
)


async def test_a_user_answer_flow_repairs_only_what_fails_and_ends_every_item(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[GlossaryFlow]):
        handle = await client.start_workflow(
            GlossaryFlow.run,
            TERMS,
            id=f"glossary-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        glossary = await handle.result()
        ledger = await handle.query(GlossaryFlow.artifacts)
        page = await handle.query(GlossaryFlow.progress, 0)

    assert glossary.endings == {
        "alpha": "accepted",
        "beta": "accepted",
        "gamma": "blocked",
        "delta": "fallback",
    }
    assert glossary.entries == {
        "alpha": "first letter (attempt 0)",
        "beta": "second letter (attempt 1)",
        "delta": "delta: see the index",
    }
    # Each round generated only what was still failing: alpha passed at once and was
    # never generated again; delta has no source and was never generated at all.
    assert [a for a in ledger.artifacts if a.startswith("answer:")] == [
        "answer:alpha:0",
        "answer:beta:0",
        "answer:gamma:0",
        "answer:beta:1",
        "answer:gamma:1",
        "answer:gamma:2",
    ]
    # The repair was given beta's issues and its rejected value.
    repaired = ledger.get("answer:beta:1").typed(Definition).data
    assert (repaired.fixes, repaired.revises) == (["VAGUE"], "second letter (attempt 0)")
    assert [link.target for link in ledger.links_from("answer:beta:1", "revises")] == [
        "answer:beta:0"
    ]
    assert [link.target for link in ledger.links_from("outcome:beta", "based_on")] == [
        "answer:beta:1"
    ]
    # gamma failed all max_repairs + 1 rounds and is blocked with its last issues.
    gamma = ledger.get("outcome:gamma").typed(AnswerResult).data
    assert (gamma.status, gamma.rounds, gamma.value) == ("blocked", 3, None)
    assert gamma.issues == [AnswerIssue(code="VAGUE", message="attempt 2 is vague")]
    assert [link.target for link in ledger.links_from("outcome:gamma", "last_attempt")] == [
        "answer:gamma:2"
    ]
    delta = ledger.get("outcome:delta").typed(AnswerResult).data
    assert (delta.status, delta.rounds) == ("fallback", 0)
    assert [issue.code for issue in delta.issues] == [SOURCE_UNAVAILABLE]
    assert [link.target for link in ledger.links_from("outcome:delta", "answers")] == [
        "question:delta"
    ]
    # observe saw every stage; the status followed the rounds.
    assert [e.message for e in page.events if e.kind == "info" and "=" in e.message] == [
        "generate:0 alpha=accepted beta=blocked gamma=blocked delta=fallback",
        "repair:1 alpha=accepted beta=accepted gamma=blocked delta=fallback",
        "repair:2 alpha=accepted beta=accepted gamma=blocked delta=fallback",
        "final alpha=accepted beta=accepted gamma=blocked delta=fallback",
    ]
    assert page.status == "final accepted=2 fallback=1 blocked=1"
    assert model.calls == []


async def test_a_user_answer_flow_that_cannot_be_defined_fails_at_once(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[StrictGlossaryFlow]):
        handle = await client.start_workflow(
            StrictGlossaryFlow.run,
            TERMS,
            id=f"glossary-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        ledger = await handle.query(StrictGlossaryFlow.artifacts)

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("InvalidAnswerBatch", True)
    assert cause.message.startswith("review_policy='required' needs a review hook")
    assert len(ledger) == 0 and model.calls == []  # nothing stored, nothing generated
    description = await handle.describe()
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "failed"


# --- AnswerFlowWorkflow --------------------------------------------------------------


async def start(
    client: Client, settings: Settings, items: list[Question], **kw
) -> WorkflowHandle[AnswerFlowWorkflow, AnswerFlowResult]:
    return await client.start_workflow(
        AnswerFlowWorkflow.run,
        AnswerBatchInput(questions=items, **kw),
        id=f"answer-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def answer(
    client: Client, settings: Settings, items: list[Question], **kw
) -> tuple[AnswerFlowResult, Ledger]:
    handle = await start(client, settings, items, **kw)
    return await handle.result(), await ledger_of(handle)


def by_id(result: AnswerFlowResult) -> dict[str, ItemVerdict]:
    return {r.item_id: r for r in result.results}


def outcomes(result: AnswerFlowResult, ledger: Ledger) -> dict[str, AnswerResult]:
    """Each item's `outcome:{id}` artifact, with every check it got."""
    return {r.item_id: ledger.resolve(r.outcome, AnswerResult) for r in result.results}


def codes(issues) -> list[str]:
    return [issue.code for issue in issues]


async def summaries(client: Client, handle: WorkflowHandle) -> list[tuple[str, str]]:
    return [(a.activity_id, a.summary) for a in await scheduled_activities(client, handle)]


# --- the grounding rule and the batch checks (no server) ----------------------------


def test_grounding_quotes_the_source_verbatim_up_to_case_spacing_and_typography() -> None:
    source = "The Eiffel Tower was completed in 1889 — for the “World's Fair”."
    assert grounding_issues("1889", "the eiffel  tower WAS\ncompleted", source) == []
    assert grounding_issues("1889", '"completed in 1889 - for the"', source) == []
    assert grounding_issues("1889", 'the "World\'s Fair".', source) == []
    assert codes(grounding_issues("1889", "in 1889", source)) == [QUOTE_TOO_SHORT]
    assert codes(grounding_issues("1889", "", source)) == [QUOTE_TOO_SHORT]
    assert codes(grounding_issues("1889", "was finished in 1889", source)) == [NOT_IN_SOURCE]
    assert codes(grounding_issues("1889", "The Eiffel ... in 1889", source)) == [NOT_IN_SOURCE]
    assert codes(grounding_issues("  ", "The Eiffel Tower", source)) == ["EMPTY_ANSWER"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[", "the batch is not valid JSON: Expecting value: line 1 column 2 (char 1)"),
        (
            '"q1"',
            "the batch must be a JSON list of questions or an object with 'questions', got str",
        ),
        ("{}", "the batch has no 'questions' list"),
        ("[]", "the batch has no questions"),
        ('{"questions": [], "max_repair": 1}', "unknown field 'max_repair' in the batch"),
        ('[{"id": "q1", "question": "x", "text": "y"}]', "question 1 has unknown field 'text'"),
        ('[{"id": "q1"}]', "question 1: question: Field required"),
        ('[{"id": 7, "question": "x"}]', "question 1: id: Input should be a valid string"),
        ('[{"id": "q 1", "question": "x"}]', "question 1 has the id 'q 1': an id is 1-64"),
        ('[{"id": "q1", "question": " "}]', "question 'q1' is empty"),
        (
            '[{"id": "q1", "question": "x"}, {"id": "q1", "question": "y"}]',
            "input id 'q1' appears more than once in the request",
        ),
        ('{"questions": [{"id": "q1", "question": "x"}], "max_repairs": -1}', "max_repairs must"),
        ('{"questions": [{"id": "q1", "question": "x"}], "max_repairs": true}', "max_repairs: "),
        ('{"questions": [{"id": "q1", "question": "x"}], "budget_tokens": 0}', "budget_tokens"),
        ('{"questions": [{"id": "q1", "question": "x"}], "review_policy": "on"}', "review_policy"),
        (
            '{"questions": [{"id": "a", "question": "x"}, {"id": "b", "question": "y"}], '
            '"max_items": 1}',
            "the request has 2 items, more than max_items=1",
        ),
    ],
)
def test_a_bad_batch_file_gets_one_clear_error(document: str, message: str) -> None:
    with pytest.raises(AnswerBatchError) as error:
        load_answer_batch(document)
    assert str(error.value).startswith(message)


def test_a_batch_file_is_a_list_or_an_object_and_flags_override_it() -> None:
    listed = load_answer_batch('[{"id": "q1", "question": "Why?", "source": "Because."}]')
    assert listed == AnswerBatchInput(
        questions=[Question(id="q1", question="Why?", source="Because.")]
    )
    document = {
        "questions": [{"id": "q1", "question": "Why?"}],
        "max_repairs": 3,
        "review_policy": "off",
    }
    batch = load_answer_batch(document, max_repairs=0, budget_tokens=500)
    assert (batch.max_repairs, batch.review_policy, batch.budget) == (0, "off", Budget(tokens=500))
    assert check_answer_batch(batch)[0].source_status == "none"


# --- end to end --------------------------------------------------------------------


async def test_a_repair_round_regenerates_only_the_failing_item(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(answerer(ungrounded={"q2": 1}))
    handle = await start(client, worker, questions("q1", "q2", "q3"))
    result = await handle.result()
    ledger = await ledger_of(handle)

    assert result.counts == {"accepted": 3, "fallback": 0, "blocked": 0}
    assert [(r.item_id, r.status, r.rounds) for r in result.results] == [
        ("q1", "accepted", 1),
        ("q2", "accepted", 2),
        ("q3", "accepted", 1),
    ]
    assert [c.activity_id for c in model.calls] == [
        "llm:generate:0",
        "llm:review:0",
        "llm:repair:1",
        "llm:review:1",
    ]
    generate, review, repair, review_again = model.calls
    assert set(context_of(generate, "question")) == {"q1", "q2", "q3"}
    assert set(context_of(review, "question")) == {"q1", "q3"}  # q2 failed the local check
    # The repair call is about q2 alone: its question, its rejected answer, its issue.
    assert set(context_of(repair, "question")) == {"q2"}
    assert set(context_of(repair, "answer")) == {"q2:0"}
    assert "- q2: NOT_IN_SOURCE: the quote does not occur verbatim" in repair.last_user
    assert not re.search(r"\bq[13]\b", repair.text)
    assert set(context_of(review_again, "answer")) == {"q2:1"}

    assert {"answer:q2:0", "answer:q2:1", "answer:q1:0"} <= set(ledger.artifacts)
    assert "answer:q1:1" not in ledger and "review:answer:q2:0" not in ledger
    assert [link.target for link in ledger.links_from("answer:q2:1", "revises")] == ["answer:q2:0"]
    assert [link.target for link in ledger.links_from("review:answer:q2:1")] == ["answer:q2:1"]
    tree = [node.id for node in ledger.provenance("outcome:q2").walk()]
    assert tree == [
        "outcome:q2",
        "question:q2",
        "answer:q2:1",  # based_on
        "question:q2",
        "answer:q2:0",  # revised by answer:q2:1
        "question:q2",
    ]
    q2 = by_id(result)["q2"]
    assert q2.accepted == ArtifactRef(id="answer:q2:1", type="ItemAnswer", version=1)
    accepted = ledger.resolve(q2.accepted, ItemAnswer)
    assert q2.answer == accepted.answer
    assert accepted.quote == "Kraków was the capital of Poland"
    assert codes(outcomes(result, ledger)["q2"].checks[0].issues) == [NOT_IN_SOURCE]

    assert await summaries(client, handle) == [
        ("llm:generate:0", "request model: answer 3 questions"),
        ("llm:review:0", "request model: review 2 answers"),
        ("llm:repair:1", "request model: repair 1 answer"),
        ("llm:review:1", "request model: review 1 answer"),
    ]


async def test_every_item_ends_accepted_fallback_or_blocked(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    # q1 is fine; q2's quote is never in its source; q3 fails its review twice; q4 and
    # q5 have no source (left out, and blank).
    model.reply(answerer(ungrounded={"q2": 9}, review_fails={"q3": 9}))
    items = questions("q1", "q2", "q3", q4=None, q5="   ")
    result, ledger = await answer(client, worker, items, max_repairs=1)

    assert result.counts == {"accepted": 1, "fallback": 2, "blocked": 2}
    results = by_id(result)
    assert results["q1"].status == "accepted"
    assert results["q1"].answer.startswith("from q1")  # the accepted ItemAnswer's
    assert (results["q2"].status, codes(results["q2"].issues)) == ("blocked", [NOT_IN_SOURCE])
    assert (results["q3"].status, codes(results["q3"].issues)) == ("blocked", [REVIEW_FAILED])
    assert results["q3"].issues[0].message == "round 1 verdict on q3"
    assert results["q2"].answer is None and results["q2"].rounds == 2
    for unavailable in ("q4", "q5"):  # no source given: said so, not "unavailable"
        assert results[unavailable].status == "fallback"
        assert results[unavailable].answer == NOT_ENOUGH_INFORMATION
        assert codes(results[unavailable].issues) == [NO_SOURCE]
        assert results[unavailable].rounds == 0
    # Unavailable questions never reach the model; the repair round has q2 and q3 only.
    shown = [set(context_of(c, "question")) for c in model.calls]
    assert shown == [{"q1", "q2", "q3"}, {"q1", "q3"}, {"q2", "q3"}, {"q3"}]
    repair = model.calls_for("llm:repair:1")[0]
    assert "- q3: REVIEW_FAILED (see [review:answer:q3:0])" in repair.last_user
    assert set(context_of(repair, "review")) == {"answer:q3:0"}
    assert "round 0 verdict on q3" not in repair.last_user  # referenced, not repeated

    assert [link.target for link in ledger.links_from("outcome:q1", "based_on")] == ["answer:q1:0"]
    assert [link.target for link in ledger.links_from("outcome:q2", "last_attempt")] == [
        "answer:q2:1"
    ]
    assert ledger.links_from("outcome:q4", "based_on") == []
    assert [link.target for link in ledger.links_from("outcome:q4", "answers")] == ["question:q4"]
    assert {r.item_id: r.accepted.id for r in result.results if r.accepted} == {"q1": "answer:q1:0"}


async def test_missing_duplicate_and_unknown_answers(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    good = answerer()

    def reply(call: Call) -> dict:
        if call.activity_id != "llm:generate:0":
            return good(call)
        q1 = good(call)["answers"][0]
        bad = {**q1, "quote": "nothing of the sort"}
        return {"answers": [bad, q1, {**q1, "item_id": "zz"}]}  # q2 left out

    model.reply(reply)
    handle = await start(client, worker, questions("q1", "q2"), review_policy="off")
    result = await handle.result()
    ledger = await ledger_of(handle)

    results = outcomes(result, ledger)
    assert codes(results["q1"].checks[0].issues) == [NOT_IN_SOURCE]  # the first answer counts
    assert codes(results["q2"].checks[0].issues) == ["MISSING_VALUE"]
    assert result.counts["accepted"] == 2
    assert "answer:q2:0" not in ledger
    repair = model.calls_for("llm:repair:1")[0]
    assert set(context_of(repair, "answer")) == {"q1:0"}  # q2 had no answer to show
    assert "- q2: MISSING_VALUE: generate returned no value for 'q2'" in repair.last_user
    page = await handle.query(AnswerFlowWorkflow.progress, 0)
    assert "ignored answers for q1, zz" in [e.message for e in page.events]


@pytest.mark.parametrize(("policy", "status"), [("required", "blocked"), ("optional", "accepted")])
async def test_a_review_that_leaves_an_item_out(
    client: Client, worker: Settings, model: ScriptedModel, policy: str, status: str
) -> None:
    model.reply(answerer(unreviewed={"q2"}))
    result, ledger = await answer(client, worker, questions("q1", "q2"), review_policy=policy)

    results = by_id(result)
    assert results["q1"].status == "accepted"
    assert (results["q2"].status, codes(results["q2"].issues)) == (status, [REVIEW_UNRESOLVED])
    assert "review:answer:q1:0" in ledger and "review:answer:q2:0" not in ledger
    assert [c.activity_id for c in model.calls] == ["llm:generate:0", "llm:review:0"]


async def test_a_failed_review_call_blocks_under_required(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(answerer())
    model.fail(403, when=lambda call: call.schema_name == "Verdicts")
    result, _ = await answer(client, worker, questions("q1"), review_policy="required")
    assert (result.results[0].status, codes(result.results[0].issues)) == (
        "blocked",
        [REVIEW_UNRESOLVED],
    )
    assert "PermissionDenied" in result.results[0].issues[0].message


async def test_review_off_makes_no_review_call(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(answerer(ungrounded={"q1": 1}))
    result, _ = await answer(client, worker, questions("q1", "q2"), review_policy="off")
    assert result.counts["accepted"] == 2
    assert [c.activity_id for c in model.calls] == ["llm:generate:0", "llm:repair:1"]


@pytest.mark.parametrize("policy", ["off", "optional"])
async def test_a_token_budget_stops_after_round_zero(
    client: Client, worker: Settings, model: ScriptedModel, policy: str
) -> None:
    model.reply(answerer(ungrounded={"q2": 9}))
    items = questions("q1", "q2", q3=None)
    handle = await start(client, worker, items, budget_tokens=1, review_policy=policy)
    result = await handle.result()

    assert [c.activity_id for c in model.calls] == ["llm:generate:0"]
    # Every item ended, and the run's phase says the budget stopped it.
    description = await handle.describe()
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == OVER_BUDGET
    results = by_id(result)
    assert (results["q2"].status, codes(results["q2"].issues)) == (
        "blocked",
        [NOT_IN_SOURCE, BUDGET],
    )
    assert results["q3"].status == "fallback"
    # q1 passed its check; without a review it is accepted, and an optional review the
    # budget refused leaves its local verdict standing, with the budget as a note.
    assert results["q1"].status == "accepted"
    assert codes(results["q1"].issues) == ([] if policy == "off" else [BUDGET])
    assert result.usage.total_tokens >= 1


def test_a_batch_takes_every_recipes_budget_and_budget_tokens_still_reads() -> None:
    base = {"questions": [{"id": "q1", "question": "Why?"}]}
    assert load_answer_batch({**base, "budget_tokens": 500}).budget == Budget(tokens=500)
    file = json.dumps({**base, "budget": {"cost": 0.5, "on_exhausted": "ask"}})
    assert load_answer_batch(file).budget == Budget(cost=Decimal("0.5"), on_exhausted="ask")
    with pytest.raises(AnswerBatchError, match="give budget or budget_tokens"):
        load_answer_batch({**base, "budget_tokens": 5, "budget": {"tokens": 5}})


async def test_an_invalid_batch_fails_at_once(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    batch = AnswerBatchInput(questions=questions("q1", "q2", "q1"))
    with pytest.raises(AnswerBatchError) as expected:
        check_answer_batch(batch)
    handle = await client.start_workflow(
        AnswerFlowWorkflow.run,
        batch,
        id=f"answer-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("InvalidAnswerBatch", True)
    assert (
        cause.message
        == str(expected.value)
        == "input id 'q1' appears more than once in the request"
    )
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "failed"
    assert model.calls == []
    assert await summaries(client, handle) == []


async def test_status_follows_the_rounds(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(answerer(ungrounded={"q2": 1, "q3": 2}))
    release = model.hold(lambda call: call.activity_id == "llm:repair:1")
    handle = await start(client, worker, questions("q1", "q2", "q3", q4=None), max_repairs=1)
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id == "llm:repair:1")

    # Mid-round: the status shows round 0's counts, the search attribute the phase.
    assert (
        await handle.query(AnswerFlowWorkflow.status) == "round:0 accepted=1 fallback=1 failing=2"
    )
    running = (await handle.describe()).typed_search_attributes
    assert running.get(STATUS_ATTRIBUTE) == "round"
    ledger = await handle.query(AnswerFlowWorkflow.artifacts)
    assert "answer:q2:0" in ledger and "outcome:q1" not in ledger
    release.set()
    await handle.result()

    page = await handle.query(AnswerFlowWorkflow.progress, 0)
    statuses = [e.message for e in page.events if e.kind == "status"]
    assert statuses == [
        "answering 4 items (1 without a source)",
        "generate:0: round:0 accepted=1 fallback=1 failing=2; failing: q2, q3",
        "repair:1: round:1 accepted=2 fallback=1 failing=1; failing: q3",
        "final accepted=2 fallback=1 blocked=1; blocked: q3",
    ]
    assert "round 1: repair 2 items" in [e.message for e in page.events]
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(RECIPE_ATTRIBUTE) == "answer_flow"
    assert attributes.get(STATUS_ATTRIBUTE) == "final"  # the phase


async def test_a_failed_generate_call_is_visible_as_failed(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(401, when=lambda call: call.schema_name == "BatchAnswers")
    handle = await start(client, worker, questions("q1"))
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    description = await handle.describe()
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "failed"


async def test_a_killed_worker_mid_round_does_not_repeat_finished_calls(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(answerer(ungrounded={"q2": 1}))
    repair = "llm:repair:1"

    async def begin() -> WorkflowHandle:
        return await start(client, settings, questions("q1", "q2", "q3"))

    result = await result_despite_worker_crash(
        client, settings, model, start=begin, during=lambda call: call.activity_id == repair
    )

    assert result.counts == {"accepted": 3, "fallback": 0, "blocked": 0}
    assert Counter(call.activity_id for call in model.calls) == {
        "llm:generate:0": 1,
        "llm:review:0": 1,
        repair: 2,  # the interrupted call, then its retry on the new worker
        "llm:review:1": 1,
    }
