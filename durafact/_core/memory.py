"""Chat memory: the policies that keep a long conversation bounded (seed 000).

A chat's memory is plain state (`Memory`): the raw window of recent messages,
the summaries or the digest of what left it, and the counters that name them.
A policy looks at that state after a turn and decides, purely, what to fold
(`plan` -> a `Fold`, or None when the window is fine); the workflow runs the
summarizer hook for a fold that needs text (one model activity) and then
`apply`s the fold with that text. A summarizer that gives no text (None) never
fails the chat: the recipe's fallback keeps a truncated line of what was folded.

- `WindowSummarizer(window, every)`: once the window holds more than `window`
  messages, its oldest `every` are summarized into `summary:{round}` and leave
  the window. The round comes from the message count (messages folded before /
  `every`, plus one), so folding the same messages again names the same summary.
- `WindowPruner(keep)`: the last `keep` messages stay, older ones are dropped;
  no model call.
- `RollingDigestSummarizer(window, trigger)`: once the window holds more than
  `trigger` messages, everything older than the last `window` is folded into one
  `digest` (its previous text plus the new messages); its version counts the
  folds. It bounds the window itself: do not combine it with a pruner.

A fold never splits an assistant's tool calls from their results: it ends just
before a user message, so the model never sees a tool result without its call.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from durafact._core.ids import DIGEST_ID, summary_id
from durafact._core.llm import ChatTurn

# Characters of each folded message the fallback keeps.
FALLBACK_CHARS = 200


class ChatLine(ChatTurn):
    """One message of the conversation with its number (from 0, across runs)."""

    seq: int = Field(ge=0)

    def turn(self) -> ChatTurn:
        return ChatTurn.model_validate(self.model_dump(exclude={"seq"}))


class TranscriptPage(BaseModel):
    """A page of a chat run's messages (the query `transcript`)."""

    lines: list[ChatLine]
    first: int = Field(description="The first message this run holds.")
    next_offset: int
    total: int = Field(description="Messages in the whole conversation.")


class Summary(BaseModel):
    """The artifact `summary:{round}`: what messages `first`..`last` said."""

    round: int
    first: int
    last: int
    text: str


class Digest(BaseModel):
    """The artifact `digest`: everything folded so far; `version` counts the folds."""

    text: str = ""
    version: int = 0
    last: int = Field(default=-1, description="The last message folded into it.")


class Memory(BaseModel):
    """What a chat remembers: what continue-as-new carries, nothing else."""

    window: list[ChatLine] = Field(default_factory=list)
    summaries: list[Summary] = Field(default_factory=list)
    digest: Digest | None = None
    next_seq: int = 0
    folded: int = Field(default=0, description="Messages that left the window so far.")

    def add(self, turn: ChatTurn) -> ChatLine:
        line = ChatLine(seq=self.next_seq, **turn.model_dump())
        self.window.append(line)
        self.next_seq += 1
        return line


class Fold(BaseModel):
    """A policy's decision: the oldest `count` messages of the window leave it; when
    `artifact_id` is set, their text goes into that summary or the digest first."""

    count: int = Field(ge=1)
    artifact_id: str | None = None
    lines: list[ChatLine] = Field(default_factory=list)
    previous: str | None = Field(default=None, description="The digest's text so far.")


def render(lines: list[ChatLine]) -> str:
    """The messages as `role: text` lines, what a summarizer reads."""
    return "\n".join(f"{line.role}: {' '.join(line.content.split())}" for line in lines)


def fallback_text(lines: list[ChatLine]) -> str:
    """What a fold keeps when the summarizer gives nothing: each message cut short."""
    return "\n".join(
        f"{line.role}: {' '.join(line.content.split())[:FALLBACK_CHARS]}" for line in lines
    )


def _boundary(window: list[ChatLine], count: int) -> int:
    """`count`, moved forward until the window's next message is a user's (or the end),
    so a fold never separates tool calls from their results."""
    while count < len(window) and window[count].role != "user":
        count += 1
    return count


class WindowSummarizer(BaseModel):
    kind: Literal["window_summarizer"] = "window_summarizer"
    window: int = Field(default=8, ge=2, description="Raw messages kept before folding.")
    every: int = Field(default=4, ge=1, description="Messages per summary.")

    @model_validator(mode="after")
    def _every_fits(self) -> WindowSummarizer:
        if self.every > self.window:
            raise ValueError("every must not exceed window")
        return self

    def plan(self, memory: Memory) -> Fold | None:
        if len(memory.window) <= self.window:
            return None
        count = _boundary(memory.window, self.every)
        lines = memory.window[:count]
        round_ = memory.folded // self.every + 1
        return Fold(count=count, artifact_id=summary_id(round_), lines=lines)

    def apply(self, memory: Memory, fold: Fold, text: str | None) -> Memory:
        summary = Summary(
            round=int(fold.artifact_id.rsplit(":", 1)[1]) if fold.artifact_id else 0,
            first=fold.lines[0].seq,
            last=fold.lines[-1].seq,
            text=text if text and text.strip() else fallback_text(fold.lines),
        )
        summaries = [s for s in memory.summaries if s.round != summary.round] + [summary]
        return _dropped(memory, fold.count, summaries=summaries)


class WindowPruner(BaseModel):
    kind: Literal["window_pruner"] = "window_pruner"
    keep: int = Field(default=8, ge=1, description="Raw messages kept; older ones are dropped.")

    def plan(self, memory: Memory) -> Fold | None:
        excess = len(memory.window) - self.keep
        if excess <= 0:
            return None
        return Fold(count=_boundary(memory.window, excess))

    def apply(self, memory: Memory, fold: Fold, text: str | None) -> Memory:
        return _dropped(memory, fold.count)


class RollingDigestSummarizer(BaseModel):
    kind: Literal["rolling_digest"] = "rolling_digest"
    window: int = Field(default=8, ge=1, description="Raw messages that stay unfolded.")
    trigger: int = Field(default=12, ge=2, description="Window length that starts a fold.")

    @model_validator(mode="after")
    def _trigger_above_window(self) -> RollingDigestSummarizer:
        if self.trigger <= self.window:
            raise ValueError("trigger must be above window")
        return self

    def plan(self, memory: Memory) -> Fold | None:
        if len(memory.window) <= self.trigger:
            return None
        count = _boundary(memory.window, len(memory.window) - self.window)
        previous = memory.digest.text if memory.digest else None
        return Fold(
            count=count, artifact_id=DIGEST_ID, lines=memory.window[:count], previous=previous
        )

    def apply(self, memory: Memory, fold: Fold, text: str | None) -> Memory:
        digest = memory.digest or Digest()
        if not (text and text.strip()):
            text = "\n".join(t for t in (digest.text, fallback_text(fold.lines)) if t)
        folded = Digest(text=text, version=digest.version + 1, last=fold.lines[-1].seq)
        return _dropped(memory, fold.count, digest=folded)


def _dropped(memory: Memory, count: int, **changes: object) -> Memory:
    return memory.model_copy(
        update={"window": memory.window[count:], "folded": memory.folded + count, **changes}
    )


MemoryPolicy = Annotated[
    WindowSummarizer | WindowPruner | RollingDigestSummarizer, Field(discriminator="kind")
]
