"""The front-end protocols, driven by their own JavaScript clients (frontends/drive/)
against `durafact serve` on the scripted model: how long from a client's POST to the
first text part; the events each protocol sends for a 3-step plan; a reply resumed
after a dropped connection, with the model calls counted; and 100 streams on one run,
with the server's open files and resident memory (the server runs in this process).

    python -m bench.protocols_bench [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

from bench._common import Stack, dev_stack
from durafact._api import create_app
from durafact._runtime.registry import load_registry
from durafact.testing import default_reply
from tests.helpers import drive, serving

TOKEN = "bench-token"
REPLY = "A market square, a castle on a hill, and cafés along the river."


async def first_text(url: str, rounds: int) -> list[float]:
    """Seconds from the POST to the first text delta, over `rounds` new chats."""
    took = []
    body = {"messages": [{"role": "user", "parts": [{"type": "text", "text": "Tell me"}]}]}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        for n in range(rounds):
            message = {**body["messages"][0], "id": f"m{n}"}
            sent = {"id": f"bench-{uuid.uuid4().hex[:8]}", "messages": [message]}
            began = time.perf_counter()
            first = None
            async with http.stream("POST", "/api/ai-sdk/chats", json=sent) as response:
                async for line in response.aiter_lines():
                    if first is None and '"text-delta"' in line:
                        first = time.perf_counter() - began
            took.append(first)
    return took


def resident_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]


async def settled(files: int) -> int:
    """The open files once the closed connections are let go (the server closes its
    side when it reads the client's end), or after 10 s."""
    for _ in range(100):
        now = len(os.listdir("/proc/self/fd"))
        if now <= files:
            return now
        await asyncio.sleep(0.1)
    return now


async def hundred_streams(stack: Stack, url: str) -> str:
    run_id = f"bench-load-{uuid.uuid4().hex[:8]}"
    held = stack.model.hold(lambda call: call.activity_id.startswith("llm:final"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as h:
        start = {"type": "PlanExecuteWorkflow", "input": {"text": "x"}, "id": run_id}
        assert (await h.post("/api/runs", json=start)).status_code == 201
        files, kib = len(os.listdir("/proc/self/fd")), resident_kib()
        firsts = [asyncio.Event() for _ in range(100)]

        async def follow(first: asyncio.Event) -> None:
            async with h.stream("GET", f"/api/ai-sdk/runs/{run_id}/stream") as response:
                async for _ in response.aiter_lines():
                    first.set()

        readers = [asyncio.ensure_future(follow(e)) for e in firsts]
        await asyncio.gather(*(e.wait() for e in firsts))
        during = len(os.listdir("/proc/self/fd")), resident_kib()
        held.set()
        await asyncio.gather(*readers)
    after = await settled(files), resident_kib()
    calls = sum(1 for c in stack.model.calls if c.workflow_id == run_id)
    return (
        f"100 streams on one run: {calls} model calls (one follower's: 5); open files "
        f"{files} -> {during[0]} -> {after[0]}; resident {kib} -> {during[1]} -> {after[1]} KiB"
    )


async def ag_ui(url: str, rounds: int) -> None:
    """AG-UI's events for a 3-step plan, and its chats' first text parts, as
    @ag-ui/client's HttpAgent receives them (`ms` since its POST)."""
    plan = {"message": "Plan", "forwardedProps": {"recipe": "PlanExecuteWorkflow"}}
    spec = {
        "url": f"{url}/api/ag-ui/runs",
        "token": TOKEN,
        "threadId": f"bench-ag-{uuid.uuid4().hex[:8]}",
    }
    printed = await drive("ag_ui.mjs", json.dumps({**spec, "runs": [plan]}))
    kinds = [line["event"]["type"] for line in printed if "event" in line]
    print(f"AG-UI events for a 3-step plan: {len(kinds)}: {dict(Counter(kinds))}")
    firsts = []
    for _ in range(rounds):
        chat = {
            **spec,
            "url": f"{url}/api/ag-ui/chats",
            "threadId": f"bench-ag-{uuid.uuid4().hex[:8]}",
        }
        printed = await drive("ag_ui.mjs", json.dumps({**chat, "runs": [{"message": "Tell me"}]}))
        firsts.append(
            next(
                line["ms"]
                for line in printed
                if line.get("event", {}).get("type") == "TEXT_MESSAGE_CONTENT"
            )
        )
    print(
        f"AG-UI POST to the first text part, {rounds} new chats: median "
        f"{statistics.median(firsts):.0f} ms, max {max(firsts):.0f} ms"
    )


async def main(rounds: int) -> None:
    def reply(call: object) -> object:
        return REPLY if "llm:chat" in getattr(call, "activity_id", "") else default_reply(call)  # type: ignore[arg-type]

    async with dev_stack(reply) as stack, stack.worker():
        app = create_app(stack.client, stack.settings, load_registry(entry_points=False), TOKEN)
        async with serving(app) as url:
            took = await first_text(url, rounds)
            print(
                f"POST to the first text part, {rounds} new chats on the scripted model: "
                f"median {statistics.median(took) * 1000:.0f} ms, max {max(took) * 1000:.0f} ms"
            )
            body = json.dumps({"type": "PlanExecuteWorkflow"})
            run_id = f"bench-plan-{uuid.uuid4().hex[:8]}"
            printed = await drive("ai_sdk.mjs", url, TOKEN, "runs", run_id, "send", "Plan", body)
            kinds = Counter(line["chunk"]["type"] for line in printed if "chunk" in line)
            print(f"AI SDK chunks for a 3-step plan: {sum(kinds.values())}: {dict(kinds)}")
            await ag_ui(url, rounds)
            stack.model.pace = 0.05
            chat_id = f"bench-drop-{uuid.uuid4().hex[:8]}"
            printed = await drive("ai_sdk.mjs", url, TOKEN, "chats", chat_id, "drop", "Tell me")
            stack.model.pace = 0.0
            text = "".join(
                p["text"] for p in printed[-1]["messages"][-1]["parts"] if p["type"] == "text"
            )
            calls = sum(1 for c in stack.model.calls if c.workflow_id == chat_id)
            print(
                f"A reply dropped after 3 text parts and resumed: whole={text == REPLY}, "
                f"model calls {calls}"
            )
            print(await hundred_streams(stack, url))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    asyncio.run(main(parser.parse_args().rounds))
