"""Record the workflow histories that the replay tests check.

    python -m tests.record_histories            # every scenario
    python -m tests.record_histories reflection # only the named ones

Runs each scenario on a fresh dev server with the scripted model and writes
`tests/histories/<name>.json`. Re-record only on purpose: a committed history is
the promise that running workflows of that shape still replay after a change.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateStage

from durafact._core.approval import ApprovalAnswer, RememberScope
from durafact._core.budget import Budget
from durafact._core.loop_context import CompactContext
from durafact._core.memory import RollingDigestSummarizer
from durafact._core.steer import SteerNote
from durafact._recipes import (
    AnswerBatchInput,
    AnswerFlowWorkflow,
    ChatInput,
    ChatReply,
    ChatSend,
    ChatWorkflow,
    Goal,
    PlanExecuteWorkflow,
    PlanReActInput,
    PlanReActWorkflow,
    ReActInput,
    ReActWorkflow,
    ReflectionInput,
    ReflectionWorkflow,
    ResearchInput,
    ResearchWorkflow,
    SupervisorRequest,
    SupervisorWorkflow,
)
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls, start_dev_server
from tests.helpers import question_waiting
from tests.scripted_answers import answerer, questions
from tests.scripted_research import (
    KAYAK_QUESTION,
    SUM_QUESTION,
    kayak_script,
    sample_sources,
    shipped_skills,
    sum_script,
)

HISTORIES = Path(__file__).parent / "histories"
QUEUE = "record"


async def plan_execute(client: Client, model: ScriptedModel) -> str:
    await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Plan a weekend in Kraków"),
        id="plan_execute",
        task_queue=QUEUE,
    )
    return "plan_execute"


async def plan_execute_retried(client: Client, model: ScriptedModel) -> str:
    model.fail(429, when=lambda call: call.schema_name == "Plan", headers={"retry-after": "1"})
    model.fail(200, when=lambda call: "Step 2" in call.last_user, content="")
    await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Compare two laptops", max_steps=2),
        id="plan_execute_retried",
        task_queue=QUEUE,
    )
    return "plan_execute_retried"


async def plan_execute_failed(client: Client, model: ScriptedModel) -> str:
    model.fail(401, when=lambda call: "Step 1" in call.last_user)
    try:
        await client.execute_workflow(
            PlanExecuteWorkflow.run,
            Goal(text="Fail on the first step"),
            id="plan_execute_failed",
            task_queue=QUEUE,
        )
    except WorkflowFailureError:
        return "plan_execute_failed"
    raise AssertionError("the scenario was meant to fail")


async def plan_execute_canceled(client: Client, model: ScriptedModel) -> str:
    """Cancelled with a reason while the model answers step 2: it ends `canceled`."""
    model.hold(lambda call: "Step 2" in call.last_user)
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Stop on the second step"),
        id="plan_execute_canceled",
        task_queue=QUEUE,
    )
    await asyncio.to_thread(model.wait_for, lambda call: "Step 2" in call.last_user)
    await handle.cancel(reason="not needed any more")
    try:
        await handle.result()
    except WorkflowFailureError:
        return "plan_execute_canceled"
    raise AssertionError("the scenario was meant to be cancelled")


def critic(*scores: float) -> Callable[[Call], str | dict]:
    """Critique round r scores `scores[r - 1]`; drafts and rewrites are plain text."""

    def reply(call: Call) -> str | dict:
        round_ = call.activity_id.rsplit(":", 1)[-1]
        if call.schema_name == "Critique":
            return {"score": scores[int(round_) - 1], "feedback": f"be concrete (round {round_})"}
        return f"a text on {call.last_user.splitlines()[0]}"

    return reply


async def reflection(client: Client, model: ScriptedModel) -> str:
    model.reply(critic(0.4, 0.9))
    await client.execute_workflow(
        ReflectionWorkflow.run,
        ReflectionInput(topic="Why tea cools faster in a wide cup"),
        id="reflection",
        task_queue=QUEUE,
    )
    return "reflection"


async def reflection_round_limit(client: Client, model: ScriptedModel) -> str:
    model.reply(critic(-0.2, 0.5))  # -0.2 is clamped to 0.0; neither round is accepted
    await client.execute_workflow(
        ReflectionWorkflow.run,
        ReflectionInput(topic="A haiku about replay", max_rounds=1),
        id="reflection_round_limit",
        task_queue=QUEUE,
    )
    return "reflection_round_limit"


async def answer_flow(client: Client, model: ScriptedModel) -> str:
    model.reply(answerer(ungrounded={"q2": 1}))  # q2's first quote is not in its source
    await client.execute_workflow(
        AnswerFlowWorkflow.run,
        AnswerBatchInput(questions=questions("q1", "q2", "q3")),
        id="answer_flow",
        task_queue=QUEUE,
    )
    return "answer_flow"


async def answer_flow_budget(client: Client, model: ScriptedModel) -> str:
    model.reply(answerer(ungrounded={"q2": 9}))
    await client.execute_workflow(
        AnswerFlowWorkflow.run,
        AnswerBatchInput(questions=questions("q1", "q2", q3=None), budget_tokens=1),
        id="answer_flow_budget",
        task_queue=QUEUE,
    )
    return "answer_flow_budget"


def specialist(call: Call) -> str | dict:
    """Facts, a budget route and a report that names the facts it was shown."""
    if call.schema_name == "Facts":
        return {"scope": "kitchen", "budget": "3000 EUR", "deadline": "March"}
    if call.schema_name == "RouteChoice":
        return {"route": "budget", "reason": "it asks what fits the money"}
    return f"a budget report ({call.activity_id})"


async def supervisor(client: Client, model: ScriptedModel) -> str:
    model.reply(specialist)
    handle = await client.start_workflow(
        SupervisorWorkflow.run,
        SupervisorRequest(request="Renovate the kitchen for 3000 EUR by March"),
        id="supervisor",
        task_queue=QUEUE,
    )
    question = await question_waiting(handle, 1)
    await handle.signal(
        SupervisorWorkflow.answer,
        ApprovalAnswer(question_id=question.id, approved=True, by="recorder"),
    )
    await handle.result()
    return "supervisor"


async def supervisor_rebuilt(client: Client, model: ScriptedModel) -> str:
    """Rejected with a corrected budget (signal), rebuilt, approved by the update."""
    model.reply(specialist)
    handle = await client.start_workflow(
        SupervisorWorkflow.run,
        SupervisorRequest(request="Renovate the bathroom for 3000 EUR by May"),
        id="supervisor_rebuilt",
        task_queue=QUEUE,
    )
    first = await question_waiting(handle, 1)
    await handle.signal(
        SupervisorWorkflow.answer,
        ApprovalAnswer(
            question_id=first.id,
            approved=False,
            reason="the budget is 5000",
            changes={"budget": "5000 EUR"},
            by="recorder",
        ),
    )
    second = await question_waiting(handle, 2)
    await handle.execute_update(
        SupervisorWorkflow.decide,
        ApprovalAnswer(question_id=second.id, approved=True, by="recorder"),
    )
    await handle.result()
    return "supervisor_rebuilt"


async def research(client: Client, model: ScriptedModel) -> str:
    model.reply(sum_script())  # a total computed in code from three CSV rows
    await client.execute_workflow(
        ResearchWorkflow.run,
        ResearchInput(question=SUM_QUESTION, sources=sample_sources(), skills=shipped_skills()),
        id="research",
        task_queue=QUEUE,
    )
    return "research"


async def research_insufficient(client: Client, model: ScriptedModel) -> str:
    model.reply(kayak_script())  # no quote survives: no source has the answer
    await client.execute_workflow(
        ResearchWorkflow.run,
        ResearchInput(question=KAYAK_QUESTION, sources=sample_sources(), skills=shipped_skills()),
        id="research_insufficient",
        task_queue=QUEUE,
    )
    return "research_insufficient"


def agent(*replies: str | ToolCalls) -> Callable[[Call], str | ToolCalls]:
    """Reply n answers ReAct's turn n (`llm:react:{run}:{n}`)."""

    def reply(call: Call) -> str | ToolCalls:
        return replies[int(call.activity_id.rsplit(":", 1)[-1]) - 1]

    return reply


