"""Fixtures of the API and console tests: one `durafact serve` app per module, on a
real uvicorn server on loopback, over the session's dev server, with a worker of the
module's own task queue on the scripted model (and the destructive `delete_file`, which
a run uses only when it names it); and the token every call sends."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, async_playwright
from temporalio.client import Client

from durafact._api import create_app
from durafact._runtime.registry import load_registry
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.helpers import CHROMIUM_ARGS, chromium_path, serving
from tests.workflows.test_react import delete_file

TOKEN = "test-token-3f9c"  # the same in every xdist worker: it names tests


@dataclass
class Served:
    url: str
    settings: Settings
    app: Any = None

    def auth(self, token: str = TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def serve_api(
    client: Client, model: ScriptedModel, token: str | None, **options: Any
) -> AsyncIterator[Served]:
    """The app with `token` (and create_app's `options`) on a free loopback port, with a
    worker of its own task queue."""
    settings = Settings(
        openai_base_url=model.url,
        openai_api_key="test",
        model="scripted",
        task_queue=f"api-{uuid.uuid4().hex[:8]}",
    )
    app = create_app(client, settings, load_registry(entry_points=False), token=token, **options)
    async with build_worker(client, settings, tools=[delete_file]), serving(app) as url:
        yield Served(url, settings, app)


def delete_once_told(path: str, done: str = "Deleted it.") -> Callable[[Call], str | ToolCalls]:
    """A model that asks to delete `path` (the destructive `delete_file`), then, once the
    conversation holds the tool's answer, says `done`."""

    def reply(call: Call) -> str | ToolCalls:
        told = any(m.get("role") == "tool" for m in call.body["messages"])
        return done if told else ToolCalls([("delete_file", {"path": path})])

    return reply


@pytest.fixture(scope="module")
async def served(client: Client, scripted_server: ScriptedModel) -> AsyncIterator[Served]:
    async with serve_api(client, scripted_server, TOKEN) as served:
        yield served


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the API that sends the token, and `X-Durafact: 1`, as a program does
    that posts a change without a JSON body (a cancel, a stop)."""
    headers = {**served.auth(), "X-Durafact": "1"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as c:
        yield c


@dataclass
class Event:
    id: str | None
    name: str
    data: Any


async def read_events(
    http: httpx.AsyncClient, path: str, *, last_event_id: str | None = None, count: int = 0
) -> list[Event]:
    """The SSE events of `path` until the stream ends (or, with `count`, the first
    `count` of them, then the connection is dropped)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    events: list[Event] = []
    async with http.stream("GET", path, headers=headers, timeout=60) as response:
        assert response.status_code == 200, await response.aread()
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line:
                name, _, value = line.partition(":")
                if name:  # a line starting with ':' is a comment (the keep-alive ping)
                    fields[name] = value.removeprefix(" ")
                continue
            if "data" in fields:
                events.append(
                    Event(
                        fields.get("id"), fields.get("event", "message"), json.loads(fields["data"])
                    )
                )
                if count and len(events) == count:
                    break
            fields = {}
    return events


# --- a real browser ---------------------------------------------------------------------

SCREENSHOTS_ENV = "DURAFACT_SCREENSHOTS"


@contextlib.asynccontextmanager
async def chromium(*args: str) -> AsyncIterator[Browser]:
    """The system Chromium, headless, with CHROMIUM_ARGS and `args`."""
    async with async_playwright() as playwright:
        try:
            path = chromium_path()
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        launched = await playwright.chromium.launch(
            executable_path=path, args=[*CHROMIUM_ARGS, *args]
        )
        yield launched
        await launched.close()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as launched:
        yield launched


@pytest.fixture
async def console(browser: Browser, served: Served) -> AsyncIterator[BrowserContext]:
    """A browser context at 1280 px whose tabs already hold the token, as after a person
    gave it once."""
    context = await browser.new_context(
        base_url=served.url, viewport={"width": 1280, "height": 900}
    )
    await context.add_init_script(f"sessionStorage.setItem('durafact.token', {TOKEN!r})")
    yield context
    await context.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where the tests' screenshots go: DURAFACT_SCREENSHOTS (README's come from
    `DURAFACT_SCREENSHOTS=docs/console`), else the test's tmp_path."""
    where = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where
