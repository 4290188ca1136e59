"""Every model response is priced on the worker: the endpoint's cached prompt tokens
(`prompt_tokens_details.cached_tokens`, whole or streamed) at the cached price, the rest
at the input and output prices; a model without a price costs None, never 0. The
scripted model reports the usage over real HTTP, as an OpenAI endpoint does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durafact._core.llm import LLMResponse, Usage
from durafact._recipes import (
    ChatInput,
    ChatReply,
    ChatSend,
    ChatWorkflow,
    Goal,
    PlanExecuteResult,
    PlanExecuteWorkflow,
)
from durafact._recipes.recipe import COST_ATTRIBUTE, TOKENS_ATTRIBUTE
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel
from tests.helpers import OTHER_MODEL_PRICES, SCRIPTED_PRICES, scripted_cost


def words(call: Call) -> int:
    """The call's prompt tokens, as the scripted model counts them."""
    return len(call.text.split())


def half_cached(call: Call) -> int:
    return words(call) // 2


@pytest.fixture
async def priced(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    async with build_worker(client, settings, prices=SCRIPTED_PRICES):
        yield settings


async def plan(client: Client, task_queue: str) -> tuple[WorkflowHandle, PlanExecuteResult]:
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Plan a weekend in Kraków"),
        id=f"cost-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )
    return handle, await handle.result()


async def responses(client: Client, handle: WorkflowHandle) -> list[LLMResponse]:
    """The model activity's results, in history order: what the worker recorded."""
    converter = client.data_converter.payload_converter
    history = await handle.fetch_history()
    return [
        converter.from_payload(
            e.activity_task_completed_event_attributes.result.payloads[0], LLMResponse
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]


async def test_each_response_costs_its_cached_tokens_at_the_cached_price(
    client: Client, priced: Settings, model: ScriptedModel
) -> None:
    model.cache(half_cached)
    handle, result = await plan(client, priced.task_queue)

    answered = await responses(client, handle)
    assert len(answered) == len(model.calls) == 5  # the plan, 3 steps, the answer
    for response, call in zip(answered, model.calls, strict=True):
        usage = response.usage
        assert usage.prompt_tokens == words(call)
        assert usage.cached_tokens == half_cached(call) > 0
        spent = scripted_cost(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)
        assert usage.cost == spent
        assert usage.currency == "USD"
    assert result.usage.cost == sum(r.usage.cost for r in answered)
    assert result.usage.cached_tokens == sum(half_cached(c) for c in model.calls)
    # Visibility has the run's totals once it ended.
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(TOKENS_ATTRIBUTE) == result.usage.total_tokens
    assert attributes.get(COST_ATTRIBUTE) == float(result.usage.cost)


@pytest.mark.parametrize("streams", [True, False], ids=["streamed", "whole-to-a-stream-request"])
async def test_a_streamed_reply_reports_its_cached_tokens_and_is_priced(
    client: Client, priced: Settings, model: ScriptedModel, streams: bool
) -> None:
    model.streams = streams  # False: an endpoint that answers a stream request whole
    model.cache(lambda call: 4)
    model.reply(lambda call: "one two three four five")
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        ChatWorkflow.run, ChatInput(), id=chat_id, task_queue=priced.task_queue
    )
    reply = await handle.execute_update(
        ChatWorkflow.send, ChatSend(text="count to five"), result_type=ChatReply
    )

    assert reply.text == "one two three four five"
    (call,) = model.calls
    assert call.body["stream"] is True
    usage = await handle.query("usage", result_type=Usage)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (
        words(call),
        4,
        5,
    )
    assert usage.cost == scripted_cost(words(call), 4, 5)
    await handle.terminate("done")


async def test_a_model_without_a_price_costs_none_never_zero(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.cache(half_cached)
    async with build_worker(client, settings, prices=OTHER_MODEL_PRICES):
        handle, result = await plan(client, settings.task_queue)

    assert result.usage.total_tokens > 0 and result.usage.cached_tokens > 0
    assert result.usage.cost is None
    assert all(r.usage.cost is None for r in await responses(client, handle))
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(TOKENS_ATTRIBUTE) == result.usage.total_tokens
    assert attributes.get(COST_ATTRIBUTE) is None  # unset: a Double has no "unknown"