async def react(client: Client, model: ScriptedModel) -> str:
    """Text protocol: a reply that breaks the format, a tool error, a call, the answer."""
    model.reply(
        agent(
            "It is probably about 400.",
            "Thought: compute it.\nAction: calculator\nAction Input: 17 * / 23\nPAUSE",
            'Thought: fix the input.\nAction: calculator\nAction Input: {"expression": "17 * 23"}',
            "Thought: I now know the answer.\nFinal Answer: 391",
        )
    )
    await client.execute_workflow(
        ReActWorkflow.run,
        ReActInput(question="What is 17 times 23?"),
        id="react",
        task_queue=QUEUE,
    )
    return "react"


async def react_native(client: Client, model: ScriptedModel) -> str:
    """Native protocol: two calls at once, then the answer."""
    model.reply(
        agent(
            ToolCalls(
                [("calculator", {"expression": "2 + 3"}), ("calculator", {"expression": "4 * 5"})]
            ),
            "2 + 3 is 5 and 4 * 5 is 20.",
        )
    )
    await client.execute_workflow(
        ReActWorkflow.run,
        ReActInput(question="What are 2 + 3 and 4 * 5?", protocol="native"),
        id="react_native",
        task_queue=QUEUE,
    )
    return "react_native"


async def react_continued(client: Client, model: ScriptedModel) -> str:
    """A long loop with the `compact` context policy that continues as new between two
    turns: the run that continues is `react_continuing`, the run after it
    `react_continued`."""

    def reply(call: Call) -> str:
        if not call.activity_id.startswith("llm:react:"):
            return f"digest of {call.activity_id}"
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        if turn <= 12:
            return (
                f"Thought: step {turn}.\nAction: calculator\n"
                f'Action Input: {{"expression": "{turn} * 7"}}'
            )
        return "Thought: I now know the answer.\nFinal Answer: 546"

    model.reply(reply)
    handle = await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(
            question="What is the sum of 7, 14, ..., 84?",
            max_turns=20,
            continue_after_events=100,
            context=CompactContext(keep_turns=2, max_tokens=100),
        ),
        id="react_continued",
        task_queue=QUEUE,
    )
    first_run = handle.result_run_id
    await handle.result()
    continuing = await client.get_workflow_handle(
        "react_continued", run_id=first_run
    ).fetch_history()
    (HISTORIES / "react_continuing.json").write_text(continuing.to_json())
    return "react_continued"


