"""Worker deployment versioning on a real dev server: two builds of one deployment on one
task queue, as in a rolling deploy. Which worker ran a run is read from its history:
each workflow task completed names the build that completed it.

- a run pinned to build A finishes on A's worker while B is current; a new run starts on B;
- a chat, and a long ReAct loop, move to B at their next continue-as-new, which they
  make once B is current;
- a build id without a deployment (or the reverse) is one line before anything runs;
  without either, the worker is not versioned.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, RoutingConfigUpdateState, VersioningBehavior
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Replayer

from durafact._recipes import (
    ChatInput,
    ChatReply,
    ChatSend,
    ChatWorkflow,
    ReActInput,
    ReActResult,
    ReActWorkflow,
    SupervisorRequest,
    SupervisorResult,
    SupervisorWorkflow,
)
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.settings import Settings
from durafact._runtime.versioning import DeploymentConfigError
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, approve, waiting_question
from tests.cli.test_starter import REQUEST, specialist
from tests.helpers import DURAFACT_WORKER, ROOT, clean_env, run_command

SWITCH_TIMEOUT = 30.0


async def make_current(client: Client, deployment: str, build: str) -> None:
    """What `temporal worker deployment set-current-version` does, once the server knows
    the build (from its worker's first poll); then until the task queues know it too
    (about a second on the dev server): a run learns of a new version from them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SWITCH_TIMEOUT
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace, deployment_name=deployment, build_id=build
    )
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(request)
            break
        except RPCError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)
    describe = DescribeWorkerDeploymentRequest(
        namespace=client.namespace, deployment_name=deployment
    )
    while True:
        info = (
            await client.workflow_service.describe_worker_deployment(describe)
        ).worker_deployment_info
        if (
            info.routing_config_update_state
            == RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
        ):
            return
        assert loop.time() < deadline, f"{deployment}.{build} did not reach its task queues"
        await asyncio.sleep(0.05)


async def builds(client: Client, workflow_id: str, run_id: str | None) -> list[str]:
    """The build of the worker that completed each workflow task of a run, in order."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return [
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]


async def runs_of(client: Client, workflow_id: str) -> list[str]:
    """The run ids of a workflow id, first run first."""
    found = [w async for w in client.list_workflows(f'WorkflowId="{workflow_id}"')]
    return [w.run_id for w in sorted(found, key=lambda w: w.start_time)]


async def next_run(client: Client, handle: WorkflowHandle[Any, Any], after: str) -> str:
    """The run id of the run that continued `after`, once it started."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SWITCH_TIMEOUT
    while (run_id := (await handle.describe()).run_id) == after:
        assert loop.time() < deadline, f"{handle.id} did not continue as new"
        await asyncio.sleep(0.1)
    return run_id


@pytest.fixture
def deployment() -> str:
    return f"shop-{uuid.uuid4().hex[:8]}"


