"""The AI SDK's UI message stream, driven by the SDK's own chat client (AbstractChat, what
`useChat` wraps, over DefaultChatTransport, which checks every chunk against the SDK's
chunk schema: a chunk that breaks the protocol fails the program, so the test) against a
live `durafact serve` on the scripted model. The model calls are counted on the scripted
model's side."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, expect
from temporalio.client import Client

from durafact._core.approval import ApprovalQuestion
from durafact.testing import Call, ScriptedModel
from tests.api.conftest import TOKEN, Served, delete_once_told
from tests.api.test_ag_ui import agent, events
from tests.helpers import clean_env, drive, serving, starter
from tests.workflows.test_react import DELETED

REPLY = "Kraków has a market square, a castle and many small cafés."


def chunks(printed: list[Any]) -> list[dict[str, Any]]:
    return [line["chunk"] for line in printed if "chunk" in line]


def last_message(printed: list[Any]) -> dict[str, Any]:
    return printed[-1]["messages"][-1]


def text(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


def chat_calls(model: ScriptedModel) -> list[Call]:
    return [call for call in model.calls if call.activity_id.startswith("llm:chat:")]


async def test_a_chat_reply_streams_in_more_than_one_text_part(
    served: Served, model: ScriptedModel, http: httpx.AsyncClient
) -> None:
    model.reply(lambda call: REPLY)
    chat_id = f"ui-{uuid.uuid4().hex[:8]}"
    printed = await drive("ai_sdk.mjs", served.url, TOKEN, "chats", chat_id, "send", "Tell me")
    got = chunks(printed)
    deltas = [c["delta"] for c in got if c["type"] == "text-delta"]
    assert len(deltas) > 1 and "".join(deltas) == REPLY
    types = [c["type"] for c in got]
    assert types[:3] == ["start", "start-step", "text-start"]
    assert types[-3:] == ["text-end", "finish-step", "finish"]
    reply = last_message(printed)
    assert reply["role"] == "assistant" and text(reply) == REPLY
    assert printed[-1]["status"] == "ready"
    # The client's message is the chat's durable reply.
    transcript = (await http.get(f"/api/chats/{chat_id}/transcript")).json()
    assert [line["content"] for line in transcript["lines"]] == ["Tell me", REPLY]


async def test_a_stream_dropped_mid_reply_resumes_and_completes_with_one_model_turn(
    served: Served, model: ScriptedModel
) -> None:
    model.reply(lambda call: REPLY)
    model.pace = 0.05  # the reply is still being written when the connection drops
    chat_id = f"ui-{uuid.uuid4().hex[:8]}"
    printed = await drive("ai_sdk.mjs", served.url, TOKEN, "chats", chat_id, "drop", "Tell me")
    assert {"dropped": True} in printed
    assert {"statusAfterDrop": "error"} in printed
    assert text(last_message(printed)) == REPLY
    assert printed[-1]["status"] == "ready"
    assert len(chat_calls(model)) == 1


async def test_the_same_message_id_posted_twice_makes_one_turn(
    served: Served, model: ScriptedModel
) -> None:
    model.reply(lambda call: REPLY)
    chat_id = f"ui-{uuid.uuid4().hex[:8]}"
    printed = await drive("ai_sdk.mjs", served.url, TOKEN, "chats", chat_id, "twice", "Tell me")
    got = chunks(printed)
    replies = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    assert replies == REPLY * 2  # each stream carries the whole reply
    assert [c["type"] for c in got].count("finish") == 2
    assert len(chat_calls(model)) == 1


async def test_a_tool_approval_request_is_answered_from_the_client_and_the_tool_runs_once(
    served: Served, model: ScriptedModel
) -> None:
    path = f"/tmp/ui-{uuid.uuid4().hex[:8]}"

    model.reply(delete_once_told(path))
    chat_id = f"ui-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"settings": {"tools": ["delete_file"]}})
    printed = await drive(
        "ai_sdk.mjs", served.url, TOKEN, "chats", chat_id, "approve", "Delete it", body
    )
    got = chunks(printed)
    asked = [c for c in got if c["type"] == "tool-approval-request"]
    assert len(asked) == 1 and asked[0]["approvalId"].startswith("approval:")
    called = next(c for c in got if c["type"] == "tool-input-available")
    assert called["toolName"] == "delete_file" and called["input"] == {"path": path}
    assert called["toolCallId"] == asked[0]["toolCallId"]
    output = next(c for c in got if c["type"] == "tool-output-available")
    assert output["output"] == f"deleted {path}"
    assert DELETED.count(path) == 1
    message = last_message(printed)
    tool_part = next(p for p in message["parts"] if p.get("toolCallId") == called["toolCallId"])
    assert tool_part["state"] == "output-available"
    assert tool_part["approval"]["approved"] is True
    assert text(message).endswith("Deleted it.")
    assert len(chat_calls(model)) == 2


async def approval_requested(
    http: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """POST `body` and read its stream up to the first tool approval request: that
    request, and the reply's metadata (which names the turn)."""
    metadata: dict[str, Any] = {}
    async with http.stream("POST", "/api/ai-sdk/chats", json=body, timeout=60) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            metadata = chunk.get("messageMetadata", metadata)
            if chunk["type"] == "tool-approval-request":
                return chunk, metadata
    raise AssertionError("the stream ended without an approval request")


