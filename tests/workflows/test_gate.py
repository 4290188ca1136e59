"""The human gate judges the call that runs (issue 30): a policy, a question and a
remembered decision see a tool's arguments as the tool receives them, bound and
validated by its own model, never the text the model wrote. End to end on the dev
server: the scripted model plays an attacker, the worker runs real tools of this
module that record what they were given."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.client import Client, WorkflowHandle

from durafact._activities.tools import tool
from durafact._core.approval import ApprovalAnswer, ApprovalQuestion, RememberScope
from durafact._core.tool_policy import RememberedDecision, arguments_hash
from durafact._recipes import ReActInput, ReActResult, ReActWorkflow
from durafact._recipes.recipe import STATUS_ATTRIBUTE
from durafact._recipes.tool_gate import MAX_ASKED_ARGUMENTS
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.helpers import ledger_of, question_waiting

RAN: list[tuple[str, Any]] = []


@tool
def shell(cmd: str) -> str:
    """Run a shell command."""
    RAN.append(("shell", cmd))
    return f"ran {cmd}"


@tool
def pay(amount: float) -> str:
    """Pay an amount."""
    RAN.append(("pay", amount))
    return f"paid {amount}"


@tool
def flag(force: bool) -> str:
    """Set a flag."""
    RAN.append(("flag", force))
    return f"flag {force}"


@tool(destructive=True)
def wipe(path: str) -> str:
    """Wipe a path."""
    RAN.append(("wipe", path))
    return f"wiped {path}"


TOOLS = [shell, pay, flag, wipe]


@pytest.fixture
async def gate_worker(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    RAN.clear()
    async with build_worker(client, settings, tools=TOOLS):
        yield settings


def turns(*replies: Any) -> Callable[[Call], Any]:
    """Reply n answers the model call of turn n; the last one answers every later turn."""

    def reply(call: Call) -> Any:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        return replies[min(turn, len(replies)) - 1]

    return reply


def text_action(tool_name: str, action_input: str) -> str:
    return f"Thought: I act.\nAction: {tool_name}\nAction Input: {action_input}\nPAUSE"


FINAL = "Thought: done.\nFinal Answer: done"


async def start(
    client: Client, settings: Settings, rules: list[str], **kw: Any
) -> WorkflowHandle[Any, ReActResult]:
    """A ReAct run over this module's tools with `rules` written `ACTION TOOL [when ...]`."""
    policy = {"rules": [rule(text) for text in rules]}
    return await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(
            question="Do the thing",
            tools=[t.name for t in TOOLS],
            tool_policy=policy,
            **kw,
        ),
        id=f"gate-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


def rule(text: str) -> dict[str, str]:
    action, tool_name, *when = text.split(" ", 2)
    return {"action": action, "tool": tool_name, **({"when": when[0][5:]} if when else {})}


async def finished(handle: WorkflowHandle[Any, ReActResult]) -> ReActResult:
    return await asyncio.wait_for(handle.result(), timeout=60)


async def decide(
    handle: WorkflowHandle[Any, Any],
    question: ApprovalQuestion,
    approved: bool = True,
    remember: RememberScope | None = None,
) -> None:
    answer = ApprovalAnswer(question_id=question.id, approved=approved, remember=remember)
    await handle.execute_update("decide", answer)


async def waiting(handle: WorkflowHandle[Any, Any], count: int) -> list[ApprovalQuestion]:
    """The questions that wait, once `count` of them do, in the order the model asked for
    their calls. (The calls of one turn are bound at once, and a question is numbered
    when its binding returns, so numbers need not follow the model's order.)"""
    for _ in range(600):
        questions = await handle.query("pending_questions", result_type=list[ApprovalQuestion])
        if len(questions) == count:
            return sorted(questions, key=lambda q: q.tool_call_id or "")
        await asyncio.sleep(0.025)
    raise AssertionError(f"{count} questions never waited in {handle.id}")


