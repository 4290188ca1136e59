"""`starter.py chat` as a user runs it: one message from a script, an interactive
session, and a second terminal on the same chat."""

from __future__ import annotations

import asyncio
import json
import uuid

from durafact._recipes.chat import STOPPED_REPLY
from durafact.testing import ScriptedModel
from tests.helpers import DURAFACT, ROOT, read_until, starter


async def interactive(chat_id: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *DURAFACT,
        "chat",
        chat_id,
        env=env,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def type_line(process: asyncio.subprocess.Process, line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(f"{line}\n".encode())
    await process.stdin.drain()


async def test_send_prints_the_streamed_reply_and_json_prints_one_object(
    starter_env: dict[str, str],
    model: ScriptedModel,
) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    run = await starter(
        "chat", chat_id, "--send", "hello there", "--json", env=starter_env, cwd=ROOT
    )
    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert (document["workflow_id"], document["seq"], document["text"]) == (
        chat_id,
        0,
        "done: hello there",
    )
    run = await starter("chat", chat_id, "--send", "and again", env=starter_env, cwd=ROOT)
    assert run.code == 0, run.err
    assert run.out.splitlines() == ["assistant> done: and again"]
    assert model.calls[-1].body["stream"] is True


async def test_interactive_session_and_a_second_terminal_see_one_conversation(
    starter_env: dict[str, str],
) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    first = await interactive(chat_id, starter_env)
    processes = [first]
    try:
        assert first.stdout is not None
        await read_until(first.stdout, f"new chat {chat_id}")
        await type_line(first, "hello")
        await read_until(first.stdout, "assistant> done: hello")
        run = await starter("chat", chat_id, "--send", "from elsewhere", env=starter_env, cwd=ROOT)
        assert run.code == 0, run.err
        seen = await read_until(first.stdout, "assistant> done: from elsewhere")
        assert any("[another terminal] you> from elsewhere" in line for line in seen)
        await type_line(first, "/memory")
        await read_until(first.stdout, "memory (rolling_digest): 4 messages in the window")
        await type_line(first, "/transcript")
        seen = await read_until(first.stdout, "3 assistant> done: from elsewhere")
        assert any("0 user> hello" in line for line in seen)
        await type_line(first, "/quit")
        assert await asyncio.wait_for(first.wait(), 30) == 0
        # Attached later, a terminal shows where the conversation is.
        second = await interactive(chat_id, starter_env)
        processes.append(second)
        assert second.stdout is not None
        seen = await read_until(second.stdout, "assistant> done: from elsewhere")
        assert seen[0] == (
            f"attached to chat {chat_id} (/memory, /transcript, /stop, /steer TEXT, /quit)"
        )
        await type_line(second, "/quit")
        assert await asyncio.wait_for(second.wait(), 30) == 0
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_stop_typed_while_a_reply_is_awaited_stops_the_turn_and_the_next_is_answered(
    starter_env: dict[str, str], model: ScriptedModel
) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    model.reply(lambda call: f"done: {call.last_user}")
    model.hold(lambda call: call.workflow_id == chat_id and call.activity_id == "llm:chat:1")
    process = await interactive(chat_id, starter_env)
    try:
        assert process.stdout is not None
        await read_until(process.stdout, f"new chat {chat_id}")
        await type_line(process, "/stop")  # nothing is being answered yet
        await type_line(process, "write me an essay")
        await asyncio.to_thread(model.wait_for, lambda call: call.workflow_id == chat_id)
        await type_line(process, "/stop")
        await read_until(process.stdout, f"assistant> {STOPPED_REPLY}")
        await type_line(process, "just say hi")
        await read_until(process.stdout, "assistant> done: just say hi")
        await type_line(process, "/quit")
        assert await asyncio.wait_for(process.wait(), 30) == 0
        assert process.stderr is not None
        assert (await process.stderr.read()).decode().splitlines() == [
            "/stop: no reply is awaited here"
        ]
    finally:
        model.release_all()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_send_without_an_id_starts_a_chat_and_says_its_id(
    starter_env: dict[str, str],
) -> None:
    run = await starter("chat", "--send", "hello", env=starter_env, cwd=ROOT)
    assert run.code == 0, run.err
    [line] = run.err_lines
    chat_id = line.removeprefix("new chat ").split(":")[0]
    assert line == f"new chat {chat_id}: durafact chat {chat_id} --send TEXT"
    again = await starter("chat", chat_id, "--send", "again", "--json", env=starter_env, cwd=ROOT)
    assert again.code == 0, again.err
    assert json.loads(again.out)["workflow_id"] == chat_id


async def test_result_of_a_chat_says_it_is_one_and_shows_its_last_reply(
    starter_env: dict[str, str],
) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:6]}"
    sent = await starter("chat", chat_id, "--send", "hello", env=starter_env, cwd=ROOT)
    assert sent.code == 0, sent.err
    run = await starter("result", chat_id, env=starter_env, cwd=ROOT, timeout=30)
    assert run.code == 0, run.err
    assert run.out.splitlines() == [
        f"{chat_id} is a chat: it has no result and goes on until it is ended",
        "its last reply (message 1):",
        "  done: hello",
        f"talk to it: durafact chat {chat_id}",
    ]


async def test_chat_usage_mistakes_are_one_line(
    starter_env: dict[str, str],
) -> None:
    for args, reason in (
        (["x", "--json"], "--json goes with --send"),
        (["x", "--send", "  "], "the message is empty"),
    ):
        run = await starter("chat", *args, env=starter_env, cwd=ROOT)
        assert (run.code, len(run.err_lines)) == (2, 1)
        assert run.err_lines[0].startswith(f"starter: {reason}")
