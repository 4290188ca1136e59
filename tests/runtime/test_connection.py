"""Connecting anywhere through `temporalio.envconfig`, and never starting a workflow
where its tasks would fail.

The starter and the worker run as users run them (subprocesses) and reach one extra
dev server, on a free port, only through a temporal.toml profile
(TEMPORAL_CONFIG_FILE + TEMPORAL_PROFILE). That server starts without durafact's
search attributes; they are per namespace, so each test has a namespace of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durafact._local.embedded import Embedded, temporal_binary
from durafact._recipes.plan_execute import Goal, PlanExecuteResult, PlanExecuteWorkflow
from durafact._recipes.recipe import RECIPE_ATTRIBUTE
from durafact._runtime.connection import connect_options
from durafact._runtime.search_attributes import (
    NAMES,
    NamespaceNotReady,
    ensure_search_attributes,
    missing_message,
)
from durafact._runtime.settings import Settings, SettingsError
from durafact.testing import ScriptedModel, start_dev_server
from tests.cli.test_registration import worker_process
from tests.helpers import DURAFACT_WORKER, ROOT, Run, clean_env, free_port, run_command, starter

GOAL = "Plan a weekend in Kraków"
PROFILE = "durafact-test"
# One namespace per test that changes or checks search attributes.
NAMESPACES = ("register", "refuse", "bare", "mistyped")


@dataclass
class Server:
    address: str
    env: WorkflowEnvironment

    async def client(self, namespace: str) -> Client:
        return await Client.connect(
            self.address, namespace=namespace, data_converter=pydantic_data_converter
        )

    async def search_attributes(self, namespace: str) -> set[str]:
        response = await self.env.client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        return set(response.custom_attributes)


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[Server]:
    """A dev server on a non-default port, without durafact's search attributes."""
    port = free_port()
    env = await start_dev_server(
        port=port,
        search_attributes=(),
        extra_args=[arg for namespace in NAMESPACES for arg in ("--namespace", namespace)],
    )
    try:
        yield Server(f"127.0.0.1:{port}", env)
    finally:
        await env.shutdown()


def profile_env(tmp_path: Path, address: str, namespace: str, **extra: str) -> dict[str, str]:
    """A clean environment whose only way to Temporal is a profile in a temporal.toml."""
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.default]\naddress = "127.0.0.1:1"\n\n'  # never the one used
        f'[profile.{PROFILE}]\naddress = "{address}"\nnamespace = "{namespace}"\n'
    )
    return clean_env(TEMPORAL_CONFIG_FILE=str(config), TEMPORAL_PROFILE=PROFILE, **extra)


def model_env(model: ScriptedModel, queue: str) -> dict[str, str]:
    return {
        "DURAFACT_TASK_QUEUE": queue,
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "test",
        "DURAFACT_MODEL": "scripted",
    }


async def worker_until_exit(env: dict[str, str], timeout: float = 30) -> Run:
    """`durafact-worker` that is expected to stop on its own."""
    return await run_command(*DURAFACT_WORKER, env=env, cwd=ROOT, timeout=timeout)


def running_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*DURAFACT_WORKER],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop(process: subprocess.Popen[bytes]) -> str:
    """SIGTERM and wait; the worker's stderr."""
    if process.poll() is None:
        process.terminate()
    _, err = process.communicate(timeout=20)
    return err.decode()


# --- settings from a profile, without a server -------------------------------------------


def test_settings_come_from_the_profile_and_variables_override_it(tmp_path: Path) -> None:
    env = profile_env(tmp_path, "127.0.0.1:7999", "ns1")
    settings = Settings.from_env(env)
    assert settings.temporal_address == "127.0.0.1:7999"
    assert settings.temporal_namespace == "ns1"
    assert settings.temporal_address_explicit  # never an embedded server
    assert settings.temporal_address_source == f"profile {PROFILE!r} in {tmp_path}/temporal.toml"

    overridden = Settings.from_env(env | {"TEMPORAL_ADDRESS": "10.0.0.1:7233"})
    assert overridden.temporal_address == "10.0.0.1:7233"
    assert overridden.temporal_address_source == "TEMPORAL_ADDRESS"
    assert overridden.temporal_namespace == "ns1"

    assert not Settings.from_env(clean_env()).temporal_address_explicit


