"""The model-call contract shared by workflow code and the LLM activity.

Only these small pydantic models cross the workflow/activity boundary. Earlier
artifacts a prompt needs travel as references (`ChatMessage.context`): the
activity reads their text from its own workflow by query, so each text is stored
in history once, not once per call that uses it. A conversation (a tool loop, a
chat) travels the same way: `LLMRequest.conversation` names the run's `ChatTurn`
artifacts, which the activity reads with the `context_messages` query and sends
after `messages` with their roles, tool calls and tool-call ids (read from memory
instead when the activity runs where its workflow does: durafact/_runtime/handoff.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field

from durafact._core.compact import Compact
from durafact._core.sources import DEFAULT_ENDPOINT, ENDPOINT_NAME
from durafact._core.tools import ToolCall, ToolSpec


class ArtifactSpan(BaseModel):
    """The first `count` artifacts whose ids start with `prefix`, in creation order.

    A constant-size name for "every result so far": naming them one id each would
    make step n's input grow with n, and the whole history with n squared.
    """

    prefix: str
    count: int = Field(ge=0)


# One artifact by id, or a span of them.
ContextRef = str | ArtifactSpan


class ContextText(BaseModel):
    id: str
    text: str


class ChatMessage(Compact):
    role: Literal["system", "user", "assistant"]
    content: str = ""
    content_from: str | None = Field(
        default=None,
        description="A ledger artifact whose text is this message's content: a long text "
        "that an earlier call of the run sent whole (a system prompt) goes by reference.",
    )
    context: list[ContextRef] = Field(
        default_factory=list,
        description="Ledger artifacts whose text the activity appends to this message.",
    )
    separate: bool = Field(
        default=False,
        description="Each context text after the first is a message of its own (same role), "
        "in order. A context that grows from call to call (a span of every result so far) "
        "then only adds messages at the end, so successive calls share their messages "
        "byte for byte up to there: what an endpoint's prompt cache reuses.",
    )
    omitted_defaults: ClassVar[frozenset[str]] = frozenset({"separate"})

    def references(self) -> list[ContextRef]:
        """What the activity reads for this message: `content_from`, then `context`."""
        return [self.content_from, *self.context] if self.content_from else list(self.context)


class Prompt(BaseModel):
    """A message text that several model calls of a run send (`prompt:{hash}`), stored
    whole in history once, with the first call that sent it."""

    text: str


class Usage(Compact):
    """Tokens, and what they cost, of one model call or of a run's calls added up."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = Field(
        default=0, description="Of `prompt_tokens`, read from the endpoint's prompt cache."
    )
    cost: Decimal | None = Field(
        default=Decimal(0),
        description="In `currency` (the worker's `DURAFACT_PRICES`); None when a call's "
        "model has no price there: unknown, never counted as 0.",
    )
    currency: str = Field(default="", description="Of `cost`; empty while nothing is priced.")
    omitted_defaults: ClassVar[frozenset[str]] = frozenset(
        {"prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "cost", "currency"}
    )

    def __add__(self, other: Usage) -> Usage:
        currencies = {c for c in (self.currency, other.currency) if c}
        # Costs in two currencies (workers with different tables) have no sum.
        unknown = self.cost is None or other.cost is None or len(currencies) > 1
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost=None if unknown else self.cost + other.cost,
            currency=currencies.pop() if len(currencies) == 1 else "",
        )