async def plan_react(client: Client, model: ScriptedModel) -> str:
    """A plan of two steps, each a ReAct child: the first answers with the calculator,
    the second runs out of turns."""
    step_agents = [
        agent(
            'Thought: compute it.\nAction: calculator\nAction Input: {"expression": "3 * 12"}',
            "Thought: I now know the answer.\nFinal Answer: 36",
        ),
        agent(
            "Thought: add.\nAction: calculator\nAction Input: 36 + 1",
            "Thought: add again.\nAction: calculator\nAction Input: 37 + 1",
        ),
    ]

    def reply(call: Call) -> str | dict | ToolCalls:
        if call.schema_name == "Plan":
            return {"steps": ["Count the eggs in three boxes of twelve", "Count them again"]}
        if call.activity_id.startswith("llm:react:"):
            workflow_id = unquote(call.headers["x-durafact-workflow-id"])
            return step_agents[int(workflow_id.rsplit(":", 1)[-1])](call)
        return "Three boxes hold 36 eggs."

    model.reply(reply)
    await client.execute_workflow(
        PlanReActWorkflow.run,
        PlanReActInput(text="How many eggs are in three boxes of twelve?", max_turns=2),
        id="plan_react",
        task_queue=QUEUE,
    )
    return "plan_react"


def busy(call: Call) -> str:
    """An agent that never answers: a new calculation every turn."""
    turn = int(call.activity_id.rsplit(":", 1)[-1])
    return f"Thought: compute it.\nAction: calculator\nAction Input: {turn} * 7\nPAUSE"


