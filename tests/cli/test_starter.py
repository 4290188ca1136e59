"""starter.py as a user runs it: a subprocess, judged by its exit code and output.

Most tests point it at the session dev server (TEMPORAL_ADDRESS) and a task queue
served by the in-process `worker` fixture; the up/down tests run an embedded stack
of their own on free ports in a temporary directory.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durafact._activities.tools import tool
from durafact._cli.arguments import parser, values_of
from durafact._cli.output import ANSWER_HINT
from durafact._core.approval import ApprovalAnswer, ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.sources import SourceSpec
from durafact._recipes import (
    AnswerFlowResult,
    PlanExecuteResult,
    SupervisorResult,
    SupervisorWorkflow,
)
from durafact._recipes.react import ReActResult
from durafact._recipes.recipe import RECIPE_ATTRIBUTE
from durafact._recipes.research_models import ResearchResult
from durafact._runtime.registry import load_registry
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact._service.launch import launch_of_command
from durafact.testing import Call, ScriptedModel, ToolCalls, default_reply
from tests.helpers import (
    DURAFACT_WORKER,
    ROOT,
    clean_env,
    free_port,
    question_waiting,
    read_until,
    spawn,
    starter,
)
from tests.loopback_web import LoopbackWeb, Page
from tests.scripted_answers import answerer
from tests.scripted_research import (
    KAYAK_QUESTION,
    SUM_QUESTION,
    Script,
    kayak_script,
    sum_script,
)

REPO = ROOT
GOAL = "Plan a weekend in Kraków"
ANSWER = "done: Write the final answer."


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rpartition(")")[2].split()[0] == "Z")


def recorded_pid(state: Path, name: str) -> int:
    return json.loads((state / f"{name}.pid").read_text())["pid"]


async def executions(client: Client, query: str) -> list[str]:
    return [w.run_id async for w in client.list_workflows(query)]


def is_plan_call(call: Call) -> bool:
    return call.schema_name == "Plan"


# --- plan, status, result -------------------------------------------------------------


async def test_plan_json_prints_one_object_with_the_completed_result(
    starter_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    run = await starter("plan", GOAL, "--json", env=starter_env, cwd=tmp_path)

    assert run.code == 0, run.err
    assert run.err == ""
    doc = json.loads(run.out)  # the whole of stdout is one JSON object
    assert set(doc) == {"workflow_id", "run_id", "status", "result", "ui_url"}
    assert doc["status"] == "COMPLETED"
    assert doc["workflow_id"].startswith("plan-")
    assert doc["result"]["answer"]["text"] == ANSWER
    result = PlanExecuteResult.model_validate(doc["result"])
    assert [ref.id for ref in result.steps] == [f"step:{GOAL}:{i}" for i in range(3)]
    assert f"/workflows/{doc['workflow_id']}/{doc['run_id']}/" in doc["ui_url"]
    # Legible in the Web UI from the start: summary and recipe search attribute.
    description = await client.get_workflow_handle(doc["workflow_id"]).describe()
    assert await description.static_summary() == f"plan: {GOAL}"
    assert description.typed_search_attributes.get(RECIPE_ATTRIBUTE) == "plan_execute"


async def test_model_text_reaches_the_terminal_with_its_control_characters_shown_as_text(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    # A reply that would retitle the terminal, clear it, start a C1 escape and reverse the
    # rest of its line; tab stays.
    hostile = "Retitled\x1b]0;pwned\x07 cleared\x1b[2J csi\x9b2J\tkept \u202ereversed"
    shown = "Retitled\\x1b]0;pwned\\x07 cleared\\x1b[2J csi\\x9b2J\tkept \\u202ereversed"
    model.reply(lambda call: default_reply(call) if call.schema_name else hostile)
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    plan, as_json, chat = await asyncio.gather(
        starter("plan", GOAL, env=starter_env, cwd=tmp_path),
        starter("plan", GOAL, "--json", env=starter_env, cwd=tmp_path),
        starter("chat", chat_id, "--send", "hello", env=starter_env, cwd=tmp_path),
    )
    assert as_json.code == 0, as_json.err
    document = json.loads(as_json.out)
    artifacts = await starter("artifacts", document["workflow_id"], env=starter_env, cwd=tmp_path)

    for run in (plan, as_json, chat, artifacts):
        assert run.code == 0, run.err
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", run.out), run.out
    assert f"  {shown}" in plan.out.splitlines()  # the answer
    assert document["result"]["answer"]["text"] == hostile  # JSON reads back unchanged
    assert chat.out.splitlines() == [f"assistant> {shown}"]  # streamed, word by word
    assert f"  text:  {shown}" in artifacts.out.splitlines()


async def test_the_same_id_attaches_to_one_workflow_running_or_completed(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = f"plan-same-{uuid.uuid4().hex[:6]}"
    planning = model.hold(is_plan_call)  # keep the first run busy while the second attaches
    first = await spawn("plan", GOAL, "--id", workflow_id, "--json", env=starter_env, cwd=tmp_path)
    await asyncio.to_thread(model.wait_for, is_plan_call)
    second = await spawn("plan", GOAL, "--id", workflow_id, env=starter_env, cwd=tmp_path)
    assert second.stdout is not None
    attached = await read_until(second.stdout, "attached to the running workflow")
    planning.set()
    first_out, _ = await asyncio.wait_for(first.communicate(), 60)
    second_out, _ = await asyncio.wait_for(second.communicate(), 60)
    assert first.returncode == 0 and second.returncode == 0

    run_id = json.loads(first_out)["run_id"]
    assert f"(run {run_id})" in attached[-1]
    assert ANSWER in second_out.decode()
    # Once completed, the same id shows that run's result instead of starting another.
    third = await starter(
        "plan", GOAL, "--id", workflow_id, "--json", env=starter_env, cwd=tmp_path
    )
    assert third.code == 0, third.err
    assert json.loads(third.out)["run_id"] == run_id
    assert json.loads(third.out)["status"] == "COMPLETED"
    assert await executions(client, f'WorkflowId="{workflow_id}"') == [run_id]
    assert len(model.calls_for("llm:plan:")) == 1


async def test_progress_lines_appear_live_while_the_workflow_runs(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    step_two = model.hold(lambda call: "Step 2:" in call.last_user)
    process = await spawn("plan", GOAL, env=starter_env, cwd=tmp_path)
    assert process.stdout is not None
    seen = await read_until(process.stdout, "[executing:2/3] step 2/3")
    assert process.returncode is None  # printed while the workflow was still running
    step_two.set()
    rest, err = await asyncio.wait_for(process.communicate(), 60)
    lines = seen + rest.decode().splitlines()

    assert process.returncode == 0, err
    assert lines[0].startswith("started workflow plan-")
    progress = [line for line in lines if line.startswith("  [")]
    # Each line carries the status it was announced under, even when one poll
    # brought several status changes at once.
    assert progress == [
        f"  [planning] planning: {GOAL}",
        "  [planning] planned 3 steps",
        "  [executing:1/3] step 1/3",
        "  [executing:1/3] step 1/3 done",
        "  [executing:2/3] step 2/3",
        "  [executing:2/3] step 2/3 done",
        "  [executing:3/3] step 3/3",
        "  [executing:3/3] step 3/3 done",
        "  [finishing] finishing",
        "  [completed] completed",
    ]
    assert lines[lines.index("answer:") + 1] == f"  {ANSWER}"
    assert "  1. Gather facts" in lines
    workflow_id = lines[0].split()[2]
    assert lines[-2] == f"artifacts: durafact artifacts {workflow_id}"
    assert lines[-1].startswith("Web UI: http://localhost:8233/namespaces/default/workflows/plan-")


async def test_no_wait_returns_at_once_then_status_and_result_follow_the_workflow(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = f"plan-later-{uuid.uuid4().hex[:6]}"
    planning = model.hold(is_plan_call)  # the workflow cannot finish until released
    started = await starter(
        "plan", GOAL, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path, timeout=15
    )
    assert started.code == 0, started.err
    assert f"started workflow {workflow_id}" in started.out
    assert f"durafact result {workflow_id}" in started.out
    await asyncio.to_thread(model.wait_for, is_plan_call)

    status = await starter("status", workflow_id, env=starter_env, cwd=tmp_path)
    assert status.code == 0, status.err
    assert f"workflow {workflow_id}: RUNNING (PlanExecuteWorkflow" in status.out
    assert "recipe status: planning" in status.out
    assert f"/workflows/{workflow_id}/" in status.out

    planning.set()
    result = await starter("result", workflow_id, env=starter_env, cwd=tmp_path)
    assert result.code == 0, result.err
    assert ANSWER in result.out
    status = await starter("status", workflow_id, env=starter_env, cwd=tmp_path)
    assert f"workflow {workflow_id}: COMPLETED" in status.out
    assert "recipe status: completed" in status.out


async def test_workflow_failure_is_one_line_with_its_type_and_message(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.fail(401, times=10)
    failed = f"plan-denied-{uuid.uuid4().hex[:6]}"
    run, as_json = await asyncio.gather(
        starter("plan", GOAL, "--id", failed, env=starter_env, cwd=tmp_path),
        starter("plan", GOAL, "--id", failed + "-json", "--json", env=starter_env, cwd=tmp_path),
    )

    assert run.code == 1
    assert len(run.err_lines) == 1, run.err
    assert run.err.startswith(
        f"starter: workflow {failed} failed: AuthenticationFailed: model endpoint answered 401"
    )
    assert "  [failed] failed" in run.out.splitlines()
    assert "Traceback" not in run.out + run.err
    assert as_json.code == 1
    assert len(as_json.err_lines) == 1
    doc = json.loads(as_json.out)
    assert (doc["status"], doc["result"]) == ("FAILED", None)


async def test_warns_when_no_worker_polls_the_task_queue(
    starter_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    workflow_id = f"plan-orphan-{uuid.uuid4().hex[:6]}"
    env = starter_env | {"DURAFACT_TASK_QUEUE": queue}
    process = await spawn("plan", GOAL, "--id", workflow_id, env=env, cwd=tmp_path)
    assert process.stderr is not None
    try:
        warning = await read_until(process.stderr, "warning")
    finally:
        process.kill()
        await process.wait()
        await client.get_workflow_handle(workflow_id).terminate("test cleanup")
    assert f"no worker polls task queue {queue!r}" in warning[-1]
    assert "durafact-worker" in warning[-1]


# --- mistakes -------------------------------------------------------------------------


async def test_empty_goal_is_rejected_in_one_line_and_nothing_is_started(
    starter_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    embedded_env = clean_env(DURAFACT_TEMPORAL_PORT=str(free_port()))
    runs = await asyncio.gather(
        starter("plan", "   ", env=starter_env, cwd=tmp_path),
        starter("plan", "", "--json", env=embedded_env, cwd=tmp_path),
    )
    for run in runs:
        assert run.code == 2
        assert run.err == "starter: the goal is empty\n"
        assert run.out == ""
    assert await executions(client, f'TaskQueue="{queue}"') == []
    assert not (tmp_path / ".durafact").exists()  # no embedded stack either


async def test_unknown_command_is_one_line(tmp_path: Path) -> None:
    run = await starter("frobnicate", env=clean_env(), cwd=tmp_path)
    assert run.code == 2
    assert run.err_lines == [
        "starter: unknown command 'frobnicate' "
        "(commands: start, plan, reflect, answer, route, research, react, chat, list, pending, "
        "approve, decide, status, result, cancel, steer, resume, fork, artifacts, check, eval, "
        "serve, up, down, key)"
    ]


async def test_unreachable_explicit_address_fails_naming_it(tmp_path: Path) -> None:
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1")
    # The timeout only bounds a hang (the starter must not retry forever).
    runs = await asyncio.gather(
        starter("plan", GOAL, env=env, cwd=tmp_path, timeout=30),
        starter("status", "plan-x", env=env, cwd=tmp_path, timeout=30),
    )
    for run in runs:
        assert run.code == 1
        assert run.err_lines == ["starter: cannot reach Temporal at 127.0.0.1:1 (TEMPORAL_ADDRESS)"]
    assert not (tmp_path / ".durafact").exists()  # TEMPORAL_ADDRESS set: never a server


async def test_unknown_workflow_id_is_one_line_for_status_and_result(
    starter_env: dict[str, str], tmp_path: Path
) -> None:
    missing = f"plan-missing-{uuid.uuid4().hex[:6]}"
    runs = await asyncio.gather(
        starter("status", missing, env=starter_env, cwd=tmp_path),
        starter("result", missing, "--json", env=starter_env, cwd=tmp_path),
    )
    for run in runs:
        assert run.code == 1
        assert run.err_lines == [f"starter: no workflow with id {missing!r}"]
        assert run.out == ""


# --- the embedded stack ---------------------------------------------------------------


@pytest.fixture
def stack_env(model: ScriptedModel) -> dict[str, str]:
    """No TEMPORAL_ADDRESS: the starter runs its own stack, on free ports, against the
    scripted model (so no local model is needed)."""
    return clean_env(
        DURAFACT_TEMPORAL_PORT=str(free_port()),
        DURAFACT_UI_PORT=str(free_port()),
        DURAFACT_API_PORT=str(free_port()),
        DURAFACT_TASK_QUEUE=f"embedded-{uuid.uuid4().hex[:6]}",
        OPENAI_BASE_URL=model.url,
    )


async def test_up_starts_server_and_worker_in_background_and_down_stops_exactly_them(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    # One state directory (DURAFACT_HOME) whatever the directory a command runs from.
    state = Path(stack_env["DURAFACT_HOME"])
    here, there, elsewhere = (tmp_path / name for name in ("here", "there", "elsewhere"))
    for directory in (here, there, elsewhere):
        directory.mkdir()
    port, ui_port = int(stack_env["DURAFACT_TEMPORAL_PORT"]), stack_env["DURAFACT_UI_PORT"]
    console = f"http://127.0.0.1:{stack_env['DURAFACT_API_PORT']}/"
    try:
        up = await starter("up", env=stack_env, cwd=here)
        assert up.code == 0, up.err
        assert f"started the Temporal dev server on 127.0.0.1:{port}" in up.out
        assert "started a worker on task queue" in up.out
        assert f"started the console on {console}" in up.out
        assert up.out.splitlines()[-2:] == [
            f"Web UI: http://localhost:{ui_port}",
            f"Console: {console}",
        ]
        server, worker = recorded_pid(state, "temporal"), recorded_pid(state, "worker")
        api = recorded_pid(state, "api")
        assert alive(server) and alive(worker) and alive(api) and port_open(port)
        health = await asyncio.to_thread(httpx.get, f"{console}health", timeout=10)
        assert health.json() == {"ok": True}
        assert not (state / "model.pid").exists()  # OPENAI_BASE_URL is set
        assert (state / "temporal.db").exists()

        again = await starter("up", env=stack_env, cwd=there)
        assert again.code == 0, again.err
        assert f"already running on 127.0.0.1:{port} (pid {server})" in again.out
        assert f"(pid {worker})" in again.out

        plan = await starter("plan", GOAL, "--json", env=stack_env, cwd=there)
        assert plan.code == 0, plan.err
        doc = json.loads(plan.out)
        assert doc["status"] == "COMPLETED"
        assert doc["result"]["answer"]["text"] == ANSWER
        assert doc["ui_url"].startswith(f"http://localhost:{ui_port}/namespaces/default/")
    finally:
        down = await starter("down", env=stack_env, cwd=elsewhere)
    assert down.code == 0, down.err
    assert down.out.splitlines() == [
        f"stopped the console (pid {api})",
        f"stopped a worker (pid {worker})",
        f"stopped the Temporal dev server (pid {server})",
    ]
    assert not alive(server) and not alive(worker) and not alive(api) and not port_open(port)
    assert list(state.glob("*.pid")) == []

    nothing = await starter("down", env=stack_env, cwd=here)
    assert nothing.code == 0
    assert nothing.out.startswith("nothing is running")


async def test_plan_without_temporal_address_starts_the_embedded_stack_first(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    try:
        plan = await starter("plan", GOAL, "--json", env=stack_env, cwd=tmp_path)
    finally:
        down = await starter("down", env=stack_env, cwd=tmp_path)
    assert plan.code == 0, plan.err
    assert json.loads(plan.out)["status"] == "COMPLETED"  # stdout stays one JSON object
    assert "starting the embedded stack" in plan.err
    assert "started a worker" in plan.err
    assert "stopped the Temporal dev server" in down.out


async def test_up_fails_with_the_local_models_reason_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = clean_env(
        DURAFACT_TEMPORAL_PORT=str(port),
        DURAFACT_UI_PORT=str(free_port()),
        DURAFACT_MODEL_PORT=str(free_port()),
        DURAFACT_API_PORT=str(free_port()),
        DURAFACT_LOCAL_MODEL_PATH=str(tmp_path / "missing.gguf"),
    )
    up = await starter("up", env=env, cwd=tmp_path)

    assert up.code == 1
    assert up.err_lines[-1].startswith("starter: the local model cannot start: ")
    assert "OPENAI_BASE_URL" in up.err_lines[-1]
    assert list((tmp_path / ".durafact").glob("*.pid")) == []
    assert not port_open(port)  # the server it started was stopped again


async def test_down_never_signals_a_process_it_did_not_start(tmp_path: Path) -> None:
    state = tmp_path / ".durafact"
    state.mkdir()
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        # A pid file whose pid now belongs to someone else (recycled, or edited).
        argv = [*DURAFACT_WORKER]
        (state / "worker.pid").write_text(json.dumps({"pid": bystander.pid, "argv": argv}))
        down = await starter("down", env=clean_env(), cwd=tmp_path)
        assert down.code == 0, down.err
        assert f"stale pid file for pid {bystander.pid} removed" in down.out
        assert "nothing is running" in down.out
        assert bystander.poll() is None
        assert not (state / "worker.pid").exists()
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()


# --- reflect and answer ---------------------------------------------------------------


async def test_reflect_runs_the_reflection_recipe_and_prints_the_ending(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    def critic(call: Call) -> str | dict:
        if call.schema_name == "Critique":
            return {"score": 0.9, "feedback": "good"}
        return "A short text."

    model.reply(critic)
    run = await starter("reflect", "Why retries belong to Temporal", env=starter_env, cwd=tmp_path)
    assert run.code == 0, run.err
    assert "accepted after 0 rewrite(s) and 1 critique(s); scores: 0.90" in run.out
    assert "  A short text." in run.out
    assert "[critiquing:1]" in run.out


async def test_answer_runs_the_shipped_example_batch(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(answerer())
    run = await starter(
        "answer", str(REPO / "examples" / "questions.json"), "--json", env=starter_env, cwd=tmp_path
    )
    assert run.code == 0, run.err
    result = AnswerFlowResult.model_validate(json.loads(run.out)["result"])
    assert {r.item_id: r.status for r in result.results} == {
        "retries": "accepted",
        "history": "accepted",
        "pricing": "fallback",  # no source: "not enough information"
    }


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["reflect", "  "], "starter: the topic is empty"),
        (["reflect", "x", "--accept-at", "2"], "starter: --accept-at: "),
        (["reflect", "x", "--max-rounds", "0"], "starter: --max-rounds: "),
        (["answer", "missing.json"], "starter: cannot read missing.json: "),
        (["answer", "bad.json"], "starter: bad.json: the batch is not valid JSON"),
        (["answer", "dupes.json"], "starter: dupes.json: "),
        (["answer", "ok.json", "--review", "always"], "starter: argument --review: invalid"),
    ],
)
async def test_bad_reflect_and_answer_input_is_one_line_and_starts_nothing(
    starter_env: dict[str, str], client: Client, tmp_path: Path, args: list[str], reason: str
) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    question = {"id": "q1", "question": "?", "source": "text"}
    (tmp_path / "dupes.json").write_text(json.dumps([question, question]))
    (tmp_path / "ok.json").write_text(json.dumps([question]))
    run = await starter(*args, env=starter_env, cwd=tmp_path)
    assert run.code == 2
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(reason), run.err
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    assert await executions(client, f'TaskQueue="{queue}"') == []


async def test_start_refuses_an_answer_batch_that_breaks_its_rules_as_answer_does(
    starter_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    batch = {"questions": [{"id": "../x", "question": "Why?", "source": "Because."}]}
    (tmp_path / "batch.json").write_text(json.dumps(batch))

    started = await starter(
        "start", "AnswerFlowWorkflow", "--input", "@batch.json", env=starter_env, cwd=tmp_path
    )
    answered = await starter("answer", "batch.json", env=starter_env, cwd=tmp_path)

    rule = "question 1 has the id '../x': an id is 1-64 letters, digits, '_', '.' or '-'"
    assert (started.code, answered.code) == (2, 2)
    assert started.err_lines == [
        f"starter: --input does not fit AnswerBatchInput: {rule}, starting with a letter or digit"
    ]
    assert answered.err_lines[0].startswith(f"starter: batch.json: {rule}")
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    assert await executions(client, f'TaskQueue="{queue}"') == []


# --- route, pending, approve, decide ----------------------------------------------------

REQUEST = "Renovate the kitchen for 3000 EUR by March"


def specialist(call: Call) -> str | dict:
    if call.schema_name == "Facts":
        return {"scope": "kitchen", "budget": "3000 EUR", "deadline": "March"}
    if call.schema_name == "RouteChoice":
        return {"route": "budget", "reason": "money"}
    return f"Report {call.activity_id}"


async def route_waiting(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> tuple[str, ApprovalQuestion]:
    model.reply(specialist)
    workflow_id = f"route-{uuid.uuid4().hex[:6]}"
    started = await starter(
        "route", REQUEST, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert started.code == 0, started.err
    assert f"started workflow {workflow_id}" in started.out
    assert f"answer: durafact approve {workflow_id} [--reject]" in started.out
    return workflow_id, await question_waiting(client.get_workflow_handle(workflow_id))


async def test_route_waits_in_pending_until_approve_signals_it_through_a_rebuild(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id, first = await route_waiting(starter_env, client, model, tmp_path)

    # pending reads the visibility store, which may lag the workflow by a moment.
    for _ in range(50):
        listed = await starter("pending", "--json", env=starter_env, cwd=tmp_path)
        assert listed.code == 0, listed.err
        rows = [w for w in json.loads(listed.out)["workflows"] if w["workflow_id"] == workflow_id]
        if rows:
            break
        await asyncio.sleep(0.2)
    [row] = rows
    assert row["workflow_type"] == "SupervisorWorkflow" and row["error"] is None
    [question] = row["questions"]
    assert (question["id"], question["kind"]) == (first.id, "approve")
    assert question["text"].startswith(f"Approve the budget report for {REQUEST!r}?")
    text = await starter("pending", env=starter_env, cwd=tmp_path)
    lines = text.out.splitlines()
    assert f"{workflow_id}  {first.id}  approve" in lines
    assert lines[lines.index(f"{workflow_id}  {first.id}  approve") + 1] == (
        f"  Approve the budget report for {REQUEST!r}?"
    )
    assert lines[-1].endswith("answer one: durafact approve ID " + ANSWER_HINT)
    status = await starter("status", workflow_id, env=starter_env, cwd=tmp_path)
    assert "recipe status: awaiting_approval" in status.out
    assert f"waiting for a person: {first.id} (approve)" in status.out

    rejected = await starter(
        "approve", workflow_id, "--reject", "--reason", "more money", "--set", "budget=5000 EUR",
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert rejected.code == 0, rejected.err
    assert rejected.out.splitlines()[0] == (
        f"rejected {first.id} of workflow {workflow_id} with budget=5000 EUR (signal sent)"
    )
    second = await question_waiting(client.get_workflow_handle(workflow_id), 2)
    approved = await starter("approve", workflow_id, env=starter_env, cwd=tmp_path)
    assert approved.code == 0, approved.err
    assert approved.out.startswith(f"approved {second.id} of workflow {workflow_id} (signal sent)")

    result = await starter("result", workflow_id, env=starter_env, cwd=tmp_path)
    assert result.code == 0, result.err
    out = result.out.splitlines()
    assert "route: budget (model)" in out
    assert "facts: scope=kitchen, budget=5000 EUR, deadline=March" in out
    assert "report (attempt 2):" in out
    user = getpass.getuser()
    assert (
        f"  {first.id} (approve) rejected by {user}: more money (changes: budget=5000 EUR)" in out
    )
    assert f"  {second.id} (approve) approved by {user}" in out
    assert out[out.index("reply:") + 1].startswith("  Approved: the budget report (attempt 2)")
    assert len(model.calls_for(f"llm:report:{REQUEST}")) == 2


async def test_route_says_once_that_it_waits_for_a_person_and_how_to_answer(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(specialist)
    workflow_id = f"route-{uuid.uuid4().hex[:6]}"
    process = await spawn("route", REQUEST, "--id", workflow_id, env=starter_env, cwd=tmp_path)
    assert process.stdout is not None
    seen = await read_until(process.stdout, "waiting for a person")
    question = await question_waiting(client.get_workflow_handle(workflow_id))
    await client.get_workflow_handle(workflow_id).signal(
        SupervisorWorkflow.answer, ApprovalAnswer(approved=True, by="ben")
    )
    rest, err = await asyncio.wait_for(process.communicate(), 60)
    lines = seen + rest.decode().splitlines()

    assert process.returncode == 0, err
    hint = f"  waiting for a person: durafact approve {workflow_id} {ANSWER_HINT}"
    assert lines.count(hint) == 1
    asked = lines.index(hint) - 3  # the question, its facts and report lines, then the hint
    assert lines[asked] == (
        f"  [awaiting_approval] {question.id} (approve): Approve the budget report for {REQUEST!r}?"
    )
    assert lines[asked + 1].strip().startswith("Facts: scope=kitchen")
    assert f"  [awaiting_approval] {question.id} approved by ben" in lines
    assert "reply:" in lines


async def test_decide_prints_the_outcome_or_the_validators_reason_without_touching_history(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id, question = await route_waiting(starter_env, client, model, tmp_path)
    handle = client.get_workflow_handle(workflow_id)
    before = len((await handle.fetch_history()).events)
    wrong = f"approval:{REQUEST}:7"
    refused = await starter(
        "decide", workflow_id, wrong, "--approve", env=starter_env, cwd=tmp_path
    )
    assert refused.code == 1
    assert refused.err_lines == [
        f"starter: decide refused: InvalidAnswer: no question {wrong!r} was asked"
    ]
    assert refused.out == ""
    assert len((await handle.fetch_history()).events) == before

    decided = await starter(
        "decide", workflow_id, question.id, "--reject", "--reason", "not now",
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert decided.code == 0, decided.err
    assert decided.out.splitlines()[0] == f"{question.id} rejected: not now"
    result = SupervisorResult.model_validate(await handle.result())
    assert not result.approved and result.reply.text.startswith("Rejected (not now)")
    again = await starter(
        "decide", workflow_id, question.id, "--approve", env=starter_env, cwd=tmp_path
    )
    assert again.code == 1
    assert again.err_lines == [
        f"starter: workflow {workflow_id} is COMPLETED: nothing waits for an answer"
    ]


async def test_decide_takes_the_questions_number_in_its_thread(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id, question = await route_waiting(starter_env, client, model, tmp_path)
    none = await starter("decide", workflow_id, "2", "--approve", env=starter_env, cwd=tmp_path)
    assert none.err_lines == [
        f"starter: workflow {workflow_id}: no pending question is number 2 of its thread"
    ]
    decided = await starter("decide", workflow_id, "1", "--approve", env=starter_env, cwd=tmp_path)
    assert decided.code == 0, decided.err
    assert decided.out.splitlines()[0] == f"{question.id} approved"
    assert SupervisorResult.model_validate(await client.get_workflow_handle(workflow_id).result())


async def test_approve_and_decide_say_in_one_line_when_nothing_can_be_answered(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(specialist)
    missing = f"route-missing-{uuid.uuid4().hex[:6]}"
    facts = model.hold(lambda call: call.schema_name == "Facts")  # running, nothing asked yet
    busy = f"route-busy-{uuid.uuid4().hex[:6]}"
    started = await starter(
        "route", REQUEST, "--id", busy, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert started.code == 0, started.err
    await asyncio.to_thread(model.wait_for, lambda call: call.schema_name == "Facts")
    try:
        runs = await asyncio.gather(
            starter("approve", missing, env=starter_env, cwd=tmp_path),
            starter("decide", missing, "approval:x:1", "--approve", env=starter_env, cwd=tmp_path),
            starter("approve", busy, "--reject", env=starter_env, cwd=tmp_path),
        )
    finally:
        facts.set()
    for run in runs[:2]:
        assert run.code == 1
        assert run.err_lines == [f"starter: no workflow with id {missing!r}"]
    assert runs[2].code == 1
    assert runs[2].err_lines == [f"starter: workflow {busy} has no pending question"]
    await question_waiting(client.get_workflow_handle(busy))
    unknown = await starter(
        "approve", busy, "--reject", "--set", "colour=red", env=starter_env, cwd=tmp_path
    )
    assert unknown.code == 2
    assert unknown.err_lines == [
        "starter: --set colour: not a fact of SupervisorWorkflow (facts: scope, budget, deadline)"
    ]
    await client.get_workflow_handle(busy).terminate("test cleanup")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["route", "  "], "starter: the request is empty"),
        (["route", "x", "--approval-timeout", "5x"], "starter: --approval-timeout: '5x' is not"),
        (["route", "x", "--approval-timeout", "0s"], "starter: --approval-timeout: '0s' is not"),
        (["route", "x", "--approval-timeout", "1.5h"], "starter: --approval-timeout: '1.5h'"),
        (["route", "x", "--approval-timeout", " 2h"], "starter: --approval-timeout: ' 2h'"),
        (["route", "x", "--on-timeout", "escalate"], "starter: --on-timeout needs --approval-"),
        (["route", "x", "--on-timeout", "wait"], "starter: argument --on-timeout: invalid"),
        (["approve", "w", "--set", "budget=1"], "starter: --set goes with --reject"),
        (["approve", "w", "--reject", "--set", "budget"], "starter: --set 'budget': expected"),
        (["approve", "w", "--reject", "--set", "budget= "], "starter: --set budget: the value"),
        (["decide", "w", "q"], "starter: one of the arguments --approve --reject is required"),
        (["decide", "w", "q", "--approve", "--reject"], "starter: argument --reject: not allowed"),
    ],
)
async def test_bad_route_and_approval_input_is_one_line_and_starts_nothing(
    starter_env: dict[str, str], client: Client, tmp_path: Path, args: list[str], reason: str
) -> None:
    run = await starter(*args, env=starter_env, cwd=tmp_path)
    assert run.code == 2
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(reason), run.err
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    assert await executions(client, f'TaskQueue="{queue}"') == []


# --- research ---------------------------------------------------------------------------


async def test_research_answers_from_the_sample_shop_and_prints_the_provenance_tree(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(sum_script())
    run = await starter("research", SUM_QUESTION, env=starter_env, cwd=tmp_path)

    assert run.code == 0, run.err
    lines = run.out.splitlines()
    answer = lines.index("answer:")
    assert lines[answer + 1].startswith("  Renting a city bike with a child seat and a helmet")
    assert "20.50 EUR" in lines[answer + 1]
    tree = lines[lines.index("provenance:") + 1 :]
    assert tree[0].startswith("  answer:") and tree[0].endswith("(ResearchAnswer)")
    assert any(line.lstrip().startswith("supported_by -> calc:") for line in tree)
    assert any("computed_from -> resolved:ref:" in line for line in tree)
    assert any("materialized_from -> ref:" in line for line in tree)
    assert any(line.lstrip().startswith("found_by -> source:prices") for line in tree)
    # Live progress, labelled with the status machine's statuses.
    assert "  [researching] searching docs" in lines
    assert "  [answered] research status: answerable -> answered" in lines, run.out


async def test_research_reads_the_given_files_and_fetches_only_a_chosen_url(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    web = LoopbackWeb(
        pages={
            "/late": Page("Late returns", "A bike returned after closing costs one extra day."),
            "/cafe": Page("Cafe news", "The mill cafe reopens in May."),
        }
    ).start()
    try:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "terms.md").write_text("# Terms\n\nPhoto ID is needed to rent.")
        (tmp_path / "fleet.csv").write_text("code,name,price\nb1,City bike,14.00\n")
        model.reply(
            Script(
                pick=[web.url("/late")],
                quotes=["A bike returned after closing costs one extra day."],
                claims=[
                    (
                        "Late returns cost one extra day.",
                        ["A bike returned after closing costs one extra day."],
                        None,
                    )
                ],
                answer="Returning late costs one extra day.",
            )
        )
        run = await starter(
            "research",
            "What does a late return cost?",
            "--docs", "docs",
            "--csv", "fleet.csv",
            "--url", web.url("/late"),
            "--url", web.url("/cafe"),
            "--allow-private",
            "--json",
            env=starter_env,
            cwd=tmp_path,
        )  # fmt: skip
    finally:
        web.stop()

    assert run.code == 0, run.err
    document = json.loads(run.out)
    result = ResearchResult.model_validate(document["result"])
    assert result.status == "answered" and result.answer == "Returning late costs one extra day."
    shown = await starter(
        "artifacts", document["workflow_id"], "--json", env=starter_env, cwd=tmp_path
    )
    ledger = Ledger.model_validate(json.loads(shown.out)["ledger"])
    specs = {s.data.source_id: s for s in ledger.find_all(SourceSpec)}
    assert specs["docs"].data.root == str(tmp_path / "docs")
    assert specs["prices"].data.key == "code"  # the first column, when --csv-key is not given
    assert specs["web"].data.allow_private is True
    assert web.requests == {"/late": 1}


async def test_research_without_an_answer_in_the_sources_says_insufficient(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(kayak_script())
    run = await starter("research", KAYAK_QUESTION, env=starter_env, cwd=tmp_path)
    assert run.code == 0, run.err
    assert "insufficient: no quote from the documents answers the question" in run.out
    assert "provenance:" not in run.out


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["research", "  "], "starter: the question is empty"),
        (["research", "x", "--docs", "nowhere"], "starter: --docs: nowhere is not a directory"),
        (["research", "x", "--csv", "none.csv"], "starter: --csv: cannot read none.csv: "),
        (["research", "x", "--csv", "ok.csv", "--csv-key", "sku"], "starter: --csv-key: ok.csv"),
        (["research", "x", "--csv-key", "sku"], "starter: --csv-key needs --csv"),
        (["research", "x", "--allow-private"], "starter: --allow-private applies to --url"),
        (["research", "x", "--url", "ftp://a/b"], "starter: not an http(s) URL: ftp://a/b"),
        (["research", "x", "--limit", "0"], "starter: --limit: "),
        (["research", "x", "--max-docs", "99"], "starter: --max-docs: "),
    ],
)
async def test_bad_research_input_is_one_line_and_starts_nothing(
    starter_env: dict[str, str], client: Client, tmp_path: Path, args: list[str], reason: str
) -> None:
    (tmp_path / "ok.csv").write_text("item,price\nhelmet,2.00\n")
    run = await starter(*args, env=starter_env, cwd=tmp_path)
    assert run.code == 2
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(reason), run.err
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    assert await executions(client, f'TaskQueue="{queue}"') == []


# --- react ------------------------------------------------------------------------------

CALC_QUESTION = "What is 17 * 23?"
LONG_THOUGHT = "I should multiply the two numbers, " + "checking every digit twice, " * 12


@tool(destructive=True)
def shred(path: str) -> str:
    """Shred a document for good."""
    return f"shredded {path}"


@pytest.fixture
async def shredder_env(
    client: Client, settings: Settings, model: ScriptedModel
) -> AsyncIterator[dict[str, str]]:
    """The starter on a task queue whose in-process worker also runs the destructive `shred`."""
    async with build_worker(client, settings, tools=[shred]):
        yield clean_env(
            TEMPORAL_ADDRESS=client.service_client.config.target_host,
            DURAFACT_TASK_QUEUE=settings.task_queue,
            OPENAI_BASE_URL=model.url,
        )


def agent(*replies: str) -> Callable[[Call], str]:
    """Reply n answers the tool loop's model call of turn n (`llm:react:{run}:{n}`)."""

    def reply(call: Call) -> str:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        return replies[min(turn, len(replies)) - 1]

    return reply