def test_an_api_key_means_tls_and_a_cloud_address_links_the_cloud_ui() -> None:
    settings = Settings.from_env(
        clean_env(
            TEMPORAL_ADDRESS="ns.acct.tmprl.cloud:7233",
            TEMPORAL_NAMESPACE="ns.acct",
            TEMPORAL_API_KEY="secret",
        )
    )
    options = connect_options(settings)
    assert options["target_host"] == "ns.acct.tmprl.cloud:7233"
    assert (options["namespace"], options["api_key"], options["tls"]) == ("ns.acct", "secret", True)
    assert settings.workflow_url("w").startswith("https://cloud.temporal.io/namespaces/ns.acct/")
    assert "secret" not in repr(settings) + settings.model_dump_json()


def test_web_ui_links_go_to_the_port_the_embedded_stacks_ui_was_given(
    durafact_home: Path,
) -> None:
    # A process recorded as the stack's dev server, as `up` records it, with its ports.
    server, ui = free_port(), free_port()
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--port", str(server)]
    argv += ["--ui-port", str(ui)]
    process = Embedded(durafact_home).piece("temporal").start(argv, os.environ, durafact_home)
    try:
        for address in (f"localhost:{server}", f"127.0.0.1:{server}"):
            settings = Settings.from_env(clean_env(TEMPORAL_ADDRESS=address))
            assert settings.workflow_url("w").startswith(f"http://localhost:{ui}/namespaces/")
        # Another server's UI: the documented variables, else 8233.
        other = clean_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
        assert Settings.from_env(other).ui_url == "http://localhost:8233"
        moved = other | {"DURAFACT_UI_PORT": "9233"}
        assert Settings.from_env(moved).ui_url == "http://localhost:9233"
        given = clean_env(TEMPORAL_ADDRESS=f"localhost:{server}", DURAFACT_UI_URL="http://ui:80")
        assert Settings.from_env(given).ui_url == "http://ui:80"
    finally:
        process.kill()
        process.wait()
    # Not running any more: nothing recorded is trusted.
    assert Settings.from_env(clean_env(TEMPORAL_ADDRESS=f"localhost:{server}")).ui_url == (
        "http://localhost:8233"
    )


async def test_the_worker_connects_to_the_port_durafact_temporal_port_names(
    client: Client, model: ScriptedModel
) -> None:
    port = client.service_client.config.target_host.rpartition(":")[2]
    env = clean_env(
        DURAFACT_TEMPORAL_PORT=port,
        DURAFACT_TASK_QUEUE=f"moved-{uuid.uuid4().hex[:6]}",
        OPENAI_BASE_URL=model.url,
    )
    async with worker_process(client, [*DURAFACT_WORKER], env, cwd=ROOT):
        pass  # it polls the queue on the session's server


def test_a_bad_profile_or_a_key_without_an_address_is_one_line(tmp_path: Path) -> None:
    env = profile_env(tmp_path, "127.0.0.1:7999", "ns1")
    file = tmp_path / "temporal.toml"
    cases = {
        "TEMPORAL_PROFILE=nope: no such profile (in {file})": env | {"TEMPORAL_PROFILE": "nope"},
        "TEMPORAL_CONFIG_FILE=/no/such.toml: no such file": env
        | {"TEMPORAL_CONFIG_FILE": "/no/such.toml"},
        "an API key is configured for Temporal but no address: set TEMPORAL_ADDRESS "
        f"(or `address` in profile 'default' in {os.devnull})": clean_env(TEMPORAL_API_KEY="k"),
    }
    for reason, case in cases.items():
        with pytest.raises(SettingsError) as raised:
            Settings.from_env(case)
        assert str(raised.value) == reason.format(file=file)
    # With an address in the profile, an API key from the environment joins it.
    assert connect_options(Settings.from_env(env | {"TEMPORAL_API_KEY": "k"}))["api_key"] == "k"


