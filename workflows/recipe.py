"""What every recipe workflow shares: the context its hooks use, and its queries.

A recipe's hooks reach the world only through `RecipeContext`: `ctx.llm` makes one
model activity per call, `ctx.announce` records progress for the starter's live
output, `ctx.set_status` keeps the Web UI's details and search attributes current,
and `ctx.ledger` holds the artifacts. Everything here runs inside the workflow
sandbox, so it is deterministic: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey

from durafact.ledger import Ledger
from durafact.llm import (
    ChatMessage,
    ContextRef,
    ContextText,
    LLMRequest,
    LLMResponse,
    Usage,
    type_path,
)

RECIPE_ATTRIBUTE = SearchAttributeKey.for_keyword("DurafactRecipe")
STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword("DurafactStatus")
SEARCH_ATTRIBUTES = (RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE)

M = TypeVar("M", bound=BaseModel)


def stamp(item: M, **values: Any) -> M:
    """`item` with those of `values` its type declares as fields.

    Recipes fill in bookkeeping fields (`goal`/`index`, `topic`/`round`) on what
    hooks return, so hooks never have to.
    """
    fields = type(item).model_fields
    update = {k: v for k, v in values.items() if k in fields}
    return item.model_copy(update=update) if update else item


def subject_text(subject: BaseModel, *fields: str) -> str:
    """What names a recipe's subject (a goal, a topic) in ids: the first of `fields`
    that holds a string, else the subject's JSON."""
    for field in fields:
        value = getattr(subject, field, None)
        if isinstance(value, str):
            return value
    return subject.model_dump_json()


def quote(text: str, limit: int = 60) -> str:
    """A short quoted label for activity summaries."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


class Announcement(BaseModel):
    seq: int
    kind: str
    message: str
    status: str = Field(description="The recipe's status when this was announced.")


class Progress(BaseModel):
    """A page of announcements for a poller that has seen `offset` of them."""

    status: str
    events: list[Announcement]
    next_offset: int


class ModelCalls:
    """`ctx.llm`: each call is one `request_model` activity, named after the current scope."""

    def __init__(self, ctx: RecipeContext) -> None:
        self._ctx = ctx

    async def text(
        self,
        prompt: str,
        *,
        system: str | None = None,
        context: list[ContextRef] | None = None,
        summary: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """Free text. `context` names ledger artifacts (ids or spans) whose text the model sees."""
        response = await self.request(
            self._messages(prompt, system, context),
            summary=summary,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        return response.text

    async def structured(
        self,
        output: type[M],
        prompt: str,
        *,
        system: str | None = None,
        context: list[ContextRef] | None = None,
        summary: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> M:
        """An instance of `output`, produced under its JSON schema and validated."""
        response = await self.request(
            self._messages(prompt, system, context),
            output=output,
            summary=summary,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        return output.model_validate(response.data)

    async def request(
        self,
        messages: list[ChatMessage],
        *,
        output: type[BaseModel] | None = None,
        summary: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> LLMResponse:
        """The general form: explicit messages, optional structured output."""
        ctx = self._ctx
        activity_id = ctx.next_activity_id("llm")
        response: LLMResponse = await workflow.execute_activity(
            "request_model",
            LLMRequest(
                messages=messages,
                output_type=type_path(output) if output else None,
                temperature=temperature,
                max_tokens=max_tokens,
            ),
            result_type=LLMResponse,
            activity_id=activity_id,
            summary=summary or f"request model: {ctx.scope}",
            start_to_close_timeout=ctx.llm_timeout,
            heartbeat_timeout=ctx.llm_heartbeat_timeout,
            retry_policy=ctx.llm_retry,
        )
        ctx.usage += response.usage
        return response

    @staticmethod
    def _messages(
        prompt: str, system: str | None, context: list[ContextRef] | None
    ) -> list[ChatMessage]:
        messages = [ChatMessage(role="system", content=system)] if system else []
        if context:
            messages.append(ChatMessage(role="user", content="Context:", context=context))
        messages.append(ChatMessage(role="user", content=prompt))
        return messages


class RecipeContext:
    """The handle a recipe's hooks get: the ledger, model calls, progress and status."""

    def __init__(
        self,
        recipe: str,
        llm_timeout: timedelta,
        llm_heartbeat_timeout: timedelta,
        llm_retry: RetryPolicy,
    ) -> None:
        self.recipe = recipe
        self.ledger = Ledger()
        self.status = "starting"
        self.usage = Usage()
        self.events: list[Announcement] = []
        self.scope = recipe
        self.llm_timeout = llm_timeout
        self.llm_heartbeat_timeout = llm_heartbeat_timeout
        self.llm_retry = llm_retry
        self.llm = ModelCalls(self)
        self._calls_in_scope = 0

    @contextmanager
    def scoped(self, artifact_id: str) -> Iterator[None]:
        """Name the activities a hook starts after the artifact it is producing."""
        outer, outer_calls = self.scope, self._calls_in_scope
        self.scope, self._calls_in_scope = artifact_id, 0
        try:
            yield
        finally:
            self.scope, self._calls_in_scope = outer, outer_calls

    def next_activity_id(self, verb: str) -> str:
        # The first call in a scope gets the plain id (`llm:step:goal:0`); a hook that
        # makes several calls gets `#2`, `#3`: still stable across replays and retries.
        self._calls_in_scope += 1
        suffix = f"#{self._calls_in_scope}" if self._calls_in_scope > 1 else ""
        return f"{verb}:{self.scope}{suffix}"

    def announce(self, message: str, kind: str = "info") -> None:
        self.events.append(
            Announcement(seq=len(self.events), kind=kind, message=message, status=self.status)
        )
        workflow.set_current_details(f"**{self.status}**: {message}")

    def set_status(self, status: str, message: str | None = None) -> None:
        self.status = status
        workflow.upsert_search_attributes([STATUS_ATTRIBUTE.value_set(status)])
        self.announce(message or status, kind="status")


class Recipe:
    """Base of every recipe workflow: the context and the queries the starter uses."""

    recipe_name: ClassVar[str] = "recipe"
    llm_timeout: ClassVar[timedelta] = timedelta(minutes=2)
    # The activity heartbeats while it waits for the model: a worker that dies
    # mid-call is noticed after this long, and the call moves to another worker.
    llm_heartbeat_timeout: ClassVar[timedelta] = timedelta(seconds=10)
    llm_retry: ClassVar[RetryPolicy] = RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=6,
    )

    def __init__(self) -> None:
        self.ctx = RecipeContext(
            self.recipe_name, self.llm_timeout, self.llm_heartbeat_timeout, self.llm_retry
        )

    def begin(self) -> None:
        """Mark the run as this recipe in the search attributes."""
        workflow.upsert_search_attributes([RECIPE_ATTRIBUTE.value_set(self.recipe_name)])

    @workflow.query
    def status(self) -> str:
        return self.ctx.status

    @workflow.query
    def progress(self, offset: int = 0) -> Progress:
        events = self.ctx.events[max(offset, 0) :]
        return Progress(status=self.ctx.status, events=events, next_offset=offset + len(events))

    @workflow.query
    def artifacts(self) -> Ledger:
        return self.ctx.ledger

    @workflow.query
    def context_texts(self, refs: list[ContextRef]) -> list[ContextText]:
        """The prompt text of the referenced artifacts, for the model activity."""
        ledger = self.ctx.ledger
        return [ContextText(id=a.id, text=a.text()) for ref in refs for a in ledger.select(ref)]