def act(tool_name: str, arguments: str, thought: str = "I should use a tool.") -> str:
    return f"Thought: {thought}\nAction: {tool_name}\nAction Input: {arguments}\nPAUSE"


def final(answer: str) -> str:
    return f"Thought: I now know the answer.\nFinal Answer: {answer}"


async def test_react_answers_a_calculator_question_showing_each_turn_in_one_short_line(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(agent(act("calculator", '{"expression": "17 * 23"}', LONG_THOUGHT), final("391")))
    run = await starter("react", CALC_QUESTION, env=starter_env, cwd=tmp_path)

    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].startswith("started workflow react-")
    progress = [line for line in lines if line.startswith("  [")]
    assert "  [starting] tools: calculator" in progress, run.out
    thought = next(line for line in progress if "] Thought: I should multiply" in line)
    assert len(thought) <= 100 and thought.endswith("…")  # cut, however long the thought
    assert '  [turn:1] Action: calculator {"expression": "17 * 23"}' in progress
    assert "  [calling:calculator] Observation: 391" in progress
    assert "  [turn:2] Answer: 391" in progress
    # In the order the loop ran them: thought, action, observation, then the answer.
    order = [thought, "  [calling:calculator] Observation: 391", "  [turn:2] Answer: 391"]
    positions = [progress.index(line) for line in order]
    assert positions == sorted(positions)
    # The result: the answer, the turns, and each tool call with how it went.
    assert lines[lines.index("answer:") + 1] == "  391"
    assert "turns: 2" in lines
    assert lines[lines.index("tool calls:") + 1] == "  turn 1: calculator ok"
    assert lines[-1].startswith("Web UI: http://localhost:8233/namespaces/default/workflows/react-")
    workflow_id = lines[0].split()[2]
    description = await client.get_workflow_handle(workflow_id).describe()
    assert await description.static_summary() == f"react: {CALC_QUESTION}"
    assert description.typed_search_attributes.get(RECIPE_ATTRIBUTE) == "react"