async def test_an_approval_response_that_is_not_a_json_boolean_answers_nothing_and_runs_nothing(
    served: Served, model: ScriptedModel, http: httpx.AsyncClient, client: Client
) -> None:
    """As an attacker (or a careless client) would post it, by hand: a "false" that a
    truthiness test would read as a yes, a 0, a null, no id. Each is refused before any
    answer is sent, also beside a well-formed one; a JSON false rejects."""
    path = f"/tmp/ui-{uuid.uuid4().hex[:8]}"
    model.reply(delete_once_told(path))
    chat_id = f"ui-{uuid.uuid4().hex[:8]}"
    user = {"id": f"m-{chat_id}", "role": "user", "parts": [{"type": "text", "text": "Delete"}]}
    body = {"id": chat_id, "messages": [user], "settings": {"tools": ["delete_file"]}}
    asked, metadata = await approval_requested(http, body)
    question = asked["approvalId"]

    def responding(*approvals: dict[str, Any]) -> dict[str, Any]:
        parts = [
            {
                "type": "tool-delete_file",
                "toolCallId": asked["toolCallId"],
                "state": "approval-responded",
                "approval": approval,
            }
            for approval in approvals
        ]
        reply = {"id": "a", "role": "assistant", "metadata": metadata, "parts": parts}
        return {"id": chat_id, "messages": [user, reply]}

    bad = [
        {"id": question, "approved": "false"},
        {"id": question, "approved": "true"},
        {"id": question, "approved": 0},
        {"id": question, "approved": 1},
        {"id": question, "approved": None},
        {"id": question},
        {"approved": True},
        {"id": 7, "approved": True},
        {"id": question, "approved": True, "reason": {"why": "fine"}},
    ]
    for approval in bad:
        refused = await http.post("/api/ai-sdk/chats", json=responding(approval))
        assert refused.status_code == 400, approval
    mixed = await http.post(
        "/api/ai-sdk/chats",
        json=responding({"id": question, "approved": True}, {"id": question, "approved": "no"}),
    )
    assert mixed.status_code == 400
    assert "needs approved: true or false" in mixed.json()["error"]["message"]
    handle = client.get_workflow_handle(chat_id)
    waiting = await handle.query("pending_questions", result_type=list[ApprovalQuestion])
    assert [q.id for q in waiting] == [question]  # still asked: nothing answered it

    rejected = await http.post(
        "/api/ai-sdk/chats", json=responding({"id": question, "approved": False})
    )
    assert rejected.status_code == 200
    said = "".join(
        json.loads(line[6:]).get("delta", "")
        for line in rejected.text.splitlines()
        if line.startswith("data: {")
    )
    assert said == "Deleted it."  # the model's next turn, told the call was not approved
    told = [m for m in model.calls[-1].body["messages"] if m["role"] == "tool"]
    assert told and "not approved" in told[-1]["content"]
    assert path not in DELETED


async def test_a_run_streams_its_progress_as_data_parts_and_its_answer_as_text(
    served: Served, model: ScriptedModel, http: httpx.AsyncClient
) -> None:
    run_id = f"ui-run-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"type": "PlanExecuteWorkflow"})
    printed = await drive(
        "ai_sdk.mjs", served.url, TOKEN, "runs", run_id, "send", "Plan a picnic", body
    )
    got = chunks(printed)
    statuses = [c["data"]["status"] for c in got if c["type"] == "data-status"]
    assert statuses[0] == "planning" and "executing:3/3" in statuses
    detail = (await http.get(f"/api/runs/{run_id}")).json()
    assert detail["state"] == "COMPLETED"
    # The answer as the recipe shows it: its steps with their results, then the answer.
    answer = text(last_message(printed))
    assert answer == detail["answer"] and answer.startswith("steps:\n  1. ")
    assert answer.endswith("answer:\n  done: Write the final answer.")


