"""`chat [ID]`: talk to a durable chat (the registered recipe that declares itself one,
the ready ChatWorkflow), the reply printed as the model writes it.

    durafact chat [ID] [--memory digest|summaries|prune] [--tools NAME,...] [--no-stream]
                  [--budget-tokens N] [--budget-cost X] [--budget-ask]
                  [--endpoint NAME ...] [--fallback-after DURATION]
    durafact chat ID --send TEXT [--json]

Interactive, each line is sent with the update `send`; `/memory`, `/transcript` and
`/quit` (or end of input) are commands. While a reply is awaited, `/stop` stops the turn
(the update `stop`) and `/steer TEXT` adds TEXT to it before its next model call (a
message sent with `steer: true`); other lines typed meanwhile are sent after the reply.
The chat starts when its id is new and is attached to otherwise (the options only shape
a new chat): a second terminal on the same id sees the same conversation, the other
terminal's messages marked as such.

What is printed comes from the workflow's stream: `messages` (each message and
its reply) and `tokens` (the reply as it is written, when the endpoint streams).
The durable reply is the update's result: `--send` prints it whole if the stream
did not (or printed something else, e.g. a retried call's first words).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import uuid
from typing import Any

from durafact._cli.arguments import MEMORY_POLICIES
from durafact._cli.budget_options import budget_given
from durafact._cli.endpoint_options import endpoints_given
from durafact._cli.follow import warn_if_no_worker
from durafact._cli.output import Failed, emit_json, note, quoted, say, say_json
from durafact._core.llm import TextChunk
from durafact._core.text import indent
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings
from durafact._service import chats
from durafact._service.chats import (
    MESSAGES_TOPIC,
    TOKENS_TOPIC,
    ChatEvent,
    ChatInput,
    ChatReply,
    ChatSend,
    MemoryView,
    TranscriptPage,
)
from durafact._service.errors import MessageRefused, ServiceError, TurnFailed
from durafact._service.inputs import check_path_id
from durafact._service.launch import budgeted
from durafact._service.runs import state_name

# How long a reply's last streamed words may trail the update's result.
STREAM_GRACE = 3.0
SHOWN_ON_ATTACH = 10


def chat_input(args: argparse.Namespace) -> ChatInput:
    """A new chat's input from the options; a bad tool name is one line (exit code 2)."""
    tools = [name.strip() for name in args.tools.split(",") if name.strip()]
    try:
        input = ChatInput(
            memory=MEMORY_POLICIES[args.memory](), tools=tools, stream=not args.no_stream
        )
    except ValueError as exc:
        raise Failed(f"--tools: {exc}", code=2) from None
    return budgeted(input, budget_given(args)).model_copy(update=endpoints_given(args))


def check_chat_args(args: argparse.Namespace) -> None:
    chat_input(args)  # bad options, before connecting
    if args.id is not None:
        check_path_id(args.id)  # a chat's id may hold '/' (`team/chat`), no step '..'
    if args.json and args.send is None:
        raise Failed("--json goes with --send", code=2)
    if args.send is not None and not args.send.strip():
        raise Failed("the message is empty", code=2)


async def chat(
    client: Any, settings: Settings, registry: Registry, args: argparse.Namespace
) -> int:
    check_chat_args(args)
    workflow_id = args.id or f"chat-{uuid.uuid4().hex[:8]}"
    handle, started = await chats.open_chat(
        client, settings, registry, workflow_id, chat_input(args)
    )
    description = await handle.describe()
    await warn_if_no_worker(client, settings, description.task_queue)
    if args.send is not None:
        if started and not args.json:  # the id to send the next message to
            note(f"new chat {workflow_id}: durafact chat {quoted(workflow_id)} --send TEXT")
        return await send_one(client, handle, args.send, args.json)
    opened = "new chat" if started else "attached to chat"
    say(f"{opened} {workflow_id} (/memory, /transcript, /stop, /steer TEXT, /quit)")
    if not started:
        page = await chats.transcript(handle)
        for line in page.lines[-SHOWN_ON_ATTACH:]:
            if line.role in ("user", "assistant") and line.content:
                say(f"{'you' if line.role == 'user' else 'assistant'}> {line.content}")
    return await interactive(client, handle)


