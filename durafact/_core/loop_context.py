"""What a tool loop's model sees: the policies that keep a long agent run's context bounded.

The memory policies of durafact/_core/memory.py bound a chat between messages; these bound a
ReAct loop between turns, in the same shape: the model's view is plain state
(`LoopContext`: the question, the lines of the turns it sees, the digest of the ones
it no longer sees), a policy looks at it after a turn and decides, purely, what to
change (`plan` -> a `ContextFold`, or None), the workflow makes the one model call a
fold that needs text asks for, and `apply`s the fold with that text.

- `KeepAll` (the default): the model sees every message; nothing is folded.
- `PruneObservations(keep_turns)`: the observations of turns older than the last
  `keep_turns` are shown as their first line and "[pruned: see obs:...]"; the
  observation artifact stays whole in the ledger. No model call.
- `CompactContext(keep_turns, max_tokens)`: once the view passes `max_tokens`
  (estimated at four characters a token), one model call folds every turn but the last
  `keep_turns` into the digest (`digest:{run}:{version}`), which the model sees instead,
  after the question.

Folds go by whole turns: an assistant message with tool calls and the observations
that answer them belong to one turn, so a fold never separates a call from its result.
The question (turn 0) always stays.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from durafact._core.llm import ChatTurn

# Characters of each folded line the fallback digest keeps when the fold's call fails.
FALLBACK_CHARS = 200
CHARS_PER_TOKEN = 4


class LoopLine(BaseModel):
    """One message the model sees (`said`): the number of its `msg:{run}:{n}` artifact,
    the turn it belongs to (0: the question) and, for an observation, the id of the
    artifact that holds it whole."""

    said: ChatTurn
    message: int = Field(ge=0)
    turn: int = Field(ge=0)
    observation: str | None = None
    pruned: bool = False


class LoopDigest(BaseModel):
    """The artifact `digest:{run}:{version}`: what turns `first_turn`..`last_turn` did."""

    text: str
    version: int = Field(ge=1)
    first_turn: int
    last_turn: int


class LoopContext(BaseModel):
    """The model's view of a loop: what continue-as-new carries of the conversation."""

    window: list[LoopLine] = Field(default_factory=list)
    digest: LoopDigest | None = None
    next_message: int = Field(default=0, description="The number of the next `msg:` artifact.")

    def shown(self, digest_id: str) -> list[ChatTurn]:
        """The messages the model gets: the question, the digest (named `digest_id`) when
        there is one, then the turns it sees."""
        turns = [line.said for line in self.window]
        if self.digest is None:
            return turns
        asked = sum(1 for line in self.window if line.turn == 0)
        digest = self.digest
        note = ChatTurn(
            role="user",
            content=f"[{digest_id}] What turns {digest.first_turn} to {digest.last_turn} did "
            f"(folded):\n{digest.text}",
        )
        return [*turns[:asked], note, *turns[asked:]]

    def tokens(self) -> int:
        """A rough token count of the view: what `CompactContext` compares to its limit."""
        chars = len(self.digest.text) if self.digest else 0
        chars += sum(len(line.said.content) for line in self.window)
        chars += sum(len(c.model_dump_json()) for line in self.window for c in line.said.tool_calls)
        return chars // CHARS_PER_TOKEN


class ContextFold(BaseModel):
    """A policy's decision: prune the observations of the lines `prune` (their
    positions in the window), or fold `lines` into the next digest (with the digest so
    far, when there is one)."""

    prune: list[int] = Field(default_factory=list)
    lines: list[LoopLine] = Field(default_factory=list)

    @property
    def needs_text(self) -> bool:
        return bool(self.lines)


def fallback_text(lines: list[LoopLine]) -> str:
    """What a fold keeps when its model call fails: each line as `role: text`, cut short."""
    out = []
    for line in lines:
        said = line.said
        calls = "".join(f" [calls {c.name} {c.arguments}]" for c in said.tool_calls)
        out.append(f"{said.role}: {' '.join(said.content.split())}{calls}"[:FALLBACK_CHARS])
    return "\n".join(out)


def pruned_text(content: str, observation: str) -> str:
    """An observation as a pruned line shows it: its first line and where it is whole."""
    first = content.strip().splitlines()[0] if content.strip() else ""
    return f"{first}\n[pruned: see {observation}]"


class KeepAll(BaseModel):
    kind: Literal["keep_all"] = "keep_all"

    def plan(self, context: LoopContext, turn: int) -> ContextFold | None:
        return None

    def apply(self, context: LoopContext, fold: ContextFold, text: str | None) -> LoopContext:
        return context


class PruneObservations(BaseModel):
    kind: Literal["prune_observations"] = "prune_observations"
    keep_turns: int = Field(default=10, ge=1, description="The last turns shown whole.")

    def plan(self, context: LoopContext, turn: int) -> ContextFold | None:
        old = [
            n
            for n, line in enumerate(context.window)
            if line.observation and not line.pruned and line.turn <= turn - self.keep_turns
        ]
        return ContextFold(prune=old) if old else None

    def apply(self, context: LoopContext, fold: ContextFold, text: str | None) -> LoopContext:
        window = list(context.window)
        for n in fold.prune:
            line = window[n]
            shown = pruned_text(line.said.content, line.observation or "")
            said = line.said.model_copy(update={"content": shown})
            window[n] = line.model_copy(update={"said": said, "pruned": True})
        return context.model_copy(update={"window": window})


class CompactContext(BaseModel):
    kind: Literal["compact"] = "compact"
    keep_turns: int = Field(default=10, ge=1, description="The last turns shown whole.")
    max_tokens: int = Field(
        default=8000, ge=100, description="The view's estimated size that starts a fold."
    )

    def plan(self, context: LoopContext, turn: int) -> ContextFold | None:
        if context.tokens() <= self.max_tokens:
            return None
        lines = [line for line in context.window if 0 < line.turn <= turn - self.keep_turns]
        return ContextFold(lines=lines) if lines else None

    def apply(self, context: LoopContext, fold: ContextFold, text: str | None) -> LoopContext:
        before = context.digest
        if not (text and text.strip()):
            kept = fallback_text(fold.lines)
            text = "\n".join(t for t in (before.text if before else "", kept) if t)
        digest = LoopDigest(
            text=text.strip(),
            version=before.version + 1 if before else 1,
            first_turn=before.first_turn if before else fold.lines[0].turn,
            last_turn=fold.lines[-1].turn,
        )
        last = digest.last_turn
        window = [line for line in context.window if line.turn == 0 or line.turn > last]
        return context.model_copy(update={"window": window, "digest": digest})


ContextPolicy = Annotated[KeepAll | PruneObservations | CompactContext, Field(discriminator="kind")]
