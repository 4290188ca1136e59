"""The example front ends (frontends/, docs/guides/frontends.md), as a person uses them:
`frontends/serve.mjs`
bundles each page with esbuild and passes its protocol requests on to a live `durafact
serve` with the token; Chromium opens the page, sends a message, answers a tool's
question."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from playwright.async_api import Browser, expect

from durafact.testing import ScriptedModel
from tests.api.conftest import TOKEN, Served, delete_once_told
from tests.helpers import FRONTENDS
from tests.workflows.test_react import DELETED

REPLY = "Two kayaks fit on the roof rack."


@contextlib.asynccontextmanager
async def example_server(served: Served) -> AsyncIterator[str]:
    """`node frontends/serve.mjs` in front of `served`, on a free port: its URL."""
    process = await asyncio.create_subprocess_exec(
        shutil.which("node") or "node",
        str(FRONTENDS / "serve.mjs"),
        served.url,
        "0",
        stdout=subprocess.PIPE,
        env={**os.environ, "DURAFACT_API_TOKEN": TOKEN},
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        yield line.decode().strip()
    finally:
        process.terminate()
        await process.wait()


@pytest.fixture(scope="module")
async def examples(served: Served) -> AsyncIterator[str]:
    async with example_server(served) as url:
        yield url


async def test_the_usechat_page_streams_a_reply(
    browser: Browser, examples: str, model: ScriptedModel
) -> None:
    model.reply(lambda call: REPLY)
    page = await browser.new_page()
    try:
        await page.goto(examples)
        await page.get_by_placeholder("Message").fill("How many kayaks?")
        await page.get_by_role("button", name="Send").click()
        await expect(page.locator("article.assistant")).to_have_text(REPLY)
        await expect(page.locator("article.user")).to_have_text("How many kayaks?")
    finally:
        await page.close()


async def test_the_usechat_page_approves_a_tool_and_the_tool_runs_once(
    browser: Browser, examples: str, model: ScriptedModel, http: httpx.AsyncClient
) -> None:
    path = f"/tmp/page-{uuid.uuid4().hex[:8]}"

    model.reply(delete_once_told(path))
    chat_id = f"page-{uuid.uuid4().hex[:8]}"
    chat = {"id": chat_id, "settings": {"tools": ["delete_file"]}}  # a chat with the tool
    assert (await http.post("/api/chats", json=chat)).status_code == 201
    page = await browser.new_page()
    try:
        await page.goto(f"{examples}/?chat={chat_id}")
        await page.get_by_placeholder("Message").fill("Delete the file")
        await page.get_by_role("button", name="Send").click()
        await page.get_by_role("button", name="Approve").click()
        await expect(page.locator("article.assistant").last).to_contain_text("Deleted it.")
        await expect(page.locator(".tool pre").last).to_have_text(f"deleted {path}")
    finally:
        await page.close()
    assert DELETED.count(path) == 1


async def test_a_request_from_another_sites_page_is_refused_by_the_example_server(
    examples: str,
) -> None:
    async with httpx.AsyncClient(base_url=examples) as proxy:
        refused = await proxy.post(
            "/api/ai-sdk/chats",
            json={"id": "x", "messages": []},
            headers={"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
        )
    assert refused.status_code == 403
