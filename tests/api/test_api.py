"""The HTTP API on the dev server and the scripted model: each endpoint's success and
its errors, all in one JSON shape; nothing starts on bad input."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from durafact import testing
from durafact._api import create_app
from durafact._core.ids import message_id, step_id
from durafact._recipes.chat import ChatInput, ChatWorkflow
from durafact._recipes.supervisor import SupervisorRequest, SupervisorWorkflow
from durafact._runtime.registry import load_registry
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact._service.chats import open_chat
from durafact.testing import Call, ScriptedModel, default_reply
from tests.api.conftest import TOKEN, Served, read_events
from tests.cli.test_steer import accepted_updates
from tests.helpers import ROOT, clean_env, free_port, read_until, spawn, starter
from tests.scripted_research import SUM_QUESTION, sample_sources, sum_script
from tests.workflows.test_plan_react import GOAL as PLAN_REACT_GOAL
from tests.workflows.test_plan_react import act as react_act
from tests.workflows.test_plan_react import final as react_final
from tests.workflows.test_plan_react import script as plan_react_script
from tests.workflows.test_plan_react import workflow_of
from tests.workflows.test_react import act, turns
from tests.workflows.test_supervisor import REQUEST, specialist

GOAL = {"text": "Plan a weekend in Kraków", "max_steps": 2}


def plans_and_routes(call: Call) -> str | dict:
    """Plans as the default model does, routes and reports as a specialist."""
    return default_reply(call) if call.schema_name == "Plan" else specialist()(call)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The one error shape, with `status`."""
    assert response.status_code == status, response.text
    document = response.json()
    assert set(document) == {"error"}
    assert document["error"]["message"]
    return document["error"]


async def start(http: httpx.AsyncClient, kind: str, input: Any, **extra: Any) -> str:
    response = await http.post("/api/runs", json={"type": kind, "input": input, **extra})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def finished(http: httpx.AsyncClient, workflow_id: str) -> dict[str, Any]:
    for _ in range(300):
        run = (await http.get(f"/api/runs/{workflow_id}")).json()
        if run["state"] != "RUNNING":
            return run
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never ended")


async def waiting_question(http: httpx.AsyncClient, workflow_id: str, n: int = 1) -> dict:
    for _ in range(300):
        run = (await http.get(f"/api/runs/{workflow_id}")).json()
        if [q["n"] for q in run["questions"]] == [n]:
            return run["questions"][0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"question {n} of {workflow_id} never came")


async def test_a_run_starts_and_reads_back_with_result_usage_artifacts_and_provenance(
    http: httpx.AsyncClient, served: Served, model: ScriptedModel
) -> None:
    recipes = {r["type"]: r for r in (await http.get("/api/recipes")).json()}
    assert recipes["PlanExecuteWorkflow"]["recipe"] == "plan_execute"
    assert recipes["PlanExecuteWorkflow"]["input_schema"]["title"] == "Goal"
    workflow_id = f"plan-{uuid.uuid4().hex[:8]}"
    response = await http.post(
        "/api/runs", json={"type": "PlanExecuteWorkflow", "input": GOAL, "id": workflow_id}
    )
    assert response.status_code == 201, response.text
    started = response.json()
    assert (started["id"], started["type"]) == (workflow_id, "PlanExecuteWorkflow")
    assert response.headers["location"] == f"/api/runs/{workflow_id}"
    assert started["ui_url"].endswith(f"/workflows/{workflow_id}/{started['run_id']}/history")

    run = await finished(http, workflow_id)
    assert (run["state"], run["recipe"], run["status"]) == (
        "COMPLETED",
        "plan_execute",
        "completed",
    )
    assert run["summary"] == "PlanExecuteWorkflow: Plan a weekend in Kraków"
    assert run["result"]["answer"]["text"].startswith("done: ")
    assert run["usage"]["total_tokens"] == run["result"]["usage"]["total_tokens"] > 0
    # DurafactTokens and DurafactCost; this worker has no prices, so the cost is unknown.
    assert run["tokens"] == run["usage"]["total_tokens"]
    assert run["cost"] is None and run["usage"]["cost"] is None
    assert run["failure"] is None and run["questions"] == []

    ledger = (await http.get(f"/api/runs/{workflow_id}/artifacts")).json()
    ids = [a["id"] for a in ledger["artifacts"]]
    final = next(i for i in ids if i.startswith("final:"))
    assert any(i.startswith("step:") for i in ids) and ledger["links"]
    tree = (await http.get(f"/api/runs/{workflow_id}/provenance/{final}")).json()
    assert tree["tree"]["id"] == final
    assert tree["rendered"].splitlines()[0] == f"{final} (FinalAnswer)"
    assert "supported_by -> result:step:" in tree["rendered"]

    missing = await http.get(f"/api/runs/{workflow_id}/provenance/final:nothing")
    assert "no artifact 'final:nothing'" in error_of(missing, 404)["message"]