async def chat_result(handle: Any, description: Any, url: str, as_json: bool) -> int:
    """`result` of a chat: a conversation has no result and never ends by itself, so
    instead of waiting for one, its last reply (from this run's transcript)."""
    last = await chats.last_reply(handle)
    state = state_name(description)
    if as_json:
        reply = {"seq": last.seq, "text": last.content} if last else None
        emit_json(handle.id, description.run_id, state, {"chat": True, "last_reply": reply}, url)
        return 0
    say(f"{handle.id} is a chat: it has no result and goes on until it is ended")
    if last is None:
        say("no reply yet")
    else:
        say(f"its last reply (message {last.seq}):")
        say(indent(last.content, "  "))
    say(f"talk to it: durafact chat {quoted(handle.id)}")
    return 0


class Printer:
    """Prints a chat's stream: the other terminals' messages, replies as they are written.

    `mine` are the keys of this terminal's messages (their text was typed here);
    `done[key]` is set once the reply (or the failure) of a message was printed."""

    def __init__(self, mine: set[str], only: str | None = None) -> None:
        self.mine = mine
        self.only = only
        self.done: dict[str, asyncio.Event] = {}
        self.printed: dict[str, str] = {}
        self._attempt: dict[str, int] = {}

    def finished(self, key: str) -> asyncio.Event:
        return self.done.setdefault(key, asyncio.Event())

    def take(self, topic: str, data: dict[str, Any]) -> None:
        if topic == TOKENS_TOPIC:
            self.token(TextChunk.model_validate(data))
        elif topic == MESSAGES_TOPIC:
            self.event(ChatEvent.model_validate(data))

    def token(self, chunk: TextChunk) -> None:
        if self.only is not None and chunk.key != self.only:
            return
        attempt = self._attempt.get(chunk.key)
        if attempt is None or chunk.attempt != attempt:
            if attempt is not None:
                say("\n(the model call was retried)\n", end="")
            say("assistant> ", end="")
            self._attempt[chunk.key] = chunk.attempt
            self.printed[chunk.key] = ""
        say(chunk.text, end="")
        self.printed[chunk.key] += chunk.text

    def event(self, event: ChatEvent) -> None:
        if self.only is not None and event.key != self.only:
            return
        if event.kind == "user":
            if event.key not in self.mine:
                say(f"\n[another terminal] you> {event.text}\n", end="")
            return
        if event.kind == "error":
            say(f"error: {event.text}\n", end="")
        else:
            self.finish(event.key, event.text)
        self.finished(event.key).set()

    def finish(self, key: str, text: str) -> None:
        """End the reply's line: what streamed, completed to the durable reply."""
        shown = self.printed.get(key)
        if shown is None:
            say(f"assistant> {text}\n", end="")
        elif shown == text or text.startswith(shown) or shown.strip() == text:
            say(f"{text[len(shown) :] if text.startswith(shown) else ''}\n", end="")
        else:
            say(f"\nassistant> {text}\n", end="")
        self.printed[key] = text


async def follow(client: Any, workflow_id: str, printer: Printer, offset: int) -> None:
    async for item in chats.stream(client, workflow_id, offset):
        printer.take(item.topic, item.data)


async def send_one(client: Any, handle: Any, text: str, as_json: bool) -> int:
    key = uuid.uuid4().hex
    printer = Printer({key}, only=key)
    reader = None
    if not as_json:
        offset = await chats.stream_offset(client, handle.id)
        reader = asyncio.create_task(follow(client, handle.id, printer, offset))
    try:
        reply = await deliver(handle, text, key)
        if reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(printer.finished(key).wait(), STREAM_GRACE)
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
    if as_json:
        document = {"workflow_id": handle.id, **reply.model_dump(mode="json")}
        say_json(document)
    elif printer.printed.get(key) != reply.text:
        printer.finish(key, reply.text)
    return 0


async def deliver(handle: Any, text: str, key: str, steer: bool = False) -> ChatReply:
    try:
        return await chats.send_message(handle, ChatSend(text=text, id=key, steer=steer))
    except (MessageRefused, TurnFailed) as exc:
        raise Failed(f"not sent: {exc}") from None


