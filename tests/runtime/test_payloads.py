"""Large payloads in external storage (durafact/_runtime/payloads.py): a goal or a
document of several megabytes completes, the history holds references instead of the
text, the S3 driver works against a real S3-compatible server on loopback (moto),
encrypted payloads are stored as ciphertext only, and an input over the starter's limit is refused.

Workers run in process on a client with durafact._runtime.codec's converter for the test's own
store; the starter runs as a user runs it, with the same DURAFACT_PAYLOADS. The history
is read with the session client, which has no external storage: it sees what the
server stores.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.client import Client
from temporalio.converter import StorageDriverClaim, StorageDriverStoreContext

from durafact._recipes import PlanExecuteResult
from durafact._recipes.research_models import ResearchResult
from durafact._runtime.codec import ENCODING, data_converter, new_key
from durafact._runtime.payloads import (
    DEFAULT_THRESHOLD,
    PAYLOADS_ENV,
    THRESHOLD_ENV,
    FileStorageDriver,
    PayloadConfigError,
    store_from_env,
)
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact._service.inputs import MAX_INPUT_BYTES
from durafact.testing import ScriptedModel
from tests.helpers import clean_env, free_port, starter, with_converter
from tests.runtime.test_codec import stored_payloads
from tests.scripted_research import Script

MARKER = "QUOKKA-51c2e0"
REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
BUCKET = "durafact-payloads"


def is_reference(payload: Payload) -> bool:
    return payload.metadata.get("messageType") == REFERENCE_TYPE


async def run_json(
    client: Client, settings: Settings, store: dict[str, str], *args: str, cwd: Path
) -> dict[str, Any]:
    """The starter's `args --json` run to completion against an in-process worker on the
    converter `store` configures, with the same store in the starter's environment."""
    async with build_worker(with_converter(client, data_converter(store)), settings):
        env = clean_env(
            TEMPORAL_ADDRESS=client.service_client.config.target_host,
            DURAFACT_TASK_QUEUE=settings.task_queue,
            OPENAI_BASE_URL=settings.openai_base_url or "",
            **store,
        )
        run = await starter(*args, "--json", env=env, cwd=cwd, timeout=180)
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["status"] == "COMPLETED"
    return doc


def file_store(tmp_path: Path) -> dict[str, str]:
    return {PAYLOADS_ENV: f"file:{tmp_path / 'payloads'}"}


async def assert_history_holds_only_references(client: Client, workflow_id: str) -> None:
    payloads = await stored_payloads(client, workflow_id)
    assert any(is_reference(p) for p in payloads)
    largest = max(p.ByteSize() for p in payloads)
    assert largest < DEFAULT_THRESHOLD, f"a payload of {largest} bytes is in the history"
    assert not any(MARKER.encode() in p.data for p in payloads)


# --- a large goal, a large document ------------------------------------------------------


