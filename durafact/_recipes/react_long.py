"""Long ReAct runs: the model's view folded by a context policy, and continue-as-new
between two turns. The loop (durafact/_recipes/react.py) calls these; they keep no state of
their own.

What the model sees is the run's view (`_Run.view` of durafact/_recipes/react.py, a
`LoopContext` of durafact/_core/loop_context.py), which the query `context_messages`
serves: with the context policy `keep_all` (the default) every message;
`prune_observations` shows observations older than the last turns by their first line
and "[pruned: see obs:...]"; `compact` folds every turn but the last few into a digest
(`digest:{run}:{version}`, one model call `llm:digest:{run}:{version}`) once the view
passes a token estimate (`fold_context`, after each turn).

Between two turns, never within one, a run whose history is past
`continue_after_events` or `continue_after_bytes` (or that the server says is full),
and that made half of that limit itself (`continues`), waits for its handlers to
finish and continues as new with `ReActInput.loop_carry` (`ReActCarry`): the turn
count, the view, the tool list, the calls, the last observations (the loop guard),
what was spent, the remembered answers, and each earlier run with the observations it
holds (`continue_as_new`). The next run takes it up (`resume`) and names those as
`run:{run_id}` artifacts (`EarlierRun`), and the answer is linked `based_on` them as
well as on its own observations. Only a `ReActInput` can carry the loop; a recipe
with another input stays in one run.

Versions. On a worker of a deployment (durafact/_runtime/versioning.py) every run is
pinned to the version it started on. A recipe that declares
`upgrade_on_continue_as_new` (`ReActWorkflow`, `ChatWorkflow`) also continues as new
between two turns once a new version is current (`new_version`), and its next run
starts there (`next_run_options`): a long loop moves to new code at a turn's end, never
within a run, so the change needs no `workflow.patched`, only a carry the new code
still reads.
"""

from __future__ import annotations

from typing import Any, NoReturn, Protocol

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ContinueAsNewVersioningBehavior

from durafact._core.ids import earlier_run_id, loop_digest_id, message_id, tools_id
from durafact._core.llm import Usage
from durafact._core.loop_context import ContextFold, ContextPolicy, LoopContext
from durafact._core.react import Observation, ToolCallRecord, ToolList
from durafact._core.tool_policy import RememberedDecision
from durafact._core.tools import ToolSpec
from durafact._recipes.recipe import RecipeContext, reraise_cancellation
from durafact._recipes.tool_gate import hold_remembered, remembered

COMPACTOR = (
    "You keep the notes of an assistant working through a question with tools. Rewrite "
    "the digest so far and the turns below as one short digest: keep every result, number, "
    "name and id the answer may need, and what was already tried; drop the rest. Plain "
    "text, no preamble."
)


class EarlierRun(BaseModel):
    """The artifact `run:{run_id}`: an earlier run of this loop, which continued as new,
    and the observations its ledger holds (the `artifacts` query of that run id)."""

    run_id: str
    first_turn: int
    last_turn: int
    observations: list[str] = Field(default_factory=list)


class ReActCarry(BaseModel):
    """What a ReAct run carries into the next when it continues as new between two
    turns: only what the next turn needs. Large values go through the data converter's
    payload store, like any payload."""

    turns: int = Field(description="Turns made so far, in every run of the chain.")
    context: LoopContext = Field(description="The model's view, by value.")
    tools: ToolList = Field(description="The tools listed by the first run.")
    calls: list[ToolCallRecord] = Field(default_factory=list)
    recent: list[Observation] = Field(
        default_factory=list, description="The last observations, for the loop guard."
    )
    usage: Usage = Field(default_factory=Usage, description="What the earlier runs spent.")
    earlier: list[EarlierRun] = Field(default_factory=list)
    remembered: list[RememberedDecision] = Field(
        default_factory=list,
        description="Answers to tool questions remembered so far, every scope: the chain "
        "is one run of the loop.",
    )


class LongRunLimits(Protocol):
    """The limits read here (`ReActSettings` has them)."""

    context: ContextPolicy
    continue_after_events: int
    continue_after_bytes: int
    loop_limit: int


class LongRun(Protocol):
    """What is read and kept here of a run (the loop's `_Run` has it)."""

    key: str
    question: str
    view: LoopContext
    first_turn: int
    start_events: int
    start_bytes: int
    calls: list[ToolCallRecord]
    observations: dict[str, Observation]
    carried_recent: list[Observation]
    earlier: list[EarlierRun]

    @property
    def settings(self) -> LongRunLimits: ...

    def latest(self) -> list[Observation]: ...


def history_full(events: int, size: int) -> bool:
    """Whether this run's history is past `events` events or `size` bytes, or the
    server suggests continuing as new."""
    info = workflow.info()
    return (
        info.is_continue_as_new_suggested()
        or info.get_current_history_length() >= events
        or info.get_current_history_size() >= size
    )


# --- the context policy ------------------------------------------------------------------


async def fold_context(ctx: RecipeContext, run: LongRun, turn: int) -> None:
    """Let the context policy fold the model's view after `turn`: a fold into the
    digest is one model call (`llm:digest:{run}:{version}`)."""
    policy = run.settings.context
    fold = policy.plan(run.view, turn)
    if fold is None:
        return
    text = None
    if fold.needs_text:
        version = run.view.digest.version + 1 if run.view.digest else 1
        with ctx.scoped(loop_digest_id(run.key, version)):
            text = await _digest_text(ctx, run, fold)
    run.view = policy.apply(run.view, fold, text)
    digest = run.view.digest
    if fold.needs_text and digest is not None:
        ctx.ledger.create(loop_digest_id(run.key, digest.version), digest)
        ctx.announce(
            f"context: turns {digest.first_turn} to {digest.last_turn} folded into "
            f"{loop_digest_id(run.key, digest.version)}",
            kind="context",
        )