async def interactive(client: Any, handle: Any) -> int:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    mine: set[str] = set()
    printer = Printer(mine)
    offset = await chats.stream_offset(client, handle.id)
    reader = asyncio.create_task(follow(client, handle.id, printer, offset))
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    read_lines(lines)
    # Lines typed while a reply was awaited, sent after it (None: the input ended).
    later: list[str | None] = []
    try:
        while True:
            line = later.pop(0) if later else await lines.get()
            if line is None or line == "/quit":
                break
            if not line or await command(handle, line):
                continue
            key = uuid.uuid4().hex
            mine.add(key)
            sending = asyncio.create_task(deliver(handle, line, key))
            while not sending.done():  # what is typed meanwhile: /stop, /steer, or later
                typed = asyncio.create_task(lines.get())
                await asyncio.wait({sending, typed}, return_when=asyncio.FIRST_COMPLETED)
                if not typed.done():
                    typed.cancel()
                    continue
                extra = typed.result()
                if extra is None or not await while_answering(handle, extra, mine):
                    later.append(extra)
            try:
                reply = sending.result()
            except Failed as exc:
                say(f"starter: {exc}", sys.stderr)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(printer.finished(key).wait(), STREAM_GRACE)
            if printer.printed.get(key) != reply.text:
                printer.finish(key, reply.text)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
    return 0


def read_lines(lines: asyncio.Queue[str | None]) -> None:
    """Each line typed, stripped, into `lines`, None once the input ends: from a daemon
    thread, which a `/quit` leaves blocked in input() without holding up the exit."""
    loop = asyncio.get_running_loop()

    def read() -> None:
        while True:
            try:
                line: str | None = input("you> " if sys.stdin.isatty() else "").strip()
            except EOFError:
                line = None
            loop.call_soon_threadsafe(lines.put_nowait, line)
            if line is None:
                return

    threading.Thread(target=read, name="chat-input", daemon=True).start()


async def command(handle: Any, line: str) -> bool:
    """Run `line` if it is a command that needs no turn running (`/memory`, `/transcript`,
    or `/stop` and `/steer`, which then say there is none); False: a message."""
    if line == "/memory":
        say(show_memory(await chats.memory(handle)))
    elif line == "/transcript":
        say(show_transcript(await chats.transcript(handle)))
    elif line == "/stop" or line.startswith("/steer"):
        say(f"{line.split()[0]}: no reply is awaited here", sys.stderr)
    else:
        return False
    return True


async def while_answering(handle: Any, line: str, mine: set[str]) -> bool:
    """`/stop` or `/steer TEXT` typed while a reply is awaited; False: another line."""
    if line == "/stop":
        try:
            await chats.stop_turn(handle)
        except ServiceError as exc:
            say(f"starter: not stopped: {exc}", sys.stderr)
        return True
    if line.startswith("/steer"):
        text = line.removeprefix("/steer").strip()
        if not text:
            say("/steer TEXT: the note is empty", sys.stderr)
            return True
        key = uuid.uuid4().hex
        mine.add(key)
        try:
            reply = await deliver(handle, text, key, steer=True)
        except Failed as exc:
            say(f"starter: {exc}", sys.stderr)
            return True
        say(f"({reply.text})" if reply.status == "steered" else f"assistant> {reply.text}")
        return True
    return False


def show_memory(view: MemoryView) -> str:
    memory = view.memory
    lines = [
        f"memory ({view.policy}): {len(memory.window)} messages in the window, "
        f"{memory.folded} folded, {view.turns} turns, run {view.runs}"
    ]
    for summary in memory.summaries:
        lines.append(
            f"summary:{summary.round} (messages {summary.first}-{summary.last}): {summary.text}"
        )
    if memory.digest is not None:
        lines.append(f"digest (version {memory.digest.version}): {memory.digest.text}")
    return "\n".join(lines)


def show_transcript(page: TranscriptPage) -> str:
    head = f"messages {page.first}-{page.total - 1} of {page.total} (earlier ones: earlier runs)"
    body = [f"{line.seq:>4} {line.role}> {line.content}" for line in page.lines if line.content]
    return "\n".join([head, *body])