class ChatTurn(Compact):
    """One message of a conversation, stored as an artifact (`msg:{run}:{n}`) once."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(
        default_factory=list, description="What an assistant turn asked for (native protocol)."
    )
    tool_call_id: str | None = Field(default=None, description="The call a tool turn answers.")
    name: str | None = Field(default=None, description="The tool a tool turn comes from.")


@dataclass(frozen=True)
class ResolvedContext:
    """A request's context, resolved: the texts of each message's references (in
    message order) and the conversation's turns (None without a conversation). What
    the model activity reads by query, or takes from memory when it runs where its
    workflow does (durafact/_runtime/handoff.py)."""

    texts: tuple[tuple[ContextText, ...], ...]
    turns: tuple[ChatTurn, ...] | None

    def chars(self) -> int:
        size = sum(len(t.text) for texts in self.texts for t in texts)
        return size + sum(len(turn.content) for turn in self.turns or ())


class StreamTo(BaseModel):
    """Where the model activity publishes the reply's text while the model writes it:
    a topic of its own workflow's stream (`temporalio.contrib.workflow_streams`), each
    piece a `TextChunk` tagged with `key`."""

    topic: str
    key: str


class TextChunk(BaseModel):
    """A piece of a reply as it is written. `attempt` is the activity attempt that wrote
    it: a retried call writes its reply again from the start."""

    key: str
    attempt: int
    index: int
    text: str


# How long a call keeps failing on one endpoint before it moves to the next one the run
# names (`RecipeSettings.endpoints`); see `LLMRequest.fallback`.
FALLBACK_AFTER = timedelta(minutes=2)


def checked_endpoints(names: list[str]) -> list[str]:
    """`names`, lower-cased as the worker knows them, when each is an endpoint name and
    none is named twice; else a ValueError saying which."""
    bad = [name for name in names if not ENDPOINT_NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"not endpoint names: {bad} (letters, digits and _, at most 64)")
    lowered = [name.lower() for name in names]
    twice = sorted({name for name in lowered if lowered.count(name) > 1})
    if twice:
        raise ValueError(f"endpoints named twice: {', '.join(twice)}")
    return lowered


class LLMRequest(Compact):
    messages: list[ChatMessage] = Field(min_length=1)
    conversation: ArtifactSpan | None = Field(
        default=None,
        description="The run's `ChatTurn` artifacts so far, sent after `messages`.",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Names of tools the model may call (native protocol); the worker knows "
        "their schemas.",
    )
    tool_specs: list[ToolSpec] = Field(
        default_factory=list,
        description="Tools the workflow runs itself (ReAct's `search_sources`), offered with "
        "their specs as given, after `tools`; the worker does not look them up.",
    )
    stop: list[str] | None = Field(
        default=None,
        description="Stop sequences; with them an empty reply is returned, not retried.",
    )
    output_type: str | None = Field(
        default=None,
        description=(
            "For structured output, the name (`type_path`) of a pydantic model the worker "
            "was registered with; None for free text. A name, never an import path: the "
            "activity looks it up and imports nothing."
        ),
    )
    model: str | None = Field(default=None, description="None: the worker's DURAFACT_MODEL.")
    endpoint: str | None = Field(
        default=None,
        pattern=f"^{ENDPOINT_NAME.pattern}$",
        description="The name of a model endpoint configured on the worker (None: "
        "`default`, its OPENAI_BASE_URL with OPENAI_API_KEY); a name, never a URL.",
    )
    fallback: list[Annotated[str, Field(pattern=f"^{ENDPOINT_NAME.pattern}$")]] = Field(
        default_factory=list,
        description="Endpoints to move to, in order, when the call keeps failing retryably: "
        "an attempt scheduled `fallback_after` or more after the first goes to the first of "
        "them, `2 * fallback_after` to the second, and so on; the last is kept until the "
        "deadline. A refusal (4xx) fails the call wherever it happens.",
    )
    fallback_after: timedelta = Field(default=FALLBACK_AFTER, gt=timedelta(0))
    temperature: float | None = None
    max_tokens: int | None = None
    validation_attempts: int = Field(
        default=3, ge=1, description="Asks in all when the output does not validate."
    )
    omitted_defaults: ClassVar[frozenset[str]] = frozenset(
        {"validation_attempts", "fallback_after"}
    )
    stream: StreamTo | None = Field(
        default=None,
        description="Free text only: publish the reply as it is written (when the endpoint "
        "streams); the result is still the whole reply.",
    )


class LLMResponse(Compact):
    text: str = Field(description="The free-text answer; empty for structured output.")
    tool_calls: list[ToolCall] = Field(
        default_factory=list, description="The calls the model asked for (native protocol)."
    )
    data: dict[str, Any] | None = Field(
        default=None, description="The validated structured output, when one was asked for."
    )
    usage: Usage = Field(default_factory=Usage)
    model: str = Field(default="", description="The model that answered, as the endpoint names it.")
    endpoint: str = Field(
        default=DEFAULT_ENDPOINT,
        description="The endpoint that answered: `LLMRequest.endpoint`, or one of its "
        "`fallback` endpoints.",
    )
    attempts: int = 1
    finish_reason: str = Field(
        default="stop",
        description="Why the model stopped, as the endpoint said: `stop`, `length`, "
        "`tool_calls`, ...",
    )
    omitted_defaults: ClassVar[frozenset[str]] = frozenset(
        {"attempts", "endpoint", "finish_reason"}
    )


class ModelFallback(BaseModel):
    """The artifact `fallback:{call}`: a model call answered by another endpoint than the
    first one the run names, because that one kept failing."""

    call: str = Field(description="The model call's activity id.")
    endpoint: str = Field(description="The endpoint that answered.")
    model: str = Field(description="The model that answered.")
    instead_of: str = Field(description="The endpoint the run names first.")


def type_path(model: type[BaseModel]) -> str:
    """The name an output model is registered and requested under: `module:QualName`."""
    return f"{model.__module__}:{model.__qualname__}"


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the form `strict: true` structured output accepts.

    Strict mode wants every object closed (`additionalProperties: false`) with all
    of its properties required, and no `default` keywords.
    """
    schema = copy.deepcopy(model.model_json_schema())

    def close(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("default", None)
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema
