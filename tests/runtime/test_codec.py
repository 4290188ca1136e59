"""Payloads encrypted at rest (durafact/_runtime/codec.py) and the codec server
(durafact/_runtime/codec_server.py).

The workflows run on the session dev server with a worker whose client has the codec;
the starter runs as a user runs it, with the keys in its environment. What the server
stores is read with a client WITHOUT the codec, and every payload of the history is
searched for a marker that was in the goal.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from durafact._local.embedded import temporal_binary
from durafact._runtime.codec import (
    ENCODING,
    KEY_ID_FIELD,
    CodecConfigError,
    EncryptionCodec,
    PayloadDecryptError,
    data_converter,
    keys_from_env,
    new_key,
)
from durafact._runtime.codec_server import CodecServer
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import ScriptedModel
from tests.helpers import (
    DURAFACT,
    DURAFACT_WORKER,
    ROOT,
    clean_env,
    free_port,
    run_command,
    starter,
    with_converter,
)

MARKER = "ZEBRA-7f3a91"
GOAL = f"Plan the {MARKER} launch"
K1 = new_key("k1")
K2 = new_key("k2")
K1_OTHER = new_key("k1")  # the same id, other bytes: a wrong key
UI = "http://localhost:8233"


# --- payloads as the server stores them -----------------------------------------------


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload in a history event, except search attributes (which the server
    indexes, so no codec ever sees them)."""
    for field, value in message.ListFields():
        if field.name in ("search_attributes", "indexed_fields"):
            continue
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            items: Any = [value]
        elif field.message_type.GetOptions().map_entry:
            items = value.values()
        else:
            items = value
        for item in items:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