async def react_over_budget(client: Client, model: ScriptedModel) -> str:
    """A loop its token budget stops: over_budget after a few turns."""
    model.reply(busy)
    try:
        await client.execute_workflow(
            ReActWorkflow.run,
            ReActInput(
                question="What is 7 times each number?", max_turns=30, budget=Budget(tokens=900)
            ),
            id="react_over_budget",
            task_queue=QUEUE,
        )
    except WorkflowFailureError:
        return "react_over_budget"
    raise AssertionError("the scenario was meant to stop over budget")


async def react_budget_asked(client: Client, model: ScriptedModel) -> str:
    """A budget that asks: approved with a new limit, then the loop answers."""
    model.reply(
        lambda call: (
            "Thought: done.\nFinal Answer: 42" if call.activity_id.endswith(":5") else busy(call)
        )
    )
    handle = await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(
            question="What is 7 times each number?",
            max_turns=30,
            budget=Budget(tokens=900, on_exhausted="ask"),
        ),
        id="react_budget_asked",
        task_queue=QUEUE,
    )
    question = await question_waiting(handle)
    await handle.signal(
        "answer",
        ApprovalAnswer(question_id=question.id, approved=True, changes={"tokens": "20000"}),
    )
    await handle.result()
    return "react_budget_asked"


async def plan_react_over_budget(client: Client, model: ScriptedModel) -> str:
    """Two steps whose ReAct children share the parent's budget: the second runs out,
    and the parent stops with it."""

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": ["Count the eggs in three boxes of twelve", "Count them again"]}
        child = unquote(call.headers["x-durafact-workflow-id"]).rsplit(":", 1)[-1]
        if child == "0" and call.activity_id.endswith(":2"):
            return "Thought: I now know the answer.\nFinal Answer: 36"
        return busy(call)

    model.reply(reply)
    try:
        await client.execute_workflow(
            PlanReActWorkflow.run,
            PlanReActInput(
                text="How many eggs are in three boxes of twelve?",
                max_turns=30,
                budget=Budget(tokens=2500),
            ),
            id="plan_react_over_budget",
            task_queue=QUEUE,
        )
    except WorkflowFailureError:
        return "plan_react_over_budget"
    raise AssertionError("the scenario was meant to stop over budget")


async def chat(client: Client, model: ScriptedModel) -> str:
    """A chat that streams, calls a tool, folds its digest and continues as new: the run
    that continues is `chat_continuing`, the run after it `chat`."""

    def reply(call: Call) -> str | ToolCalls:
        if call.messages[-1].get("role") == "tool":
            return f"that is {call.messages[-1]['content']}"
        if "6 * 7" in call.last_user:
            return ToolCalls([("calculator", {"expression": "6 * 7"})])
        return f"noted: {call.last_user.splitlines()[-1]}"

    model.reply(reply)
    handle = await client.start_workflow(
        ChatWorkflow.run,
        ChatInput(
            tools=["calculator"],
            memory=RollingDigestSummarizer(window=2, trigger=4),
            continue_after_events=100,
        ),
        id="chat",
        task_queue=QUEUE,
    )
    first_run = handle.result_run_id
    text, n = "what is 6 * 7?", 0
    while True:
        sent = await handle.execute_update(
            ChatWorkflow.send, ChatSend(text=text), result_type=ChatReply
        )
        if sent.run == 1:
            break
        n += 1
        text = f"message {n}"
    for n in range(2):
        await handle.execute_update(
            ChatWorkflow.send, ChatSend(text=f"after {n}"), result_type=ChatReply
        )
    continuing = await client.get_workflow_handle("chat", run_id=first_run).fetch_history()
    (HISTORIES / "chat_continuing.json").write_text(continuing.to_json())
    return "chat"