async def test_a_runs_answer_is_the_same_text_in_every_front_door(
    served: Served,
    model: ScriptedModel,
    http: httpx.AsyncClient,
    console: BrowserContext,
    client: Client,
    tmp_path: Path,
) -> None:
    """The AI SDK's stream ends with the text `durafact result` prints for the run, and a
    late AG-UI client and the console's page show that text too."""
    run_id = f"ui-same-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"type": "PlanExecuteWorkflow"})
    printed = await drive(
        "ai_sdk.mjs", served.url, TOKEN, "runs", run_id, "send", "Plan a picnic", body
    )
    answer = text(last_message(printed))
    address = client.service_client.config.target_host
    cli = await starter("result", run_id, env=clean_env(TEMPORAL_ADDRESS=address), cwd=tmp_path)
    assert cli.code == 0, cli.err
    assert cli.out.startswith(f"{answer}\nusage: ")
    assert answer.startswith("steps:\n") and "\nanswer:\n  done: " in answer
    (late,) = await agent(served, "runs", run_id, [{}])
    snapshot = next(e for e in events(late) if e["type"] == "MESSAGES_SNAPSHOT")
    last = snapshot["messages"][-1]
    assert (last["role"], last["content"]) == ("assistant", answer)
    page = await console.new_page()
    await page.goto(f"/runs/{run_id}")
    await expect(page.locator("#answer p")).to_be_visible(timeout=15_000)
    assert await page.locator("#answer p").inner_text() == answer


async def test_a_post_without_the_token_is_refused_before_anything_starts(
    served: Served,
) -> None:
    body = {"id": "ui-nope", "messages": [{"id": "m", "role": "user", "parts": []}]}
    async with httpx.AsyncClient(base_url=served.url) as anonymous:
        response = await anonymous.post("/api/ai-sdk/chats", json=body)
    assert response.status_code == 401


async def test_a_user_message_without_text_is_400_and_starts_no_chat(
    served: Served, http: httpx.AsyncClient
) -> None:
    chat_id = f"ui-{uuid.uuid4().hex[:8]}"
    body = {"id": chat_id, "messages": [{"id": "m", "role": "user", "parts": []}]}
    response = await http.post("/api/ai-sdk/chats", json=body)
    assert response.status_code == 400
    assert "no text part" in response.json()["error"]["message"]
    gone = await http.get(f"/api/runs/{chat_id}")
    assert gone.status_code == 404


async def read_stream(http: httpx.AsyncClient, path: str, opened: asyncio.Event) -> list[dict]:
    """The chunks of one UI message stream, read to its end; `opened` is set once
    its first chunk came."""
    got: list[dict] = []
    async with http.stream("GET", path, timeout=120) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                got.append(json.loads(line[6:]))
                opened.set()
    return got


async def files_settled(before: int) -> int:
    """The open files once the server has closed its side of the connections the
    clients closed (when it reads their end), or what is still open after 10 s."""
    for _ in range(100):
        if (now := open_files()) <= before:
            return now
        await asyncio.sleep(0.1)
    return now


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def resident_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]


async def test_a_hundred_streams_on_one_run_cost_one_run_and_leave_nothing_open(
    served: Served, model: ScriptedModel, http: httpx.AsyncClient
) -> None:
    """The server is this process (uvicorn in the test's loop): its open files and
    resident memory are read from /proc/self."""
    run_id = f"ui-load-{uuid.uuid4().hex[:8]}"
    held = model.hold(lambda call: call.activity_id.startswith("llm:final"))
    started = await http.post(
        "/api/runs", json={"type": "PlanExecuteWorkflow", "input": {"text": "x"}, "id": run_id}
    )
    assert started.status_code == 201
    before_files, before_kib = open_files(), resident_kib()
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=served.url, headers=served.auth(), limits=limits) as many:
        opened = [asyncio.Event() for _ in range(100)]
        readers = [
            asyncio.ensure_future(read_stream(many, f"/api/ai-sdk/runs/{run_id}/stream", e))
            for e in opened
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 60)
        during_files, during_kib = open_files(), resident_kib()
        held.set()
        streams = await asyncio.wait_for(asyncio.gather(*readers), 120)
    answers = {text(last_of(chunks)) for chunks in streams}
    detail = (await http.get(f"/api/runs/{run_id}")).json()
    after_files, after_kib = await files_settled(before_files), resident_kib()
    print(
        f"\n100 streams on one run: open files {before_files} -> {during_files} -> "
        f"{after_files}; resident {before_kib} -> {during_kib} -> {after_kib} KiB"
    )
    assert answers == {detail["answer"]}
    calls = [c for c in model.calls if c.workflow_id == run_id]
    assert len(calls) == 5  # the plan, three steps, the finish: as one follower costs
    assert len(served.app.state.services.feeds) == 0  # the last follower stopped the poller
    assert after_files <= before_files + 5


def last_of(chunks: list[dict]) -> dict:
    """The message the chunks of one stream make, as the client assembles its text."""
    parts = [{"type": "text", "text": c["delta"]} for c in chunks if c["type"] == "text-delta"]
    return {"parts": parts}


async def test_a_stream_that_breaks_the_protocol_fails_the_client() -> None:
    """The check every test above relies on: the SDK's client refuses a chunk its schema
    does not take (here a text delta without the id of its part)."""

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in ({"type": "start"}, {"type": "text-delta", "delta": "x"}):
            body = f"data: {json.dumps(chunk)}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    async with serving(broken) as url:
        with pytest.raises(AssertionError, match="TypeValidationError"):
            await drive("ai_sdk.mjs", url, TOKEN, "chats", "c", "send", "hi")
