"""`POST /api/runs/{id}/fork` and the console's "Fork from here" on the live server: the
same operation as `durafact fork` (durafact/_service/forks.py), and its refusals as status
codes."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from playwright.async_api import BrowserContext, expect

from durafact.testing import ScriptedModel
from tests.api.test_api import finished, start
from tests.workflows.test_fork import GOAL, RESULT, STEP, planner


async def test_a_fork_is_started_from_edited_artifacts_and_reruns_what_depends_on_them(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(planner)
    workflow_id = await start(http, "PlanExecuteWorkflow", {"text": GOAL})
    await finished(http, workflow_id)
    ledger = (await http.get(f"/api/runs/{workflow_id}/artifacts")).json()
    values = {a["id"]: a["fork_value"] for a in ledger["artifacts"]}
    assert values[STEP] == "Book a hotel"
    assert values[RESULT] == "result of <Step 2: Book a hotel>"
    assert values[f"goal:{GOAL}"] is None and values[f"final:{GOAL}"] is None
    full = len(model.calls)
    fork_id = f"{workflow_id}-hotel"

    response = await http.post(
        f"/api/runs/{workflow_id}/fork", json={"set": {RESULT: "Hotel Wawel"}, "id": fork_id}
    )

    assert response.status_code == 201, response.text
    forked = response.json()
    assert response.headers["Location"] == f"/api/runs/{fork_id}"
    assert forked["id"] == fork_id and forked["forked_from"] == workflow_id
    assert forked["rerun_from"] == f"step:{GOAL}:2"
    assert forked["kept"] == [f"plan:{GOAL}", f"step:{GOAL}:0", f"step:{GOAL}:1"]
    run = await finished(http, fork_id)
    assert run["state"] == "COMPLETED"
    assert "Hotel Wawel" in run["result"]["answer"]["text"]
    assert [c.activity_id for c in model.calls[full:]] == [
        f"llm:step:{GOAL}:2",
        f"llm:final:{GOAL}",
    ]
    fork_ledger = (await http.get(f"/api/runs/{fork_id}/artifacts")).json()
    links = {(x["source"], x["relation"], x["target"]) for x in fork_ledger["links"]}
    assert (RESULT, "forked_from", "fork") in links

    refusals = [
        ({"set": {"nope": "x"}}, 400, "BadRequest", f"run {workflow_id} has no artifact 'nope'"),
        ({"set": {RESULT: {"text": 5}}}, 400, "BadRequest", f"{RESULT}: text: Input should be"),
        ({"sets": {RESULT: "x"}}, 422, "InvalidRequest", "'sets' is not a field of body"),
        ({"set": {RESULT: "x"}, "id": fork_id}, 409, "Conflict", f"{fork_id!r} is taken"),
    ]
    for body, status, kind, message in refusals:
        refused = await http.post(f"/api/runs/{workflow_id}/fork", json=body)
        assert refused.status_code == status, refused.text
        assert refused.json()["error"]["type"] == kind
        assert message in refused.json()["error"]["message"]
    missing = await http.post("/api/runs/no-such-run/fork", json={"set": {RESULT: "x"}})
    assert missing.status_code == 404


async def test_fork_from_here_on_an_artifact_starts_the_fork_and_opens_its_page(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel, screenshots: Path
) -> None:
    model.reply(planner)
    workflow_id = await start(http, "PlanExecuteWorkflow", {"text": GOAL})
    await finished(http, workflow_id)
    page = await console.new_page()
    await page.goto(f"/runs/{workflow_id}")
    await expect(page.locator("#provenance .tree").first).to_be_visible(timeout=15_000)
    result = page.locator(f'details.artifact[data-id="{RESULT}"]')
    await result.locator("summary").click()
    # Only what a fork may change has the button: not the goal, nor the final answer.
    await expect(page.locator("button", has_text="Fork from here")).to_have_count(6)
    await result.get_by_role("button", name="Fork from here").click()
    value = result.get_by_role("textbox", name=f"New value of {RESULT}")
    await expect(value).to_have_value("result of <Step 2: Book a hotel>")
    await value.fill("Hotel Wawel, two nights")
    await result.get_by_role("button", name="Start the fork").click()

    await expect(page).to_have_url(re.compile(rf"/runs/{workflow_id}-fork-[0-9a-f]{{8}}$"))
    await expect(page.locator("#progress")).to_contain_text(f"forked from {workflow_id}")
    await expect(page.locator("#answer")).to_contain_text("Hotel Wawel, two nights", timeout=20_000)
    await page.screenshot(path=screenshots / "run-fork.png", full_page=True)


async def test_a_finished_runs_page_reads_its_ledger_once_and_an_opened_fork_stays_open(
    console: BrowserContext, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    # Each read of a closed run's ledger or provenance is a worker replaying its history;
    # a second read also drew the ledger again, closing a fork a person had opened.
    model.reply(planner)
    workflow_id = await start(http, "PlanExecuteWorkflow", {"text": GOAL})
    await finished(http, workflow_id)
    page = await console.new_page()
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url.rsplit("/api/runs/", 1)[-1]))
    await page.goto(f"/runs/{workflow_id}")
    result = page.locator(f'details.artifact[data-id="{RESULT}"]')
    await result.locator("summary").click()
    await result.get_by_role("button", name="Fork from here").click()
    value = result.get_by_role("textbox", name=f"New value of {RESULT}")
    await value.fill("Hotel Wawel, two nights")
    await page.wait_for_load_state("networkidle")  # the event stream ended with the run's end

    assert sum(r.endswith("/artifacts") for r in reads) == 1, reads
    assert sum("/provenance/" in r for r in reads) == 1, reads  # the plan's one tree
    await expect(value).to_have_value("Hotel Wawel, two nights")
    await expect(result.get_by_role("button", name="Start the fork")).to_be_visible()
