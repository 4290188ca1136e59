"""ReflectionLoop: the ready ReflectionWorkflow end to end on a real dev server with the
scripted model, and a user's own loop with deterministic hooks (no model at all)."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import Counter

import pytest
from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durafact._core.ledger import ArtifactRef, Ledger
from durafact._recipes import (
    Draft,
    RecipeContext,
    ReflectionInput,
    ReflectionLoop,
    ReflectionOutcome,
    ReflectionResult,
    ReflectionSettings,
    ReflectionWorkflow,
    Review,
)
from durafact._recipes.recipe import RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE

# The workflow sandbox re-imports this module; the worker side is not workflow code.
with workflow.unsafe.imports_passed_through():
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from durafact.testing import Call, ScriptedModel
    from tests.helpers import ledger_of, result_despite_worker_crash, scheduled_activities

TOPIC = "Why tea cools faster in a wide cup"
DRAFT = f"draft:{TOPIC}"


def critic(*scores: float):
    """A model whose critique in round r scores `scores[r - 1]`; texts name their version."""

    def reply(call: Call) -> str | dict:
        round_ = call.activity_id.rsplit(":", 1)[-1]
        if call.schema_name == "Critique":
            return {"score": scores[int(round_) - 1], "feedback": f"add numbers (round {round_})"}
        if call.activity_id.startswith("llm:rewrite:"):
            return f"text v{int(round_) + 1}"
        return "text v1"

    return reply


async def start(client: Client, settings: Settings, **kw) -> WorkflowHandle:
    return await client.start_workflow(
        ReflectionWorkflow.run,
        ReflectionInput(topic=TOPIC, **kw),
        id=f"reflect-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def reflect(client: Client, settings: Settings, **kw) -> tuple[ReflectionResult, Ledger]:
    handle = await start(client, settings, **kw)
    return await handle.result(), await ledger_of(handle)


def reviews_of(result: ReflectionResult, ledger: Ledger) -> list[Review]:
    return [ledger.resolve(ref, Review) for ref in result.reviews]


async def test_accepted_in_round_one_makes_no_rewrite(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.9))
    result, ledger = await reflect(client, worker)

    assert (result.ending, result.scores, result.rounds) == ("accepted", [0.9], 1)
    assert [c.activity_id for c in model.calls] == [f"llm:{DRAFT}", f"llm:review:{DRAFT}:1"]
    assert result.draft == ArtifactRef(id=DRAFT, type="Draft", version=1)
    assert ledger.resolve(result.draft, Draft).text == result.final.text == "text v1"
    assert (result.final.rounds, result.final.score) == (1, 0.9)


async def test_a_low_score_leads_to_one_rewrite_that_is_accepted(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.4, 0.85))
    result, ledger = await reflect(client, worker)

    assert (result.ending, result.scores, result.rounds) == ("accepted", [0.4, 0.85], 2)
    assert [c.activity_id for c in model.calls] == [
        f"llm:{DRAFT}",
        f"llm:review:{DRAFT}:1",
        f"llm:rewrite:{DRAFT}:1",
        f"llm:review:{DRAFT}:2",
    ]
    # One draft, updated in place: its version is the round it was accepted in.
    assert result.draft == ArtifactRef(id=DRAFT, type="Draft", version=2)
    draft = ledger.resolve(result.draft, Draft)
    assert draft == Draft(topic=TOPIC, round=2, text="text v2")
    assert draft.text == result.final.text
    assert [(r.round, r.score) for r in reviews_of(result, ledger)] == [(1, 0.4), (2, 0.85)]
    for r in (1, 2):
        assert [link.target for link in ledger.links_from(f"review:{DRAFT}:{r}", "reviews")] == [
            DRAFT
        ]
    assert [link.target for link in ledger.links_from(f"final:{TOPIC}")] == [DRAFT]
    assert ledger.links_from(f"final:{TOPIC}")[0].relation == "based_on"
    ids = [node.id for node in ledger.provenance(f"final:{TOPIC}").walk()]
    assert ids == [f"final:{TOPIC}", DRAFT, f"topic:{TOPIC}"]
    assert result.usage.total_tokens > 0


async def test_the_rewrite_sees_the_feedback_and_the_draft_by_reference(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.4, 0.85))
    handle = await start(client, worker)
    await handle.result()

    [rewrite] = model.calls_for(f"llm:rewrite:{DRAFT}:1")
    assert "text v1" in rewrite.text and "add numbers (round 1)" in rewrite.text
    # Round 2 critiques the rewritten text, not the first one.
    [second] = model.calls_for(f"llm:review:{DRAFT}:2")
    assert "text v2" in second.text and "text v1" not in second.text
    # Both reached the model as artifact ids: the rewrite activity's input in history
    # holds neither text, so history grows with the rounds, not with their square.
    inputs = {s.activity_id: s.input for s in await scheduled_activities(client, handle)}
    request = str(inputs[f"llm:rewrite:{DRAFT}:1"])
    assert "text v1" not in request and "add numbers" not in request
    assert DRAFT in request and f"review:{DRAFT}:1" in request


async def test_out_of_rewrites_the_best_scored_text_is_kept_not_the_last(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.3, 0.7, 0.2))  # the rewrite of round 2 made it worse
    handle = await start(client, worker, max_rounds=2)
    result = await handle.result()
    ledger = await ledger_of(handle)

    assert result.ending == "round_limit" and result.scores == pytest.approx([0.3, 0.7, 0.2])
    assert result.final.text == "text v2"
    assert (result.final.rounds, result.final.score) == (2, pytest.approx(0.7))
    draft = ledger.get(DRAFT)
    assert draft.data["text"] == "text v2" and draft.version == 4  # restored as the latest
    progress = await handle.query(ReflectionWorkflow.progress, 0)
    assert "keeping the draft of round 2, the best scored (0.70)" in [
        e.message for e in progress.events
    ]


async def test_a_review_copied_into_a_rewrite_never_reaches_the_text(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    def parrot(call: Call) -> str | dict:
        if call.schema_name == "Critique":
            return {"score": 0.5 if call.activity_id.endswith(":1") else 0.9, "feedback": "cite"}
        if call.activity_id.startswith("llm:rewrite:"):
            # A weak model: the review it was shown, then the text.
            return '{"round": 1, "score": 0.5, "feedback": "cite"}\n\nTea cools (Newton, 1701).'
        return "Tea cools."

    model.reply(parrot)
    result = await (await start(client, worker)).result()
    assert result.final.text == "Tea cools (Newton, 1701)."
    [rewrite] = model.calls_for(f"llm:rewrite:{DRAFT}:1")
    assert "Review of round 1 (score 0.50): cite" in rewrite.text  # shown as prose
    assert '"feedback"' not in rewrite.text


@pytest.mark.parametrize("max_rounds", [1, 2, 3])
async def test_the_round_limit_ends_the_loop_with_every_score(
    client: Client, worker: Settings, model: ScriptedModel, max_rounds: int
) -> None:
    model.reply(critic(*[0.1 * (i + 1) for i in range(max_rounds + 1)]))
    handle = await start(client, worker, max_rounds=max_rounds)
    result = await handle.result()

    # max_rounds bounds the rewrites; every rewrite is critiqued.
    rounds = max_rounds + 1
    assert result.ending == "round_limit"
    assert result.scores == pytest.approx([0.1 * r for r in range(1, rounds + 1)])
    assert result.rounds == rounds
    assert len(model.calls) == 2 * max_rounds + 2
    assert [c.activity_id for c in model.calls] == [
        f"llm:{DRAFT}",
        *[f"llm:{verb}:{DRAFT}:{r}" for r in range(1, rounds) for verb in ("review", "rewrite")],
        f"llm:review:{DRAFT}:{rounds}",
    ]
    assert result.draft.version == rounds
    reviews = reviews_of(result, await ledger_of(handle))
    assert [r.round for r in reviews] == list(range(1, rounds + 1))
    assert result.final.text == f"text v{rounds}"
    assert await handle.query(ReflectionWorkflow.status) == "round_limit"
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(STATUS_ATTRIBUTE) == "round_limit"


async def test_the_last_allowed_round_can_still_accept(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.2, 0.3, 0.95))
    result, _ = await reflect(client, worker)
    assert (result.ending, result.rounds, len(model.calls)) == ("accepted", 3, 6)


async def test_scores_outside_zero_to_one_are_clamped_and_kept_raw(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(-0.5, 1.2))
    handle = await start(client, worker, accept_at=1.0)
    result = await handle.result()

    assert (result.ending, result.scores) == ("accepted", [0.0, 1.0])
    reviews = reviews_of(result, await ledger_of(handle))
    assert [(r.score, r.raw_score) for r in reviews] == [(0.0, -0.5), (1.0, 1.2)]
    page = await handle.query(ReflectionWorkflow.progress, 0)
    messages = [e.message for e in page.events]
    assert "round 1: score -0.5 clamped to 0.0" in messages
    assert "round 2: score 1.2 clamped to 1.0" in messages


async def test_status_follows_the_rounds(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.4, 0.85))
    release = model.hold(lambda call: call.activity_id == f"llm:rewrite:{DRAFT}:1")
    handle = await start(client, worker)
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id.startswith("llm:rewrite"))
    assert await handle.query(ReflectionWorkflow.status) == "rewriting:1"
    running = (await handle.describe()).typed_search_attributes
    assert running.get(STATUS_ATTRIBUTE) == "rewriting"  # the phase
    ledger = await handle.query(ReflectionWorkflow.artifacts)
    assert ledger.get(DRAFT).version == 1 and f"review:{DRAFT}:1" in ledger

    release.set()
    await handle.result()
    page = await handle.query(ReflectionWorkflow.progress, 0)
    statuses = [e.message for e in page.events if e.kind == "status"]
    assert statuses == [
        f"drafting: {TOPIC}",
        "critiquing:1",
        "rewriting:1",
        "critiquing:2",
        "finishing: accepted in round 2",
        "accepted: round 2, score 0.85",
    ]
    assert "round 1: score 0.40 (accept at 0.80)" in [e.message for e in page.events]
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(RECIPE_ATTRIBUTE) == "reflection"
    assert attributes.get(STATUS_ATTRIBUTE) == "accepted"


async def test_history_shows_readable_activity_summaries(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.4, 0.85))
    handle = await start(client, worker)
    await handle.result()
    summaries = [s.summary for s in await scheduled_activities(client, handle)]
    assert summaries == [
        f"request model: draft {TOPIC!r}",
        "request model: critique round 1",
        "request model: rewrite round 1",
        "request model: critique round 2",
    ]


async def test_a_failed_critique_is_visible_as_failed(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(critic(0.4, 0.85))
    model.fail(403, when=lambda call: call.schema_name == "Critique")
    handle = await start(client, worker)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "failed"


def test_bad_input_is_rejected_before_anything_starts() -> None:
    assert ReflectionInput(topic="  Tea  ").topic == "Tea"
    for bad in (
        {"topic": "   "},
        {"topic": "Tea", "accept_at": 1.5},
        {"topic": "Tea", "accept_at": -0.1},
        {"topic": "Tea", "accept_at": math.nan},
        {"topic": "Tea", "max_rounds": 0},
    ):
        with pytest.raises(ValidationError):
            ReflectionInput(**bad)


async def test_a_killed_worker_mid_rewrite_does_not_repeat_finished_calls(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    rewrite = f"llm:rewrite:{DRAFT}:1"
    model.reply(critic(0.4, 0.85))
    result = await result_despite_worker_crash(
        client,
        settings,
        model,
        start=lambda: start(client, settings),
        during=lambda call: call.activity_id == rewrite,
    )

    assert (result.ending, result.scores) == ("accepted", [0.4, 0.85])
    assert result.draft.version == 2
    assert Counter(call.activity_id for call in model.calls) == {
        f"llm:{DRAFT}": 1,
        f"llm:review:{DRAFT}:1": 1,
        rewrite: 2,  # the interrupted call, then its retry on the new worker
        f"llm:review:{DRAFT}:2": 1,
    }


# --- A user's own loop: deterministic hooks, no model -------------------------------


class Brief(BaseModel):
    text: str
    max_rounds: int | None = None


class Verse(BaseModel):
    topic: str = ""
    round: int = 0
    lines: list[str]


class Poem(BaseModel):
    text: str


@workflow.defn
class Versifier(ReflectionLoop[Brief, Verse, Poem]):
    """Accepts a verse of four lines; each rewrite adds one line."""

    @workflow.run
    async def run(self, brief: Brief) -> ReflectionOutcome[Poem]:
        return await self.execute(brief)

    def settings(self, brief: Brief) -> ReflectionSettings:
        # Only a whole verse is accepted; the brief may change how many rewrites.
        if brief.max_rounds is None:
            return ReflectionSettings(accept_at=1.0)
        return ReflectionSettings(accept_at=1.0, max_rounds=brief.max_rounds)

    async def draft(self, ctx: RecipeContext, brief: Brief) -> Verse:
        return Verse(lines=[brief.text])

    async def critique(self, ctx: RecipeContext, verse: Verse) -> tuple[float, str]:
        if verse.lines[0] == "nan":
            return math.nan, "?"
        return len(verse.lines) / 4, f"{4 - len(verse.lines)} lines short"

    async def rewrite(self, ctx: RecipeContext, verse: Verse, review: Review) -> Verse:
        return Verse(lines=[*verse.lines, f"line {len(verse.lines) + 1} ({review.feedback})"])

    async def finish(self, ctx: RecipeContext, verse: Verse, review: Review) -> Poem:
        return Poem(text=" / ".join(verse.lines))


async def test_a_user_loop_runs_its_hooks_without_a_model(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[Versifier]):

        async def run(brief: Brief) -> tuple[ReflectionOutcome[Poem], WorkflowHandle]:
            handle = await client.start_workflow(
                Versifier.run,
                brief,
                id=f"verse-{uuid.uuid4().hex[:8]}",
                task_queue=settings.task_queue,
            )
            return await handle.result(), handle

        # Default settings: max_rounds=2 rewrites -> 3 lines at most, never 4: the limit.
        limited, handle = await run(Brief(text="Rain"))
        ledger = await handle.query(Versifier.artifacts)
        # Overridden per run: a third rewrite reaches four lines and is accepted.
        accepted, _ = await run(Brief(text="Snow", max_rounds=3))
        # No rewrites allowed: one critique, then the limit.
        single, _ = await run(Brief(text="Fog", max_rounds=0))
        nan = await client.start_workflow(
            Versifier.run,
            Brief(text="nan"),
            id=f"verse-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await nan.result()
        failed = (await nan.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE)

    assert (limited.ending, limited.scores, limited.rounds) == ("round_limit", [0.25, 0.5, 0.75], 3)
    assert limited.final == Poem(text="Rain / line 2 (3 lines short) / line 3 (2 lines short)")
    verse = ledger.get("draft:Rain")
    assert verse.version == 3
    assert (verse.typed(Verse).data.topic, verse.typed(Verse).data.round) == ("Rain", 3)
    assert [link.source for link in ledger.links if link.relation == "reviews"] == [
        "review:draft:Rain:1",
        "review:draft:Rain:2",
        "review:draft:Rain:3",
    ]
    assert ledger.links_from("final:Rain", "based_on")[0].target == "draft:Rain"
    assert (accepted.ending, accepted.scores) == ("accepted", [0.25, 0.5, 0.75, 1.0])
    assert (single.ending, single.scores, single.final) == ("round_limit", [0.25], Poem(text="Fog"))
    # A score that is not a number fails the run, visibly.
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidScore"
    assert failed == "failed"
    assert model.calls == []


@workflow.defn
class OverStrictVersifier(Versifier):
    """A bad override: asks for a score no critique can give."""

    @workflow.run
    async def run(self, brief: Brief) -> ReflectionOutcome[Poem]:
        return await self.execute(brief)

    def settings(self, brief: Brief) -> ReflectionSettings:
        limits = super().settings(brief)
        limits.accept_at = 1.5  # pydantic does not check an assignment: the loop does
        return limits


async def test_settings_out_of_range_fail_the_run_before_any_hook(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[OverStrictVersifier]):
        handle = await client.start_workflow(
            OverStrictVersifier.run,
            Brief(text="Hail"),
            id=f"verse-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        ledger = await handle.query(OverStrictVersifier.artifacts)

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidSettings"
    assert cause.message == "accept_at must be a number in [0, 1], not 1.5"
    assert list(ledger.artifacts) == ["topic:Hail"]
