"""The web console in a real browser (the system Chromium, driven by Playwright) on the
live server: what a person does with runs, approvals and chats."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, Route, expect
from temporalio.client import Client

from durafact._recipes.chat import STOPPED_REPLY, ChatInput
from durafact._runtime.registry import load_registry
from durafact._runtime.worker import build_worker
from durafact._service.chats import open_chat
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.api.conftest import TOKEN, Served
from tests.api.test_api import (
    LONG_PATH,
    NOTE,
    asking_about_a_long_call,
    asking_about_the_calculator,
    asking_in_a_step,
    busy_agent,
    finished,
    remembered_decision,
    start,
    waiting_question,
)
from tests.cli.test_steer import accepted_updates
from tests.scripted_research import SUM_QUESTION, sample_sources, sum_script
from tests.workflows.test_react import act, turns
from tests.workflows.test_steer import chat_with_calculator
from tests.workflows.test_supervisor import REQUEST, specialist

QUARTER = "What is a quarter of 12 euros?"
MARKUP = "<script>alert(1)</script><img src=x onerror=alert(2)> and <b>bold</b>"
PHONE = {"width": 390, "height": 844}


def final(answer: str) -> str:
    return f"Thought: I now know the answer.\nFinal Answer: {answer}"


async def fits(page: Page) -> bool:
    """Whether the page needs no sideways scrolling at its width."""
    return await page.evaluate(
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )


async def test_a_person_approves_in_the_inbox_and_watches_the_run_complete_on_its_page(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel, screenshots: Path
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, workflow_id)

    run = await console.new_page()
    await run.goto(f"/runs/{workflow_id}")
    facts = run.locator("#facts")
    await expect(facts).to_contain_text("awaiting_approval")
    await run.evaluate("window.stillTheSamePage = true")  # gone if the page reloads

    inbox = await console.new_page()
    await inbox.goto("/approvals")
    card = inbox.locator(f'article[data-question="{question["id"]}"]')
    await expect(card).to_contain_text("Approve the budget report")
    await expect(card.locator("header a")).to_have_text(workflow_id)
    await inbox.screenshot(path=screenshots / "inbox.png", full_page=True)
    await card.locator("textarea[name=reason]").fill("within the budget")
    await card.get_by_role("button", name="Approve").click()
    await expect(card.locator(".outcome")).to_have_text("Approved")

    await expect(facts).to_contain_text("COMPLETED", timeout=15_000)
    assert await run.evaluate("window.stillTheSamePage === true")
    progress = run.locator("#progress")
    await expect(progress).to_contain_text(
        f"{question['id']} approved by web console: within the budget"
    )
    await expect(run.locator("#answer")).to_contain_text("Approved: the budget report")
    await expect(run.locator("#questions-card")).to_be_hidden()
    # This worker has no price table: the usage is its tokens, with no cost "unknown".
    usage = (await http.get(f"/api/runs/{workflow_id}")).json()["usage"]
    await expect(facts.locator("dd").last).to_have_text(f"{usage['total_tokens']:,} tokens")


async def test_a_step_agents_question_is_answered_in_the_inbox_and_its_link_opens_its_page(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id, agent, asking = await asking_in_a_step(http, model)  # the id holds '/'
    (question,) = asking["questions"]
    page = await console.new_page()
    await page.goto("/approvals")
    card = page.locator("article.question").filter(has=page.get_by_role("link", name=agent))
    await expect(card.locator(".qid")).to_have_text(question["id"])
    await card.get_by_role("button", name="Approve").click()
    await expect(card.locator(".outcome")).to_have_text("Approved")

    await card.get_by_role("link", name=agent).click()
    await expect(page.locator("#title")).to_have_text(agent)
    await expect(page.locator("#facts")).to_contain_text("COMPLETED", timeout=15_000)
    await expect(page.locator("#progress")).to_contain_text(
        f"{question['id']} approved by web console"
    )
    await expect(page.locator("#answer")).to_contain_text("cleared")

    # The run's page lists its step agents; each opens its own page.
    await page.goto(f"/runs/{workflow_id}")
    listed = page.locator(f'#agents li[data-id="{agent}"]')
    await expect(listed).to_contain_text("COMPLETED", timeout=15_000)
    await listed.get_by_role("link", name=agent).click()
    await expect(page.locator("#title")).to_have_text(agent)


async def test_rejecting_with_a_corrected_budget_rebuilds_and_asks_again_in_the_same_thread(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    first = await waiting_question(http, workflow_id)
    inbox = await console.new_page()
    await inbox.goto("/approvals")
    card = inbox.locator(f'article[data-question="{first["id"]}"]')
    await card.locator("textarea[name=reason]").fill("the budget grew")
    await card.locator("input[name='fact:budget']").fill("5000 EUR")
    await card.get_by_role("button", name="Reject").click()
    await expect(card.locator(".outcome")).to_have_text("Rejected (corrected: budget=5000 EUR)")

    second_id = first["id"].removesuffix(":1") + ":2"  # the same thread, question 2
    again = inbox.locator(f'article[data-question="{second_id}"]')
    await expect(again).to_contain_text("asked again (2)", timeout=15_000)
    await expect(again.locator("pre")).to_contain_text("budget=5000 EUR")
    assert model.calls_for("llm:report:")[-1].activity_id.endswith(":2")  # rebuilt


async def test_a_budget_question_is_approved_with_a_new_limit_and_the_run_goes_on(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(lambda call: final("42") if call.activity_id.endswith(":6") else busy_agent(call))
    loop = {"question": "What is 7 times each number?", "max_turns": 30}
    budget = {"tokens": 900, "on_exhausted": "ask"}
    workflow_id = await start(http, "ReActWorkflow", {**loop, "budget": budget})
    question = await waiting_question(http, workflow_id)
    inbox = await console.new_page()
    await inbox.goto("/approvals")
    card = inbox.locator(f'article[data-question="{question["id"]}"]')
    await expect(card).to_contain_text("of 900 tokens; extend by 900 tokens?")
    await card.locator("input[name='set:tokens']").fill("50000")
    await card.get_by_role("button", name="Approve").click()
    await expect(card.locator(".outcome")).to_have_text("Approved (set: tokens=50000)")
    run = await finished(http, workflow_id)
    assert (run["state"], run["result"]["answer"]) == ("COMPLETED", "42")
    assert 900 < run["usage"]["total_tokens"] < 50_000


async def test_a_chat_reply_streams_into_the_page_in_more_than_one_piece(
    console: BrowserContext, model: ScriptedModel, screenshots: Path
) -> None:
    reply = "Durable chats keep every turn: this reply is written a word at a time, slowly."

    def chat(call: Call) -> str:
        return reply if call.activity_id.startswith("llm:chat:") else "a digest"

    model.reply(chat)
    model.pace = 0.08  # seconds between the words the scripted model streams
    page = await console.new_page()
    await page.goto("/chats")
    await page.get_by_role("button", name="New chat").click()
    await page.wait_for_url("**/chats/chat-*")
    await expect(page.locator("#memory")).to_contain_text("rolling_digest")
    # Every text the reply's bubble shows, as the page changes it.
    await page.evaluate(
        """() => {
        window.seen = [];
        new MutationObserver(() => {
          const bubble = document.querySelector('.bubble.assistant');
          if (bubble && bubble.textContent) window.seen.push(bubble.textContent);
        }).observe(document.getElementById('messages'),
                   {childList: true, subtree: true, characterData: true});
      }"""
    )
    await page.locator("#text").fill("How do durable chats work?")
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator(".bubble.assistant")).to_have_text(reply, timeout=20_000)
    seen = await page.evaluate("window.seen")
    pieces = [text for text in dict.fromkeys(seen) if text != reply]
    assert len(pieces) >= 2, seen  # it grew in the page before the whole reply came
    assert all(reply.startswith(text) for text in pieces)
    await expect(page.locator("#transcript")).to_contain_text(reply)
    await page.screenshot(path=screenshots / "chat.png", full_page=True)


async def test_a_research_runs_page_shows_the_provenance_tree_down_to_its_sources(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel, screenshots: Path
) -> None:
    model.reply(sum_script())
    sources = [s.model_dump(mode="json") for s in sample_sources()]
    workflow_id = await start(
        http, "ResearchWorkflow", {"question": SUM_QUESTION, "sources": sources}
    )
    page = await console.new_page()
    await page.goto(f"/runs/{workflow_id}")
    tree = page.locator("#provenance .tree")
    await expect(tree.first).to_contain_text("found_by → source:prices", timeout=20_000)
    await expect(tree.first).to_contain_text("supported_by → claim:")
    await expect(page.locator("#answer")).to_contain_text("20.50 EUR per day")
    await tree.locator('li[data-artifact="source:prices"] > button').first.click()
    await expect(page.locator("#artifact-text")).to_contain_text("prices.csv")
    await page.locator("#provenance-card").screenshot(path=screenshots / "run-provenance.png")
    # Any artifact opens into the tree of what it rests on.
    claim = page.locator("details.artifact").filter(has_text="claim:").first
    await claim.locator("summary").click()
    await claim.get_by_role("button", name="What it rests on").click()
    await expect(tree).to_have_count(1)
    assert (await tree.locator("li").first.get_attribute("data-artifact")).startswith("claim:")
    await expect(tree).to_contain_text("found_by → source:prices")


class HeldAnswer:
    """The answer to request `nth` (from 1) a page sends to a route, kept from the page
    until `release`: the request reaches the server at once, so it answers with what the
    server had then. Other requests pass; with `abort_after`, those made after the
    release fail, so nothing the page asks later draws over the held answer."""

    def __init__(self, nth: int = 1, abort_after: bool = False) -> None:
        self.nth, self.abort_after = nth, abort_after
        self.urls: list[str] = []
        self.fetched = asyncio.Event()  # the server has answered it
        self._released = asyncio.Event()

    async def route(self, route: Route) -> None:
        self.urls.append(route.request.url)
        if self._released.is_set() and self.abort_after:
            await route.abort()
        elif len(self.urls) != self.nth:
            await route.continue_()
        else:
            response = await route.fetch()
            self.fetched.set()
            await self._released.wait()
            await route.fulfill(response=response)

    async def release(self, page: Page) -> None:
        """Let the held answer reach `page`; returns once the page has had time to draw it."""
        held = self.urls[self.nth - 1]
        async with page.expect_request_finished(lambda request: request.url == held):
            self._released.set()
        await page.evaluate("() => new Promise((done) => setTimeout(done, 100))")


async def test_a_ledger_read_while_the_run_ran_never_covers_the_one_read_at_its_end(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    """A running run's page reads the ledger when it opens and again when the run ends.
    On a busy machine the first answer can come back last: the page keeps the later one."""
    model.reply(lambda call: {"steps": ["Pack"]} if call.schema_name == "Plan" else "Packed.")
    planning = model.hold(lambda call: call.schema_name == "Plan")
    plan = await start(http, "PlanExecuteWorkflow", {"text": "Pack for a trip", "max_steps": 1})
    page = await console.new_page()
    first = HeldAnswer()  # the ledger while the run still plans
    await page.route("**/artifacts", first.route)
    await page.goto(f"/runs/{plan}")
    await asyncio.wait_for(first.fetched.wait(), 15)
    planning.set()
    await expect(page.locator("#answer p")).to_contain_text("Packed.", timeout=15_000)
    artifact = page.locator("details.artifact")
    await expect(artifact.first).to_be_visible()
    count = await artifact.count()
    await first.release(page)
    await expect(artifact).to_have_count(count)
    await expect(page.locator("#artifacts")).to_contain_text("Packed.")


async def test_the_runs_list_shows_the_filter_a_person_chose_whichever_answer_comes_last(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    """The list the page asked for as it opened can come back after the one a person then
    asked for with a filter: the page keeps showing the filtered list."""
    model.reply(lambda call: {"steps": ["Pack"]} if call.schema_name == "Plan" else "Packed.")
    done = await start(http, "PlanExecuteWorkflow", {"text": "Pack for a trip", "max_steps": 1})
    await finished(http, done)
    planning = model.hold(lambda call: call.schema_name == "Plan")
    running = await start(http, "PlanExecuteWorkflow", {"text": "Pack for a trip"})
    page = await console.new_page()
    # Every run, the running one too; no later refresh may draw over what it drew.
    first = HeldAnswer(abort_after=True)
    await page.route("**/api/runs?*", first.route)
    await page.goto("/")
    await asyncio.wait_for(first.fetched.wait(), 15)
    await page.locator("#state").select_option("COMPLETED")
    await expect(page.locator(f'#runs tr[data-id="{done}"]')).to_be_visible()
    await expect(page.locator("#runs td.state").filter(has_text="RUNNING")).to_have_count(0)
    assert "state=" not in first.urls[0]
    await first.release(page)
    assert await page.locator(f'#runs tr[data-id="{running}"]').count() == 0
    await expect(page.locator(f'#runs tr[data-id="{done}"]')).to_be_visible()
    planning.set()
    await finished(http, running)


async def test_model_text_with_markup_shows_as_text_and_no_dialog_opens(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(lambda call: {"steps": [MARKUP]} if call.schema_name == "Plan" else MARKUP)
    dialogs: list[str] = []
    page = await console.new_page()
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    plan = await start(http, "PlanExecuteWorkflow", {"text": MARKUP, "max_steps": 1})
    await page.goto(f"/runs/{plan}")
    # The plan as `durafact result` shows it: the step, its result, the answer; as text.
    shown = f"steps:\n  1. {MARKUP}\n     -> {MARKUP}\nanswer:\n  {MARKUP}"
    await expect(page.locator("#answer p")).to_have_count(1, timeout=15_000)
    assert await page.locator("#answer p").inner_text() == shown
    await expect(page.locator("#progress")).to_contain_text("planning: <script>alert(1)</script>")
    await expect(page.locator("#artifacts")).to_contain_text(MARKUP)

    await page.goto("/chats")
    await page.get_by_role("button", name="New chat").click()
    await page.wait_for_url("**/chats/chat-*")
    await page.locator("#text").fill(MARKUP)
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator(".bubble.assistant")).to_have_text(MARKUP, timeout=15_000)
    await expect(page.locator(".bubble.user")).to_have_text(MARKUP)
    await asyncio.sleep(0.5)  # time for a script or an onerror handler to have run
    assert await page.locator("main img, main script, main b").count() == 0
    assert dialogs == []


async def test_without_the_token_the_api_answers_401_and_the_page_asks_for_it(
    browser, served: Served, http: httpx.AsyncClient, model: ScriptedModel, screenshots: Path
) -> None:
    model.reply(specialist())
    waiting = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    await waiting_question(http, waiting)
    async with httpx.AsyncClient(base_url=served.url) as anonymous:
        assert (await anonymous.get("/api/runs")).status_code == 401

    context = await browser.new_context(
        base_url=served.url, viewport={"width": 1280, "height": 800}
    )
    try:
        page = await context.new_page()
        await page.goto("/")
        form = page.locator("#token-form")
        await expect(form).to_be_visible()
        await expect(page.locator("main")).to_be_hidden()
        await page.locator("#token").fill(TOKEN)
        await page.get_by_role("button", name="Use token").click()
        await expect(form).to_be_hidden()
        row = page.locator(f'#runs tr[data-id="{waiting}"]')
        await expect(row).to_contain_text("awaiting_approval")
        await page.screenshot(path=screenshots / "runs.png", full_page=True)
        # Kept for the tab: another page of the console does not ask again.
        await page.goto("/approvals")
        await expect(page.locator('article[data-question^="approval:"]').first).to_be_visible()
        await expect(form).to_be_hidden()
        # The API's docs need no token and nothing from the internet.
        await page.goto("/docs")
        await expect(page.locator(".opblock-summary-path").first).to_be_visible()
        document = (await http.get("/openapi.json")).json()
        operations = sum(len(methods) for methods in document["paths"].values())
        assert await page.locator(".opblock").count() == operations
    finally:
        await context.close()
    await http.post(f"/api/runs/{waiting}/cancel")


async def test_every_page_fits_a_phone(
    browser, served: Served, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    waiting = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    await waiting_question(http, waiting)
    chat = (await http.post("/api/chats", json={})).json()["id"]
    context = await browser.new_context(base_url=served.url, viewport=PHONE, is_mobile=True)
    await context.add_init_script(f"sessionStorage.setItem('durafact.token', {TOKEN!r})")
    try:
        page = await context.new_page()
        for path, ready in (
            ("/", f'#runs tr[data-id="{waiting}"]'),
            (f"/runs/{waiting}", "#questions article"),
            ("/approvals", "#inbox article"),
            (f"/chats/{chat}", "#memory p"),
        ):
            await page.goto(path)
            await expect(page.locator(ready).first).to_be_visible()
            assert await fits(page), path
    finally:
        await context.close()
    await http.post(f"/api/runs/{waiting}/cancel")


async def test_remember_this_call_chosen_in_the_inbox_lets_the_same_call_run_unasked(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel, screenshots: Path
) -> None:
    workflow_id, question = await asking_about_the_calculator(http, model)
    inbox = await console.new_page()
    await inbox.goto("/approvals")
    card = inbox.locator(f'article[data-question="{question["id"]}"]')
    await expect(card.locator(".rule")).to_have_text("asked by: rule 1: ask calc*")
    # Only the scopes the question takes: a ReAct run has no chat to remember for.
    await expect(card.locator("fieldset.remember label")).to_have_text(
        ["no later call", "this call (the same tool and arguments)", "this tool, in this run"]
    )
    await card.get_by_label("this call (the same tool and arguments)").check()
    await card.screenshot(path=screenshots / "tool-question.png")
    await card.get_by_role("button", name="Approve").click()
    await expect(card.locator(".outcome")).to_have_text(
        "Approved, remembered for this call (the same tool and arguments)"
    )

    # The same call again ran without a question.
    rule = await remembered_decision(http, workflow_id)
    assert (rule["scope"], rule["by"], rule["question_id"]) == (
        "call",
        "web console",
        question["id"],
    )


async def test_the_inbox_shows_a_long_call_whole(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id, question = await asking_about_a_long_call(http, model)
    page = await console.new_page()
    await page.goto("/approvals")
    card = page.locator(f'article[data-question="{question["id"]}"]')
    value = card.locator(".arguments pre")
    await expect(value).to_have_text(LONG_PATH)
    await expect(card.locator(".arguments dt")).to_contain_text(
        f"path ({len(LONG_PATH)} characters, all shown)"
    )
    await card.get_by_role("button", name="Reject").click()
    await expect(card.locator(".outcome")).to_have_text("Rejected")
    await finished(http, workflow_id)


async def test_in_the_chat_page_a_note_steers_the_running_turn_and_stop_ends_a_held_one(
    console: BrowserContext,
    http: httpx.AsyncClient,
    client: Client,
    model: ScriptedModel,
    screenshots: Path,
) -> None:
    model.reply(chat_with_calculator)
    first = model.hold(lambda call: call.activity_id == "llm:chat:1")
    model.hold(lambda call: call.activity_id == "llm:chat:2")
    settings = {"tools": ["calculator"], "stream": False}
    chat_id = (await http.post("/api/chats", json={"settings": settings})).json()["id"]
    page = await console.new_page()
    await page.goto(f"/chats/{chat_id}")
    await expect(page.locator("#memory")).to_contain_text("rolling_digest")
    stop, steer = page.get_by_role("button", name="Stop"), page.get_by_role("button", name="Steer")
    await expect(stop).to_be_hidden()
    await page.locator("#text").fill("12 euros in cents?")
    await page.get_by_role("button", name="Send").click()
    await expect(steer).to_be_visible()

    await page.locator("#text").fill(NOTE)
    await steer.click()
    while await accepted_updates(client, chat_id) < 2:  # the message, then the note
        await asyncio.sleep(0.1)
    first.set()
    await expect(page.locator(".messages .outcome")).to_have_text(
        "steered turn 1 (the reply to message 0)", timeout=15_000
    )
    await expect(page.locator(".bubble.assistant")).to_have_text("that is 300 cents")
    (second_call,) = [c for c in model.calls if c.activity_id == "llm:chat:1:2"]
    assert second_call.messages[-1]["content"] == f"Note from a person: {NOTE}"
    await expect(stop).to_be_hidden()

    await page.locator("#text").fill("write me an essay")
    await page.get_by_role("button", name="Send").click()
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id == "llm:chat:2")
    await expect(stop).to_be_visible()
    await page.locator(".chat").screenshot(path=screenshots / "chat-controls.png")
    await stop.click()
    stopped = page.locator(".bubble.assistant.stopped")
    await expect(stopped).to_have_text(STOPPED_REPLY, timeout=15_000)
    await expect(stop).to_be_hidden()
    transcript = (await http.get(f"/api/chats/{chat_id}/transcript")).json()["lines"]
    assert [(t["role"], t["content"]) for t in transcript[-2:]] == [
        ("user", "write me an essay"),
        ("assistant", STOPPED_REPLY),
    ]


async def test_a_note_from_the_run_page_reaches_the_agents_next_call_and_cancel_keeps_a_reason(
    console: BrowserContext,
    http: httpx.AsyncClient,
    client: Client,
    model: ScriptedModel,
    screenshots: Path,
) -> None:
    model.reply(turns(act("calculator", "12 * 0.25"), act("calculator", "3 * 100"), final("300")))

    def turn(n: int) -> Callable[[Call], bool]:
        return lambda call: (
            call.activity_id.startswith("llm:react:") and call.activity_id.endswith(f":{n}")
        )

    held = model.hold(turn(1))
    model.hold(turn(3))
    workflow_id = await start(http, "ReActWorkflow", {"question": QUARTER})
    page = await console.new_page()
    await page.goto(f"/runs/{workflow_id}")
    await asyncio.to_thread(model.wait_for, turn(1))
    card = page.locator("#steer-card")
    await expect(card).to_be_visible()
    await card.locator("#note").fill(NOTE)
    await card.get_by_role("button", name="Send the note").click()
    # Said at once, while turn 1's model call is still held.
    await expect(card.locator("#steer-outcome")).to_have_text(
        "Queued: the note goes before turn 2", timeout=15_000
    )
    assert await accepted_updates(client, workflow_id) == 1
    held.set()
    second = await asyncio.to_thread(model.wait_for, turn(2))
    assert second.last_user == f"Note from a person: {NOTE}"
    await expect(page.locator("#progress")).to_contain_text(f"note from a person: {NOTE}")
    await page.locator("#overview").screenshot(path=screenshots / "run-controls.png")
    await card.screenshot(path=screenshots / "run-note.png")

    await asyncio.to_thread(model.wait_for, turn(3))
    await page.locator("#cancel-reason").fill("the cents are enough")
    await page.get_by_role("button", name="Cancel run").click()
    await expect(page.locator("#facts")).to_contain_text("CANCELED", timeout=15_000)
    await expect(card).to_be_hidden()
    ledger = (await http.get(f"/api/runs/{workflow_id}/artifacts")).json()
    (cancellation,) = [a for a in ledger["artifacts"] if a["id"] == "cancellation"]
    assert cancellation["data"]["reason"] == "the cents are enough"


async def test_a_chat_page_opened_before_its_worker_answers_fills_in_once_it_does(
    console: BrowserContext, client: Client, served: Served
) -> None:
    # A chat on a queue that no worker polls yet: its queries go unanswered (503).
    late = served.settings.model_copy(update={"task_queue": f"late-{uuid.uuid4().hex[:8]}"})
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    await open_chat(client, late, load_registry([]), chat, ChatInput())
    page = await console.new_page()
    await page.goto(f"/chats/{chat}")
    await expect(page.locator("#problem")).to_contain_text(f"chat {chat}", timeout=15_000)

    async with build_worker(client, late):
        await expect(page.locator("#memory p").first).to_contain_text("0 turns", timeout=15_000)
    await expect(page.locator("#problem")).to_be_hidden()


# --- issue 32: each console item at a desktop's size and a phone's ----------------------

SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": PHONE}
REPLY = "Every reply stays in the conversation."


@pytest.fixture(params=list(SIZES))
async def sized(request, browser: Browser, served: Served) -> AsyncIterator[BrowserContext]:
    """A console context whose tabs hold the token, at 1280×800 and at 390×844."""
    phone = request.param == "phone"
    context = await browser.new_context(
        base_url=served.url, viewport=SIZES[request.param], is_mobile=phone, has_touch=phone
    )
    await context.add_init_script(f"sessionStorage.setItem('durafact.token', {TOKEN!r})")
    yield context
    await context.close()


def chatting(call: Call) -> str:
    return REPLY if call.activity_id.startswith("llm:chat:") else "a digest"


async def test_a_message_sent_before_the_first_view_is_shown_keeps_its_reply(
    sized: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(chatting)
    chat = (await http.post("/api/chats", json={})).json()["id"]
    page = await sized.new_page()
    # The first transcript is read at once but reaches the page only when released: the
    # conversation so far arrives after a message was sent, as on a slow first load.
    first = HeldAnswer()
    await page.route("**/transcript?*", first.route)
    await page.goto(f"/chats/{chat}")
    await page.locator("#text").fill("Is a reply ever lost?")
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator(".bubble.user")).to_have_text("Is a reply ever lost?")
    assert len(first.urls) == 1  # the first view is not shown yet
    await first.release(page)
    await expect(page.locator(".bubble.assistant")).to_have_text(REPLY, timeout=20_000)
    await expect(page.locator(".bubble.user")).to_have_text("Is a reply ever lost?")
    await expect(page.locator("#transcript")).to_contain_text(REPLY)


async def test_the_transcript_read_after_an_earlier_message_never_covers_a_later_one(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    """Each message sent reads the transcript again; when the read after the first
    message comes back after the one after the second, the later transcript stays."""
    model.reply(chatting)
    chat = (await http.post("/api/chats", json={})).json()["id"]
    page = await console.new_page()
    # The first view's transcript passes, the one after the first message is held.
    after_first = HeldAnswer(nth=2)
    await page.route("**/transcript?*", after_first.route)
    await page.goto(f"/chats/{chat}")
    for text in ("First message", "Second message"):
        await page.locator("#text").fill(text)
        await page.get_by_role("button", name="Send").click()
        await expect(page.locator(".bubble.assistant")).to_have_count(
            1 if text.startswith("First") else 2, timeout=20_000
        )
        await asyncio.wait_for(after_first.fetched.wait(), 15)
    transcript = page.locator("#transcript")
    await expect(transcript).to_contain_text("Second message")
    await after_first.release(page)
    assert "Second message" in await transcript.inner_text()


async def test_a_message_sent_as_soon_as_a_new_chat_opens_gets_its_reply(
    sized: BrowserContext, model: ScriptedModel
) -> None:
    model.reply(chatting)
    page = await sized.new_page()
    await page.goto("/chats")
    await page.get_by_role("button", name="New chat").click()
    await page.wait_for_url("**/chats/chat-*")
    # No waiting for the memory or the transcript: a person types at once.
    await page.locator("#text").fill("Hello, new chat")
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator(".bubble.assistant")).to_have_text(REPLY, timeout=20_000)
    await expect(page.locator(".bubble.user")).to_have_text("Hello, new chat")
    await expect(page.locator("#transcript")).to_contain_text(REPLY)
    await expect(page.locator(".bubble")).to_have_count(2)


def long_plan(call: Call) -> str | dict:
    if call.schema_name == "Plan":
        return {"steps": [f"do part {i} of the work, carefully and in order" for i in range(8)]}
    return f"done: {call.activity_id}"


async def test_a_run_page_with_much_progress_opens_at_the_top(
    sized: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(long_plan)
    plan = await start(http, "PlanExecuteWorkflow", {"text": "a long plan", "max_steps": 8})
    assert (await finished(http, plan))["state"] == "COMPLETED"
    page = await sized.new_page()
    await page.goto(f"/runs/{plan}")
    # Everything the page loads is in: the progress (its event stream, which closes at
    # the run's end), the result, its provenance, drawn again at the end; then nothing
    # is left to load.
    await expect(page.locator("#progress li").nth(10)).to_be_attached(timeout=15_000)
    await expect(page.locator("#provenance .tree").first).to_be_visible(timeout=15_000)
    await expect(page.locator("#artifacts details").first).to_be_attached()
    await page.wait_for_load_state("networkidle")
    assert await page.evaluate("document.documentElement.scrollHeight > innerHeight")
    assert await page.evaluate("scrollY") == 0
    await expect(page.locator("#title")).to_be_in_viewport()


async def test_a_run_page_stays_at_the_top_while_its_progress_grows(
    sized: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(long_plan)
    ending = model.hold(lambda call: call.activity_id.startswith("llm:final:"))
    plan = await start(http, "PlanExecuteWorkflow", {"text": "a growing plan", "max_steps": 8})
    page = await sized.new_page()
    await page.goto(f"/runs/{plan}")
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id.startswith("llm:final:"))
    await expect(page.locator("#progress li").nth(10)).to_be_attached()
    assert await page.evaluate("scrollY") == 0
    ending.set()
    await expect(page.locator("#facts")).to_contain_text("COMPLETED", timeout=15_000)
    await expect(page.locator("#provenance .tree").first).to_be_visible(timeout=15_000)
    assert await page.evaluate("scrollY") == 0


async def test_the_runs_table_shows_each_runs_id_and_facts_without_sideways_scroll(
    sized: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel, screenshots: Path
) -> None:
    model.reply(long_plan)
    plan = await start(http, "PlanExecuteWorkflow", {"text": "a plan to list", "max_steps": 2})
    await finished(http, plan)
    page = await sized.new_page()
    await page.goto("/")
    row = page.locator(f'#runs tr[data-id="{plan}"]')
    await expect(row.locator("td.tokens")).to_have_text(re.compile(r"^\d[\d,]*$"))
    width = page.viewport_size["width"]
    link = row.get_by_role("link", name=plan)
    assert await link.evaluate("a => a.getClientRects().length") == 1  # the id on one line
    # This worker has no price table: the run has no cost, and its cell is empty (on a
    # phone, left out), not "unknown".
    await expect(row.locator("td.cost")).to_have_text("")
    for cell in ("run", "recipe", "state", "started", "tokens"):
        shown = row.locator(f"td.{cell}")
        await expect(shown).to_be_visible()
        box = await shown.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (cell, box)
    await expect(row.locator("td.state")).to_contain_text("COMPLETED")
    assert await fits(page)
    if width < 500:
        await page.screenshot(path=screenshots / "runs-phone.png")


async def test_each_action_on_a_waiting_run_page_has_its_own_reason_field(
    sized: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    waiting = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, waiting)
    page = await sized.new_page()
    await page.goto(f"/runs/{waiting}")
    card = page.locator(f'article[data-question="{question["id"]}"]')
    await expect(card).to_be_visible()
    # One field per action, each named for it; no field is just "Reason".
    answer_reason = card.get_by_label("Reason for approving or rejecting")
    cancel_reason = page.get_by_label("Reason for cancelling the run")
    await expect(answer_reason).to_have_count(1)
    await expect(cancel_reason).to_have_count(1)
    await expect(page.get_by_label("Reason", exact=True)).to_have_count(0)
    await expect(page.locator("#cancel-form").get_by_label(re.compile("Reason"))).to_have_count(1)
    await expect(card.get_by_label(re.compile("Reason"))).to_have_count(1)

    await cancel_reason.fill("not this one")
    await answer_reason.fill("within the budget")
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator("#facts")).to_contain_text("COMPLETED", timeout=15_000)
    await expect(page.locator("#progress")).to_contain_text(
        f"{question['id']} approved by web console: within the budget"
    )
    await expect(page.locator("#progress")).not_to_contain_text("not this one")


async def test_a_reason_typed_for_one_question_stays_when_another_is_answered(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    # Two calculator calls in one turn under a rule that asks: two questions at once.
    calls = [("calculator", {"expression": "2 + 3"}), ("calculator", {"expression": "4 * 5"})]
    model.reply(turns(ToolCalls(calls), "5 and 20"))
    policy = {"rules": [{"action": "ask", "tool": "calc*"}]}
    workflow_id = await start(
        http,
        "ReActWorkflow",
        {"question": "2 + 3 and 4 * 5?", "protocol": "native", "tool_policy": policy},
    )
    for _ in range(300):
        questions = (await http.get(f"/api/runs/{workflow_id}")).json()["questions"]
        if len(questions) == 2:
            break
        await asyncio.sleep(0.1)
    first, second = (q["id"] for q in questions)
    page = await console.new_page()
    await page.goto(f"/runs/{workflow_id}")
    first_card = page.locator(f'article[data-question="{first}"]')
    second_card = page.locator(f'article[data-question="{second}"]')
    await second_card.get_by_label("Reason for approving or rejecting").fill("checked 4 * 5")

    await first_card.get_by_role("button", name="Approve").click()
    # The run page draws its questions again once the first is answered: one is left.
    await expect(page.locator("#questions article.question")).to_have_count(1)
    await expect(second_card.get_by_label("Reason for approving or rejecting")).to_have_value(
        "checked 4 * 5"
    )
    await second_card.get_by_role("button", name="Approve").click()
    await expect(page.locator("#facts")).to_contain_text("COMPLETED", timeout=15_000)
    await expect(page.locator("#progress")).to_contain_text(
        f"{second} approved by web console: checked 4 * 5"
    )


ICON = """async (selector) => {
  const href = selector ? document.querySelector(selector).href : "/favicon.ico";
  const response = await fetch(href);
  return [response.status, response.headers.get("content-type")];
}"""


async def test_every_page_has_a_favicon_and_no_request_answers_404(
    sized: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(long_plan)
    plan = await start(http, "PlanExecuteWorkflow", {"text": "a plan", "max_steps": 1})
    await finished(http, plan)
    chat = (await http.post("/api/chats", json={})).json()["id"]
    page = await sized.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    for path, ready in (
        ("/", f'#runs tr[data-id="{plan}"]'),
        (f"/runs/{plan}", "#provenance .tree"),
        ("/approvals", "#inbox article:visible, #empty:visible"),
        ("/chats", "#new-chat"),
        (f"/chats/{chat}", "#memory p"),
    ):
        await page.goto(path)
        await expect(page.locator(ready).first).to_be_visible(timeout=15_000)
        # Headless Chromium loads no icon by itself: the page fetches what a browser
        # would, the icon it links and the one asked for where none is linked, so both
        # go through the page's network log.
        linked = await page.evaluate(ICON, "link[rel=icon]")
        assert linked == [200, "image/svg+xml"], path
        assert await page.evaluate(ICON, None) == [200, "image/x-icon"], path
    assert missing == []
