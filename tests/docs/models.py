"""What the scripted model answers while a documentation block runs: a block marked
`model: NAME` gets NAME(model) before it starts (tests/docs/blocks.py). Unmarked blocks
get ScriptedModel's default: a plan of three steps, "Gather facts", "Compare options",
"Decide", and "done: " with the last line of any other request."""

from __future__ import annotations

from durafact.testing import Call, ScriptedModel


def trips(model: ScriptedModel) -> None:
    """docs/guides/your-recipe.md: three cities, then a day in each."""

    def answer(call: Call) -> str | dict:
        if call.schema_name == "Cities":
            return {"cities": ["Gdańsk", "Toruń", "Poznań"]}
        return "a day in " + call.last_user.removeprefix("Plan a day in ").rstrip(".")

    model.reply(answer)


def critic(model: ScriptedModel) -> None:
    """docs/recipes/reflection.md: a critic that scores each draft 0.5 higher than the
    last (0.3, 0.8), and a writer that numbers its drafts."""
    drafts = iter(range(1, 100))

    def answer(call: Call) -> str | dict:
        if call.schema_name == "Critique":
            critiques = sum(c.schema_name == "Critique" for c in model.calls)
            return {"score": min(0.3 + 0.5 * (critiques - 1), 1.0), "feedback": "Say why."}
        return f"Draft {next(drafts)}: durable workflows survive crashes."

    model.reply(answer)


def grounded(model: ScriptedModel) -> None:
    """docs/recipes/answer-flow.md: an answer that quotes its source verbatim."""
    from tests.scripted_answers import answerer

    model.reply(answerer())


def specialist(model: ScriptedModel) -> None:
    """docs/recipes/routing.md: the facts of the kitchen request, the route `budget`,
    and a report named after its activity."""

    def answer(call: Call) -> str | dict:
        if call.schema_name == "Facts":
            return {"scope": "kitchen", "budget": "3000 EUR", "deadline": "March"}
        if call.schema_name == "RouteChoice":
            return {"route": "budget", "reason": "money"}
        return f"Report {call.activity_id}"

    model.reply(answer)


def sums(model: ScriptedModel) -> None:
    """docs/guides/approvals.md: the calculator on 2 + 2, 2 + 2 and 3 + 3, then the
    answer (the text protocol)."""
    from tests.cli.test_approval_policy import sums

    model.reply(sums)


def cancels(model: ScriptedModel) -> None:
    """docs/guides/tools.md: `cancel_order` for order 42, then the answer."""

    def answer(call: Call) -> str:
        if call.activity_id.endswith(":1"):
            return 'Thought: cancel it.\nAction: cancel_order\nAction Input: {"order_id": "42"}'
        return "Thought: done.\nFinal Answer: Order 42 is cancelled."

    model.reply(answer)


def notes(model: ScriptedModel) -> None:
    """docs/guides/tools.md: on the native protocol, turn 1 searches the notes of
    examples/notes_mcp.py for "deadline", turn 2 answers with what the search said."""
    from durafact.testing import ToolCalls

    def answer(call: Call) -> str | ToolCalls:
        found = [m["content"] for m in call.messages if m.get("role") == "tool"]
        if not found:
            return ToolCalls([("notes__search", {"text": "deadline"})])
        return "Two notes mention the deadline:\n" + found[-1]

    model.reply(answer)


def agent(model: ScriptedModel, expression: str, answer: str, steps: list[str] | None = None):
    """A ReAct agent on the text protocol: turn 1 calls the calculator on `expression`,
    turn 2 answers `answer`; a plan has `steps`, any other request gets "done: ..."."""

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": steps or ["Compute it"]}
        if not call.activity_id.startswith("llm:react:"):
            return f"done: {answer}"
        if call.activity_id.endswith(":1"):
            action = f'{{"expression": "{expression}"}}'
            return f"Thought: compute it.\nAction: calculator\nAction Input: {action}"
        return f"Thought: I now know the answer.\nFinal Answer: {answer}"

    model.reply(reply)


def percent(model: ScriptedModel) -> None:
    """docs/recipes/react.md: 17.5% of 2,340 with the calculator."""
    agent(model, "2340 * 0.175", "409.50 EUR")


def eggs(model: ScriptedModel) -> None:
    """docs/recipes/react.md: a one-step plan whose agent prices the eggs."""
    agent(model, "3 * 12 * 0.25", "9.00 EUR", ["Price three boxes of twelve eggs at 0.25 each"])


def stuck_steps(model: ScriptedModel) -> None:
    """docs/guides/steer.md, cancel: the default plan, whose steps are held until the
    block ends (a cancelled call hangs up, and is let go)."""
    model.hold(lambda call: call.activity_id.startswith("llm:step:"))


def quarter(model: ScriptedModel) -> None:
    """docs/guides/steer.md, steer: turn 1 (held for 10 s from its arrival, long enough
    for the note to be queued before it ends) divides by 4; turn 2 answers in cents once
    a note asked."""
    import threading

    timers: list[threading.Timer] = []

    def first_turn(call: Call) -> bool:
        if not call.activity_id.endswith(":1"):
            return False
        if not timers:
            timers.append(threading.Timer(10.0, release.set))
            timers[0].start()
        return True

    release = model.hold(first_turn)

    def reply(call: Call) -> str:
        if call.activity_id.endswith(":1"):
            action = '{"expression": "12 / 4"}'
            return f"Thought: divide.\nAction: calculator\nAction Input: {action}"
        if "give the result in cents" in call.text:
            return "Thought: a person asked for cents.\nFinal Answer: 300 cents"
        return "Thought: done.\nFinal Answer: 3 euros"

    model.reply(reply)


def busy(model: ScriptedModel) -> None:
    """docs/guides/budgets.md: a tool loop that never answers, a new product each turn."""
    from tests.cli.test_budget import busy

    model.reply(busy)


def times_table(model: ScriptedModel) -> None:
    """docs/guides/budgets.md: 7 times 1 to 5 with the calculator, then the answer."""

    def reply(call: Call) -> str:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        if turn <= 5:
            action = f'{{"expression": "{turn} * 7"}}'
            return f"Thought: compute it.\nAction: calculator\nAction Input: {action}"
        return "Thought: I now know the answer.\nFinal Answer: 7, 14, 21, 28 and 35."

    model.reply(reply)


def outage(model: ScriptedModel) -> None:
    """docs/operations/failures.md: down (503) until the run is resumed: a model call
    fails until it is a second first attempt, the one `resume` schedules afresh."""
    firsts: list[str] = []

    def failing(call: Call) -> bool:
        if call.attempt == 1:
            firsts.append(call.activity_id)
        return firsts.count("llm:plan:Plan a weekend in Kraków") < 2

    model.fail(503, times=10_000, when=failing)


def bike_prices(model: ScriptedModel) -> None:
    """docs/recipes/research.md: a model that follows the instructions: it chooses the
    price list, quotes its three rows and names their sum (tests/scripted_research.py)."""
    from tests.scripted_research import sum_script

    model.reply(sum_script())


def readme(model: ScriptedModel) -> None:
    """README.md: three questions about the topic, each answered "done: ..."; the
    ready planner's plan is the default's."""
    from durafact.testing import default_reply

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Questions":
            return {"questions": ["What is a workflow?", "What is an activity?"]}
        return default_reply(call)

    model.reply(reply)


def eval_trips(model: ScriptedModel) -> None:
    """docs/operations/deploy.md: three cities for a trip, and another third city for the
    planner's changed prompt (tests/evaluation/__init__.py); "a day in CITY" for a day."""
    from tests.evaluation import trips

    model.reply(trips)