async def test_an_unreachable_profile_address_is_one_line_for_starter_and_worker(
    tmp_path: Path,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = profile_env(tmp_path, address, "default", DURAFACT_TASK_QUEUE="nowhere")
    where = f"{address} (profile {PROFILE!r} in {tmp_path}/temporal.toml)"
    run, worker = await asyncio.gather(
        starter("plan", GOAL, env=env, cwd=tmp_path, timeout=30),
        worker_until_exit(env | {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}),
    )
    assert (run.code, run.err_lines) == (1, [f"starter: cannot reach Temporal at {where}"])
    assert not (tmp_path / ".durafact").exists()  # an address is configured: never a server
    assert worker.code == 1
    assert worker.err_lines[-1] == f"worker: cannot reach Temporal at {where}"


async def test_an_api_key_against_a_plain_server_says_it_turned_tls_on_and_how_to_go_on(
    client: Client, tmp_path: Path
) -> None:
    address = client.service_client.config.target_host  # the session's plain dev server
    env = clean_env(
        TEMPORAL_ADDRESS=address, TEMPORAL_API_KEY="secret", OPENAI_BASE_URL="http://127.0.0.1:1/v1"
    )
    run, worker = await asyncio.gather(
        starter("status", "some-id", env=env, cwd=tmp_path), worker_until_exit(env)
    )
    reason = (
        f"cannot reach Temporal at {address} (TEMPORAL_ADDRESS): TEMPORAL_API_KEY turns TLS "
        "on, and this server speaks plain gRPC: unset it, or set TEMPORAL_TLS=false to send "
        "the key without TLS"
    )
    assert (run.code, run.err_lines) == (1, [f"starter: {reason}"])
    assert worker.code == 1
    assert worker.err_lines[-1] == f"worker: {reason}"
    plain = await starter("status", "some-id", env=env | {"TEMPORAL_TLS": "false"}, cwd=tmp_path)
    assert plain.err_lines == ["starter: no workflow with id 'some-id'"]


# --- search attributes on a fresh server ------------------------------------------------


async def test_through_a_profile_the_starter_registers_the_search_attributes_and_the_worker_runs_it(
    server: Server, model: ScriptedModel, tmp_path: Path
) -> None:
    namespace = "register"
    env = profile_env(tmp_path, server.address, namespace, **model_env(model, "register-q"))
    assert await server.search_attributes(namespace) == set()

    started = await starter("plan", GOAL, "--no-wait", "--json", env=env, cwd=tmp_path)

    assert started.code == 0, started.err
    assert started.err_lines[0] == (
        "registered the search attributes DurafactRecipe, DurafactStatus, DurafactTokens and "
        f"DurafactCost in namespace {namespace!r}"
    )
    assert await server.search_attributes(namespace) >= set(NAMES)
    doc = json.loads(started.out)
    workflow_id = doc["workflow_id"]
    assert f"/namespaces/{namespace}/workflows/{workflow_id}/" in doc["ui_url"]

    worker = running_worker(env)  # the worker too connects through the profile
    try:
        client = await server.client(namespace)
        handle = client.get_workflow_handle(workflow_id, result_type=PlanExecuteResult)
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        worker_err = stop(worker)
    assert result.answer.text == "done: Write the final answer."
    description = await handle.describe()
    assert description.typed_search_attributes.get(RECIPE_ATTRIBUTE) == "plan_execute"
    assert worker.returncode == 0, worker_err
    assert f"on {server.address} (namespace {namespace}" in worker_err

    again = await starter("result", workflow_id, "--json", env=env, cwd=tmp_path)
    assert again.code == 0 and again.err == "", again.err  # nothing left to register


async def test_told_not_to_register_the_starter_refuses_with_the_command_and_starts_nothing(
    server: Server, model: ScriptedModel, tmp_path: Path
) -> None:
    namespace = "refuse"
    env = profile_env(
        tmp_path,
        server.address,
        namespace,
        DURAFACT_REGISTER_SEARCH_ATTRIBUTES="0",
        **model_env(model, "refuse-q"),
    )

    runs = await asyncio.gather(
        starter("plan", GOAL, env=env, cwd=tmp_path, timeout=30),
        starter("plan", GOAL, "--json", "--id", "plan-refused", env=env, cwd=tmp_path),
    )

    command = (
        f"temporal operator search-attribute create --namespace {namespace} "
        "--name DurafactRecipe --type Keyword --name DurafactStatus --type Keyword "
        "--name DurafactTokens --type Int --name DurafactCost --type Double"
    )
    for run in runs:
        assert run.code == 1
        assert run.err_lines == [
            f"starter: namespace {namespace!r} lacks the search attributes DurafactRecipe, "
            "DurafactStatus, DurafactTokens and DurafactCost that durafact workflows set "
            f"(DURAFACT_REGISTER_SEARCH_ATTRIBUTES=0); create them with: {command}"
        ]
        assert run.out == ""
    client = await server.client(namespace)
    assert [w.id async for w in client.list_workflows()] == []
    assert await server.search_attributes(namespace) == set()
    assert model.calls == []


async def test_the_worker_refuses_to_start_without_the_search_attributes_until_they_exist(
    server: Server, model: ScriptedModel, tmp_path: Path
) -> None:
    namespace = "bare"
    queue = f"bare-{uuid.uuid4().hex[:6]}"
    env = profile_env(tmp_path, server.address, namespace, **model_env(model, queue))

    refused = await worker_until_exit(env)

    assert refused.code == 1
    line = refused.err_lines[-1]
    assert line == f"worker: {missing_message(NAMES, namespace)}"
    assert "Traceback" not in refused.err
    # The command it names works as given, in the same environment (the temporal CLI
    # reads the same profile); then the worker runs.
    command = shlex.split(line.partition("create them with: ")[2])
    assert command[0] == "temporal"
    created = subprocess.run(
        [str(temporal_binary()), *command[1:]], env=env, capture_output=True, text=True
    )
    assert created.returncode == 0, created.stderr
    assert await server.search_attributes(namespace) >= set(NAMES)

    worker = running_worker(env)
    try:
        client = await server.client(namespace)
        handle = await client.start_workflow(
            PlanExecuteWorkflow.run, Goal(text=GOAL), id=f"plan-{queue}", task_queue=queue
        )
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        worker_err = stop(worker)
    assert result.answer.text == "done: Write the final answer."
    assert worker.returncode == 0, worker_err


async def test_an_attribute_of_another_type_is_refused_by_name_and_nothing_is_registered(
    server: Server,
) -> None:
    namespace = "mistyped"
    client = await server.client(namespace)
    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(namespace=namespace, search_attributes={"DurafactCost": keyword})
    )

    with pytest.raises(NamespaceNotReady) as refused:
        await ensure_search_attributes(client, register=True)

    assert str(refused.value) == (
        f"search attribute DurafactCost in namespace {namespace!r} is of type Keyword; "
        "durafact workflows set it as Double"
    )
    assert await server.search_attributes(namespace) == {"DurafactCost"}  # nothing added


async def test_a_variable_that_is_not_utf8_is_one_line_for_starter_and_worker() -> None:
    # os.fsdecode keeps the byte 0xff as a surrogate, which reaches the child as that byte.
    env = clean_env(DURAFACT_TASK_QUEUE=os.fsdecode(b"queue-\xff"))
    started = await starter("status", "some-id", env=env, cwd=ROOT)
    worker = await worker_until_exit(env)
    for run, who in ((started, "starter"), (worker, "worker")):
        assert run.code != 0
        assert run.err_lines == [f"{who}: DURAFACT_TASK_QUEUE is not valid UTF-8 text"], run.err