async def test_react_json_is_one_object_with_the_loops_result_in_either_protocol(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(agent(act("calculator", "2 ** 10"), final("1024")))
    text = await starter(
        "react", "What is 2 to the 10th?", "--max-turns", "3", "--json",
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip

    assert text.code == 0, text.err
    assert text.err == ""
    doc = json.loads(text.out)  # the whole of stdout is one JSON object, no progress
    assert set(doc) == {"workflow_id", "run_id", "status", "result", "ui_url"}
    assert doc["status"] == "COMPLETED" and doc["workflow_id"].startswith("react-")
    result = ReActResult.model_validate(doc["result"])
    assert (result.ending, result.answer, result.turns) == ("answer", "1024", 2)
    assert [(c.tool, c.ok) for c in result.tool_calls] == [("calculator", True)]

    model.reset()
    both = [("calculator", {"expression": "2 ** 10"}), ("calculator", {"expression": "2 ** 5"})]

    def native(call: Call) -> str | ToolCalls:
        return ToolCalls(both) if call.activity_id.endswith(":1") else "1024 and 32"

    model.reply(native)
    run = await starter(
        "react", "What are 2**10 and 2**5?", "--protocol", "native", "--json",
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert run.code == 0, run.err
    result = ReActResult.model_validate(json.loads(run.out)["result"])
    assert (result.answer, result.turns) == ("1024 and 32", 2)
    assert [(c.tool, c.ok) for c in result.tool_calls] == [("calculator", True)] * 2
    assert model.calls_for("llm:react:")[0].tool_names == ["calculator"]  # tools= was used

    model.reset()
    model.reply(agent(*[act("calculator", f"{n} * 2") for n in range(1, 13)], final("done")))
    pruned = await starter(
        "react", "Double twelve numbers", "--context", "prune_observations", "--max-turns", "13",
        "--json", env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert pruned.code == 0, pruned.err
    # The last 10 turns are shown whole: at turn 12, turn 1's observation is pruned.
    twelfth = model.calls_for("llm:react:")[11].text
    assert "Observation: 2\n[pruned: see obs:Double twelve numbers:1:0]" in twelfth
    assert "[pruned: see obs:Double twelve numbers:2:0]" not in twelfth


async def test_react_without_an_answer_says_how_the_loop_ended(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(agent(act("calculator", "1 / 0")))  # the same failing call, every turn
    looping = await starter("react", "What is 1 / 0?", env=starter_env, cwd=tmp_path)
    assert looping.code == 0, looping.err
    lines = looping.out.splitlines()
    assert any(line.startswith("no answer: looping: calculator failed (") for line in lines)
    assert "  turn 3: calculator failed (ToolError)" in lines, looping.out

    model.reply(agent(act("calculator", "1 + 1", "Let me check again.")))
    limited = await starter(
        "react", "What is 1 + 1?", "--max-turns", "2", env=starter_env, cwd=tmp_path
    )
    assert limited.code == 0, limited.err
    assert "no answer: turn_limit: the model did not answer within 2 turns" in limited.out
    assert "turns: 2" in limited.out.splitlines()


async def test_react_asks_a_person_before_a_destructive_tool_and_says_how_to_answer(
    shredder_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(agent(act("shred", '{"path": "q3.pdf"}'), final("Shredded q3.pdf.")))
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    process = await spawn(
        "react", "Shred q3.pdf", "--tools", "shred", "--id", workflow_id,
        env=shredder_env, cwd=tmp_path,
    )  # fmt: skip
    assert process.stdout is not None
    seen = await read_until(process.stdout, "waiting for a person")
    question = await question_waiting(client.get_workflow_handle(workflow_id))
    approved = await starter("approve", workflow_id, env=shredder_env, cwd=tmp_path)
    assert approved.code == 0, approved.err
    rest, err = await asyncio.wait_for(process.communicate(), 60)
    lines = seen + rest.decode().splitlines()

    assert process.returncode == 0, err
    hint = f"  waiting for a person: durafact approve {workflow_id} {ANSWER_HINT}"
    assert lines.count(hint) == 1
    asked = lines[lines.index(hint) - 1]
    assert asked.startswith(f"  [awaiting_approval] {question.id} (approve): Run the destructive")
    assert "  [calling:shred] Observation: shredded q3.pdf" in lines
    assert lines[lines.index("tool calls:") + 1] == "  turn 1: shred ok"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["react", "  "], "starter: the question is empty"),
        (["react", "x", "--max-turns", "0"], "starter: --max-turns: "),
        (["react", "x", "--tools", "calculator,no such"], "starter: --tools: not tool names"),
        (["react", "x", "--mcp", "a/b"], "starter: --mcp: not tool names"),
        (["react", "x", "--protocol", "json"], "starter: argument --protocol: invalid choice"),
        (
            ["react", "x", "--tools", "calculator,nosuchtool"],
            "starter: --tools: unknown tool 'nosuchtool': this worker has [calculator]",
        ),
        (
            ["react", "x", "--mcp", "notes"],
            "starter: --mcp: unknown MCP server 'notes': this worker has none (configure",
        ),
    ],
)
async def test_bad_react_input_is_one_line_and_starts_nothing(
    starter_env: dict[str, str], client: Client, tmp_path: Path, args: list[str], reason: str
) -> None:
    run = await starter(*args, env=starter_env, cwd=tmp_path)
    assert run.code == 2
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(reason), run.err
    assert run.out == ""
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    assert await executions(client, f'TaskQueue="{queue}"') == []


# --- every input bounded (issue 12) -----------------------------------------------------


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["plan", "\udcff\udcfe"], r"starter: argument 2 is not valid UTF-8 text: \xff\xfe"),
        (["status", "run-\udcff"], r"starter: argument 2 is not valid UTF-8 text: run-\xff"),
        (["answer", "deep.json"], "starter: deep.json: the batch is nested too deeply"),
        (["answer", "long.json"], "starter: long.json: the batch holds a number too long"),
        (
            ["start", "PlanExecuteWorkflow", "--input", '{"max_steps": ' + "7" * 5000 + "}"],
            "starter: --input holds a number too long to read",
        ),
        (
            ["route", "r", "--approval-timeout", "9" * 5000 + "s"],
            "starter: --approval-timeout: '999",
        ),
        (
            ["start", "PlanExecuteWorkflow", "--input", "@deep.json"],
            "starter: --input @deep.json is nested more than 100 levels deep",
        ),
        (
            ["start", "PlanExecuteWorkflow", "--input", f'{{"text": "x", "extra": {nested(900)}}}'],
            "starter: --input is nested more than 100 levels deep",
        ),
        (
            ["start", "PlanExecuteWorkflow", "--input", '{"text": "\\ud800"}'],
            "starter: the input cannot be sent to Temporal: it holds text that is not valid "
            "Unicode",
        ),
        (
            ["answer", "surrogate.json"],
            "starter: the input cannot be sent to Temporal: it holds text that is not valid "
            "Unicode",
        ),
        (
            ["route", "r", "--approval-timeout", "99999999999999999999d"],
            "starter: --approval-timeout: '99999999999999999999d' is longer than 100 years",
        ),
        (
            ["research", "x", "--url", "http://example.org/", "--allow-network", "10.0.0.1/8"],
            "starter: --allow-network: '10.0.0.1/8' is not a network",
        ),
        (
            ["research", "x", "--allow-network", "10.0.0.0/8"],
            "starter: --allow-network applies to --url and --search-endpoint",
        ),
        (
            ["plan", "x", "--max-steps", "101"],
            "starter: --max-steps: Input should be less than or equal to 100",
        ),
    ],
)
async def test_bad_bytes_deep_nesting_and_overflows_are_one_line_and_exit_code_2(
    tmp_path: Path, args: list[str], reason: str
) -> None:
    (tmp_path / "deep.json").write_text(nested(100_000))
    (tmp_path / "long.json").write_text('{"questions": [], "max_repairs": ' + "7" * 5000 + "}")
    question = '{"id": "q1", "question": "\\ud800?", "source": "text"}'
    (tmp_path / "surrogate.json").write_text(f"[{question}]")
    # An unreachable server: input that got as far as connecting would fail there, code 1.
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1")
    run = await starter(*args, env=env, cwd=tmp_path)
    assert (run.code, run.out) == (2, ""), run.err
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(reason), run.err