async def test_a_pinned_run_finishes_on_its_build_while_a_new_run_starts_on_the_current_one(
    client: Client, settings: Settings, model: ScriptedModel, deployment: str
) -> None:
    model.reply(specialist)

    async def ask(name: str) -> WorkflowHandle[Any, SupervisorResult]:
        return await client.start_workflow(
            SupervisorWorkflow.run,
            SupervisorRequest(request=REQUEST),
            id=f"{name}-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )

    async with build_worker(client, settings, deployment=deployment, build_id="A"):
        await make_current(client, deployment, "A")
        old = await ask("old")
        await waiting_question(old)
        async with build_worker(client, settings, deployment=deployment, build_id="B"):
            await make_current(client, deployment, "B")
            new = await ask("new")
            # The old run waited for a person while B became current, and is answered now.
            for handle in (old, new):
                await approve(handle)
                assert (await handle.result()).reply.approved
    assert set(await builds(client, old.id, None)) == {"A"}
    assert set(await builds(client, new.id, None)) == {"B"}
    info = (await old.describe()).raw_description.workflow_execution_info.versioning_info
    assert info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
    assert (info.deployment_version.deployment_name, info.deployment_version.build_id) == (
        deployment,
        "A",
    )


async def test_a_chat_moves_to_the_new_build_at_its_next_continue_as_new(
    client: Client, settings: Settings, model: ScriptedModel, deployment: str
) -> None:
    async def send(text: str) -> ChatReply:
        return await chat.execute_update(
            ChatWorkflow.send, ChatSend(text=text), result_type=ChatReply
        )

    async with build_worker(client, settings, deployment=deployment, build_id="A"):
        await make_current(client, deployment, "A")
        chat = await client.start_workflow(
            ChatWorkflow.run,
            ChatInput(stream=False),
            id=f"chat-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        first_run = chat.result_run_id
        assert first_run is not None
        replies = [await send("one")]
        async with build_worker(client, settings, deployment=deployment, build_id="B"):
            await make_current(client, deployment, "B")
            # The message that arrives after the deploy is answered where the run is, and
            # then the chat continues as new onto B.
            replies.append(await send("two"))
            second_run = await next_run(client, chat, first_run)
            replies.append(await send("three"))
            await chat.terminate("the test ended")
    assert [(r.run, r.text) for r in replies] == [
        (0, "done: one"),
        (0, "done: two"),
        (1, "done: three"),
    ]
    # One conversation across the two runs: the messages go on being numbered.
    assert replies[0].seq < replies[1].seq < replies[2].seq
    assert set(await builds(client, chat.id, first_run)) == {"A"}
    assert set(await builds(client, chat.id, second_run)) == {"B"}
    # The run that continued onto B replays on its own code: what moved it is in history.
    history = await client.get_workflow_handle(chat.id, run_id=first_run).fetch_history()
    replayer = Replayer(workflows=[], plugins=[DurafactPlugin(env={}, entry_points=False)])
    await replayer.replay_workflow(history)
    described = await client.get_workflow_handle(chat.id, run_id=second_run).describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    # The new run is pinned to B in turn.
    assert info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
    assert info.deployment_version.build_id == "B"


def counting(turns: int) -> Callable[[Call], str]:
    """Turns 1..`turns` each ask the calculator for 1 + N; then the answer."""

    def reply(call: Call) -> str:
        n = int(call.activity_id.rsplit(":", 1)[-1])
        if n <= turns:
            return (
                f"Thought: add.\nAction: calculator\nAction Input: "
                f'{{"expression": "1 + {n}"}}\nPAUSE'
            )
        return f"Thought: done.\nFinal Answer: counted {turns}"

    return reply


async def test_a_long_react_loop_moves_to_the_new_build_between_two_turns(
    client: Client, settings: Settings, model: ScriptedModel, deployment: str
) -> None:
    q = "Count to three"
    model.reply(counting(3))
    held = model.hold(lambda call: call.activity_id == f"llm:react:{q}:2")
    async with build_worker(client, settings, deployment=deployment, build_id="A"):
        await make_current(client, deployment, "A")
        handle = await client.start_workflow(
            ReActWorkflow.run,
            ReActInput(question=q, tools=["calculator"]),
            id=f"react-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        first_run = handle.result_run_id
        await asyncio.to_thread(model.wait_for, lambda c: c.activity_id.endswith(f"{q}:2"))
        async with build_worker(client, settings, deployment=deployment, build_id="B"):
            await make_current(client, deployment, "B")
            held.set()  # turn 2 ends on A; turn 3 is the next run's, on B
            result: ReActResult = await asyncio.wait_for(handle.result(), SWITCH_TIMEOUT)
    assert (result.ending, result.answer, result.turns) == ("answer", "counted 3", 4)
    assert [c.ok for c in result.tool_calls] == [True, True, True]
    runs = await runs_of(client, handle.id)
    assert runs[0] == first_run and len(runs) == 2
    assert set(await builds(client, handle.id, runs[0])) == {"A"}
    assert set(await builds(client, handle.id, runs[1])) == {"B"}
    # Each turn's model call was made once, across the two runs.
    turns = [c.activity_id.rsplit(":", 1)[-1] for c in model.calls_for("llm:react:")]
    assert turns == ["1", "2", "3", "4"]


@pytest.mark.parametrize(
    ("options", "env", "says"),
    [
        ({"build_id": "v2"}, {}, "build id 'v2' needs a deployment"),
        ({}, {"DURAFACT_DEPLOYMENT": "shop"}, "deployment 'shop' needs a build id"),
        ({"deployment": "shop.eu", "build_id": "v2"}, {}, "a deployment name has no '.'"),
        ({"deployment": "shop", "build_id": "x" * 256}, {}, "at most 255 characters"),
    ],
)
def test_a_half_configured_deployment_is_one_line(
    options: dict[str, str], env: dict[str, str], says: str
) -> None:
    with pytest.raises(DeploymentConfigError) as refused:
        DurafactPlugin(**options, env=env)
    assert says in str(refused.value) and "\n" not in str(refused.value)


async def test_the_worker_command_refuses_a_build_id_without_a_deployment_before_connecting() -> (
    None
):
    # No Temporal server at this address: the worker would fail to connect, later.
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1", OPENAI_BASE_URL="http://127.0.0.1:1/v1")
    run = await run_command(*DURAFACT_WORKER, "--build-id", "v2", env=env, cwd=ROOT)
    assert run.code == 2
    assert run.err_lines == [
        "worker: build id 'v2' needs a deployment: the name of the workers it belongs to "
        "(--deployment NAME, DurafactPlugin(deployment=...) or DURAFACT_DEPLOYMENT)"
    ]


async def test_without_a_deployment_the_worker_is_not_versioned(
    client: Client, settings: Settings, deployment: str
) -> None:
    async with build_worker(client, settings) as worker:
        assert worker.config(active_config=True).get("deployment_config") is None
    async with build_worker(client, settings, deployment=deployment, build_id="v1") as worker:
        given = worker.config(active_config=True).get("deployment_config")
    assert given is not None and given.version.to_canonical_string() == f"{deployment}.v1"