async def _digest_text(ctx: RecipeContext, run: LongRun, fold: ContextFold) -> str | None:
    """The digest's new text: one model call, which reads the digest so far and the
    folded messages by reference; None (the policy's fallback: the folded lines cut
    short) when it fails."""
    digest = run.view.digest
    refs = [loop_digest_id(run.key, digest.version)] if digest else []
    refs += [message_id(run.key, line.message) for line in fold.lines]
    try:
        return await ctx.llm.text(
            f"Question: {run.question}\n\nFold the digest so far (if any) and the "
            "messages above into the new digest.",
            system=COMPACTOR,
            context=list(refs),
            summary=f"request model: fold turns {fold.lines[0].turn} to {fold.lines[-1].turn}",
        )
    except ActivityError as exc:
        reraise_cancellation(exc)
        workflow.logger.warning("folding the loop's context failed: %s", exc.cause)
        return None


# --- continue-as-new ---------------------------------------------------------------------


def continues(run: LongRun, upgrade: bool = False) -> bool:
    """Whether a run whose input can carry the loop (a `ReActInput`) continues as new
    now: its history is full, and this run made at least half of it (a carry near the
    limits, a long view kept whole, inline without a payload store, would otherwise
    fill each next run at once and continue on every turn); or, for a recipe that
    upgrades on continue-as-new (`upgrade`), a new version of its worker deployment is
    current (`new_version`)."""
    events, size = run.settings.continue_after_events, run.settings.continue_after_bytes
    info = workflow.info()
    grown = (
        info.get_current_history_length() - run.start_events >= events // 2
        or info.get_current_history_size() - run.start_bytes >= size // 2
    )
    return (history_full(events, size) and grown) or (upgrade and new_version())


def new_version() -> bool:
    """Whether the run's worker deployment has a new current (or ramping) version, on
    which a recipe that upgrades on continue-as-new starts its next run. Always False
    on an unversioned worker; the server says so with a workflow task, so a run that
    waits learns it with the next message or answer it gets."""
    return workflow.info().is_target_worker_deployment_version_changed()


def next_run_options(upgrade: bool) -> dict[str, Any]:
    """`workflow.continue_as_new`'s versioning options: for a recipe that upgrades on
    continue-as-new, on a versioned worker, the next run starts on the deployment's
    current version (then stays there, pinned); otherwise it inherits this run's
    version, Temporal's rule for a pinned run, and an unversioned worker sends what it
    always sent."""
    if upgrade and workflow.info().get_current_deployment_version() is not None:
        return {"initial_versioning_behavior": ContinueAsNewVersioningBehavior.AUTO_UPGRADE}
    return {}


async def continue_as_new(
    ctx: RecipeContext, input: BaseModel, run: LongRun, turns: int, upgrade: bool = False
) -> NoReturn:
    """Continue as new after `turns` turns with `input` (a `ReActInput`), carrying only
    what the next turn needs, once every handler has finished (an answer arriving now
    is taken in this run; the loop has put the notes waiting to steer it in the view);
    with `upgrade`, on the deployment's current version (`next_run_options`)."""
    await workflow.wait_condition(workflow.all_handlers_finished)
    ctx.announce(f"continuing as new after {turns} turns", kind="continue")
    this_run = EarlierRun(
        run_id=workflow.info().run_id,
        first_turn=run.first_turn,
        last_turn=turns,
        observations=list(run.observations),
    )
    limit = run.settings.loop_limit
    carry = ReActCarry(
        turns=turns,
        context=run.view,
        tools=ctx.ledger.get(tools_id(run.key)).typed(ToolList).data,
        calls=run.calls,
        recent=run.latest()[-limit:] if limit else [],
        usage=ctx.usage,
        earlier=[*run.earlier, this_run],
        remembered=remembered(ctx.ledger),
    )
    # The budget as a person may have extended it goes on with what was spent.
    budget = ctx.spending.budget
    workflow.continue_as_new(
        input.model_copy(update={"loop_carry": carry, "budget": budget}),
        **next_run_options(upgrade),
    )


def resume(ctx: RecipeContext, run: LongRun, carry: ReActCarry) -> list[ToolSpec]:
    """Take up the loop an earlier run carried here: its tools, the model's view,
    the calls, what was spent, and what each earlier run holds (`run:{run_id}`)."""
    ctx.usage = carry.usage
    ctx.ledger.create(tools_id(run.key), carry.tools)
    run.view = carry.context
    run.first_turn = carry.turns + 1
    run.calls = list(carry.calls)
    run.carried_recent = list(carry.recent)
    run.earlier = list(carry.earlier)
    hold_remembered(ctx.ledger, carry.remembered)
    # The messages the model sees, as this run's artifacts: what a fold reads.
    for line in run.view.window:
        ctx.ledger.create(message_id(run.key, line.message), line.said)
    for earlier in run.earlier:
        ctx.ledger.create(earlier_run_id(earlier.run_id), earlier)
    digest = carry.context.digest
    if digest is not None:
        ctx.ledger.create(loop_digest_id(run.key, digest.version), digest)
    ctx.announce(
        f"continued as new after {carry.turns} turns (run {len(run.earlier) + 1})",
        kind="continue",
    )
    return carry.tools.specs