async def stored_payloads(client: Client, workflow_id: str) -> list[Payload]:
    """The workflow's payloads as the server keeps them (read without any codec),
    except the SDK's patch markers: the SDK writes them itself, and all they hold is
    the patch's name from the code (a `workflow.patched` id: see CONTRIBUTING.md)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [
        p
        for event in history.events
        if event.marker_recorded_event_attributes.marker_name != "core_patch"
        for p in payloads_in(event)
    ]


def key_ids(payloads: list[Payload]) -> set[str]:
    return {p.metadata[KEY_ID_FIELD].decode() for p in payloads}


# --- running a plan with keys ---------------------------------------------------------


@pytest.fixture
async def codec_worker(
    client: Client, settings: Settings
) -> AsyncIterator[tuple[Settings, dict[str, str]]]:
    """An in-process worker whose client has the codec with k1, and the starter's
    environment for its task queue (without keys: each test adds the ones it means)."""
    async with build_worker(with_converter(client, keyed({"DURAFACT_KEYS": K1})), settings):
        yield (
            settings,
            clean_env(
                TEMPORAL_ADDRESS=client.service_client.config.target_host,
                DURAFACT_TASK_QUEUE=settings.task_queue,
                OPENAI_BASE_URL=settings.openai_base_url or "",
            ),
        )


def keyed(env: dict[str, str]) -> Any:
    return data_converter(env)


async def plan(env: dict[str, str], keys: str, workflow_id: str) -> dict[str, Any]:
    run = await starter(
        "plan", GOAL, "--id", workflow_id, "--json", env=env | {"DURAFACT_KEYS": keys}, cwd=ROOT
    )
    assert run.code == 0, run.err
    return json.loads(run.out)


async def test_a_goal_is_in_no_stored_payload_yet_the_starter_and_replayer_read_it(
    client: Client, codec_worker: tuple[Settings, dict[str, str]], model: ScriptedModel
) -> None:
    _, env = codec_worker
    workflow_id = f"codec-{uuid.uuid4().hex[:8]}"
    doc = await plan(env, K1, workflow_id)
    assert doc["status"] == "COMPLETED"
    assert MARKER in json.dumps(doc["result"])
    assert any(MARKER in call.text for call in model.calls)  # the activity saw it decrypted

    stored = await stored_payloads(client, workflow_id)
    assert len(stored) > 5  # input, activity inputs/results, summaries, the result
    assert all(p.metadata["encoding"] == ENCODING for p in stored)
    assert key_ids(stored) == {"k1"}
    assert not [p for p in stored if MARKER.encode() in p.SerializeToString()]
    # Nor anywhere else in what the server stores: activity ids are made from the goal's
    # text, so a run started with encryption gets opaque ones.
    raw = await client.get_workflow_handle(workflow_id).fetch_history()
    assert MARKER not in raw.to_json()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_id
        for e in raw.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled and all(re.fullmatch(r"llm:[0-9a-f]{20}", i) for i in scheduled)

    # The starter, with the key, reads it back; without it, or with a wrong one, it
    # says which key it needs in one line.
    result = await starter(
        "result", workflow_id, "--json", env=env | {"DURAFACT_KEYS": K1}, cwd=ROOT
    )
    assert result.code == 0, result.err
    assert MARKER in result.out
    for keys, reason in [
        ({}, "payload is encrypted with key 'k1', but no keys are configured"),
        ({"DURAFACT_KEYS": K2}, "payload is encrypted with key 'k1', which is not configured"),
        ({"DURAFACT_KEYS": K1_OTHER}, "payload encrypted with key 'k1' fails authentication"),
    ]:
        refused = await starter("result", workflow_id, "--json", env=env | keys, cwd=ROOT)
        assert refused.code == 1
        assert len(refused.err_lines) == 1 and reason in refused.err, refused.err
        assert MARKER not in refused.out + refused.err

    # A replayer with the plugin and the same keys decrypts the history.
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    plugin = DurafactPlugin(env={"DURAFACT_KEYS": K1}, entry_points=False)
    replayer = Replayer(workflows=[], plugins=[plugin])
    await replayer.replay_workflow(WorkflowHistory(workflow_id, list(history.events)))


async def test_rotation_encrypts_new_payloads_with_the_newest_key_and_still_reads_old_ones(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=settings.task_queue,
        OPENAI_BASE_URL=model.url,
    )
    old, new = f"codec-old-{uuid.uuid4().hex[:6]}", f"codec-new-{uuid.uuid4().hex[:6]}"
    async with build_worker(with_converter(client, keyed({"DURAFACT_KEYS": K1})), settings):
        await plan(env, K1, old)
    rotated = f"{K2},{K1}"
    async with build_worker(with_converter(client, keyed({"DURAFACT_KEYS": rotated})), settings):
        await plan(env, rotated, new)

    assert key_ids(await stored_payloads(client, old)) == {"k1"}
    assert key_ids(await stored_payloads(client, new)) == {"k2"}
    for workflow_id in (old, new):
        read = await starter(
            "result", workflow_id, "--json", env=env | {"DURAFACT_KEYS": rotated}, cwd=ROOT
        )
        assert read.code == 0, read.err
        assert MARKER in read.out
    only_old = await starter("result", new, "--json", env=env | {"DURAFACT_KEYS": K1}, cwd=ROOT)
    assert only_old.code == 1
    assert "encrypted with key 'k2', which is not configured (configured: k1)" in only_old.err


async def test_failure_messages_are_encrypted_and_the_starter_still_prints_them(
    client: Client, codec_worker: tuple[Settings, dict[str, str]], model: ScriptedModel
) -> None:
    _, env = codec_worker
    model.fail(401, times=10)
    workflow_id = f"codec-failed-{uuid.uuid4().hex[:6]}"
    run = await starter(
        "plan", GOAL, "--id", workflow_id, env=env | {"DURAFACT_KEYS": K1}, cwd=ROOT
    )
    assert run.code == 1
    assert run.err.startswith(
        f"starter: workflow {workflow_id} failed: AuthenticationFailed: model endpoint answered 401"
    )
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    failed = [e for e in history.events if e.HasField("workflow_execution_failed_event_attributes")]
    failure = failed[0].workflow_execution_failed_event_attributes.failure
    assert failure.message == "Encoded failure"
    assert failure.encoded_attributes.metadata["encoding"] == ENCODING
    assert not [e for e in history.events if b"model endpoint answered" in e.SerializeToString()]
    # `status` decrypts the stored failure with the same keys.
    status = await starter("status", workflow_id, env=env | {"DURAFACT_KEYS": K1}, cwd=ROOT)
    assert "failure: AuthenticationFailed: model endpoint answered 401" in status.out, status.out


async def test_status_names_the_key_a_worker_lacks_to_decrypt_a_run(
    client: Client, codec_worker: tuple[Settings, dict[str, str]]
) -> None:
    _, env = codec_worker  # the worker has k1 only
    workflow_id = f"codec-k2-{uuid.uuid4().hex[:6]}"
    with_k2 = env | {"DURAFACT_KEYS": K2}
    started = await starter("plan", GOAL, "--id", workflow_id, "--no-wait", env=with_k2, cwd=ROOT)
    assert started.code == 0, started.err
    failing = re.compile(
        r"workflow task failing: PayloadDecryptError: payload is encrypted with key 'k2', "
        r"which is not configured \(configured: k1\): add key 'k2' to DURAFACT_KEYS or "
        r"DURAFACT_KEYS_FILE \(attempt \d+\)"
    )
    try:
        for _ in range(60):  # until the worker has failed the first task and it is retried
            status = await starter("status", workflow_id, env=with_k2, cwd=ROOT)
            if "workflow task failing" in status.out:
                break
    finally:
        await client.get_workflow_handle(workflow_id).terminate()
    assert status.code == 0, status.err
    assert any(failing.fullmatch(line) for line in status.out.splitlines()), status.out
    assert "Encoded failure" not in status.out


async def test_status_says_a_worker_answered_when_its_answer_does_not_decrypt_here(
    codec_worker: tuple[Settings, dict[str, str]], model: ScriptedModel
) -> None:
    _, env = codec_worker
    workflow_id = f"codec-query-{uuid.uuid4().hex[:6]}"
    planning = model.hold(lambda call: call.schema_name == "Plan")
    try:
        started = await starter(
            "plan",
            GOAL,
            "--id",
            workflow_id,
            "--no-wait",
            env=env | {"DURAFACT_KEYS": K1},
            cwd=ROOT,
        )
        assert started.code == 0, started.err
        await asyncio.to_thread(model.wait_for, lambda call: call.schema_name == "Plan")
        status = await starter("status", workflow_id, env=env | {"DURAFACT_KEYS": K2}, cwd=ROOT)
    finally:
        planning.set()
    assert status.code == 0, status.err
    assert "summary: not shown: encrypted with key 'k1', which does not decrypt here" in (
        status.out
    )
    assert (
        "recipe status: planning (a worker answered the status query, but its answer does "
        "not decrypt here: payload is encrypted with key 'k1', which is not configured "
        "(configured: k2): add key 'k1' to DURAFACT_KEYS or DURAFACT_KEYS_FILE)"
    ) in status.out.splitlines()
    assert "no worker answered" not in status.out


# --- the codec and its keys -----------------------------------------------------------


async def test_without_keys_payloads_are_plain_and_unchanged() -> None:
    codec = EncryptionCodec(None)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'{"goal": "x"}')
    assert await codec.encode([payload]) == [payload]
    assert await codec.decode([payload]) == [payload]
    assert data_converter({}).payload_converter.to_payloads(["x"])[0].data == b'"x"'


async def test_a_payload_round_trips_and_each_encryption_differs() -> None:
    codec = EncryptionCodec(keys_from_env({"DURAFACT_KEYS": f"{K2},{K1}"}))
    payload = Payload(metadata={"encoding": b"json/plain"}, data=MARKER.encode())
    first, second = await codec.encode([payload, payload])
    assert first.data != second.data  # a fresh nonce each time
    assert first.metadata[KEY_ID_FIELD] == b"k2"
    assert await codec.decode([first, second]) == [payload, payload]
    # The key id is authenticated: relabelled, the payload is refused.
    relabelled = Payload(metadata={**first.metadata, KEY_ID_FIELD: b"k1"}, data=first.data)
    with pytest.raises(PayloadDecryptError, match="key 'k1' fails authentication") as caught:
        await codec.decode([relabelled])
    assert caught.value.key_id == "k1"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DURAFACT_KEYS": "k1"}, "DURAFACT_KEYS: 'k1'... is not ID=BASE64"),
        ({"DURAFACT_KEYS": "k1=not base64!"}, "DURAFACT_KEYS: key 'k1' is not valid base64"),
        (
            {"DURAFACT_KEYS": "k1=" + base64.b64encode(b"x" * 16).decode()},
            "DURAFACT_KEYS: key 'k1' is 16 bytes; AES-256 needs 32 "
            "(make one with: durafact key k1)",
        ),
        ({"DURAFACT_KEYS": f"{K1},{K1_OTHER}"}, "DURAFACT_KEYS: key id 'k1' is given twice"),
        (
            {"DURAFACT_KEYS": "k 1=" + K1.partition("=")[2]},
            "DURAFACT_KEYS: key id 'k 1' must be 1-64 letters, digits, '.', '_' or '-'",
        ),
        ({"DURAFACT_KEYS": " , "}, "DURAFACT_KEYS: no keys"),
        (
            {"DURAFACT_KEYS": K1, "DURAFACT_KEYS_FILE": "keys.txt"},
            "set DURAFACT_KEYS or DURAFACT_KEYS_FILE, not both",
        ),
        (
            {"DURAFACT_KEYS_FILE": "/nonexistent/keys"},
            "DURAFACT_KEYS_FILE=/nonexistent/keys: No such file or directory",
        ),
    ],
)
def test_unusable_keys_are_refused_in_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(CodecConfigError) as caught:
        keys_from_env(env)
    assert str(caught.value) == message


def test_a_key_file_lists_keys_newest_first_with_comments(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text(f"# rotated 2026-11\n{K2}\n\n{K1}\n")
    keyring = keys_from_env({"DURAFACT_KEYS_FILE": str(file)})
    assert keyring is not None and keyring.ids == ["k2", "k1"] and keyring.newest == "k2"


async def test_the_starter_and_the_worker_refuse_unusable_keys_before_connecting(
    tmp_path: Path,
) -> None:
    env = clean_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", DURAFACT_KEYS="k1=YWJj")
    run = await starter("status", "some-id", env=env, cwd=tmp_path)
    assert run.code == 1
    assert run.err_lines == [
        "starter: DURAFACT_KEYS: key 'k1' is 3 bytes; AES-256 needs 32 "
        "(make one with: durafact key k1)"
    ]
    worker = await run_command(
        *DURAFACT_WORKER,
        env=env | {"OPENAI_BASE_URL": "http://x"},
        cwd=tmp_path,
    )
    assert worker.code == 1
    assert worker.err_lines[-1].startswith("worker: DURAFACT_KEYS: key 'k1' is 3 bytes")


# --- the codec server -------------------------------------------------------------------


@pytest.fixture
def codec_server() -> Iterator[CodecServer]:
    server = CodecServer(
        ("127.0.0.1", 0),
        EncryptionCodec(keys_from_env({"DURAFACT_KEYS": f"{K2},{K1}"})),
        origins=[UI],
        token="s3cret",
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=10)


async def test_the_codec_server_decodes_what_the_server_stores_for_a_bearer_of_the_token(
    client: Client, codec_worker: tuple[Settings, dict[str, str]], codec_server: CodecServer
) -> None:
    _, env = codec_worker
    workflow_id = f"codec-srv-{uuid.uuid4().hex[:8]}"
    await plan(env, K1, workflow_id)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0]
    assert started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    body = json_format.MessageToJson(started.workflow_execution_started_event_attributes.input)
    headers = {"Content-Type": "application/json", "X-Namespace": "default", "Origin": UI}

    refused = await asyncio.to_thread(post, f"{codec_server.url}/decode", body.encode(), headers)
    assert refused.status_code == 401
    wrong = headers | {"Authorization": "Bearer nope"}
    assert (
        await asyncio.to_thread(post, f"{codec_server.url}/decode", body.encode(), wrong)
    ).status_code == 401

    bearer = headers | {"Authorization": "Bearer s3cret"}
    decoded = await asyncio.to_thread(post, f"{codec_server.url}/decode", body.encode(), bearer)
    assert decoded.status_code == 200, decoded.text
    assert decoded.headers["Access-Control-Allow-Origin"] == UI
    payloads = json_format.Parse(decoded.text, Payloads()).payloads
    assert payloads[0].metadata["encoding"] == b"json/plain"
    assert MARKER in json.dumps(json.loads(payloads[0].data))

    # /encode answers with the newest key; a prefix before the endpoint is allowed.
    encoded = await asyncio.to_thread(
        post, f"{codec_server.url}/api/encode", decoded.text.encode(), bearer
    )
    assert encoded.status_code == 200
    again = json_format.Parse(encoded.text, Payloads()).payloads[0]
    assert again.metadata[KEY_ID_FIELD] == b"k2" and MARKER.encode() not in again.data

    # The temporal CLI, with the same endpoint and token, shows the history decrypted.
    cli = await run_command(
        str(temporal_binary()),
        "workflow",
        "show",
        "--workflow-id",
        workflow_id,
        "--address",
        client.service_client.config.target_host,
        "--output",
        "json",
        "--codec-endpoint",
        codec_server.url,
        "--codec-auth",
        "Bearer s3cret",
        env=clean_env(),
        cwd=ROOT,
    )
    assert cli.code == 0, cli.err
    shown = json.loads(cli.out)["events"][0]["workflowExecutionStartedEventAttributes"]
    payload = shown["input"]["payloads"][0]
    assert payload["metadata"]["encoding"] == base64.b64encode(b"json/plain").decode()
    assert MARKER in base64.b64decode(payload["data"]).decode()


def test_the_codec_server_answers_the_web_uis_preflight_and_refuses_other_origins(
    codec_server: CodecServer,
) -> None:
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(
            f"{codec_server.url}/decode",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
            },
            timeout=10,
        )

    ok = preflight(UI)  # no token needed: browsers send none with a preflight
    assert ok.status_code == 204
    assert ok.headers["Access-Control-Allow-Origin"] == UI
    assert "POST" in ok.headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in ok.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "x-namespace", "authorization"} <= allowed
    other = preflight("http://evil.example")
    assert "Access-Control-Allow-Origin" not in other.headers


def test_the_codec_server_says_which_key_a_payload_needs(codec_server: CodecServer) -> None:
    sealed = EncryptionCodec(keys_from_env({"DURAFACT_KEYS": new_key("k9")})).encrypt(
        Payload(metadata={"encoding": b"json/plain"}, data=b'"x"')
    )
    body = json_format.MessageToJson(Payloads(payloads=[sealed])).encode()
    answer = post(
        f"{codec_server.url}/decode",
        body,
        {"Content-Type": "application/json", "Authorization": "Bearer s3cret"},
    )
    assert answer.status_code == 422
    assert answer.json()["error"] == (
        "payload is encrypted with key 'k9', which is not configured (configured: k2, k1): "
        "add key 'k9' to DURAFACT_KEYS or DURAFACT_KEYS_FILE"
    )


# --- the embedded stack ---------------------------------------------------------------


async def test_up_starts_the_codec_server_and_the_web_ui_decodes_through_it(
    model: ScriptedModel, tmp_path: Path
) -> None:
    temporal_port, ui_port, codec_port = free_port(), free_port(), free_port()
    env = clean_env(
        DURAFACT_TEMPORAL_PORT=str(temporal_port),
        DURAFACT_UI_PORT=str(ui_port),
        DURAFACT_CODEC_PORT=str(codec_port),
        DURAFACT_API_PORT=str(free_port()),
        DURAFACT_TASK_QUEUE=f"embedded-{uuid.uuid4().hex[:6]}",
        OPENAI_BASE_URL=model.url,
        DURAFACT_KEYS=K1,
    )
    codec_url = f"http://127.0.0.1:{codec_port}"
    state = tmp_path / ".durafact"
    try:
        up = await starter("up", env=env, cwd=tmp_path, timeout=120)
        assert up.code == 0, up.err
        assert f"started the codec server on {codec_url}" in up.out
        server_argv = json.loads((state / "temporal.pid").read_text())["argv"]
        assert server_argv[-2:] == ["--ui-codec-endpoint", codec_url]
        ui = f"http://localhost:{ui_port}"
        settings = (await asyncio.to_thread(httpx.get, f"{ui}/api/v1/settings", timeout=10)).json()
        assert settings["Codec"]["Endpoint"] == codec_url  # what the Web UI's browser calls

        workflow_id = f"embedded-{uuid.uuid4().hex[:6]}"
        run = await starter("plan", GOAL, "--id", workflow_id, "--json", env=env, cwd=tmp_path)
        assert run.code == 0, run.err
        assert MARKER in run.out
        assert "payloads: encrypted with key k1 (decrypts k1)" in (state / "worker.log").read_text()

        plain = await Client.connect(f"127.0.0.1:{temporal_port}")  # no codec
        stored = await stored_payloads(plain, workflow_id)
        assert key_ids(stored) == {"k1"}
        assert not [p for p in stored if MARKER.encode() in p.SerializeToString()]
        body = json_format.MessageToJson(Payloads(payloads=stored)).encode()
        headers = {"Content-Type": "application/json", "X-Namespace": "default", "Origin": ui}
        decoded = await asyncio.to_thread(post, f"{codec_url}/decode", body, headers)
        assert decoded.status_code == 200, decoded.text
        assert decoded.headers["Access-Control-Allow-Origin"] == ui
        assert MARKER.encode() in b"".join(
            p.data for p in json_format.Parse(decoded.text, Payloads()).payloads
        )
    finally:
        down = await starter("down", env=env, cwd=tmp_path)
    assert down.code == 0, down.err
    assert down.out.splitlines()[-1].startswith("stopped the codec server (pid ")
    assert list(state.glob("*.pid")) == []
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{codec_url}/decode", content=b"{}", timeout=2)


async def test_durafact_key_prints_a_key_line_the_worker_takes(tmp_path: Path) -> None:
    made = await run_command(*DURAFACT, "key", "k7", env=clean_env(), cwd=tmp_path)
    assert made.code == 0, made.err
    (line,) = made.out.splitlines()
    key_id, _, encoded = line.partition("=")
    assert key_id == "k7" and len(base64.b64decode(encoded)) == 32
    keyring = keys_from_env({"DURAFACT_KEYS": line})
    assert keyring is not None and keyring.newest == "k7"
    bad = await run_command(*DURAFACT, "key", "k 7", env=clean_env(), cwd=tmp_path)
    assert (bad.code, len(bad.err_lines)) == (1, 1)


async def test_a_worker_without_keys_fails_an_encrypted_run_visibly_and_status_says_so(
    client: Client, settings: Settings
) -> None:
    # A keyless worker has no codec (converter_for): an encrypted run it is given fails
    # its workflow task, visibly and retried, rather than running on what it cannot read.
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=settings.task_queue,
        OPENAI_BASE_URL=settings.openai_base_url or "",
    )
    workflow_id = f"codec-keyless-{uuid.uuid4().hex[:6]}"
    async with build_worker(with_converter(client, keyed({})), settings):
        with_k1 = env | {"DURAFACT_KEYS": K1}
        started = await starter(
            "plan", GOAL, "--id", workflow_id, "--no-wait", env=with_k1, cwd=ROOT
        )
        assert started.code == 0, started.err
        try:
            for _ in range(60):
                status = await starter("status", workflow_id, env=with_k1, cwd=ROOT)
                if "workflow task failing" in status.out:
                    break
        finally:
            await client.get_workflow_handle(workflow_id).terminate()
    assert (
        "workflow task failing: PayloadDecryptError: the run's payloads are encrypted and the "
        "worker has no keys: give it DURAFACT_KEYS or DURAFACT_KEYS_FILE (attempt "
    ) in status.out, status.out
