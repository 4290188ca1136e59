"""What `durafact eval` compares and reports: a model request seen in parts, why a
request differs from the one a recorded run made, and the report.

A request is seen as its `RequestView`: each message's own text (its content, or the
long text it names by `content_from`), the texts of the artifacts its context names,
the conversation's turns, the model asked for, and the settings (temperature, max
tokens, stop sequences, output type, tools). Three views of one call say why it
changed (`why_changed`):

- `recorded`: what the recorded run sent (the old code on the old answers);
- `replayed`: what the current code sends on the old answers (the recorded history
  replayed with the current code), when the current code replays that far;
- `new`: what the current code sends in the evaluation, on the answers it got there.

`recorded` against `replayed` is the change in the code: `prompt`, `model` or
`settings`. `replayed` against `new` is the change in what came before: `upstream`,
naming the artifacts whose text differs in the call's context. A call the recorded run
never made is `new`; one whose recording holds no answer (the call failed), or whose
context the current code could not replay, is `unrecorded`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from durafact._core.approval import ApprovalQuestion
from durafact._core.llm import ChatTurn, ContextText, LLMRequest, ResolvedContext, Usage

Answered = Literal["recording", "model", "not sent"]
Reason = Literal["prompt", "model", "settings", "upstream", "new", "unrecorded"]


class MessageView(BaseModel):
    """One message of a request: its own text and the context texts it carries."""

    role: str
    text: str
    separate: bool = False
    context: list[ContextText] = Field(default_factory=list)


class RequestView(BaseModel):
    """A model request as the model sees it, in parts."""

    messages: list[MessageView]
    turns: list[ChatTurn] | None = None
    model: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, request: LLMRequest, context: ResolvedContext, model: str) -> RequestView:
        """`request` with the texts `context` resolved for its references, asking
        `model`."""
        messages = []
        for message, resolved in zip(request.messages, context.texts, strict=True):
            texts = list(resolved)
            own = texts.pop(0).text if message.content_from and texts else message.content
            messages.append(
                MessageView(role=message.role, text=own, separate=message.separate, context=texts)
            )
        turns = list(context.turns) if context.turns is not None else None
        return cls(messages=messages, turns=turns, model=model, settings=settings_of(request))

    def own_texts(self) -> list[tuple[str, str, bool]]:
        return [(m.role, m.text, m.separate) for m in self.messages]

    def context_texts(self) -> dict[str, str]:
        """The text of each artifact the request's context names, and of each turn."""
        texts = {t.id: t.text for m in self.messages for t in m.context}
        for n, turn in enumerate(self.turns or ()):
            texts[f"turn {n + 1}"] = turn.model_dump_json()
        return texts


def settings_of(request: LLMRequest) -> dict[str, Any]:
    """What a request sets besides its messages and model: what the activity sends as
    temperature, max_tokens, stop, response_format (by output type) and tools."""
    return {
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "stop": request.stop,
        "output_type": request.output_type,
        "tools": request.tools,
        "tool_specs": [spec.model_dump(mode="json") for spec in request.tool_specs],
    }


def same_model(asked: str, recorded: str) -> bool:
    """Whether a call asking `asked` asks what the recorded call got: the model it named,
    or the one that answered it, which an endpoint may name with a date
    (`gpt-4o-mini-2024-07-18` answers `gpt-4o-mini`); an endpoint that named none counts
    as the same."""
    return not recorded or recorded == asked or recorded.startswith(f"{asked}-")


def changed_context(old: RequestView, new: RequestView) -> list[str]:
    """The artifacts (and turns) in either context whose text is not the same in both."""
    before, after = old.context_texts(), new.context_texts()
    names = [*after, *(name for name in before if name not in after)]
    return [name for name in names if before.get(name) != after.get(name)]


def why_changed(
    recorded: RequestView | None, replayed: RequestView | None, new: RequestView
) -> tuple[list[Reason], list[str]]:
    """Why `new` is not the request the recorded run made (`recorded`), and the
    artifacts behind an `upstream` change; `replayed` is what the current code sent on
    the recorded answers (None when its replay did not get that far)."""
    if recorded is None:
        return ["new"], []
    reasons: list[Reason] = []
    code = replayed or new
    if recorded.own_texts() != code.own_texts() or (
        replayed is not None and changed_context(recorded, replayed)
    ):
        reasons.append("prompt")
    if not same_model(code.model, recorded.model):
        reasons.append("model")
    if recorded.settings != code.settings:
        reasons.append("settings")
    upstream = changed_context(replayed or recorded, new)
    data_changed = replayed is not None and replayed != new
    if upstream or data_changed:
        reasons.append("upstream")
    return reasons, upstream


class CallEval(BaseModel):
    """One model call of an evaluated run, and how it was answered."""

    workflow_id: str
    activity_id: str
    summary: str = ""
    answered: Answered
    reasons: list[Reason] = Field(
        default_factory=list, description="Why it is not the recorded request (empty: it is)."
    )
    because: list[str] = Field(
        default_factory=list,
        description="For `upstream`: the artifacts whose text changed in its context, or "
        "else the changed calls before it.",
    )
    usage: Usage = Field(
        default_factory=Usage,
        description="The new call's tokens and cost; for a call answered from the "
        "recording, the recorded call's.",
    )


class ToolCounts(BaseModel):
    """The run's other activities (tools, source searches and reads)."""

    replayed: int = 0
    missing: int = Field(default=0, description="Not in the recording, so not answered.")
    live: bool = Field(default=False, description="Run for real (`--live-tools`).")


class RunEval(BaseModel):
    """One recorded run, re-run on the current code."""

    workflow_id: str
    workflow_type: str
    skipped: str | None = Field(default=None, description="Why it was not re-run.")
    calls: list[CallEval] = Field(default_factory=list)
    dropped: list[str] = Field(
        default_factory=list, description="Recorded model calls the current code did not make."
    )
    tools: ToolCounts = Field(default_factory=ToolCounts)
    questions_answered: int = Field(
        default=0, description="The re-run's questions for a person, given the recorded answers."
    )
    stopped_at: ApprovalQuestion | None = Field(
        default=None,
        description="The question the re-run was stopped at, with no answer made up for it "
        "(`new_end` says why).",
    )
    old_output: str = ""
    new_output: str | None = Field(default=None, description="None: no output (see `new_end`).")
    new_end: str = ""
    score: float | None = None
    score_error: str | None = None
    replay_note: str | None = Field(
        default=None, description="Where the current code stopped replaying the recorded history."
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def identical(self) -> bool:
        """Whether the new output is the old one, as the recipe shows its result."""
        return self.new_output == self.old_output

    def count(self, answered: Answered) -> int:
        return sum(call.answered == answered for call in self.calls)

    def usage(self, answered: Answered) -> Usage:
        total = Usage()
        for call in self.calls:
            if call.answered == answered:
                total += call.usage
        return total


class EvalReport(BaseModel):
    """What `durafact eval` found, run by run."""

    model: str = Field(description="The model a changed request is sent to.")
    offline: bool = False
    runs: list[RunEval] = Field(default_factory=list)

    def usage(self, answered: Answered) -> Usage:
        total = Usage()
        for run in self.runs:
            total += run.usage(answered)
        return total

    def count(self, answered: Answered) -> int:
        return sum(run.count(answered) for run in self.runs)
