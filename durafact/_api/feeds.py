"""What a run or a chat says as it goes, read once per server and shared by every stream
that follows it: the one event source of the JSON API's SSE, the AI SDK's stream and
AG-UI's (durafact/_api/events.py, ai_sdk.py, ag_ui.py).

A run's feed asks the run's `progress` query for what it announced (one poll every
`POLL_INTERVAL` for all its followers), and its `usage` query at each status change
(`RunLine`), then, once it closed, how it ended (`RunEnd`: its answer as text, read
with its ledger once for all, and only when a follower asks for it).
A chat's feed reads the chat's workflow stream (topics `messages`, `tokens`, `lines`)
from what the chat still holds. A feed starts with its first follower and stops when
the last one leaves: a client that disconnects costs nothing, and a hundred clients on
one run cost one poller, so no more queries, stream polls or history than one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from durafact._core.ledger import Ledger
from durafact._core.llm import Usage
from durafact._runtime.registry import Registered, Registry
from durafact._service import chats
from durafact._service.errors import failure_text
from durafact._service.ledger import ledger_of
from durafact._service.runs import (
    POLL_INTERVAL,
    Announcement,
    jsonable,
    progress_page,
    queried_usage,
    result_text,
    result_type,
)

# The items a chat's feed keeps: a follower that falls further behind starts again at
# the oldest kept (the chat itself keeps the turn before the one being answered).
CHAT_WINDOW = 20_000


# What a chat's follower gets when it has read every item there is so far (once the
# feed has read what the chat held when it started: `_SYNCED`).
CAUGHT_UP = object()
_SYNCED = object()


@dataclass(frozen=True)
class RunLine:
    """What a run announced, with what it had used by then: the `usage` query's answer
    as the feed last read it, at the line's status change or before (None: no worker
    answered)."""

    line: Announcement
    usage: Usage | None = None


class Answer(NamedTuple):
    """A completed run's answer as text (`result_text`) and its ledger (None: no worker
    answered)."""

    text: str
    ledger: Ledger | None


async def _no_answer() -> Answer:
    return Answer("", None)


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: Temporal's state, and its result or its failure. `answer()` reads
    a completed run's answer and ledger when a follower first needs them, once for all
    (the JSON API's stream never does: each read is a worker replaying the run)."""

    state: str
    result: Any = None
    failure: str | None = None
    answer: Callable[[], Awaitable[Answer]] = field(default=_no_answer, compare=False)


@dataclass
class _Feed:
    items: list[Any] = field(default_factory=list)
    first: int = 0  # the position of items[0]
    synced: bool = False
    done: bool = False
    followers: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None


class Feeds:
    """The feeds of one server: `run(...)` and `chat(...)` follow one."""

    def __init__(self, client: Any, registry: Registry) -> None:
        self._client = client
        self._registry = registry
        self._feeds: dict[tuple[str, str], _Feed] = {}

    def __len__(self) -> int:
        """How many runs and chats are followed now."""
        return len(self._feeds)

    async def run(
        self, workflow_id: str, run_id: str, workflow_type: str, offset: int = 0
    ) -> AsyncIterator[RunLine | RunEnd]:
        """The announcements of one run (a continued-as-new run is another) from
        `offset`, then its `RunEnd`."""
        handle = self._client.get_workflow_handle(
            workflow_id, run_id=run_id, result_type=result_type(self._registry, workflow_type)
        )
        recipe = self._registry.get(workflow_type)
        key = ("run", f"{workflow_id}\0{run_id}")
        async for item in self._follow(key, offset, _poll_run(handle, recipe)):
            yield item

    async def chat(self, chat_id: str) -> AsyncIterator[Any]:
        """The chat's stream items (`topic`, `data`, `offset`) from the oldest the chat
        still holds, until it ends; `CAUGHT_UP` each time the follower has read all
        there is so far."""
        source = _read_chat(self._client, chat_id)
        async for item in self._follow(("chat", chat_id), 0, source, caught_up=True):
            yield item

    async def _follow(
        self,
        key: tuple[str, str],
        position: int,
        source: AsyncIterator[Any],
        caught_up: bool = False,
    ) -> AsyncIterator[Any]:
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = _Feed()
            feed.task = asyncio.ensure_future(_fill(feed, source))
        else:
            await source.aclose()
        feed.followers += 1
        try:
            while True:
                behind = feed.first + len(feed.items) > position
                if caught_up and feed.synced and not feed.done and not behind:
                    yield CAUGHT_UP
                async with feed.changed:
                    await feed.changed.wait_for(
                        lambda at=position, synced=feed.synced: (
                            feed.done or feed.first + len(feed.items) > at or feed.synced != synced
                        )
                    )
                position = max(position, feed.first)
                batch = feed.items[position - feed.first :]
                position += len(batch)
                for item in batch:
                    yield item
                if feed.done and position >= feed.first + len(feed.items):
                    return
        finally:
            feed.followers -= 1
            if feed.followers == 0 and self._feeds.get(key) is feed:
                del self._feeds[key]
                if feed.task is not None:
                    feed.task.cancel()