# --- 1. arguments that are not a JSON object ----------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        ToolCalls([("shell", "rm -rf /")]),
        text_action("shell", "[x] ; rm -rf /"),
        text_action("shell", "{ rm -rf / }"),
    ],
    ids=["native bare string", "text list-like", "text brace-like"],
)
async def test_a_deny_rule_judges_raw_text_as_the_argument_it_binds_to(
    client: Client, gate_worker: Settings, model: ScriptedModel, reply: Any
) -> None:
    """Text that is not a JSON object is bound to the tool's one string parameter, and
    the rule judges that: `rm -rf /` never runs, however it was written."""
    protocol = "native" if isinstance(reply, ToolCalls) else "text"
    model.reply(turns(reply, "done" if protocol == "native" else FINAL))
    handle = await start(
        client, gate_worker, ['deny shell when cmd contains "rm "'], protocol=protocol
    )
    result = await finished(handle)
    assert RAN == []
    assert [(c.tool, c.ok, c.error_type) for c in result.tool_calls] == [
        ("shell", False, "DeniedByPolicy")
    ]


async def test_an_ask_rule_asks_about_raw_text_bound_to_the_tool(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(ToolCalls([("shell", "cat secret")]), "done"))
    handle = await start(
        client, gate_worker, ['ask shell when cmd contains "secret"'], protocol="native"
    )
    question = await question_waiting(handle)
    assert question.arguments == {"cmd": "cat secret"}
    assert question.text == 'Run the tool shell with {"cmd": "cat secret"}?'
    assert RAN == []
    await decide(handle, question, approved=False)
    await finished(handle)
    assert RAN == []


# --- 2. the values the tool receives, not the JSON types the model wrote ------------------


@pytest.mark.parametrize(
    ("tool_name", "arguments", "rules"),
    [
        ("pay", {"amount": "1000"}, ["deny pay when amount > 100"]),
        ("pay", {"amount": 1000}, ["deny pay when amount > 100"]),
        ("flag", {"force": 1}, ["deny flag when force == true"]),
        ("flag", {"force": "yes"}, ["deny flag when force == true"]),
        ("flag", {"force": "true"}, ["deny flag when force == true"]),
        ("flag", {"force": "on"}, ["allow flag when force == false", "deny flag"]),
    ],
)
async def test_a_deny_rule_judges_the_validated_values(
    client: Client,
    gate_worker: Settings,
    model: ScriptedModel,
    tool_name: str,
    arguments: dict[str, Any],
    rules: list[str],
) -> None:
    model.reply(turns(ToolCalls([(tool_name, arguments)]), "done"))
    result = await finished(await start(client, gate_worker, rules, protocol="native"))
    assert RAN == []
    assert [(c.ok, c.error_type) for c in result.tool_calls] == [(False, "DeniedByPolicy")]


