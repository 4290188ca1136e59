"""ReflectionLoop: draft, critique, rewrite with the feedback until accepted, then finish.

The recipe owns the rounds, the threshold, the artifact ids, the links and the
status; a user writes only the four judgement hooks:

    @workflow.defn
    class Essayist(ReflectionLoop[Topic, Essay, Published]):
        @workflow.run
        async def run(self, topic: Topic) -> ReflectionOutcome[Published]:
            return await self.execute(topic)

        async def draft(self, ctx, topic): ...               # -> Essay
        async def critique(self, ctx, draft): ...            # -> (score, feedback)
        async def rewrite(self, ctx, draft, review): ...     # -> Essay
        async def finish(self, ctx, draft, review): ...      # -> Published

`rewrite` and `finish` get the last `Review` (its round, score and feedback).
Give the model the draft and the review as `context=ctx.refs(draft, review)`:
references the model activity reads from the ledger, so each text is stored in
history once.

Limits: `settings(topic)`, a `ReflectionSettings`: `accept_at` (a number in
[0, 1]) and `max_rounds` (an integer >= 0). By default the input when it subclasses
`ReflectionSettings` (as `ReflectionInput` does), else the defaults; override
`settings` to set them otherwise. They are checked when the run starts: a value out
of range fails it with the non-retryable error `InvalidSettings`.

Rounds. Round `r` is the critique of version `r` of the draft: the first draft is
critiqued in round 1, the draft rewritten with round 1's feedback in round 2, and
so on. A round whose score is at least `accept_at` ends the loop (`accepted`).
`max_rounds` bounds the rewrites, as in the seed ("how many rewrites are
allowed"): after round `r` the draft is rewritten while `r <= max_rounds`, and
every rewrite is critiqued, so the text that is finished always has a score.
With the defaults (`accept_at=0.8`, `max_rounds=2`) a run makes at most 3
critiques and 2 rewrites; when round `max_rounds + 1` also scores low the loop
ends with `round_limit` and finishes the best-scored draft (the earliest of equal
scores): a rewrite can make a text worse. When that is not the last one, it is
announced and stored again as the draft's latest version, so `final:{topic}` is
`based_on` the text it was made from.

Counted in hook calls: accepted in round k = 1 draft + k critiques + (k - 1)
rewrites + 1 finish; the round limit = 1 + (max_rounds + 1) + max_rounds + 1.
`ReflectionWorkflow` makes one model call per draft, critique and rewrite and
none to finish (the final text is the draft it finishes), so it makes 2k model
calls when accepted in round k and 2 * max_rounds + 2 at the round limit (6
with the defaults).

Scores. A critique's score is clamped into [0, 1]: a model's 1.2 counts as 1.0
and -0.3 as 0.0, the review keeps the raw value in `raw_score`, and the clamp is
announced. A score that is not a finite number (NaN, inf, a string) fails the
run with the non-retryable error `InvalidScore`.

Artifacts: `topic:{topic}`, one `draft:{topic}` updated in place (its version
is the round it is critiqued in; linked `from_topic`), `review:draft:{topic}:{r}`
per round (a `Review`, linked `reviews` to the draft) and `final:{topic}`
(linked `based_on` the draft). The model activities carry the same ids with an
`llm:` prefix: `llm:draft:{topic}`, `llm:review:draft:{topic}:{r}`,
`llm:rewrite:draft:{topic}:{r}` (the rewrite that uses round r's feedback and
makes version r + 1) and `llm:final:{topic}`.

Status: `drafting`, `critiquing:1`, `rewriting:1`,
`critiquing:2`, ..., `finishing`, then `accepted` or `round_limit`; `failed`
when a hook raises. `DurafactStatus` holds the phase (`critiquing`, not
`critiquing:2`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from durafact._core.ids import draft_id, final_id, review_id, rewrite_scope, text_key, topic_id
from durafact._core.ledger import ArtifactRef, Ledger
from durafact._core.llm import Usage
from durafact._core.ready_commands import REFLECT
from durafact._core.text import indent, not_blank, shorten, without_json_objects
from durafact._recipes.recipe import (
    Recipe,
    RecipeContext,
    RecipeSettings,
    quote,
    stamp,
    subject_text,
)

T = TypeVar("T", bound=BaseModel)
D = TypeVar("D", bound=BaseModel)
F = TypeVar("F", bound=BaseModel)

Ending = Literal["accepted", "round_limit"]


def checked_score(score: Any) -> tuple[float, float | None]:
    """The score clamped into [0, 1], and the raw score when it had to be clamped."""
    try:  # an int too large for a float is an OverflowError, not a number we can clamp
        value = float(score) if isinstance(score, int | float) else math.nan
    except OverflowError:
        value = math.nan
    if isinstance(score, bool) or not math.isfinite(value):
        raise ApplicationError(
            f"the critique's score {_shown_score(score)} is not a finite number",
            type="InvalidScore",
            non_retryable=True,
        )
    clamped = min(max(value, 0.0), 1.0)
    return clamped, (value if clamped != value else None)


def _shown_score(score: Any, limit: int = 40) -> str:
    # An int of thousands of digits is named, not printed (repr refuses past 4300).
    text = repr(score) if not isinstance(score, int) or abs(score) < 10**limit else "a huge int"
    return shorten(text, limit)


class Review(BaseModel):
    """One critique of the draft: the round, its score in [0, 1] and the feedback."""

    round: int
    score: float
    feedback: str
    raw_score: float | None = Field(
        default=None, description="What the critique returned, when it was outside [0, 1]."
    )

    def prompt_text(self) -> str:
        """What a model is shown of it: prose, not JSON to copy."""
        return f"Review of round {self.round} (score {self.score:.2f}): {self.feedback}"


# A review's fields, as a model that copies it writes them.
REVIEW_KEYS = frozenset({"round", "score", "feedback", "raw_score"})


class ReflectionSettings(RecipeSettings):
    """The limits of a ReflectionLoop run."""

    accept_at: float = Field(
        default=0.8, ge=0.0, le=1.0, allow_inf_nan=False, description="Score that accepts."
    )
    max_rounds: int = Field(default=2, ge=0, description="How many rewrites at most.")


class ReflectionOutcome(BaseModel, Generic[F]):
    """How the loop ended, every round's score in order, and the finished artifact."""

    ending: Ending
    scores: list[float]
    rounds: int
    final: F