async def _fill(feed: _Feed, source: AsyncIterator[Any]) -> None:
    try:
        async for item in source:
            async with feed.changed:
                if item is _SYNCED:
                    feed.synced = True
                    feed.changed.notify_all()
                    continue
                feed.items.append(item)
                if len(feed.items) > CHAT_WINDOW:
                    drop = len(feed.items) - CHAT_WINDOW
                    del feed.items[:drop]
                    feed.first += drop
                feed.changed.notify_all()
    finally:
        with contextlib.suppress(RuntimeError):  # the loop is closing
            async with feed.changed:
                feed.done = True
                feed.changed.notify_all()


async def _poll_run(handle: Any, recipe: Registered | None) -> AsyncIterator[RunLine | RunEnd]:
    outcome = asyncio.ensure_future(handle.result(follow_runs=False))
    offset, status, usage = 0, None, None
    try:
        while True:
            closed = outcome.done()  # before the query: its answer then includes the end
            page = await progress_page(handle, offset)
            lines = page.events if page else []
            if any(line.status != status for line in lines):  # once a page, not a follower
                usage = await queried_usage(handle)
            for line in lines:
                offset, status = line.seq + 1, line.status
                yield RunLine(line, usage)
            if closed:
                break
            await asyncio.wait({outcome}, timeout=POLL_INTERVAL)
        yield await _ended(handle, outcome, recipe)
    finally:
        outcome.cancel()


async def _ended(handle: Any, outcome: asyncio.Future[Any], recipe: Registered | None) -> RunEnd:
    state = (await handle.describe()).status
    name = state.name if state else "UNKNOWN"
    try:
        value = outcome.result()
    except Exception as exc:  # failed, canceled, terminated, timed out, continued as new
        return RunEnd(name, failure=failure_text(exc))

    async def answer() -> Answer:
        ledger = await ledger_of(handle)
        return Answer(result_text(recipe, value, ledger), ledger)

    return RunEnd(name, jsonable(value), answer=once(answer))


def once(read: Callable[[], Awaitable[Answer]]) -> Callable[[], Awaitable[Answer]]:
    """`read`, run by the first caller and shared by the rest; a caller that leaves does
    not cancel it for the others."""
    reading: asyncio.Future[Answer] | None = None

    async def shared() -> Answer:
        nonlocal reading
        if reading is None:
            reading = asyncio.ensure_future(read())
        return await asyncio.shield(reading)

    return shared


async def _read_chat(client: Any, chat_id: str) -> AsyncIterator[Any]:
    """The chat's items, with `_SYNCED` after those it held when the feed began."""
    end = await chats.stream_offset(client, chat_id)
    if end == 0:
        yield _SYNCED
    async for item in chats.stream(client, chat_id, 0, chats.ALL_TOPICS):
        yield item
        if item.offset + 1 == end:
            yield _SYNCED


async def merged(feed: AsyncIterator[Any], done: asyncio.Future[Any] | None) -> AsyncIterator[Any]:
    """The feed's items, and `done` itself once it is done (and did not fail)."""
    following = asyncio.ensure_future(anext(feed))
    try:
        while True:
            waiting = {following, done} if done is not None else {following}
            finished, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if done is not None and done in finished:
                if not done.cancelled() and done.exception() is None:
                    yield done
                done = None
                continue
            try:
                item = following.result()
            except StopAsyncIteration:
                return
            yield item
            following = asyncio.ensure_future(anext(feed))
    finally:
        following.cancel()
        with contextlib.suppress(BaseException):
            await feed.aclose()
