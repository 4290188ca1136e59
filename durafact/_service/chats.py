"""Chats: the registered recipe that declares itself a `chat` (the ready `ChatWorkflow`),
started once per id and talked to while it runs: a message (the update `send`, which
returns the reply; `steer: true` joins the turn being answered), a stop of the turn
being answered (the update `stop`), its stream as it is written, its transcript and
memory (queries).

The stream's items are the workflow stream's own, on two topics: `messages` (each
message, its reply or why it failed) and `tokens` (a reply as it is written); their
offsets survive continue-as-new. The chat's models (`ChatInput`, `ChatSend`, `ChatReply`,
`ChatEvent`, `TranscriptPage`, `MemoryView`) and topics are named here for the front
doors, which import no recipe.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from durafact._core.steer import NOT_STEERED
from durafact._recipes.chat import INVALID_MESSAGE, LINES_TOPIC, MESSAGES_TOPIC, TOKENS_TOPIC
from durafact._recipes.chat import ChatEvent as ChatEvent
from durafact._recipes.chat import ChatInput as ChatInput
from durafact._recipes.chat import ChatReply as ChatReply
from durafact._recipes.chat import ChatSend as ChatSend
from durafact._recipes.chat import MemoryView as MemoryView
from durafact._recipes.chat import TranscriptPage as TranscriptPage
from durafact._recipes.chat import TurnLine as TurnLine
from durafact._recipes.recipe import RECIPE_ATTRIBUTE
from durafact._runtime.registry import Registered, Registry
from durafact._runtime.settings import Settings
from durafact._service.errors import (
    MessageRefused,
    NotRunning,
    Refused,
    TurnFailed,
    Unanswered,
    failure_text,
)
from durafact._service.runs import QUERY_TIMEOUT, describe, state_name

# What a front end that shows tool calls and questions follows.
ALL_TOPICS = (MESSAGES_TOPIC, TOKENS_TOPIC, LINES_TOPIC)
# The whole of a run's transcript, as `result` and an attaching terminal read it.
WHOLE = 10_000


def chat_recipe(registry: Registry) -> Registered:
    recipe = registry.chat_recipe()
    if recipe is None:  # the built-ins register ChatWorkflow: only a bare registry lacks it
        raise Refused("no registered recipe is a chat")
    return recipe


async def open_chat(
    client: Any,
    settings: Settings,
    registry: Registry,
    chat_id: str,
    input: ChatInput,
    attach: bool = True,
) -> tuple[Any, bool]:
    """The chat's handle, and whether it was started now (else it was running). Without
    `attach`, a chat holding the id is Refused; with it, one that has ended is too."""
    recipe = chat_recipe(registry)
    conflict = WorkflowIDConflictPolicy.USE_EXISTING if attach else WorkflowIDConflictPolicy.FAIL
    try:
        handle = await client.start_workflow(
            recipe.run_fn,
            input,
            id=chat_id,
            task_queue=settings.task_queue,
            id_conflict_policy=conflict,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(RECIPE_ATTRIBUTE, recipe.recipe_name)]
            ),
            static_summary=f"chat {chat_id}",
        )
    except WorkflowAlreadyStartedError:
        if not attach:
            raise Refused(f"chat id {chat_id!r} is taken") from None
        raise NotRunning(f"chat {chat_id} has ended; start another with a new id") from None
    response = getattr(handle, "_start_workflow_response", None)
    return client.get_workflow_handle(chat_id), bool(getattr(response, "started", True))


async def running_chat(client: Any, registry: Registry, chat_id: str) -> Any:
    """The running chat's handle; NotFound for an unknown id, NotRunning for a run that
    is no chat, or has ended."""
    handle = client.get_workflow_handle(chat_id)
    description = await describe(handle)
    recipe = registry.get(description.workflow_type)
    if recipe is None or not recipe.chat:
        raise Refused(f"{chat_id} is a {description.workflow_type}, not a chat")
    state = state_name(description)
    if state != "RUNNING":
        raise NotRunning(f"chat {chat_id} has ended ({state}); start another")
    return handle


async def send_message(handle: Any, message: ChatSend) -> ChatReply:
    """The update `send`: the reply, once written (it streams meanwhile). The same id
    again gets the first reply, never a second turn. MessageRefused when the chat refuses
    the message, TurnFailed when its turn failed."""
    try:
        return await handle.execute_update("send", message, result_type=ChatReply)
    except WorkflowUpdateFailedError as exc:
        refused = isinstance(exc.cause, ApplicationError) and exc.cause.type == INVALID_MESSAGE
        raise (MessageRefused if refused else TurnFailed)(failure_text(exc)) from None


async def submit_message(handle: Any, message: ChatSend) -> Any:
    """The update `send`, accepted (its validator passed) but not yet answered: its
    handle, whose `result()` is the reply. MessageRefused when the chat refuses it."""
    try:
        return await handle.start_update(
            "send", message, wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=ChatReply
        )
    except WorkflowUpdateFailedError as exc:
        raise MessageRefused(failure_text(exc)) from None


async def stop_turn(handle: Any) -> ChatReply:
    """The update `stop`: the turn's model or tool calls are cancelled; its reply, which
    says `stopped`. MessageRefused when no turn is being answered."""
    try:
        return await handle.execute_update("stop", result_type=ChatReply)
    except WorkflowUpdateFailedError as exc:
        refused = isinstance(exc.cause, ApplicationError) and exc.cause.type == NOT_STEERED
        raise (MessageRefused if refused else TurnFailed)(failure_text(exc)) from None


async def transcript(
    handle: Any, offset: int = 0, limit: int = WHOLE, timeout: timedelta | None = None
) -> TranscriptPage:
    """This run's messages from `offset` (numbered across runs: earlier ones are in the
    histories of earlier runs)."""
    return await handle.query(
        "transcript", args=[offset, limit], result_type=TranscriptPage, rpc_timeout=timeout
    )


async def memory(handle: Any, timeout: timedelta | None = None) -> MemoryView:
    """The window, the summaries or the digest, and the counters."""
    return await handle.query("memory", result_type=MemoryView, rpc_timeout=timeout)


async def read(client: Any, chat_id: str, query: Any, *args: Any) -> Any:
    """`query(handle, *args)` (`transcript`, `memory`) of the chat, asked for a poll's
    while; NotFound, or Unanswered saying why not."""
    handle = client.get_workflow_handle(chat_id)
    await describe(handle)
    try:
        return await query(handle, *args, timeout=QUERY_TIMEOUT)
    except Exception as exc:
        raise Unanswered(f"chat {chat_id}: {failure_text(exc)}") from None


async def stream_offset(client: Any, chat_id: str) -> int:
    """Where the chat's stream is now: the offset of its next item."""
    return await WorkflowStreamClient.create(client, chat_id).get_offset()


async def stream(
    client: Any, chat_id: str, offset: int, topics: Sequence[str] = (MESSAGES_TOPIC, TOKENS_TOPIC)
) -> AsyncIterator[Any]:
    """The chat's stream from `offset` (0: the oldest item it holds): items with `topic`,
    `data` and `offset` on `topics`, until the chat ends."""
    reader = WorkflowStreamClient.create(client, chat_id)
    async for item in reader.subscribe(list(topics), from_offset=offset):
        yield item


async def last_reply(handle: Any) -> Any:
    """The last reply of this run (a transcript line), None before the first."""
    page = await transcript(handle)
    replies = [line for line in page.lines if line.role == "assistant" and not line.tool_calls]
    return replies[-1] if replies else None