async def react_steered(client: Client, model: ScriptedModel) -> str:
    """A person's note (the update `steer`) while turn 1's model call runs: it goes
    before turn 2."""
    model.reply(
        agent(
            'Thought: compute it.\nAction: calculator\nAction Input: {"expression": "12 * 25"}',
            "Thought: I now know the answer.\nFinal Answer: 300 cents",
        )
    )
    held = model.hold(lambda call: call.activity_id.endswith(":1"))
    handle = await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question="What is a quarter of 12 euros?"),
        id="react_steered",
        task_queue=QUEUE,
    )
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id.endswith(":1"))
    steering = await handle.start_update(
        ReActWorkflow.steer,
        SteerNote(text="give the result in cents"),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    held.set()
    await steering.result()
    await handle.result()
    return "react_steered"


async def chat_stopped(client: Client, model: ScriptedModel) -> str:
    """A chat whose first turn is steered between its tool call and its answer, whose
    second turn is stopped while the model is held, and whose third message is
    answered."""

    def reply(call: Call) -> str | ToolCalls:
        if call.messages[-1].get("role") == "tool" or "Note from" in call.last_user:
            return "that is 300 cents"
        if "euros" in call.last_user:
            return ToolCalls([("calculator", {"expression": "12 * 25"})])
        return f"noted: {call.last_user}"

    model.reply(reply)
    held = model.hold(lambda call: call.activity_id == "llm:chat:1")
    handle = await client.start_workflow(
        ChatWorkflow.run, ChatInput(tools=["calculator"]), id="chat_stopped", task_queue=QUEUE
    )
    asking = asyncio.create_task(
        handle.execute_update(
            ChatWorkflow.send, ChatSend(text="12 euros in cents?"), result_type=ChatReply
        )
    )
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id == "llm:chat:1")
    steering = await handle.start_update(
        ChatWorkflow.send,
        ChatSend(text="show the sum", steer=True),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        result_type=ChatReply,
    )
    held.set()
    await steering.result()
    await asking
    model.hold(lambda call: call.activity_id == "llm:chat:2")
    asking = asyncio.create_task(
        handle.execute_update(ChatWorkflow.send, ChatSend(text="an essay"), result_type=ChatReply)
    )
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id == "llm:chat:2")
    await handle.execute_update(ChatWorkflow.stop, result_type=ChatReply)
    await asking
    await handle.execute_update(ChatWorkflow.send, ChatSend(text="hi"), result_type=ChatReply)
    return "chat_stopped"


async def gated_turn(
    client: Client,
    model: ScriptedModel,
    workflow_id: str,
    input: ReActInput,
    calls: list[tuple[str, Any]],
    answer: str,
    approvals: list[tuple[int, RememberScope | None]],
) -> str:
    """`input`'s run, whose one native turn asks for `calls` and whose next answers; each
    approval, once that many questions wait, approves the oldest (remembered or not)."""

    def reply(call: Call) -> str | ToolCalls:
        return answer if call.messages[-1].get("role") == "tool" else ToolCalls(calls)

    model.reply(reply)
    handle = await client.start_workflow(ReActWorkflow.run, input, id=workflow_id, task_queue=QUEUE)
    for count, remember in approvals:
        while len(waiting := await handle.query(ReActWorkflow.pending_questions)) != count:
            await asyncio.sleep(0.05)
        approval = ApprovalAnswer(question_id=waiting[0].id, approved=True, remember=remember)
        await handle.execute_update(ReActWorkflow.decide, approval)
    await handle.result()
    return workflow_id


