"""AG-UI over a live `durafact serve`, driven by @ag-ui/client's own HttpAgent
(frontends/drive/ag_ui.mjs), which checks every event on the wire against @ag-ui/core's
schema: runs of the ready recipes on the scripted model (steps, text, tool calls, an
interrupt answered by resume, a late client's snapshot), a chat's streamed reply, and
the API's checks before any stream starts."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.async_api import Browser, Route, expect
from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput

from durafact.testing import ScriptedModel
from tests.api.conftest import TOKEN, Served, delete_once_told, read_events, serve_api
from tests.api.test_api import GOAL, finished, start, waiting_question
from tests.helpers import FRONTENDS, drive, serving
from tests.workflows.test_react import DELETED, act, final, turns
from tests.workflows.test_supervisor import REQUEST, specialist


def new_thread(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


async def agent(
    served: Served, door: str, thread: str, runs: list[dict[str, Any]], token: str | None = TOKEN
) -> list[list[Any]]:
    """Each run's output: the events on the wire, then its `done` (or `error`)."""
    spec = {"url": f"{served.url}/api/ag-ui/{door}", "token": token, "threadId": thread}
    printed = await drive("ag_ui.mjs", json.dumps({**spec, "runs": runs}))
    return [[line for line in printed if line["run"] == n] for n in range(len(runs))]


def events(run: list[Any]) -> list[dict[str, Any]]:
    return [line["event"] for line in run if "event" in line]


def done(run: list[Any]) -> dict[str, Any]:
    (last,) = [line for line in run if "done" in line or "error" in line]
    assert "done" in last, last
    return last["done"]


def types(run: list[Any]) -> list[str]:
    return [event["type"] for event in events(run)]