class ReflectionLoop(Recipe[T, ReflectionOutcome[F]], Generic[T, D, F]):
    """Draft -> critique -> rewrite with the feedback until accepted or out of rounds -> finish."""

    recipe_name = "reflection"
    settings_model = ReflectionSettings

    async def draft(self, ctx: RecipeContext, topic: T) -> D:
        raise NotImplementedError

    async def critique(self, ctx: RecipeContext, draft: D) -> tuple[float, str]:
        raise NotImplementedError

    async def rewrite(self, ctx: RecipeContext, draft: D, review: Review) -> D:
        raise NotImplementedError

    async def finish(self, ctx: RecipeContext, draft: D, review: Review) -> F:
        raise NotImplementedError

    def settings(self, topic: T) -> ReflectionSettings:
        """This run's limits (see `Recipe.settings`)."""
        return cast(ReflectionSettings, super().settings(topic))

    async def lifecycle(self, ctx: RecipeContext, topic: T) -> ReflectionOutcome[F]:
        ledger = ctx.ledger
        text = subject_text(topic, "topic", "text")
        key = text_key(text)
        ledger.create(topic_id(text), topic)
        did = draft_id(text)
        scores: list[float] = []
        limits = self.settings(topic)
        threshold, rewrites = _checked_limits(limits.accept_at, limits.max_rounds)
        ctx.set_status("drafting", f"drafting: {key}")
        with ctx.scoped(did):
            draft = stamp(await self.draft(ctx, topic), topic=key, round=1)
        ledger.create(did, draft)
        ledger.link(did, "from_topic", topic_id(text))

        round_ = 0
        best: tuple[float, int, D, Review] | None = None  # score, round, draft, review
        while True:
            round_ += 1
            rid = review_id(did, round_)
            ctx.set_status(f"critiquing:{round_}")
            with ctx.scoped(rid):
                score, feedback = await self.critique(ctx, draft)
            score, raw = checked_score(score)
            if raw is not None:
                ctx.announce(f"round {round_}: score {raw!r} clamped to {score}")
            review = Review(round=round_, score=score, feedback=feedback, raw_score=raw)
            ledger.create(rid, review)
            ledger.link(rid, "reviews", did)
            scores.append(score)
            if best is None or score > best[0]:
                best = (score, round_, draft, review)
            ctx.announce(f"round {round_}: score {score:.2f} (accept at {threshold:.2f})")
            if score >= threshold:
                ending: Ending = "accepted"
                break
            if round_ > rewrites:
                ending = "round_limit"
                break
            ctx.set_status(f"rewriting:{round_}")
            with ctx.scoped(rewrite_scope(did, round_)):
                draft = await self.rewrite(ctx, draft, review)
            draft = stamp(draft, topic=key, round=round_ + 1)
            ledger.update(did, draft)

        assert best is not None
        if ending == "round_limit" and best[1] < round_:
            _, kept, draft, review = best
            ledger.update(did, draft)  # the latest version is the text that is finished
            ctx.announce(f"keeping the draft of round {kept}, the best scored ({best[0]:.2f})")
        ctx.set_status("finishing", f"finishing: {ending} in round {round_}")
        fid = final_id(text)
        with ctx.scoped(fid):
            final = await self.finish(ctx, draft, review)
        ledger.create(fid, final)
        ledger.link(fid, "based_on", did)
        ctx.set_status(ending, f"{ending}: round {round_}, score {review.score:.2f}")
        return ReflectionOutcome(ending=ending, scores=scores, rounds=round_, final=final)