async def test_what_an_allow_rule_judged_is_what_runs(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    """`"50"` is judged as 50.0 and runs as 50.0."""
    model.reply(turns(ToolCalls([("pay", {"amount": "50"})]), "done"))
    rules = ["allow pay when amount <= 100", "deny pay"]
    result = await finished(await start(client, gate_worker, rules, protocol="native"))
    assert RAN == [("pay", 50.0)]
    assert [c.ok for c in result.tool_calls] == [True]


async def test_arguments_that_do_not_validate_run_nothing_and_skip_no_rule(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    """An amount that is no number binds to nothing: the call is refused as an
    observation, before any rule (the `allow pay` after the deny would have let raw
    text through), and no question is asked."""
    model.reply(turns(ToolCalls([("pay", {"amount": "lots"}), ("pay", "1000")]), "done"))
    rules = ["deny pay when amount > 100", "allow pay"]
    handle = await start(client, gate_worker, rules, protocol="native")
    result = await finished(handle)
    assert RAN == []
    assert [(c.ok, c.error_type) for c in result.tool_calls] == [
        (False, "InvalidArguments"),
        (False, "InvalidArguments"),
    ]
    ledger = await ledger_of(handle)
    assert ledger.find_all(ApprovalQuestion) == []


async def test_remember_call_is_one_call_for_the_values_the_tool_receives_as_one(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    """`1`, `1.0` and `"1"` are one float: one question for the three, remembered for
    the call; `2` is another call and asks."""
    model.reply(
        turns(
            ToolCalls([("pay", {"amount": 1})]),
            ToolCalls([("pay", {"amount": 1.0}), ("pay", {"amount": "1"})]),
            ToolCalls([("pay", {"amount": 2})]),
            "done",
        )
    )
    handle = await start(client, gate_worker, ["ask pay"], protocol="native")
    first = await question_waiting(handle, 1)
    assert first.arguments == {"amount": 1.0}
    assert first.arguments_hash == arguments_hash({"amount": 1.0})
    await decide(handle, first, remember="call")
    second = await question_waiting(handle, 2)
    assert second.arguments == {"amount": 2.0}
    assert RAN == [("pay", 1.0)] * 3
    await decide(handle, second, approved=False)
    await finished(handle)
    assert RAN == [("pay", 1.0)] * 3


# --- 3. the whole call, or no question at all -----------------------------------------------


async def test_a_question_shows_the_whole_call(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    path = "/tmp/" + "a" * 420 + "/../../etc/passwd"
    model.reply(turns(ToolCalls([("wipe", {"path": path})]), "done"))
    handle = await start(client, gate_worker, [], protocol="native")
    question = await question_waiting(handle)
    assert question.arguments == {"path": path}
    assert question.text == f"Run the destructive tool wipe with {json.dumps({'path': path})}?"
    await decide(handle, question, approved=False)
    await finished(handle)
    assert RAN == []


async def test_a_question_shows_characters_that_hide_text_as_escapes(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    """A right-to-left override or a newline in an argument cannot reorder or hide what
    the person reads: the text shows them as escapes (the arguments keep them as they
    are, for the console to show the same way)."""
    path = "/tmp/report\u202efdp.exe\nand more"
    model.reply(turns(ToolCalls([("wipe", {"path": path})]), "done"))
    handle = await start(client, gate_worker, [], protocol="native")
    question = await question_waiting(handle)
    assert question.text == (
        'Run the destructive tool wipe with {"path": "/tmp/report\\u202efdp.exe\\nand more"}?'
    )
    assert question.arguments == {"path": path}
    await decide(handle, question, approved=False)
    await finished(handle)


async def test_a_call_too_long_to_show_whole_is_refused_before_it_is_asked(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    path = "/tmp/" + "a" * MAX_ASKED_ARGUMENTS
    model.reply(turns(ToolCalls([("wipe", {"path": path})]), "done"))
    handle = await start(client, gate_worker, [], protocol="native")
    result = await finished(handle)
    assert RAN == []
    (call,) = result.tool_calls
    assert (call.ok, call.error_type) == (False, "TooLongToAsk")
    ledger = await ledger_of(handle)
    assert ledger.find_all(ApprovalQuestion) == []
    shown = [m for m in model.calls[-1].body["messages"] if m["role"] == "tool"]
    assert shown[0]["content"].startswith("refused before asking: the arguments of wipe are")


# --- 4. questions asked together ------------------------------------------------------------


async def listed_status(client: Client, handle: WorkflowHandle[Any, Any]) -> str | None:
    description = await handle.describe()
    return description.typed_search_attributes.get(STATUS_ATTRIBUTE)


async def test_a_question_asked_beside_another_stays_listed_until_answered(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    """`pay(10)` and `pay(11)` in one turn: two questions. Once the first is approved
    and its call ran, the second still waits, and the run says so everywhere that
    lists what waits (the status, DurafactStatus, `pending_questions`)."""
    model.reply(turns(ToolCalls([("pay", {"amount": 10}), ("pay", {"amount": 11})]), "done"))
    handle = await start(client, gate_worker, ["ask pay"], protocol="native")
    first, second = await waiting(handle, 2)
    await decide(handle, first)
    for _ in range(400):
        if RAN:
            break
        await asyncio.sleep(0.025)
    assert RAN == [("pay", 10.0)]
    assert [q.id for q in await waiting(handle, 1)] == [second.id]
    assert await handle.query("status", result_type=str) == "awaiting_approval"
    assert await listed_status(client, handle) == "awaiting_approval"
    await decide(handle, second)
    await finished(handle)
    assert RAN == [("pay", 10.0), ("pay", 11.0)]


async def test_a_third_question_beside_a_remembered_call_stays_listed(
    client: Client, gate_worker: Settings, model: ScriptedModel
) -> None:
    calls = [("pay", {"amount": 5}), ("pay", {"amount": 5}), ("pay", {"amount": 6})]
    model.reply(turns(ToolCalls(calls), "done"))
    handle = await start(client, gate_worker, ["ask pay"], protocol="native")
    first, _, third = await waiting(handle, 3)
    await decide(handle, first, remember="call")
    assert [q.id for q in await waiting(handle, 1)] == [third.id]
    for _ in range(400):
        if len(RAN) == 2:
            break
        await asyncio.sleep(0.025)
    assert await handle.query("status", result_type=str) == "awaiting_approval"
    assert await listed_status(client, handle) == "awaiting_approval"
    await decide(handle, third)
    await finished(handle)
    assert RAN == [("pay", 5.0), ("pay", 5.0), ("pay", 6.0)]


# --- 5. remembered decisions that disagree: the most recent settles --------------------------


@pytest.mark.parametrize(
    ("first", "second", "then_runs"),
    [
        ((True, "call"), (False, "tool"), False),  # pay(5) approved, then pay rejected
        ((False, "call"), (True, "tool"), True),  # pay(5) rejected, then pay approved
    ],
    ids=["call approved then tool rejected", "call rejected then tool approved"],
)
async def test_the_most_recent_remembered_decision_settles_a_call(
    client: Client,
    gate_worker: Settings,
    model: ScriptedModel,
    first: tuple[bool, RememberScope],
    second: tuple[bool, RememberScope],
    then_runs: bool,
) -> None:
    """pay(5) and pay(6) wait together; pay(5) is answered for the call, then pay(6)
    for the whole tool. A later pay(5) follows the later decision, and says which."""
    model.reply(
        turns(
            ToolCalls([("pay", {"amount": 5}), ("pay", {"amount": 6})]),
            ToolCalls([("pay", {"amount": 5})]),
            "done",
        )
    )
    handle = await start(client, gate_worker, ["ask pay"], protocol="native")
    five, six = await waiting(handle, 2)
    await decide(handle, five, approved=first[0], remember=first[1])
    await waiting(handle, 1)
    await decide(handle, six, approved=second[0], remember=second[1])
    result = await finished(handle)

    later = result.tool_calls[-1]
    assert later.ok is then_runs
    assert RAN.count(("pay", 5.0)) == int(first[0]) + int(then_runs)
    ledger = await ledger_of(handle)
    decisions = {d.scope: d for d in (a.data for a in ledger.find_all(RememberedDecision))}
    assert set(decisions) == {"call", "tool"}
    progress = await handle.query("progress", 0)
    settled = [e["message"] for e in progress["events"] if e["kind"] == "remembered"]
    verdict = "approved" if then_runs else "rejected"
    assert settled[-1].startswith(f"pay {verdict} without asking: {decisions['tool'].id}")


# --- the property ------------------------------------------------------------------------------

NUMBERS = st.one_of(st.integers(-1_000, 1_000), st.floats(-1e4, 1e4, allow_nan=False))
RAW_AMOUNTS = st.one_of(
    NUMBERS,
    NUMBERS.map(str),  # "1000": a float field takes it
    st.booleans(),
    st.none(),
    st.text(max_size=6),
)
RAW_ARGUMENTS = st.one_of(
    st.fixed_dictionaries({"amount": RAW_AMOUNTS}),
    st.fixed_dictionaries({"amount": RAW_AMOUNTS, "note": st.text(max_size=4)}),
    RAW_AMOUNTS.map(lambda value: value if isinstance(value, str) else json.dumps(value)),
)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=RAW_ARGUMENTS)
async def test_a_deny_rule_that_holds_on_the_validated_values_never_lets_the_tool_run(
    client: Client, gate_worker: Settings, model: ScriptedModel, raw: Any
) -> None:
    """For any arguments a model writes: the tool runs only with values it accepts,
    and never with values on which `deny pay when amount > 100` holds; arguments that
    do not validate run nothing (and then `allow pay` decides nothing)."""
    RAN.clear()
    model.reply(turns(ToolCalls([("pay", raw)]), "done"))
    rules = ["deny pay when amount > 100", "allow pay"]
    result = await finished(await start(client, gate_worker, rules, protocol="native"))
    (call,) = result.tool_calls
    assert not any(amount > 100 for _, amount in RAN)
    assert len(RAN) == int(call.ok)
    if not call.ok:
        assert call.error_type in ("DeniedByPolicy", "InvalidArguments")