def text_of(run: list[Any]) -> str:
    return "".join(e["delta"] for e in events(run) if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_a_plan_run_streams_a_step_per_status_its_answer_and_its_end(
    served: Served, model: ScriptedModel, http: httpx.AsyncClient
) -> None:
    thread = new_thread("plan")
    (run,) = await agent(
        served,
        "runs",
        thread,
        [{"message": "Plan a weekend in Kraków", "forwardedProps": {"recipe": "plan"}}],
    )
    kinds = types(run)
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and kinds[-1] == "RUN_FINISHED"
    started, finish = events(run)[0], events(run)[-1]
    assert started["threadId"] == finish["threadId"] == thread
    assert "outcome" not in finish and finish["result"]["answer"]["text"].startswith("done: ")
    assert finish["usage"][0]["totalTokens"] == finish["result"]["usage"]["total_tokens"] > 0
    steps = [(e["type"], e["stepName"]) for e in events(run) if e["type"].startswith("STEP_")]
    for n in (1, 2, 3):
        at = steps.index(("STEP_STARTED", f"executing:{n}/3"))
        assert steps[at + 1] == ("STEP_FINISHED", f"executing:{n}/3")
    assert [name for kind, name in steps if kind == "STEP_STARTED"] == [
        "planning",
        "executing:1/3",
        "executing:2/3",
        "executing:3/3",
        "finishing",
        "completed",
    ]
    assert kinds.index("TEXT_MESSAGE_START") < kinds.index("TEXT_MESSAGE_CONTENT")
    assert kinds.index("TEXT_MESSAGE_END") < kinds.index("RUN_FINISHED")
    # The answer as `durafact result` and the console show it: the plan, then the answer.
    answer = text_of(run)
    assert answer == (await http.get(f"/api/runs/{thread}")).json()["answer"]
    assert answer.startswith("steps:\n  1. ")
    assert answer.endswith(f"answer:\n  {finish['result']['answer']['text']}")
    # The client holds what it sent and the answer; its state followed the deltas.
    messages = done(run)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == answer
    state = done(run)["state"]
    assert (state["workflow_id"], state["status"]) == (thread, "completed")
    assert state["usage"]["total_tokens"] == finish["result"]["usage"]["total_tokens"]
    assert state["ledger"]["FinalAnswer"] == 1


async def test_a_supervisor_run_ends_in_an_interrupt_and_the_clients_resume_completes_it(
    served: Served, model: ScriptedModel, client: Client
) -> None:
    model.reply(specialist())
    thread = new_thread("supervisor")
    asked, answered = await agent(
        served,
        "runs",
        thread,
        [
            {"message": REQUEST, "forwardedProps": {"recipe": "SupervisorWorkflow"}},
            {"answer": {"approved": True, "reason": "fine"}},
        ],
    )
    finish = events(asked)[-1]
    assert finish["type"] == "RUN_FINISHED" and finish["outcome"]["type"] == "interrupt"
    (interrupt,) = finish["outcome"]["interrupts"]
    assert interrupt["message"].startswith("Approve the ")
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert "awaiting_approval" in [e.get("stepName") for e in events(asked)]
    assert done(asked)["pendingInterrupts"] == [interrupt]

    lines = [e["value"] for e in events(answered) if e["type"] == "CUSTOM"]
    assert f"{interrupt['id']} approved by ag-ui: fine" in [line["message"] for line in lines]
    assert types(answered)[-1] == "RUN_FINISHED" and "outcome" not in events(answered)[-1]
    assert done(answered)["pendingInterrupts"] == []
    result = await client.get_workflow_handle(thread).result()
    assert result["reply"]["approved"] is True


async def test_a_react_runs_tool_call_streams_with_its_arguments_and_its_result(
    served: Served, model: ScriptedModel
) -> None:
    model.reply(turns(act("calculator", '{"expression": "17 * 23"}'), final("391")))
    thread = new_thread("react")
    (run,) = await agent(
        served,
        "runs",
        thread,
        [{"message": "What is 17 times 23", "forwardedProps": {"recipe": "react"}}],
    )
    calls = [e for e in events(run) if e["type"].startswith("TOOL_CALL_")]
    assert [e["type"] for e in calls] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    call_id = calls[0]["toolCallId"]
    assert calls[0]["toolCallName"] == "calculator"
    assert json.loads(calls[1]["delta"]) == {"expression": "17 * 23"}
    assert {e["toolCallId"] for e in calls} == {call_id}
    assert calls[3]["content"] == "391" and calls[3]["metadata"]["durafact"]["ok"] is True
    messages = done(run)["messages"]
    call = next(m for m in messages if m.get("toolCalls"))
    assert call["toolCalls"][0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression": "17 * 23"}',
    }
    assert next(m for m in messages if m["role"] == "tool")["content"] == "391"
    assert "391" in messages[-1]["content"]


async def test_a_client_attaching_to_a_finished_run_gets_its_messages_and_its_end(
    served: Served, http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id = await start(http, "PlanExecuteWorkflow", GOAL)
    ran = await finished(http, workflow_id)
    (run,) = await agent(served, "runs", workflow_id, [{}])
    assert types(run) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
        "STATE_DELTA",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    snapshot = events(run)[2]["messages"]
    assert [(m["role"], m["content"][:24]) for m in snapshot][0] == ("user", GOAL["text"][:24])
    assert ran["result"]["answer"]["text"] in snapshot[-1]["content"]
    assert done(run)["messages"] == snapshot
    assert events(run)[-1]["result"] == ran["result"]


async def test_a_client_attaching_to_a_waiting_run_gets_the_question_and_may_cancel_it(
    served: Served, model: ScriptedModel, client: Client
) -> None:
    model.reply(specialist())
    thread = new_thread("supervisor")
    (first,) = await agent(
        served, "runs", thread, [{"message": REQUEST, "forwardedProps": {"recipe": "route"}}]
    )
    late, cancelled = await agent(served, "runs", thread, [{}, {"answer": "cancel"}])
    assert types(late)[2] == "MESSAGES_SNAPSHOT"
    assert events(late)[2]["messages"][0] == {
        "id": f"input:{events(late)[1]['snapshot']['run_id']}",
        "role": "user",
        "content": REQUEST,
    }
    assert events(late)[-1]["outcome"] == events(first)[-1]["outcome"]
    # A cancelled interrupt is a rejection, as `durafact decide --reject` gives it.
    (interrupt,) = events(first)[-1]["outcome"]["interrupts"]
    lines = [e["value"]["message"] for e in events(cancelled) if e["type"] == "CUSTOM"]
    assert f"{interrupt['id']} rejected by ag-ui: cancelled" in lines
    result = await client.get_workflow_handle(thread).result()
    assert result["reply"]["approved"] is False


async def test_a_chat_message_streams_its_reply_in_pieces(
    served: Served, model: ScriptedModel
) -> None:
    model.pace = 0.01
    thread = new_thread("chat")
    first, second, again = await agent(
        served,
        "chats",
        thread,
        [{"message": "hello there friend"}, {"message": "and again"}, {}],
    )
    kinds = types(first)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("TEXT_MESSAGE_CONTENT") > 1
    assert text_of(first) == "done: hello there friend"
    assert text_of(second) == "done: and again"
    assert [(m["role"], m["content"]) for m in done(second)["messages"]] == [
        ("user", "hello there friend"),
        ("assistant", "done: hello there friend"),
        ("user", "and again"),
        ("assistant", "done: and again"),
    ]
    # The same message again (its id unchanged) gets its reply, and no second turn.
    assert text_of(again) == "done: and again" and len(model.calls) == 2
    # A client of its own, with no message, attaches: the transcript.
    (late,) = await agent(served, "chats", thread, [{}])
    assert types(late) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert [m["content"] for m in done(late)["messages"]] == [
        "hello there friend",
        "done: hello there friend",
        "and again",
        "done: and again",
    ]


async def test_without_the_token_the_client_is_refused_before_anything_starts(
    served: Served, http: httpx.AsyncClient
) -> None:
    thread = new_thread("plan")
    (run,) = await agent(
        served,
        "runs",
        thread,
        [{"message": "x", "forwardedProps": {"recipe": "plan"}, "expectError": True}],
        token=None,
    )
    assert run[-1]["status"] == 401 and "Unauthorized" in run[-1]["error"]
    assert (await http.get(f"/api/runs/{thread}")).status_code == 404
    body = {"threadId": thread, "runId": "r", "messages": [], "forwardedProps": {"recipe": "plan"}}
    other_site = await http.post(
        "/api/ag-ui/runs", json=body, headers={"Origin": "http://elsewhere.example"}
    )
    assert other_site.status_code == 403


async def test_bad_input_is_a_clear_error_before_any_stream(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    thread = new_thread("plan")
    base = {"threadId": thread, "runId": "r1", "messages": []}

    async def error(body: dict[str, Any], status: int, door: str = "runs") -> str:
        response = await http.post(f"/api/ag-ui/{door}", json=body)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        return response.json()["error"]["message"]

    assert "threadId" in await error({"runId": "r1", "messages": []}, 422)
    assert "forwardedProps.recipe" in await error(base, 400)
    unknown = await error({**base, "forwardedProps": {"recipe": "Nothing"}}, 404)
    assert unknown.startswith("unknown workflow type 'Nothing'")
    needs = await error({**base, "forwardedProps": {"recipe": "PlanExecuteWorkflow"}}, 400)
    assert needs == "PlanExecuteWorkflow needs forwardedProps.input: Goal as JSON"
    fits = await error(
        {**base, "forwardedProps": {"recipe": "PlanExecuteWorkflow", "input": {"txt": "x"}}}, 422
    )
    assert "forwardedProps.input" in fits
    resume = [{"interruptId": "approval:x:1", "status": "resolved", "payload": {"approved": True}}]
    assert "no workflow" in await error({**base, "resume": resume}, 404)
    model.reply(specialist())
    waiting = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, waiting)
    other = await error({**base, "threadId": waiting, "resume": resume}, 409)
    assert other == (
        f"interrupt 'approval:x:1' is not a pending question of workflow {waiting} "
        f"(pending: {question['id']})"
    )
    unread = [{"interruptId": question["id"], "status": "resolved", "payload": {"ok": 1}}]
    assert "needs approved: true or false" in await error(
        {**base, "threadId": waiting, "resume": unread}, 400
    )
    assert "not a chat" in await error({**base, "threadId": waiting}, 409, door="chats")


async def test_a_chats_tool_question_is_an_interrupt_and_the_resumed_turn_runs_the_tool_once(
    served: Served, model: ScriptedModel
) -> None:
    path = f"/tmp/ag-ui-{uuid.uuid4().hex[:8]}"

    model.reply(delete_once_told(path))
    settings = {"settings": {"tools": ["delete_file"]}}
    asked, answered = await agent(
        served,
        "chats",
        new_thread("chat"),
        [
            {"message": "Delete the file", "forwardedProps": settings},
            {"answer": {"approved": True}},
        ],
    )
    (interrupt,) = events(asked)[-1]["outcome"]["interrupts"]
    call = next(e for e in events(asked) if e["type"] == "TOOL_CALL_START")
    assert (call["toolCallName"], interrupt["toolCallId"]) == ("delete_file", call["toolCallId"])
    assert interrupt["reason"] == "tool_approval"
    # The resumed stream goes on after the question: the result, then the reply.
    assert types(answered).count("TOOL_CALL_START") == 0
    result = next(e for e in events(answered) if e["type"] == "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == (call["toolCallId"], f"deleted {path}")
    assert text_of(answered) == "Deleted it."
    roles = [m["role"] for m in done(answered)["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert DELETED.count(path) == 1


async def bundled(where: Path) -> Path:
    """frontends/ag-ui/app.js bundled by esbuild, as a page loads it."""
    out = where / "ag-ui.js"
    process = await asyncio.create_subprocess_exec(
        str(FRONTENDS / "node_modules" / ".bin" / "esbuild"),
        "ag-ui/app.js",
        "--bundle",
        "--format=esm",
        f"--outfile={out}",
        cwd=FRONTENDS,
        stderr=subprocess.PIPE,
    )
    _, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out


async def test_the_example_page_runs_a_recipe_asks_a_person_and_attaches_after_a_reload(
    served: Served, browser: Browser, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(specialist())
    script = await bundled(tmp_path)
    context = await browser.new_context(base_url=served.url)

    async def page_files(route: Route) -> None:  # the page, as if served beside the API
        path = urlsplit(route.request.url).path
        body = (FRONTENDS / "ag-ui" / "index.html") if path == "/ag-ui" else script
        kind = "text/html" if path == "/ag-ui" else "text/javascript"
        await route.fulfill(body=body.read_bytes(), content_type=kind)

    async def with_token(route: Route) -> None:  # what frontends/serve.mjs adds
        headers = {**route.request.headers, "authorization": f"Bearer {TOKEN}"}
        await route.continue_(headers=headers)

    await context.route(re.compile(r".*/ag-ui(\.js)?(\?.*)?$"), page_files)
    await context.route(re.compile(r".*/api/.*"), with_token)
    page = await context.new_page()
    try:
        await page.goto("/ag-ui")
        await page.get_by_label("Recipe").select_option("route")
        await page.get_by_label("Goal").fill(REQUEST)
        await page.get_by_role("button", name="Run").click()
        await expect(page.locator("#asked")).to_contain_text("Approve the budget report")
        await page.get_by_role("button", name="Approve").click()
        await expect(page.locator("li.done")).to_have_text("finished")
        answer = page.locator("li.text").last
        await expect(answer).to_contain_text("report from llm:report:")
        thread = parse_qs(urlsplit(page.url).query)["thread"][0]
        assert "step: awaiting_approval" in await page.locator("li.step").all_inner_texts()

        await page.reload()  # the same thread: the page attaches and shows what it said
        await expect(page.locator("li.user")).to_have_text(REQUEST)
        await expect(page.locator("li.assistant")).to_contain_text("report from llm:report:")
        await expect(page.locator("#state")).to_contain_text(f'"workflow_id": "{thread}"')
    finally:
        await context.close()


class Queries(Interceptor):
    """Every query a client sends, as (workflow id, query name): Temporal's own client
    interceptor, on the client the server is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return CountedQueries(next, self.sent)


class CountedQueries(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, sent: list[tuple[str, str]]) -> None:
        super().__init__(next)
        self.sent = sent

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self.sent.append((input.id, input.query))
        return await super().query_workflow(input)


async def attached_events(http: httpx.AsyncClient, thread: str, opened: asyncio.Event) -> list:
    """One AG-UI client attached to the run `thread`, read to its end; `opened` is set once
    it has its snapshots (and follows the run)."""
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": []}
    got: list[dict[str, Any]] = []
    async with http.stream("POST", "/api/ag-ui/runs", json=body, timeout=120) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                got.append(json.loads(line.removeprefix("data:")))
                if got[-1]["type"] == "MESSAGES_SNAPSHOT":
                    opened.set()
    return got


async def planning_now(http: httpx.AsyncClient, workflow_id: str) -> None:
    for _ in range(300):
        if (await http.get(f"/api/runs/{workflow_id}")).json()["recipe_status"] == "planning":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never planned")


async def test_streams_on_one_run_cost_the_usage_queries_of_one(
    client: Client, model: ScriptedModel
) -> None:
    """Eight AG-UI clients follow one run: what it used comes with each status change in
    their STATE_DELTAs, read once by the run's one poller, not once by each client.
    Counted on a server whose Temporal client has an interceptor that sees every query."""
    queries = Queries()
    counted = Client(**{**client.config(), "interceptors": [queries]})
    planning = model.hold(lambda call: call.schema_name == "Plan")
    async with serve_api(counted, model, TOKEN) as served:
        headers = {**served.auth(), "X-Durafact": "1"}
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as http:
            thread = await start(http, "PlanExecuteWorkflow", {**GOAL, "max_steps": 3})
            await planning_now(http, thread)  # every client's snapshot says so
            opened = [asyncio.Event() for _ in range(8)]
            readers = [asyncio.ensure_future(attached_events(http, thread, e)) for e in opened]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 60)
            before = queries.sent.count((thread, "usage"))  # each snapshot's, at attach
            read = queries.sent.count((thread, "artifacts"))  # each snapshot's ledger counts
            planning.set()
            streams = await asyncio.wait_for(asyncio.gather(*readers), 120)
            ran = await finished(http, thread)
    following = queries.sent.count((thread, "usage")) - before
    deltas = [[e["delta"] for e in got if e["type"] == "STATE_DELTA"] for got in streams]
    statuses = [d[0]["value"] for d in deltas[0] if d[0]["path"] == "/status"]
    print(
        f"\n8 AG-UI streams on one run: {len(statuses)} status changes; usage queries "
        f"{before} at attach, {following} while they followed; ledger queries "
        f"{queries.sent.count((thread, 'artifacts'))}"
    )
    assert all(one == deltas[0] for one in deltas)  # one source: the same deltas, in order
    assert statuses == ["executing:1/3", "executing:2/3", "executing:3/3", "finishing", "completed"]
    # A status comes with what the run used by then, in the state's `usage` (the query's).
    (first,) = [
        d for d in deltas[0] if d[0] == {"op": "replace", "path": "/status", "value": statuses[0]}
    ]
    assert [patch["path"] for patch in first] == ["/status", "/usage"]
    assert first[1]["value"]["total_tokens"] > 0
    state = next(e for e in streams[0] if e["type"] == "STATE_SNAPSHOT")["snapshot"]
    for delta in deltas[0]:
        state |= {patch["path"][1:]: patch["value"] for patch in delta}
    assert state["usage"]["total_tokens"] == ran["usage"]["total_tokens"]
    # The poller's first page, then at most one query a status change: not one a client.
    assert following <= 1 + len(statuses)
    # Since: the answer and its ledger, read once for the eight; once for the run's view.
    assert queries.sent.count((thread, "artifacts")) - read == 2


async def test_a_finished_runs_json_stream_reads_no_ledger_and_its_ag_ui_stream_one(
    client: Client, model: ScriptedModel
) -> None:
    """Each read of a closed run's ledger is a worker replaying its history. The JSON
    API's stream of a finished run shows no answer text, so it reads none; an AG-UI
    client attached after the end gets the answer, read with the ledger once."""
    queries = Queries()
    counted = Client(**{**client.config(), "interceptors": [queries]})
    async with serve_api(counted, model, TOKEN) as served:
        headers = {**served.auth(), "X-Durafact": "1"}
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as http:
            thread = await start(http, "PlanExecuteWorkflow", {**GOAL, "max_steps": 2})
            assert (await finished(http, thread))["state"] == "COMPLETED"
            before = queries.sent.count((thread, "artifacts"))  # the run's view shows the answer
            events = await read_events(http, f"/api/runs/{thread}/events")
            assert events[-1].name == "end" and events[-1].data["state"] == "COMPLETED"
            assert queries.sent.count((thread, "artifacts")) == before
            got = await attached_events(http, thread, asyncio.Event())
    (snapshot,) = [e for e in got if e["type"] == "MESSAGES_SNAPSHOT"]
    assert snapshot["messages"][-1]["id"] == f"answer:{ran_id(got)}"
    assert snapshot["messages"][-1]["content"].strip()
    assert queries.sent.count((thread, "artifacts")) == before + 1


def ran_id(events: list[dict[str, Any]]) -> str:
    """The run id an AG-UI stream's state snapshot names."""
    state = next(e for e in events if e["type"] == "STATE_SNAPSHOT")["snapshot"]
    return state["run_id"]


async def test_an_event_that_breaks_the_protocol_fails_the_client() -> None:
    """The check every test above relies on: the driver refuses an event @ag-ui/core's
    schema does not take (here a text delta without its message id)."""

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        started = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
        for event in (started, {"type": "TEXT_MESSAGE_CONTENT", "delta": "x"}):
            body = f"data: {json.dumps(event)}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async with serving(broken) as url:
        spec = {"url": url, "token": TOKEN, "threadId": "t", "runs": [{"message": "hi"}]}
        with pytest.raises(AssertionError, match="breaks the schema"):
            await drive("ag_ui.mjs", json.dumps(spec))