def _checked_limits(threshold: object, rewrites: object) -> tuple[float, int]:
    # The settings model validates what it is given, but a hook may assign out of
    # range afterwards (pydantic does not check assignments) or build it unchecked.
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0.0 <= threshold <= 1.0
    ):
        raise ApplicationError(
            f"accept_at must be a number in [0, 1], not {threshold!r}",
            type="InvalidSettings",
            non_retryable=True,
        )
    if isinstance(rewrites, bool) or not isinstance(rewrites, int) or rewrites < 0:
        raise ApplicationError(
            f"max_rounds must be an integer >= 0, not {rewrites!r}",
            type="InvalidSettings",
            non_retryable=True,
        )
    return float(threshold), rewrites


# --- The ready, LLM-driven ReflectionLoop -----------------------------------------


class ReflectionInput(ReflectionSettings):
    """The input of `ReflectionWorkflow`: the topic, and the run's limits."""

    topic: Annotated[str, not_blank("topic")] = Field(description="What the text should be about.")
    # The ready loop always allows a rewrite, and at most ten.
    max_rounds: int = Field(default=2, ge=1, le=10, description="How many rewrites at most.")


class Critique(BaseModel):
    """The model's structured output for a critique call."""

    score: float = Field(
        allow_inf_nan=False,
        description="How good the draft is, from 0.0 (unusable) to 1.0 (ready as it is).",
    )
    feedback: str = Field(description="Concrete changes that would improve the draft.")


class Draft(BaseModel):
    topic: str = ""
    round: int = 0
    text: str


class FinalText(BaseModel):
    topic: str
    text: str
    rounds: int
    score: float


class ReflectionResult(BaseModel):
    """How the loop ended, the scores and the final text, with references to the draft
    and the reviews: their texts are stored in history once, as the results of the model
    calls that wrote them. Read them from the run's ledger (the `artifacts` query, or
    `python starter.py artifacts ID`): `ledger.resolve(result.draft, Draft)`."""

    topic: str
    ending: Ending
    scores: list[float]
    rounds: int
    final: FinalText
    usage: Usage
    draft: ArtifactRef = Field(description="`draft:{topic}`; its version is the last round.")
    reviews: list[ArtifactRef] = Field(description="`review:draft:{topic}:{r}`, one per round.")


