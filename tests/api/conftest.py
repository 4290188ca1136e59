"""Fixtures of the API and console tests: one `durafact serve` app per module, on a
real uvicorn server on loopback, over the session's dev server, with a worker of the
module's own task queue on the scripted model; and the token every call sends."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from temporalio.client import Client

from durafact.api import create_app
from durafact.runtime.registry import load_registry
from durafact.runtime.settings import Settings
from durafact.runtime.worker import build_worker
from durafact.testing import ScriptedModel
from tests.helpers import free_port

TOKEN = "test-token-" + uuid.uuid4().hex


@dataclass
class Served:
    url: str
    settings: Settings

    def auth(self, token: str = TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
async def served(client: Client, scripted_server: ScriptedModel) -> AsyncIterator[Served]:
    settings = Settings(
        openai_base_url=scripted_server.url,
        openai_api_key="test",
        model="scripted",
        task_queue=f"api-{uuid.uuid4().hex[:8]}",
    )
    app = create_app(client, settings, load_registry(entry_points=False), token=TOKEN)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    async with build_worker(client, settings):
        serving = asyncio.create_task(server.serve())
        while not server.started:
            assert not serving.done(), "the API server did not start"
            await asyncio.sleep(0.02)
        try:
            yield Served(f"http://127.0.0.1:{port}", settings)
        finally:
            server.should_exit = True
            await serving


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the API that sends the token."""
    async with httpx.AsyncClient(base_url=served.url, headers=served.auth(), timeout=30) as c:
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