async def react_settled(client: Client, model: ScriptedModel) -> str:
    """A native turn asks for three calculator calls at once under an `ask` rule: the
    first answer, remembered for its call, settles the second (the same call), and a
    person answers the third."""
    same = ("calculator", {"expression": "6 * 7"})
    rules = [{"action": "ask", "tool": "calculator"}]
    return await gated_turn(
        client,
        model,
        "react_settled",
        ReActInput(
            question="Six sevens, twice, and one plus one?",
            protocol="native",
            tool_policy={"rules": rules},
        ),
        [same, same, ("calculator", {"expression": "1 + 1"})],
        "42, 42 and 2",
        [(3, "call"), (1, None)],
    )


async def react_gated(client: Client, model: ScriptedModel) -> str:
    """One native turn, three calculator calls judged as they would run: a bare string
    bound to the expression and denied by a rule, and two calls asked about together;
    the first is approved and runs while the second still waits (the run stays
    awaiting_approval), then the second is approved."""
    rules = [
        {"action": "deny", "tool": "calculator", "when": 'expression contains "/ 0"'},
        {"action": "ask", "tool": "calculator"},
    ]
    return await gated_turn(
        client,
        model,
        "react_gated",
        ReActInput(
            question="Six sevens and one plus one?", protocol="native", tool_policy={"rules": rules}
        ),
        [
            ("calculator", "1 / 0"),
            ("calculator", {"expression": "6 * 7"}),
            ("calculator", {"expression": "1 + 1"}),
        ],
        "42 and 2",
        [(2, None), (1, None)],
    )


async def react_asked_in_order(client: Client, model: ScriptedModel) -> str:
    """One native turn of three calls: a calculator call and a search of the run's sources,
    each asked about, and a calculator call a rule allows on its bound arguments. The
    search binds in the workflow, the calculator calls in the worker; the questions are
    asked in the calls' order all the same, and answered in that order."""
    rules = [
        {"action": "allow", "tool": "calculator", "when": 'expression contains "+"'},
        {"action": "ask", "tool": "calculator"},
        {"action": "ask", "tool": "search_sources"},
    ]
    return await gated_turn(
        client,
        model,
        "react_asked_in_order",
        ReActInput(
            question="Six sevens, a kayak's price, and one plus one?",
            protocol="native",
            sources=sample_sources(),
            tool_policy={"rules": rules},
        ),
        [
            ("calculator", {"expression": "6 * 7"}),
            ("search_sources", {"query": "kayak price"}),
            ("calculator", {"expression": "1 + 1"}),
        ],
        "42, and 2",
        [(2, None), (1, None)],
    )


SCENARIOS: list[Callable[[Client, ScriptedModel], Awaitable[str]]] = [
    plan_execute,
    plan_execute_retried,
    plan_execute_failed,
    plan_execute_canceled,
    reflection,
    reflection_round_limit,
    answer_flow,
    answer_flow_budget,
    supervisor,
    supervisor_rebuilt,
    research,
    research_insufficient,
    react,
    react_native,
    react_continued,
    plan_react,
    chat,
    react_over_budget,
    react_budget_asked,
    plan_react_over_budget,
    react_steered,
    chat_stopped,
    react_settled,
    react_gated,
    react_asked_in_order,
]


async def main(names: list[str]) -> None:
    unknown = set(names) - {s.__name__ for s in SCENARIOS}
    if unknown:
        raise SystemExit(f"no such scenario: {', '.join(sorted(unknown))}")
    scenarios = [s for s in SCENARIOS if not names or s.__name__ in names]
    model = ScriptedModel().start()
    # Always a fresh server: the scenarios use fixed workflow ids.
    env = await start_dev_server()
    settings = Settings(
        openai_base_url=model.url, openai_api_key="record", model="scripted", task_queue=QUEUE
    )
    try:
        async with build_worker(env.client, settings):
            for scenario in scenarios:
                model.reset()
                workflow_id = await scenario(env.client, model)
                history = await env.client.get_workflow_handle(workflow_id).fetch_history()
                path = HISTORIES / f"{workflow_id}.json"
                path.write_text(history.to_json())
                print(f"recorded {path} ({len(history.events)} events)")
    finally:
        await env.shutdown()
        model.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