def test_allow_network_puts_each_network_in_the_web_sources_spec() -> None:
    args = parser().parse_args(
        ["research", "q", "--url", "http://wiki.internal/", "--allow-network", "10.1.2.0/24",
         "--allow-network", "192.168.0.5"]
    )  # fmt: skip
    research = load_registry([]).commands()["research"]
    launch = launch_of_command(research, values_of(args, args.declared))
    [web] = [spec for spec in launch.args[0].sources if spec.kind == "web"]
    assert web.allowed_networks == ["10.1.2.0/24", "192.168.0.5/32"]
    assert web.allow_private is None


async def test_ids_in_suggested_commands_are_shell_quoted(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = f"plan it's {uuid.uuid4().hex[:6]}\nsecond line"
    run = await starter(
        "plan", GOAL, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert run.code == 0, run.err
    suggested = run.out[run.out.index("result: ") + len("result: ") :]
    assert shlex.split(suggested)[:3] == ["durafact", "result", workflow_id]
    await client.get_workflow_handle(workflow_id).result()

    # A question id needs no quoting, however long the request's words.
    route_id, question = await route_waiting(starter_env, client, model, tmp_path)
    status = await starter("status", route_id, env=starter_env, cwd=tmp_path)
    [line] = [line for line in status.out.splitlines() if line.startswith("  decide: ")]
    assert question.id == shlex.quote(question.id) and len(question.id) <= 40
    assert shlex.split(line.removeprefix("  decide: "))[:4] == [
        "durafact", "decide", route_id, question.id
    ]  # fmt: skip
    await client.get_workflow_handle(route_id).signal(
        SupervisorWorkflow.answer, ApprovalAnswer(approved=True, by="test")
    )