WRITER = (
    "You are a writer. Write a concise, concrete text on the user's topic. "
    "Answer with the text only."
)
CRITIC = (
    "You are a strict reviewer. Judge the draft given as context against its topic. "
    "Give a score from 0.0 (unusable) to 1.0 (ready to publish as it is) and concrete "
    "feedback: what to change, add or cut, and where."
)
REWRITER = (
    "You revise a draft. The current draft and the reviewer's feedback on it are given "
    "as context. Rewrite the draft so that it addresses every point of the feedback and "
    "keeps what works. Answer with the new text only."
)


def show_reflection(result: ReflectionResult, ledger: Ledger | None) -> str:
    """How the loop ended, its scores, and the text it kept."""
    # Counted as --max-rounds counts: rewrites; each version was critiqued once.
    scores = ", ".join(f"{score:.2f}" for score in result.scores)
    lines = [
        f"{result.ending} after {result.rounds - 1} rewrite(s) and {result.rounds} "
        f"critique(s); scores: {scores}"
    ]
    if result.final.rounds != result.rounds:
        lines.append(f"kept the text of round {result.final.rounds}, the best scored")
    return "\n".join([*lines, "text:", indent(result.final.text, "  ")])


@workflow.defn
class ReflectionWorkflow(ReflectionLoop[ReflectionInput, Draft, FinalText]):
    """Topic in; a draft critiqued and rewritten until accepted or out of rounds; the text."""

    command = REFLECT
    show_result = staticmethod(show_reflection)

    @workflow.init
    def __init__(self, request: ReflectionInput) -> None:
        super().__init__()
        self.request = request

    @workflow.run
    async def run(self, request: ReflectionInput) -> ReflectionResult:
        outcome = await self.execute(request)
        return ReflectionResult(
            topic=request.topic,
            ending=outcome.ending,
            scores=outcome.scores,
            rounds=outcome.rounds,
            final=outcome.final,
            usage=self.usage,
            draft=self.ledger.ref(draft_id(request.topic)),
            reviews=self.ledger.refs(Review),
        )

    async def draft(self, ctx: RecipeContext, topic: ReflectionInput) -> Draft:
        text = await ctx.llm.text(
            f"Topic: {topic.topic}",
            system=WRITER,
            summary=f"request model: draft {quote(topic.topic)}",
        )
        return Draft(text=text)

    async def critique(self, ctx: RecipeContext, draft: Draft) -> tuple[float, str]:
        # The draft travels as its ledger id: its text is in history once, as the
        # result of the call that wrote it, not again in every call that reads it.
        critique = await ctx.llm.structured(
            Critique,
            f"Topic: {self.request.topic}\nReview the draft (round {draft.round}).",
            system=CRITIC,
            context=ctx.refs(draft),
            summary=f"request model: critique round {draft.round}",
        )
        return critique.score, critique.feedback

    async def rewrite(self, ctx: RecipeContext, draft: Draft, review: Review) -> Draft:
        text = await ctx.llm.text(
            f"Topic: {self.request.topic}\nRewrite the draft using the review's feedback.",
            system=REWRITER,
            context=ctx.refs(draft, review),
            summary=f"request model: rewrite round {review.round}",
        )
        # A weak model copies the review it was shown into its text: that never reaches
        # the final text. A rewrite that was nothing else keeps the draft as it was.
        cleaned = without_json_objects(text, REVIEW_KEYS)
        if cleaned != text.strip():
            ctx.announce(f"round {review.round}: dropped a copy of the review from the rewrite")
        return Draft(text=cleaned or draft.text)

    async def finish(self, ctx: RecipeContext, draft: Draft, review: Review) -> FinalText:
        # No model call: the final text is the draft that was critiqued last.
        return FinalText(
            topic=self.request.topic, text=draft.text, rounds=review.round, score=review.score
        )
