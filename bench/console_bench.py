"""The console as a person sees it, in the system Chromium: how long from the click on
Approve to the run's page (open in another tab) showing COMPLETED, on the scripted
model; and how long from the click on Send to the first streamed word of the reply in
the chat page, and to the whole reply, on the local model.

    python -m bench.console_bench [--approvals 10] [--chats 5]

Times are read in the pages (`performance.timeOrigin + performance.now()`, one clock
for every tab), so they include the API, the SSE stream and the page's own work, and
not Playwright's polling.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import uuid

import httpx
from playwright.async_api import BrowserContext, async_playwright, expect

from bench._common import Stack, dev_stack
from bench.chat_bench import local_model
from durafact._api import create_app
from durafact._runtime.registry import load_registry
from durafact.testing import Call, default_reply
from tests.helpers import CHROMIUM_ARGS, chromium_path, serving
from tests.workflows.test_supervisor import REQUEST, specialist

NOW = "performance.timeOrigin + performance.now()"
# Records, in the page, when the element `item` inside `area` first holds `text` (any
# text, when it is empty), as window[name].
WATCH = """([area, item, text, name]) => {
  const now = () => performance.timeOrigin + performance.now();
  const seen = () => {
    const found = document.querySelector(item);
    if (found && found.textContent && found.textContent.includes(text) && !window[name]) {
      window[name] = now();
    }
  };
  new MutationObserver(seen).observe(
    document.querySelector(area), {childList: true, subtree: true, characterData: true});
  seen();
}"""


def model(call: Call) -> str | dict:
    return default_reply(call) if call.schema_name == "Plan" else specialist()(call)


async def approval_once(context: BrowserContext, http: httpx.AsyncClient) -> float:
    """Seconds from the click on Approve (inbox tab) to COMPLETED on the run's page."""
    started = await http.post(
        "/api/runs", json={"type": "SupervisorWorkflow", "input": {"request": REQUEST}}
    )
    workflow_id = started.json()["id"]
    run = await context.new_page()
    await run.goto(f"/runs/{workflow_id}")
    await expect(run.locator("#facts")).to_contain_text("awaiting_approval", timeout=30_000)
    await run.evaluate(WATCH, ["#facts", "#facts", "COMPLETED", "completedAt"])
    inbox = await context.new_page()
    await inbox.goto("/approvals")
    card = inbox.locator("article[data-question]").filter(has_text=workflow_id)
    approve = card.get_by_role("button", name="Approve")
    await approve.evaluate(f"b => b.addEventListener('click', () => window.clickedAt = {NOW})")
    await approve.click()
    await expect(run.locator("#facts")).to_contain_text("COMPLETED", timeout=30_000)
    seconds = (
        await run.evaluate("window.completedAt") - await inbox.evaluate("window.clickedAt")
    ) / 1000
    await run.close()
    await inbox.close()
    return seconds


async def approvals(stack: Stack, context: BrowserContext, url: str, count: int) -> list[float]:
    async with httpx.AsyncClient(base_url=url) as http:
        await approval_once(context, http)  # warm-up: imports, first workflow tasks
        return [await approval_once(context, http) for _ in range(count)]


async def chat_once(context: BrowserContext, http: httpx.AsyncClient) -> tuple[float, float]:
    """Seconds from the click on Send to the reply's first word in the page, and to all of it."""
    chat = (await http.post("/api/chats", json={})).json()["id"]
    page = await context.new_page()
    await page.goto(f"/chats/{chat}")
    await expect(page.locator("#memory p")).to_be_visible(timeout=30_000)
    await page.evaluate(WATCH, ["#messages", ".bubble.assistant", "", "firstAt"])
    send = page.get_by_role("button", name="Send")
    await send.evaluate(f"b => b.addEventListener('click', () => window.clickedAt = {NOW})")
    await page.locator("#text").fill("What is a durable workflow?")
    await send.click()
    await expect(page.locator(".bubble.assistant.writing")).to_have_count(0, timeout=60_000)
    whole = await page.evaluate(NOW)
    clicked, first = await page.evaluate("[window.clickedAt, window.firstAt]")
    await page.close()
    return (first - clicked) / 1000, (whole - clicked) / 1000


async def chats(
    stack: Stack, context: BrowserContext, url: str, count: int
) -> list[tuple[float, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        await chat_once(context, http)  # warm-up: the model's first prompt
        return [await chat_once(context, http) for _ in range(count)]


def row(label: str, values: list[float]) -> str:
    return f"| {label} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"


async def measured(stack: Stack, part, count: int):
    app = create_app(stack.client, stack.settings, load_registry(entry_points=False))
    async with stack.worker(), serving(app) as url, async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS
        )
        context = await browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
        try:
            return await part(stack, context, url, count)
        finally:
            await browser.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvals", type=int, default=10)
    parser.add_argument("--chats", type=int, default=5)
    args = parser.parse_args()
    if args.approvals:
        async with dev_stack(model) as stack:
            clicks = await measured(stack, approvals, args.approvals)
        print(
            f"approval click -> run page shows COMPLETED, scripted model, {len(clicks)} runs (s):"
        )
        print("| | median | min | max |\n|---|---|---|---|")
        print(row("approve to COMPLETED", clicks))
    if args.chats:
        with local_model() as url:
            async with dev_stack(model) as stack:
                stack.settings = stack.settings.model_copy(
                    update={
                        "openai_base_url": url,
                        "model": "smollm2-135m-instruct",
                        "task_queue": f"bench-{uuid.uuid4().hex[:8]}",
                    }
                )
                timings = await measured(stack, chats, args.chats)
        print(
            f"\nchat page on the local model, {len(timings)} messages (s from the click on Send):"
        )
        print("| | median | min | max |\n|---|---|---|---|")
        print(row("first streamed word shown", [first for first, _ in timings]))
        print(row("whole reply shown", [whole for _, whole in timings]))


if __name__ == "__main__":
    asyncio.run(main())
