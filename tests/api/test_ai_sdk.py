"""The AI SDK's UI message stream, driven by the SDK's own chat client (AbstractChat, what
`useChat` wraps, over DefaultChatTransport, which checks every chunk against the SDK's
chunk schema: a chunk that breaks the protocol fails the program, so the test) against a
live `durafact serve` on the scripted model. The model calls are counted on the scripted
model's side."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.api.conftest import TOKEN, Served
from tests.helpers import drive
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

    def reply(call: Call) -> str | ToolCalls:
        asked = any(m.get("role") == "tool" for m in call.body["messages"])
        return "Deleted it." if asked else ToolCalls([("delete_file", {"path": path})])

    model.reply(reply)
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
    answer = text(last_message(printed))
    assert "done:" in answer
    detail = (await http.get(f"/api/runs/{run_id}")).json()
    assert detail["state"] == "COMPLETED"


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