async def test_bad_input_is_refused_and_starts_nothing(
    http: httpx.AsyncClient, client: Client
) -> None:
    workflow_id = f"bad-{uuid.uuid4().hex[:8]}"
    bad = await http.post(
        "/api/runs",
        json={
            "type": "PlanExecuteWorkflow",
            "input": {"text": "x", "max_steps": "many"},
            "id": workflow_id,
        },
    )
    error = error_of(bad, 422)
    assert error["type"] == "InvalidInput"
    assert error["message"].startswith("input does not fit Goal: max_steps: ")
    assert [e["loc"] for e in error["errors"]] == [["max_steps"]]

    unknown = await http.post("/api/runs", json={"type": "NoSuchWorkflow", "input": {}})
    assert "unknown workflow type 'NoSuchWorkflow'" in error_of(unknown, 404)["message"]
    missing = await http.post("/api/runs", json={"type": "PlanExecuteWorkflow"})
    assert error_of(missing, 400)["message"] == "PlanExecuteWorkflow needs input: Goal as JSON"
    malformed = await http.post(
        "/api/runs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert error_of(malformed, 422)["type"] == "InvalidRequest"
    deep = await http.post(
        "/api/runs", json={"type": "PlanExecuteWorkflow", "input": {"text": [[[[[[[]]]]]]] * 1}}
    )
    assert error_of(deep, 422)["type"] == "InvalidInput"

    slashed = await http.post(
        "/api/runs",
        json={"type": "PlanExecuteWorkflow", "input": GOAL, "id": f"{workflow_id}/step:x:0"},
    )
    assert error_of(slashed, 400)["message"] == (
        "the id holds '/', which names the agents of a run's steps"
    )

    assert (await http.get(f"/api/runs/{workflow_id}")).status_code == 404
    assert [e async for e in client.list_workflows(f'WorkflowId STARTS_WITH "{workflow_id}"')] == []


async def test_an_id_that_is_a_path_step_is_refused_at_start_and_in_a_path(
    http: httpx.AsyncClient, client: Client, served: Served, tmp_path: Path
) -> None:
    for given in (".", ".."):
        refused = await http.post(
            "/api/runs", json={"type": "PlanExecuteWorkflow", "input": GOAL, "id": given}
        )
        assert error_of(refused, 400)["message"] == (
            f"the id {given!r} has '.' or '..' as a path step, which a URL cannot name"
        )
        chat = await http.post("/api/chats", json={"id": given})
        assert error_of(chat, 400)["type"] == "BadRequest"
        with pytest.raises(RPCError, match="not found"):
            await client.get_workflow_handle(given).describe()
    env = clean_env(TEMPORAL_ADDRESS=client.service_client.config.target_host)
    for command in (  # the command line and the API: one check
        ("plan", GOAL["text"], "--id", "..", "--no-wait"),
        ("plan", GOAL["text"], "--id", "team/plan", "--no-wait"),
        ("chat", "..", "--send", "hi"),  # a chat's id may hold '/', but no '..'
    ):
        run = await starter(*command, env=env, cwd=tmp_path)
        assert (run.code, len(run.err_lines)) == (2, 1), run.err
    # One started past the API (by Temporal's own client) is not named by a path either.
    handle = await client.start_workflow(
        ChatWorkflow.run, ChatInput(), id="..", task_queue=served.settings.task_queue
    )
    try:
        for method, path in (("GET", ""), ("GET", "/artifacts"), ("POST", "/cancel")):
            named = await http.request(method, f"/api/runs/%2E%2E{path}")
            assert error_of(named, 400)["message"] == (
                "the id '..' has '.' or '..' as a path step, which a URL cannot name"
            )
        assert error_of(await http.post("/api/chats/%2E%2E/stop"), 400)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    finally:
        await handle.terminate("test done")


async def test_an_answer_batch_that_breaks_its_rules_is_refused_before_it_starts(
    http: httpx.AsyncClient, client: Client
) -> None:
    workflow_id = f"batch-{uuid.uuid4().hex[:8]}"
    batch = {"questions": [{"id": "../x", "question": "Why?", "source": "Because."}]}

    refused = await http.post(
        "/api/runs", json={"type": "AnswerFlowWorkflow", "input": batch, "id": workflow_id}
    )

    error = error_of(refused, 422)
    assert error["type"] == "InvalidInput"
    assert error["message"].startswith(
        "input does not fit AnswerBatchInput: question 1 has the id '../x': an id is 1-64 "
    )
    assert [e async for e in client.list_workflows(f'WorkflowId = "{workflow_id}"')] == []


async def test_an_id_in_use_is_409_and_an_unknown_id_is_404(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    again = await http.post(
        "/api/runs",
        json={"type": "SupervisorWorkflow", "input": {"request": REQUEST}, "id": workflow_id},
    )
    assert (
        error_of(again, 409)["message"] == f"workflow id '{workflow_id}' is taken by a RUNNING run"
    )
    for path in ("", "/artifacts", "/events", "/provenance/x"):
        gone = await http.get(f"/api/runs/nobody-{uuid.uuid4().hex[:6]}{path}")
        assert error_of(gone, 404)["type"] == "NotFound"
    assert error_of(await http.post("/api/runs/nobody/cancel"), 404)["type"] == "NotFound"
    empty = await http.get("/api/runs/")  # the one-run route with nothing after the slash
    assert error_of(empty, 404)["message"] == "no workflow with an empty id"
    await http.post(f"/api/runs/{workflow_id}/cancel")


async def test_runs_are_listed_from_visibility_filtered_and_paged(
    http: httpx.AsyncClient, model: ScriptedModel, client: Client, served: Served
) -> None:
    model.reply(plans_and_routes)
    waiting = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    done = await start(http, "PlanExecuteWorkflow", GOAL)
    await finished(http, done)
    await waiting_question(http, waiting)

    async def listed(**query: str) -> list[str]:
        for _ in range(100):  # visibility follows a moment behind
            response = await http.get("/api/runs", params=query)
            assert response.status_code == 200, response.text
            ids = [run["id"] for run in response.json()["runs"]]
            if waiting in ids or done in ids:
                return ids
            await asyncio.sleep(0.1)
        return []

    assert waiting in await listed(type="SupervisorWorkflow")
    assert done not in await listed(type="SupervisorWorkflow")
    assert waiting in await listed(status="awaiting_approval")
    assert done in await listed(state="COMPLETED")
    assert waiting not in await listed(state="COMPLETED")
    first = (await http.get("/api/runs", params={"page_size": 1})).json()
    second = (
        await http.get("/api/runs", params={"page_size": 1, "page_token": first["next_page_token"]})
    ).json()
    assert first["runs"][0]["id"] != second["runs"][0]["id"]
    assert first["runs"][0]["state"] == "RUNNING"  # running runs first

    injected = await http.get("/api/runs", params={"status": 'x" OR WorkflowId!="'})
    assert error_of(injected, 422)["message"].startswith("'query.status': ")
    assert error_of(await http.get("/api/runs", params={"page_token": "%%"}), 400)
    await http.post(f"/api/runs/{waiting}/cancel")


async def test_runs_and_questions_of_a_worker_on_its_own_queue_are_listed_with_their_recipe(
    http: httpx.AsyncClient, client: Client, model: ScriptedModel, served: Served
) -> None:
    # Your own worker polls a queue of its own, not the one this server starts runs on.
    model.reply(specialist())
    own = Settings(openai_base_url=model.url, openai_api_key="test", model="scripted")
    own.task_queue = f"my-app-{uuid.uuid4().hex[:6]}"
    assert own.task_queue != served.settings.task_queue
    workflow_id = f"own-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, own):
        handle = await client.start_workflow(
            SupervisorWorkflow.run,
            SupervisorRequest(request=REQUEST),
            id=workflow_id,
            task_queue=own.task_queue,
        )
        await testing.waiting_question(handle)
        for _ in range(100):  # visibility follows a moment behind
            inbox = (await http.get("/api/approvals")).json()["runs"]
            runs = (await http.get("/api/runs", params={"type": "SupervisorWorkflow"})).json()
            waiting = [run for run in inbox if run["id"] == workflow_id]
            rows = [row for row in runs["runs"] if row["id"] == workflow_id]
            if waiting and rows:
                break
            await asyncio.sleep(0.1)
        await handle.terminate("test done")
    assert [run["type"] for run in waiting] == ["SupervisorWorkflow"]
    assert [row["recipe"] for row in rows] == ["supervisor"]


async def test_events_tell_progress_status_questions_and_the_end_and_resume_by_last_event_id(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, workflow_id)
    first = await read_events(http, f"/api/runs/{workflow_id}/events", count=4)
    outcome = await http.post(
        f"/api/runs/{workflow_id}/approvals/{question['id']}",
        json={"approved": True, "reason": "fine"},
    )
    assert outcome.status_code == 200, outcome.text
    rest = await read_events(http, f"/api/runs/{workflow_id}/events", last_event_id=first[-1].id)
    whole = await read_events(http, f"/api/runs/{workflow_id}/events")

    assert [e.id for e in first + rest] == [e.id for e in whole]  # each event once
    assert len({e.id for e in whole}) == len(whole)
    names = [e.name for e in whole]
    assert names[0] == "status" and names[-1] == "end" and names.count("end") == 1
    asked = next(e for e in whole if e.name == "question")
    assert asked.data["message"].startswith(f"{question['id']} (approve): Approve the ")
    assert [e.data["message"] for e in whole if e.name == "approval"] == [
        f"{question['id']} approved by http api: fine"
    ]
    assert whole[-1].data["state"] == "COMPLETED"
    assert whole[-1].data["result"]["reply"]["approved"] is True
    assert whole[-1].id.endswith(":end")
    # After the end there is nothing more, and a malformed id is refused.
    assert (
        await read_events(http, f"/api/runs/{workflow_id}/events", last_event_id=whole[-1].id) == []
    )
    bad = await http.get(f"/api/runs/{workflow_id}/events", headers={"Last-Event-ID": "nonsense"})
    assert error_of(bad, 400)["message"] == "Last-Event-ID 'nonsense' is not one we sent"


async def test_a_last_event_id_that_holds_no_offset_is_400_on_run_and_chat_streams(
    http: httpx.AsyncClient,
) -> None:
    chat_id = (await http.post("/api/chats", json={})).json()["id"]
    # '²' is a digit to str.isdigit, not to int(); int() refuses 5,000 digits.
    for offset in (b"\xb2", b"9" * 5000):
        run_events = await http.get(
            f"/api/runs/{chat_id}/events", headers={"Last-Event-ID": b"RUN:" + offset}
        )
        assert error_of(run_events, 400)["message"].endswith("is not one we sent")
        chat_stream = await http.get(
            f"/api/chats/{chat_id}/stream", headers={"Last-Event-ID": offset}
        )
        assert error_of(chat_stream, 400)["message"].endswith("is not ours")
    await http.post(f"/api/runs/{chat_id}/cancel")


async def test_approvals_list_every_question_and_decide_returns_the_outcome_or_409(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, workflow_id)
    inbox = (await http.get("/api/approvals")).json()["runs"]
    mine = next(run for run in inbox if run["id"] == workflow_id)
    assert mine["type"] == "SupervisorWorkflow"
    assert mine["summary"] == f"SupervisorWorkflow: {REQUEST}"
    assert mine["correctable"] == ["scope", "budget", "deadline"]
    assert [q["id"] for q in mine["questions"]] == [question["id"]]
    path = f"/api/runs/{workflow_id}/approvals"

    unknown = await http.post(f"{path}/approval:nothing:1", json={"approved": True})
    assert error_of(unknown, 409)["message"] == (
        "decide refused: InvalidAnswer: no question 'approval:nothing:1' was asked"
    )
    not_a_fact = await http.post(
        f"{path}/{question['id']}", json={"approved": False, "changes": {"colour": "red"}}
    )
    assert error_of(not_a_fact, 400)["message"].startswith("changes: colour: not a fact of ")
    with_changes = await http.post(
        f"{path}/{question['id']}", json={"approved": True, "changes": {"budget": "5000 EUR"}}
    )
    assert "changes go with a rejection only" in error_of(with_changes, 409)["message"]

    rejected = await http.post(
        f"{path}/{question['id']}",
        json={"approved": False, "reason": "more money", "changes": {"budget": "5000 EUR"}},
    )
    assert rejected.status_code == 200, rejected.text
    assert rejected.json() == {
        "question_id": question["id"],
        "approved": False,
        "reason": "more money",
        "changes": {"budget": "5000 EUR"},
        "timed_out": False,
        "remember": None,
    }
    second = await waiting_question(http, workflow_id, n=2)
    assert second["thread"] == question["thread"]
    remembering = await http.post(
        f"{path}/{second['id']}", json={"approved": True, "remember": "call"}
    )
    assert error_of(remembering, 409)["message"] == (
        f"decide refused: InvalidAnswer: {second['id']} is not a tool approval: remember is "
        "taken on tool questions only"
    )
    approved = await http.post(f"{path}/{second['id']}", json={"approved": True, "by": "ann"})
    assert approved.json()["approved"] is True
    run = await finished(http, workflow_id)
    assert run["result"]["reply"]["approved"] is True
    late = await http.post(f"{path}/{second['id']}", json={"approved": True})
    assert error_of(late, 409)["message"] == (
        f"workflow {workflow_id} is COMPLETED: nothing waits for an answer"
    )
    assert error_of(
        await http.post(f"/api/runs/nobody/approvals/{second['id']}", json={"approved": True}), 404
    )


async def test_a_decision_takes_approved_as_a_json_boolean_and_refuses_anything_else(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, workflow_id)
    path = f"/api/runs/{workflow_id}/approvals/{question['id']}"

    old = await http.post(path, json={"approve": True, "reason": "fine"})
    error = error_of(old, 422)
    assert (error["type"], error["message"]) == (
        "InvalidRequest",
        "'approve' is not a field of body (did you mean 'approved'?)",
    )
    misspelt = await http.post(path, json={"approved": True, "reasn": "fine"})
    assert error_of(misspelt, 422)["message"] == (
        "'reasn' is not a field of body (did you mean 'reason'?)"
    )
    # Only a JSON true or false decides: a string, a number or null is refused, not read
    # as what it might mean.
    for loose in ["false", "true", "yes", 0, 1, None]:
        refused = error_of(await http.post(path, json={"approved": loose}), 422)
        assert refused["message"] == "'body.approved': Input should be a valid boolean", loose
    assert (await waiting_question(http, workflow_id))["id"] == question["id"]
    approved = await http.post(path, json={"approved": True, "reason": "fine"})
    assert approved.status_code == 200, approved.text
    assert (await finished(http, workflow_id))["result"]["reply"]["approved"] is True


def twice_two_plus_two(call: Call) -> str:
    """The calculator on 2 + 2 in turns 1 and 2, then the answer."""
    if call.activity_id.endswith((":1", ":2")):
        return 'Thought: add.\nAction: calculator\nAction Input: {"expression": "2 + 2"}\nPAUSE'
    return "Thought: done.\nFinal Answer: 4"


async def asking_about_the_calculator(
    http: httpx.AsyncClient, model: ScriptedModel
) -> tuple[str, dict]:
    """A ReAct run that calls the calculator on 2 + 2 twice, under a rule that asks
    before it: its id and its first question."""
    model.reply(twice_two_plus_two)
    policy = {"rules": [{"action": "ask", "tool": "calc*"}]}
    workflow_id = await start(
        http, "ReActWorkflow", {"question": "Two plus two, twice", "tool_policy": policy}
    )
    return workflow_id, await waiting_question(http, workflow_id)


async def remembered_decision(http: httpx.AsyncClient, workflow_id: str) -> dict:
    """Once the run ends, after both calls ran and one question was asked: the
    decision it remembered."""
    run = await finished(http, workflow_id)
    assert [c["ok"] for c in run["result"]["tool_calls"]] == [True, True]
    ledger = (await http.get(f"/api/runs/{workflow_id}/artifacts")).json()
    types = [a["type"] for a in ledger["artifacts"]]
    assert types.count("ApprovalQuestion") == 1
    (rule,) = [a["data"] for a in ledger["artifacts"] if a["type"] == "RememberedDecision"]
    return rule


async def test_a_tool_question_names_its_rule_and_an_approval_may_remember_the_call(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id, question = await asking_about_the_calculator(http, model)
    inbox = (await http.get("/api/approvals")).json()["runs"]
    (asked,) = next(run for run in inbox if run["id"] == workflow_id)["questions"]
    assert (asked["id"], asked["rule"]) == (question["id"], "rule 1: ask calc*")
    assert asked["remember"] == ["call", "tool"]
    path = f"/api/runs/{workflow_id}/approvals/{question['id']}"
    approved = await http.post(path, json={"approved": True, "remember": "call", "by": "ann"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["remember"] == "call"
    rule = await remembered_decision(http, workflow_id)
    assert (rule["scope"], rule["by"], rule["question_id"]) == ("call", "ann", question["id"])


# A path whose end is what matters, far past what a cut label would keep.
LONG_PATH = "/tmp/" + "a" * 420 + "/../../etc/passwd"


async def asking_about_a_long_call(
    http: httpx.AsyncClient, model: ScriptedModel
) -> tuple[str, dict]:
    """A ReAct run that asks to delete LONG_PATH: its id and its question."""
    model.reply(turns(act("delete_file", json.dumps({"path": LONG_PATH})), react_final("done")))
    workflow_id = await start(
        http, "ReActWorkflow", {"question": "Tidy up", "tools": ["delete_file"]}
    )
    return workflow_id, await waiting_question(http, workflow_id)


async def test_a_tool_question_in_the_api_holds_the_whole_call(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id, question = await asking_about_a_long_call(http, model)
    inbox = (await http.get("/api/approvals")).json()["runs"]
    (asked,) = next(run for run in inbox if run["id"] == workflow_id)["questions"]
    assert asked["arguments"] == {"path": LONG_PATH}
    assert asked["text"] == (
        f"Run the destructive tool delete_file with {json.dumps({'path': LONG_PATH})}?"
    )
    rejected = await http.post(
        f"/api/runs/{workflow_id}/approvals/{question['id']}", json={"approved": False}
    )
    assert rejected.status_code == 200, rejected.text
    await finished(http, workflow_id)


async def test_cancel_ends_a_running_run_and_refuses_a_closed_one(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    await waiting_question(http, workflow_id)
    response = await http.post(f"/api/runs/{workflow_id}/cancel", json={"reason": "not needed"})
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "CANCEL_REQUESTED"
    run = await finished(http, workflow_id)
    assert run["state"] == "CANCELED"
    assert run["failure"].startswith("CancelledError")
    again = await http.post(f"/api/runs/{workflow_id}/cancel")
    assert (
        error_of(again, 409)["message"]
        == f"workflow {workflow_id} is CANCELED: there is nothing to cancel"
    )


NOTE = "give the result in cents"


async def test_a_plan_react_runs_note_goes_to_the_agent_of_its_step_and_waits_for_one(
    http: httpx.AsyncClient, client: Client, model: ScriptedModel
) -> None:
    model.reply(plan_react_script([react_act("3 * 12"), react_final("36")], [react_final("9.00")]))
    planning = model.hold(lambda call: call.schema_name == "Plan")

    def agents_first_turn(call: Call) -> bool:
        return call.activity_id.startswith("llm:react:") and call.activity_id.endswith(":1")

    held = model.hold(agents_first_turn)
    workflow_id = await start(http, "PlanReActWorkflow", {"text": PLAN_REACT_GOAL})
    await asyncio.to_thread(model.wait_for, lambda call: call.schema_name == "Plan")
    assert (await http.get(f"/api/runs/{workflow_id}")).json()["takes_notes"] is True
    between = await http.post(f"/api/runs/{workflow_id}/steer", json={"text": NOTE})
    assert error_of(between, 409)["message"] == (
        f"workflow {workflow_id} is a PlanReActWorkflow between its steps: no agent runs now "
        "to take a note"
    )

    planning.set()
    agent = workflow_of(await asyncio.to_thread(model.wait_for, agents_first_turn))
    steering = asyncio.create_task(
        http.post(f"/api/runs/{workflow_id}/steer", json={"text": NOTE}, params={"wait": "true"})
    )
    while not await accepted_updates(client, agent):
        await asyncio.sleep(0.1)
    held.set()
    steered = await asyncio.wait_for(steering, 30)

    assert steered.status_code == 200, steered.text
    second = await asyncio.to_thread(
        model.wait_for, lambda c: workflow_of(c) == agent and c.activity_id.endswith(":2")
    )
    assert second.last_user == f"Note from a person: {NOTE}"
    run = second.activity_id.removeprefix("llm:react:").rsplit(":", 1)[0]
    # The step, the agent's turn 1, its observation, then the note.
    assert steered.json() == {
        "id": agent,
        "queued": False,
        "turn": 2,
        "message": message_id(run, 3),
    }
    assert (await finished(http, workflow_id))["state"] == "COMPLETED"


async def test_a_note_is_queued_at_once_while_the_run_waits_for_a_person(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id, question = await asking_about_the_calculator(http, model)

    steered = await http.post(f"/api/runs/{workflow_id}/steer", json={"text": NOTE})

    assert steered.status_code == 202, steered.text
    assert steered.json() == {"id": workflow_id, "queued": True, "turn": 2, "message": None}
    assert await waiting_question(http, workflow_id) == question  # it did not wait for it
    approval = f"/api/runs/{workflow_id}/approvals/{question['id']}"
    assert (await http.post(approval, json={"approved": True})).status_code == 200
    second = await asyncio.to_thread(
        model.wait_for, lambda c: c.workflow_id == workflow_id and c.activity_id.endswith(":2")
    )
    assert second.last_user == f"Note from a person: {NOTE}"
    await http.post(f"/api/runs/{workflow_id}/cancel")


DOOMED = "/tmp/eggs/prices-2024.txt"


async def asked_in_the_inbox(http: httpx.AsyncClient, workflow_id: str) -> dict:
    """The inbox's entry for `workflow_id`, once a question of it waits there."""
    for _ in range(300):
        inbox = (await http.get("/api/approvals")).json()["runs"]
        asking = [run for run in inbox if run["id"] == workflow_id and run["questions"]]
        if asking:
            return asking[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never asked")


async def asking_in_a_step(http: httpx.AsyncClient, model: ScriptedModel) -> tuple[str, str, dict]:
    """A PlanReAct run whose first step's agent calls the destructive `delete_file` on
    DOOMED: the run's id, the agent's (`{run}/{step}`: it holds '/'), and the agent's
    entry in the inbox, with its question."""
    delete = f'Thought: clear it.\nAction: delete_file\nAction Input: {{"path": "{DOOMED}"}}\nPAUSE'
    model.reply(plan_react_script([delete, react_final("cleared")], [react_final("9.00")]))
    goal = {"text": PLAN_REACT_GOAL, "tools": ["calculator", "delete_file"]}
    workflow_id = await start(http, "PlanReActWorkflow", goal)
    agent = f"{workflow_id}/{step_id(PLAN_REACT_GOAL, 0)}"
    return workflow_id, agent, await asked_in_the_inbox(http, agent)


async def agents_of(http: httpx.AsyncClient, workflow_id: str, count: int) -> list[dict]:
    """The run's `agents`, once `count` of them are listed closed (visibility lags)."""
    for _ in range(100):
        agents = (await http.get(f"/api/runs/{workflow_id}")).json()["agents"]
        if len(agents) == count and all(a["state"] != "RUNNING" for a in agents):
            return agents
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never listed {count} closed agents: {agents}")


async def test_a_step_agents_tool_question_is_answered_by_its_id_and_its_run_is_served(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    workflow_id, agent, asking = await asking_in_a_step(http, model)
    (question,) = asking["questions"]
    assert asking["type"] == "ReActWorkflow"
    assert "delete_file" in question["text"] and DOOMED in question["text"]
    # The agent's id as it is, and percent-encoded (as the console and `Location` send it).
    for path in (f"/api/runs/{agent}", f"/api/runs/{quote(agent, safe='')}"):
        shown = (await http.get(path)).json()
        assert (shown["id"], shown["recipe_status"]) == (agent, "awaiting_approval"), shown
        assert [q["id"] for q in shown["questions"]] == [question["id"]]

    answered = await http.post(
        f"/api/runs/{agent}/approvals/{question['id']}", json={"approved": True, "by": "ann"}
    )
    assert answered.status_code == 200, answered.text
    assert (answered.json()["question_id"], answered.json()["approved"]) == (question["id"], True)
    assert (await finished(http, workflow_id))["state"] == "COMPLETED"

    child = await finished(http, agent)
    assert (child["id"], child["type"], child["state"]) == (agent, "ReActWorkflow", "COMPLETED")
    assert [(c["tool"], c["ok"]) for c in child["result"]["tool_calls"]] == [("delete_file", True)]
    ledger = (await http.get(f"/api/runs/{agent}/artifacts")).json()
    assert ledger["id"] == agent
    assert [a["data"]["status"] for a in ledger["artifacts"] if a["id"] == question["id"]] == [
        "approved"
    ]
    answer = child["result"]["answer_id"]
    tree = (await http.get(f"/api/runs/{agent}/provenance/{answer}")).json()
    assert tree["tree"]["id"] == answer
    # The run lists its step agents, first step first, as visibility has them.
    second = f"{workflow_id}/{step_id(PLAN_REACT_GOAL, 1)}"
    assert [(a["id"], a["type"], a["state"]) for a in await agents_of(http, workflow_id, 2)] == [
        (agent, "ReActWorkflow", "COMPLETED"),
        (second, "ReActWorkflow", "COMPLETED"),
    ]
    assert (await http.get(f"/api/runs/{agent}")).json()["agents"] == []  # an agent has none

    events = await read_events(http, f"/api/runs/{quote(agent, safe='')}/events")
    assert [e.data["message"] for e in events if e.name == "approval"] == [
        f"{question['id']} approved by ann"
    ]
    assert (events[-1].name, events[-1].data["state"]) == ("end", "COMPLETED")
    # The other routes with a suffix take the agent's id whole too.
    canceled = await http.post(f"/api/runs/{agent}/cancel")
    assert error_of(canceled, 409)["message"] == (
        f"workflow {agent} is COMPLETED: there is nothing to cancel"
    )
    steered = await http.post(f"/api/runs/{agent}/steer", json={"text": NOTE})
    assert error_of(steered, 409)["message"] == (
        f"workflow {agent} is COMPLETED: there is nothing to steer"
    )


async def test_a_note_is_refused_for_an_ended_run_a_recipe_without_a_tool_loop_and_a_chat(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(lambda call: react_final("4"))
    ended = await start(http, "ReActWorkflow", {"question": "What is 2 + 2?"})
    assert (await finished(http, ended))["takes_notes"] is True
    refused = await http.post(f"/api/runs/{ended}/steer", json={"text": NOTE})
    assert error_of(refused, 409)["message"] == (
        f"workflow {ended} is COMPLETED: there is nothing to steer"
    )

    plan = f"plan-{uuid.uuid4().hex[:6]}"
    model.hold(lambda call: call.workflow_id == plan)
    await start(http, "PlanExecuteWorkflow", GOAL, id=plan)
    await asyncio.to_thread(model.wait_for, lambda call: call.workflow_id == plan)
    assert (await http.get(f"/api/runs/{plan}")).json()["takes_notes"] is False
    no_loop = await http.post(f"/api/runs/{plan}/steer", json={"text": NOTE})
    assert error_of(no_loop, 409)["message"] == (
        f"workflow {plan} is a PlanExecuteWorkflow: it takes no note (ReAct runs and chats do)"
    )
    empty = await http.post(f"/api/runs/{plan}/steer", json={"text": "  "})
    assert error_of(empty, 400)["message"] == "the note is empty"
    assert error_of(await http.post(f"/api/runs/{plan}/steer", json={}), 422)["type"] == (
        "InvalidRequest"
    )
    await http.post(f"/api/runs/{plan}/cancel")

    chat = (await http.post("/api/chats", json={})).json()["id"]
    to_chat = await http.post(f"/api/runs/{chat}/steer", json={"text": NOTE})
    assert error_of(to_chat, 409)["message"] == (
        f"workflow {chat} is a chat: it takes a note as a message sent with steer: true "
        f"(POST /api/chats/{chat}/messages)"
    )
    unknown = await http.post("/api/runs/nobody/steer", json={"text": NOTE})
    assert error_of(unknown, 404)["message"] == "no workflow with id 'nobody'"
    await http.post(f"/api/runs/{chat}/cancel")


async def test_a_research_runs_provenance_goes_down_to_its_sources(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(sum_script())
    sources = [s.model_dump(mode="json") for s in sample_sources()]
    workflow_id = await start(
        http, "ResearchWorkflow", {"question": SUM_QUESTION, "sources": sources}
    )
    run = await finished(http, workflow_id)
    assert run["result"]["status"] == "answered", run
    answer = f"answer:{run['result']['turn']}"
    tree = (await http.get(f"/api/runs/{workflow_id}/provenance/{answer}")).json()
    rendered = tree["rendered"]
    assert "found_by -> source:prices (SourceSpec)" in rendered
    assert "computed_from -> resolved:" in rendered


async def test_a_chat_answers_streams_and_shows_its_transcript_and_memory(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.pace = 0.01
    created = await http.post(
        "/api/chats", json={"settings": {"memory": {"kind": "window_pruner"}}}
    )
    assert created.status_code == 201, created.text
    chat_id = created.json()["id"]
    path = f"/api/chats/{chat_id}"
    reader = asyncio.create_task(read_events(http, f"{path}/stream?offset=0", count=4))
    reply = await http.post(f"{path}/messages", json={"text": "hello there friend", "id": "m1"})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "id": "m1",
        "seq": 0,
        "text": "done: hello there friend",
        "run": 0,
        "status": "answered",
        "steered": None,
    }
    events = await asyncio.wait_for(reader, 30)
    assert [e.name for e in events][0] == "message"
    assert events[0].data == {"kind": "user", "key": "m1", "seq": 0, "text": "hello there friend"}
    tokens = [e for e in events if e.name == "token"]
    assert tokens and all(e.data["key"] == "m1" for e in tokens)
    assert [int(e.id) for e in events] == sorted(int(e.id) for e in events)

    again = await http.post(f"{path}/messages", json={"text": "anything", "id": "m1"})
    assert again.json()["text"] == "done: hello there friend"  # the first reply, no new turn
    transcript = (await http.get(f"{path}/transcript")).json()
    assert [(line["role"], line["content"]) for line in transcript["lines"]] == [
        ("user", "hello there friend"),
        ("assistant", "done: hello there friend"),
    ]
    memory = (await http.get(f"{path}/memory")).json()
    assert (memory["policy"], memory["turns"]) == ("window_pruner", 1)

    empty = await http.post(f"{path}/messages", json={"text": "   "})
    assert error_of(empty, 409)["message"] == "InvalidMessage: the message is empty"
    taken = await http.post("/api/chats", json={"id": chat_id})
    assert error_of(taken, 409)["message"] == f"chat id '{chat_id}' is taken"
    bad = await http.post("/api/chats", json={"settings": {"memory": {"kind": "forget"}}})
    assert error_of(bad, 422)["message"].startswith("settings does not fit ChatInput: memory: ")
    unknown = await http.post("/api/chats/nobody/messages", json={"text": "hi"})
    assert error_of(unknown, 404)["message"] == "no workflow with id 'nobody'"
    for path in ("stream", "transcript", "memory"):
        assert error_of(await http.get(f"/api/chats/nobody/{path}"), 404)["type"] == "NotFound"


async def test_a_chat_the_command_line_named_with_a_slash_is_reached_by_its_id(
    http: httpx.AsyncClient, client: Client, served: Served
) -> None:
    chat_id = f"team/chat-{uuid.uuid4().hex[:6]}"  # `durafact chat team/...` takes such an id
    await open_chat(client, served.settings, load_registry([]), chat_id, ChatInput())
    reply = await http.post(f"/api/chats/{chat_id}/messages", json={"text": "hello", "id": "m1"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["text"] == "done: hello"
    transcript = (await http.get(f"/api/chats/{quote(chat_id, safe='')}/transcript")).json()
    assert [line["content"] for line in transcript["lines"]] == ["hello", "done: hello"]
    assert (await http.post(f"/api/runs/{chat_id}/cancel")).status_code == 202
    refused = await http.post("/api/chats", json={"id": "team/another"})
    assert error_of(refused, 400)["message"] == (
        "the id holds '/', which names the agents of a run's steps"
    )


async def test_stop_ends_the_turn_being_answered_and_says_so(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    created = await http.post("/api/chats", json={"settings": {"stream": False}})
    chat_id = created.json()["id"]
    model.hold(lambda call: call.workflow_id == chat_id)
    path = f"/api/chats/{chat_id}"
    idle = await http.post(f"{path}/stop")
    assert (
        error_of(idle, 409)["message"] == "NotSteered: no turn is being answered: nothing to stop"
    )
    asking = asyncio.create_task(
        http.post(f"{path}/messages", json={"text": "an essay", "id": "e"})
    )
    await asyncio.to_thread(model.wait_for, lambda call: call.workflow_id == chat_id)

    stopped = await http.post(f"{path}/stop")
    reply = await asyncio.wait_for(asking, 30)

    assert stopped.status_code == 200, stopped.text
    assert reply.json() == stopped.json()
    assert (reply.json()["id"], reply.json()["status"]) == ("e", "stopped")
    model.release_all()


async def test_without_the_token_every_api_call_is_401_and_pages_load(
    served: Served,
) -> None:
    async with httpx.AsyncClient(base_url=served.url) as anonymous:
        for method, path in (
            ("GET", "/api/runs"),
            ("POST", "/api/runs"),
            ("GET", "/api/approvals"),
        ):
            response = await anonymous.request(method, path, json={} if method == "POST" else None)
            error = error_of(response, 401)
            assert error["message"] == (
                "this API needs its token: send `Authorization: Bearer <DURAFACT_API_TOKEN>`"
            )
            assert response.headers["www-authenticate"] == "Bearer"
        wrong = await anonymous.get("/api/runs", headers=served.auth("wrong"))
        assert error_of(wrong, 401)["message"] == "the token is wrong"
        page = await anonymous.get("/")
        assert page.status_code == 200 and "token-form" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert (await anonymous.get("/openapi.json")).status_code == 200
        assert (await anonymous.get("/health")).json() == {"ok": True}


async def test_request_bodies_are_capped(http: httpx.AsyncClient) -> None:
    huge = {"type": "PlanExecuteWorkflow", "input": {"text": "x" * 1_100_000}}
    error = error_of(await http.post("/api/runs", json=huge), 413)
    assert error == {
        "type": "TooLarge",
        "message": "the request body is over 1,048,576 bytes, the most taken",
    }

    async def chunks():  # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b"x" * 100_000

    chunked = await http.post(
        "/api/runs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert error_of(chunked, 413)["type"] == "TooLarge"


@pytest.mark.parametrize(
    ("host", "token", "refused"),
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("192.168.1.20", None, True),
        ("0.0.0.0", TOKEN, False),
        ("127.0.0.1", " ", True),
    ],
)
def test_serve_refuses_a_non_loopback_address_without_a_token(
    host: str, token: str | None, refused: bool
) -> None:
    from durafact._api.security import check_bind

    assert (check_bind(host, token) is not None) == refused


async def test_a_query_no_worker_answers_is_503(http: httpx.AsyncClient, client: Client) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        ChatWorkflow.run, ChatInput(), id=chat_id, task_queue=f"nobody-{uuid.uuid4().hex[:6]}"
    )
    try:
        response = await http.get(f"/api/chats/{chat_id}/transcript")
        assert error_of(response, 503)["message"].startswith(f"chat {chat_id}: ")
    finally:
        await handle.terminate("test done")


def test_the_docs_api_table_matches_the_openapi_document() -> None:
    app = create_app(None, Settings(), load_registry(entry_points=False))  # type: ignore[arg-type]

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path)

    served = {(m.upper(), shape(p)) for p, ops in app.openapi()["paths"].items() for m in ops}
    page = (ROOT / "docs/guides/console.md").read_text()
    table = page.split("\n## The HTTP API\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(GET|POST)` \| `([^`]+)` \|", table, re.MULTILINE)
    assert len(rows) == len(set(rows))
    assert {(method, shape(path)) for method, path in rows} == served


async def test_an_escalation_shows_in_the_inbox_with_the_question_that_timed_out(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    request = {"request": REQUEST, "approval_timeout": 3, "on_timeout": "escalate"}
    workflow_id = await start(http, "SupervisorWorkflow", request)
    first = await waiting_question(http, workflow_id)
    escalation = await waiting_question(http, workflow_id, n=2)  # after 3 s of silence
    inbox = (await http.get("/api/approvals")).json()["runs"]
    shown = next(run for run in inbox if run["id"] == workflow_id)["questions"]
    await http.post(f"/api/runs/{workflow_id}/cancel")
    assert [(q["kind"], q["escalates"]) for q in shown] == [("escalate", first["id"])]
    assert escalation["id"] == shown[0]["id"]
    ledger = (await http.get(f"/api/runs/{workflow_id}/artifacts")).json()
    statuses = {
        a["id"]: a["data"]["status"] for a in ledger["artifacts"] if a["type"] == "ApprovalQuestion"
    }
    assert statuses[first["id"]] == "timed_out"


async def test_serve_on_a_public_address_without_a_token_is_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    run = await starter("serve", "--host", "0.0.0.0", env=clean_env(), cwd=tmp_path)
    assert run.code == 2
    assert run.err_lines == [
        "starter: serving on 0.0.0.0 would let anyone who reaches it start and approve runs: "
        "set DURAFACT_API_TOKEN (clients send it as `Authorization: Bearer ...`), or serve on "
        "127.0.0.1"
    ]
    assert not (tmp_path / ".durafact").exists()  # no embedded stack either


async def test_serve_on_a_busy_port_or_an_unknown_host_is_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = await starter("serve", "--port", str(port), env=clean_env(), cwd=tmp_path)
    assert (busy.code, busy.err_lines) == (
        1,
        [f"starter: cannot serve on 127.0.0.1:{port}: Address already in use"],
    )
    env = clean_env(DURAFACT_API_TOKEN=TOKEN)
    unknown = await starter("serve", "--host", "nowhere.invalid", env=env, cwd=tmp_path)
    assert unknown.code == 1
    (line,) = unknown.err_lines
    assert line.startswith("starter: cannot serve on nowhere.invalid:8000: ")
    assert not (tmp_path / ".durafact").exists()  # no embedded stack either


async def test_serve_connects_like_every_command_and_answers_with_the_token(
    client: Client, tmp_path: Path
) -> None:
    port = free_port()
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host, DURAFACT_API_TOKEN=TOKEN
    )
    process = await spawn("serve", "--port", str(port), env=env, cwd=tmp_path)
    try:
        assert process.stdout is not None
        lines = await read_until(process.stdout, "console: ")
        assert lines[-1] == (
            f"console: http://127.0.0.1:{port}/ (API docs: /docs; task queue 'durafact')"
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            recipes = await http.get("/api/recipes", headers={"Authorization": f"Bearer {TOKEN}"})
            assert "SupervisorWorkflow" in {r["type"] for r in recipes.json()}
            assert (await http.get("/api/recipes")).status_code == 401
    finally:
        process.terminate()
        await process.wait()


def busy_agent(call: Call) -> str:
    """A ReAct agent that never answers: a new calculation every turn."""
    turn = call.activity_id.rsplit(":", 1)[-1]
    return f"Thought: compute it.\nAction: calculator\nAction Input: {turn} * 7\nPAUSE"


async def test_a_budget_given_at_start_is_the_runs_and_a_bad_one_starts_nothing(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(busy_agent)
    loop = {"question": "What is 7 times each number?", "max_turns": 30}
    # The body's budget is set over the input's own: tokens from the body, ask from the input.
    asked = await start(
        http,
        "ReActWorkflow",
        {**loop, "budget": {"tokens": 10**6, "on_exhausted": "ask"}},
        budget={"tokens": 900},
    )
    question = await waiting_question(http, asked)
    assert question["settable"] == ["tokens"]
    assert re.fullmatch(r"spent [0-9,]+ of 900 tokens; extend by 900 tokens\?", question["text"])
    path = f"/api/runs/{asked}/approvals/{question['id']}"
    too_low = await http.post(path, json={"approved": True, "changes": {"tokens": "5"}})
    assert "tokens=5 leaves nothing for the next call" in error_of(too_low, 409)["message"]
    rejected = await http.post(path, json={"approved": False, "reason": "enough"})
    assert rejected.status_code == 200, rejected.text
    run = await finished(http, asked)
    assert (run["state"], run["status"]) == ("FAILED", "over_budget")
    assert run["failure"].startswith("OverBudget: over budget: spent ")
    assert run["failure"].endswith(f" of 900 tokens ({question['id']} rejected: enough)")

    zero = await http.post(
        "/api/runs", json={"type": "ReActWorkflow", "input": loop, "budget": {"tokens": 0}}
    )
    assert error_of(zero, 422)
    nothing = await http.post(
        "/api/runs", json={"type": "ReActWorkflow", "input": loop, "budget": {}}
    )
    assert "a budget needs tokens, cost or both" in error_of(nothing, 422)["message"]


async def test_twenty_answers_at_once_one_is_taken_and_the_others_are_told_it_was_answered(
    http: httpx.AsyncClient, model: ScriptedModel
) -> None:
    model.reply(specialist())
    workflow_id = await start(http, "SupervisorWorkflow", {"request": REQUEST})
    question = await waiting_question(http, workflow_id)
    path = f"/api/runs/{workflow_id}/approvals/{question['id']}"

    answers = await asyncio.gather(
        *(http.post(path, json={"approved": True, "by": f"person {n}"}) for n in range(20))
    )

    taken = [a for a in answers if a.status_code == 200]
    assert len(taken) == 1
    # Too late for the question, or for the run it closed: never "no such workflow".
    late = {
        f"decide refused: InvalidAnswer: question {question['id']!r} is already answered "
        "(approved)",
        f"workflow {workflow_id} is COMPLETED: nothing waits for an answer",
    }
    for refused in (a for a in answers if a is not taken[0]):
        assert error_of(refused, 409)["message"] in late


async def listed_rows(http: httpx.AsyncClient, kind: str, workflow_id: str) -> list[dict]:
    """`GET /api/runs`' rows of `workflow_id`, once visibility lists its recipe."""
    for _ in range(300):
        runs = (await http.get("/api/runs", params={"type": kind, "page_size": 200})).json()
        rows = [r for r in runs["runs"] if r["id"] == workflow_id]
        if rows and all(r["recipe"] for r in rows):
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility never listed {workflow_id}")


async def test_the_runs_list_shows_one_row_for_a_run_that_continued_as_new(
    http: httpx.AsyncClient, client: Client, model: ScriptedModel
) -> None:
    def reply(call: Call) -> str:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        if turn <= 12:
            return f'Action: calculator\nAction Input: {{"expression": "{turn} * 3"}}'
        return "Final Answer: done"

    model.reply(reply)
    question = {"question": "Multiply step by step", "max_turns": 20, "continue_after_events": 100}
    workflow_id = await start(http, "ReActWorkflow", question)
    run = await finished(http, workflow_id)
    assert run["state"] == "COMPLETED"
    chain = [e async for e in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    assert len(chain) > 1  # it did continue as new

    (row,) = await listed_rows(http, "ReActWorkflow", workflow_id)
    assert (row["run_id"], row["state"]) == (run["run_id"], "COMPLETED")


async def test_the_runs_list_shows_a_chats_tokens_and_unknown_cost_as_its_page_does(
    http: httpx.AsyncClient,
) -> None:
    chat_id = (await http.post("/api/chats", json={})).json()["id"]
    reply = await http.post(f"/api/chats/{chat_id}/messages", json={"text": "hello"})
    assert reply.status_code == 200, reply.text

    usage = (await http.get(f"/api/runs/{chat_id}")).json()["usage"]
    (row,) = await listed_rows(http, "ChatWorkflow", chat_id)

    assert usage["total_tokens"] > 0 and usage["cost"] is None  # no prices on this worker
    assert (row["tokens"], row["cost"]) == (usage["total_tokens"], None)
