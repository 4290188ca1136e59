"""ChatWorkflow end to end on a real dev server with the scripted model: replies, the
validator, serialized senders, memory across continue-as-new, streamed tokens, and a
worker killed mid-turn."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durafact._core.llm import TextChunk, Usage
from durafact._core.memory import RollingDigestSummarizer, WindowPruner
from durafact._recipes.chat import (
    FOLD_SYSTEM,
    TOKENS_TOPIC,
    ChatInput,
    ChatReply,
    ChatSend,
    ChatWorkflow,
    MemoryView,
    TranscriptPage,
)
from durafact._recipes.recipe import COST_ATTRIBUTE, STATUS_ATTRIBUTE, TOKENS_ATTRIBUTE
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel
from tests.helpers import start_worker

CODE = re.compile(r"locker code is (\d+)")


def chat_model(call: Call) -> str:
    """Folds keep the lines that mention a code; a question about the code is answered
    from what the model was shown; anything else is echoed."""
    system = call.messages[0].get("content") or ""
    if system.startswith(FOLD_SYSTEM):
        kept = [line for line in call.last_user.splitlines() if "code" in line]
        return "\n".join(kept) or "nothing to keep"
    if "what is my locker code" in call.last_user:
        found = CODE.search(call.text)
        return f"your locker code is {found.group(1)}" if found else "I do not know"
    return f"echo: {call.last_user}"


async def start_chat(client: Client, settings: Settings, **options: Any) -> WorkflowHandle:
    return await client.start_workflow(
        ChatWorkflow.run,
        ChatInput(**options),
        id=f"chat-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def send(handle: WorkflowHandle, text: str, key: str | None = None) -> ChatReply:
    return await handle.execute_update(
        ChatWorkflow.send, ChatSend(text=text, id=key), result_type=ChatReply
    )


async def test_a_reply_streams_in_order_and_joins_to_the_durable_reply(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(lambda call: "one two three four five six seven eight nine ten")
    model.pace = 0.05
    handle = await start_chat(client, worker)
    tokens: list[TextChunk] = []

    async def collect() -> None:
        stream = WorkflowStreamClient.create(client, handle.id)
        async for item in stream.subscribe([TOKENS_TOPIC], result_type=TextChunk):
            tokens.append(item.data)
            if "".join(t.text for t in tokens).endswith("ten"):
                return

    reader = asyncio.create_task(collect())
    reply = await send(handle, "count to ten", key="m1")
    await asyncio.wait_for(reader, timeout=30)
    assert reply.text == "one two three four five six seven eight nine ten"
    assert [t.key for t in tokens] == ["m1"] * len(tokens)
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert len(tokens) >= 3  # the first word at once, then what came in each interval
    assert tokens[0].text == "one "
    assert "".join(t.text for t in tokens) == reply.text
    assert model.calls[0].body["stream"] is True


async def test_without_streaming_the_same_send_gets_the_reply(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.streams = False  # an endpoint that answers a streaming request whole
    handle = await start_chat(client, worker)
    assert (await send(handle, "hello")).text == "done: hello"
    assert (await send(handle, "again")).text == "done: again"
    # Asked to stream once, its whole answer is the reply (one paid call per message);
    # after that the worker asks that endpoint for whole answers.
    assert [c.body.get("stream") for c in model.calls] == [True, None]
    quiet = await start_chat(client, worker, stream=False)
    assert (await send(quiet, "hi")).text == "done: hi"
    assert "stream" not in model.calls[-1].body


async def test_an_endpoint_that_refuses_to_stream_is_asked_for_whole_replies(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(400, when=lambda call: bool(call.body.get("stream")))  # as some endpoints do
    handle = await start_chat(client, worker)
    assert (await send(handle, "hello")).text == "done: hello"
    assert [c.body.get("stream") for c in model.calls] == [True, None]


async def test_a_chats_search_attributes_hold_its_usage_after_each_turn(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    """A chat's status stays `chatting`, so its usage goes to DurafactTokens and
    DurafactCost after each turn: `durafact list` shows what `status` shows."""
    handle = await start_chat(client, worker)
    spent = []
    for text in ("hello", "and again"):
        await send(handle, text)
        usage = await handle.query("usage", result_type=Usage)
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(STATUS_ATTRIBUTE) == "chatting"
        assert attributes.get(TOKENS_ATTRIBUTE) == usage.total_tokens > 0
        # The worker has no prices: the cost is unknown, and unset rather than 0.
        assert usage.cost is None and attributes.get(COST_ATTRIBUTE) is None
        spent.append(usage.total_tokens)
    assert spent[1] > spent[0]


async def test_the_validator_refuses_empty_and_oversized_messages_before_history(
    client: Client, worker: Settings
) -> None:
    handle = await start_chat(client, worker, max_message_chars=20)
    for text, reason in (("   ", "empty"), ("x" * 21, "at most 20")):
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await send(handle, text)
        assert reason in str(failed.value.cause)
    assert (await send(handle, "fine")).seq == 0
    history = await handle.fetch_history()
    accepted = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert len(accepted) == 1


async def test_concurrent_senders_are_answered_one_at_a_time(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    lock = threading.Lock()
    active = [0, 0]  # in flight now, most at once

    def reply(call: Call) -> str:
        with lock:
            active[0] += 1
            active[1] = max(active)
        threading.Event().wait(0.02)
        with lock:
            active[0] -= 1
        return f"echo: {call.last_user}"

    model.reply(reply)
    handle = await start_chat(client, worker, memory=WindowPruner(keep=4), stream=False)
    replies = await asyncio.gather(*(send(handle, f"message {i}") for i in range(12)))
    assert active[1] == 1
    assert sorted(r.seq for r in replies) == list(range(0, 24, 2))
    assert all(r.text == f"echo: message {i}" for i, r in enumerate(replies))
    # The same id again is the first reply, not a second turn.
    again = await send(handle, "message 0", key=replies[0].id)
    assert again == replies[0]
    assert len(model.calls) == 12


@pytest.mark.long_running
async def test_five_hundred_messages_cross_continue_as_new_and_keep_an_early_fact(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(chat_model)
    policy = RollingDigestSummarizer(window=6, trigger=10)
    handle = await start_chat(
        client, worker, memory=policy, stream=False, continue_after_events=1500
    )
    replies = [await send(handle, "my locker code is 4711, please remember it")]
    for i in range(1, 499):
        replies.append(await send(handle, f"small talk {i}"))
    replies.append(await send(handle, "what is my locker code?"))

    assert replies[-1].text == "your locker code is 4711"
    assert [r.seq for r in replies] == list(range(0, 1000, 2))
    assert [r.text for r in replies[1:-1]] == [f"echo: small talk {i}" for i in range(1, 499)]
    assert replies[-1].run >= 2  # at least two continue-as-new boundaries behind it
    # Each message reached the model once: none lost, none answered twice.
    asked = [c.last_user for c in model.calls if c.activity_id.startswith("llm:chat:")]
    assert len(asked) == 500 and len(set(asked)) == 500
    view = await handle.query(ChatWorkflow.memory, result_type=MemoryView)
    assert len(view.memory.window) <= policy.trigger
    assert "4711" in view.memory.digest.text
    assert view.memory.digest.version > 10  # one digest, folded into again and again
    page = await handle.query(ChatWorkflow.transcript, args=[0, 1000], result_type=TranscriptPage)
    assert page.total == 1000 and page.first > 0  # earlier messages are in earlier runs

    # Any id of the conversation sent again gets its first reply and no second turn:
    # from the first run (read back from that closed run), from the run before, from
    # this one beyond the last carried replies, and one of those.
    calls = len(model.calls)
    for earlier in (replies[0], replies[200], replies[-40], replies[-2]):
        assert await send(handle, "ignored: the id decides", key=earlier.id) == earlier
    assert len(model.calls) == calls
    history = await handle.fetch_history()
    read_back = [
        e.activity_task_scheduled_event_attributes.activity_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "read_reply"
    ]
    assert read_back == [f"read-reply:{replies[0].seq}", f"read-reply:{replies[200].seq}"]


async def test_a_worker_killed_mid_turn_is_replaced_and_the_message_answered_once(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    release = model.hold(lambda call: call.attempt == 1)
    first = start_worker(client, settings)
    second = None
    try:
        handle = await start_chat(client, settings)
        sending = asyncio.create_task(send(handle, "are you still there?"))
        await asyncio.to_thread(model.wait_for, lambda call: True)
        first.kill()
        first.wait()
        release.set()
        second = start_worker(client, settings)
        reply = await asyncio.wait_for(sending, timeout=240)
        assert reply.text == "done: are you still there?"
        page = await handle.query(ChatWorkflow.transcript, result_type=TranscriptPage)
        assert [(line.role, line.content) for line in page.lines] == [
            ("user", "are you still there?"),
            ("assistant", "done: are you still there?"),
        ]
        assert [c.attempt for c in model.calls] == [1, 2]
    finally:
        for process in (first, second):
            if process and process.poll() is None:
                process.terminate()
                process.wait(timeout=15)


async def test_signalled_messages_queue_in_order_and_a_failed_turn_leaves_no_trace(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    handle = await start_chat(client, worker, stream=False)
    await handle.signal(ChatWorkflow.message, ChatSend(text="first"))
    await handle.signal(ChatWorkflow.message, ChatSend(text="second"))
    assert (await send(handle, "third")).seq == 4
    model.fail(401, when=lambda call: "broken" in call.last_user)
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await send(handle, "broken")
    assert "401" in str(failed.value.cause)
    assert (await send(handle, "fourth")).text == "done: fourth"
    page = await handle.query(ChatWorkflow.transcript, result_type=TranscriptPage)
    assert [line.content for line in page.lines if line.role == "user"] == [
        "first",
        "second",
        "third",
        "fourth",
    ]
    assert [line.seq for line in page.lines] == list(range(8))