async def test_a_1_mb_goal_completes_and_its_history_holds_references_not_the_text(
    client: Client, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    # The marker at the end: the summary in the Web UI shows the goal's first words.
    goal = "Plan the archive move. " + "Shelf 12 holds boxes of letters. " * 31_000 + MARKER
    assert len(goal) > 1_000_000
    (tmp_path / "goal.json").write_text(json.dumps({"text": goal}))
    doc = await run_json(
        client, settings, file_store(tmp_path),
        "start", "PlanExecuteWorkflow", "--input", "@goal.json", cwd=tmp_path,
    )  # fmt: skip

    result = PlanExecuteResult.model_validate(doc["result"])
    assert result.answer.goal == goal
    assert [ref.type for ref in result.steps] == ["PlanStep"] * 3
    await assert_history_holds_only_references(client, doc["workflow_id"])
    # The start request carried the goal once: the details show only its beginning.
    description = await client.get_workflow_handle(doc["workflow_id"]).describe()
    details = await description.static_details()
    assert details is not None and len(details) < 2_200


async def test_research_reads_a_5_mb_document_and_completes(
    client: Client, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    fact = f"A bike returned after closing costs one extra day ({MARKER})."
    # Long paragraphs: the file source scores each paragraph, and that is not what is tested.
    shelf = "Inner tubes and spare chains wait on the depot shelves, sorted by size. " * 1400
    filler = "".join(f"## Shelf {n}\n\n{shelf}\n\n" for n in range(50))
    (tmp_path / "docs").mkdir()
    manual = tmp_path / "docs" / "manual.txt"
    # The fact first: the model is shown each document's beginning only.
    manual.write_text(f"# Fleet manual\n\n{fact}\n\n{filler}")
    assert manual.stat().st_size > 5_000_000
    model.reply(
        Script(
            pick=["manual.txt"],
            quotes=[fact],
            claims=[("Late returns cost one extra day.", [fact], None)],
            answer="Returning late costs one extra day.",
        )
    )
    doc = await run_json(
        client, settings, file_store(tmp_path),
        "research", "What does a late return cost?", "--docs", "docs", cwd=tmp_path,
    )  # fmt: skip

    result = ResearchResult.model_validate(doc["result"])
    assert result.status == "answered", result
    assert result.answer == "Returning late costs one extra day."
    # The recipe shows the model each document's beginning: no payload needed storing.
    payloads = await stored_payloads(client, doc["workflow_id"])
    assert max(p.ByteSize() for p in payloads) < DEFAULT_THRESHOLD


# --- S3 -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port, with an empty bucket."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        s3(url).create_bucket(Bucket=BUCKET)
        yield url
    finally:
        server.stop()


def s3(url: str) -> object:
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


async def test_a_payload_over_the_threshold_goes_to_s3_and_the_run_completes(
    client: Client, settings: Settings, model: ScriptedModel, tmp_path: Path, s3_endpoint: str
) -> None:
    store = {
        PAYLOADS_ENV: f"s3://{BUCKET}",
        THRESHOLD_ENV: "4096",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }
    goal = "Plan the depot's inventory. " + "Count every crate twice. " * 400 + MARKER
    workflow_id = f"plan-s3-{uuid.uuid4().hex[:8]}"
    doc = await run_json(client, settings, store, "plan", goal, "--id", workflow_id, cwd=tmp_path)

    assert PlanExecuteResult.model_validate(doc["result"]).answer.goal == goal
    bucket = s3(s3_endpoint)
    listed = bucket.list_objects_v2(Bucket=BUCKET)  # type: ignore[attr-defined]
    keys = [item["Key"] for item in listed.get("Contents", [])]
    # The SDK's keys: the workflow's input and result under its id, activities' under theirs.
    ours = [
        k for k in keys if k.startswith(f"v0/ns/default/wt/PlanExecuteWorkflow/wi/{workflow_id}/")
    ]
    assert ours, keys
    stored = bucket.get_object(Bucket=BUCKET, Key=ours[0])["Body"].read()  # type: ignore[attr-defined]
    assert MARKER.encode() in Payload.FromString(stored).data
    payloads = await stored_payloads(client, workflow_id)
    assert any(is_reference(p) for p in payloads)
    assert max(p.ByteSize() for p in payloads) < 4096
    assert not any(MARKER.encode() in p.data for p in payloads)


# --- encryption and storage together ---------------------------------------------------------


async def test_encrypted_payloads_are_stored_as_ciphertext_only(
    client: Client, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    store = {
        **file_store(tmp_path),
        THRESHOLD_ENV: "2048",
        "DURAFACT_KEYS": new_key("k1"),
    }
    goal = "Plan the museum night. " + "Light every hall in turn. " * 200 + MARKER
    doc = await run_json(client, settings, store, "plan", goal, cwd=tmp_path)

    assert PlanExecuteResult.model_validate(doc["result"]).answer.goal == goal
    stored = [path.read_bytes() for path in (tmp_path / "payloads").rglob("*") if path.is_file()]
    assert stored
    for data in stored:
        assert Payload.FromString(data).metadata["encoding"] == ENCODING
        assert MARKER.encode() not in data


async def test_a_deleted_payload_store_is_named_with_the_way_out(
    client: Client, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    store = {**file_store(tmp_path), THRESHOLD_ENV: "2048"}
    goal = "Plan the museum night. " + "Light every hall in turn. " * 200
    doc = await run_json(client, settings, store, "plan", goal, cwd=tmp_path)
    shutil.rmtree(tmp_path / "payloads")

    env = clean_env(TEMPORAL_ADDRESS=client.service_client.config.target_host, **store)
    run = await starter("result", doc["workflow_id"], env=env, cwd=tmp_path)
    assert run.code == 1
    [line] = run.err_lines
    assert (
        f"the payload store {(tmp_path / 'payloads').resolve()} does not exist (deleted or "
        "moved? restore it; or set DURAFACT_PAYLOADS to the store the payload was written to)"
    ) in line
    assert "another DURAFACT_PAYLOADS" not in line


# --- the file driver and the settings ---------------------------------------------------------


async def test_the_same_payload_stored_twice_is_one_file_with_one_claim(tmp_path: Path) -> None:
    driver = FileStorageDriver(tmp_path)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 5000 + b'"')
    first = await driver.store(StorageDriverStoreContext(), [payload])
    again = await driver.store(StorageDriverStoreContext(), [payload])

    assert first == again
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 1
    assert await driver.retrieve(None, first) == [payload]  # type: ignore[arg-type]
    missing = StorageDriverClaim(claim_data={"sha256": "0" * 64})
    with pytest.raises(FileNotFoundError, match="starter and worker must share it"):
        await driver.retrieve(None, [missing])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({PAYLOADS_ENV: "ftp://host/dir"}, "DURAFACT_PAYLOADS=ftp://host/dir: use file:DIR or "),
        ({PAYLOADS_ENV: "s3://bucket/prefix"}, "DURAFACT_PAYLOADS=s3://bucket/prefix: give a "),
        ({THRESHOLD_ENV: "3000000"}, "DURAFACT_PAYLOAD_THRESHOLD=3000000: give a size in bytes"),
        ({THRESHOLD_ENV: "big"}, "DURAFACT_PAYLOAD_THRESHOLD=big: give a size in bytes"),
        ({THRESHOLD_ENV: "²"}, "DURAFACT_PAYLOAD_THRESHOLD=²: give a size in bytes"),
    ],
)
def test_unusable_payload_settings_are_one_line(env: dict[str, str], reason: str) -> None:
    with pytest.raises(PayloadConfigError) as raised:
        store_from_env(env)
    assert str(raised.value).startswith(reason)
    assert "\n" not in str(raised.value)


def test_the_default_store_is_in_the_state_directory_wherever_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    assert store_from_env({"DURAFACT_HOME": str(home)}).location == f"file:{home / 'payloads'}"
    expected = f"file:{tmp_path / 'state' / 'durafact' / 'payloads'}"
    assert store_from_env({"XDG_STATE_HOME": str(tmp_path / "state")}).location == expected
    store = store_from_env({"HOME": str(tmp_path / "user")})
    assert store.location == f"file:{tmp_path / 'user' / '.local/state/durafact/payloads'}"
    assert store.threshold == DEFAULT_THRESHOLD


# --- the starter's limit ---------------------------------------------------------------------


async def test_an_input_over_the_limit_is_refused_in_one_line_and_nothing_starts(
    client: Client, tmp_path: Path
) -> None:
    queue = f"test-{uuid.uuid4().hex[:8]}"
    batch = [{"id": "q1", "question": "x" * (MAX_INPUT_BYTES + 1)}]
    (tmp_path / "batch.json").write_text(json.dumps(batch))
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host, DURAFACT_TASK_QUEUE=queue
    )
    run = await starter("answer", "batch.json", env=env, cwd=tmp_path)

    assert run.code == 2
    assert len(run.err_lines) == 1, run.err
    assert re.fullmatch(
        rf"starter: the input is 10,000,\d{{3}} bytes, over the {MAX_INPUT_BYTES:,} a workflow "
        r"input may hold; put large content in a source \(such as --docs DIR\) and pass its "
        "location",
        run.err_lines[0],
    ), run.err
    assert [w async for w in client.list_workflows(f'TaskQueue="{queue}"')] == []
