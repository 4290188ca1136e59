"""Router + ApprovalGate: the ready SupervisorWorkflow end to end on a real dev server with
the scripted model (approve, reject, fallbacks, change -> rebuild), and the two stages
composed into a user's own recipes (a one-off recipe and a PlanExecute) with
deterministic hooks (no model at all)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle

from durafact._core.approval import ApprovalAnswer, ApprovalOutcome, ApprovalQuestion
from durafact._core.ids import approval_id
from durafact._core.ledger import Ledger
from durafact._recipes import (
    ApprovalGate,
    Facts,
    PlanExecute,
    Recipe,
    RecipeContext,
    Report,
    Router,
    SupervisorRequest,
    SupervisorResult,
    SupervisorWorkflow,
    Task,
    keyword_route,
)
from durafact._recipes.recipe import RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE

# The workflow sandbox re-imports this module; the worker side is not workflow code.
with workflow.unsafe.imports_passed_through():
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from durafact.testing import Call, ScriptedModel
    from tests.helpers import (
        free_port,
        ledger_of,
        own_dev_server,
        question_waiting,
        scheduled_activities,
        start_worker,
    )

REQUEST = "Renovate the kitchen for 3000 EUR by March"
FACTS = {"scope": "office kitchen", "budget": "3000 EUR", "deadline": "March"}
STAGE_OF = {"facts": "facts", "task": "route", "report": "report"}


def specialist(route: str = "budget", facts: dict | None = None):
    """A model that extracts `facts`, routes to `route` (or to `timeline` once the facts
    it is shown mention a schedule) and writes a report naming its activity."""

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Facts":
            return facts or FACTS
        if call.schema_name == "RouteChoice":
            chosen = "timeline" if "schedule" in call.text else route
            return {"route": chosen, "reason": "it is what the request asks about"}
        return f"report from {call.activity_id}"

    return reply


def stage_counts(model: ScriptedModel) -> Counter[str]:
    """Model calls per stage (`llm:report:...:2` counts for `report`)."""
    return Counter(STAGE_OF[call.activity_id.split(":")[1]] for call in model.calls)


async def start(client: Client, settings: Settings, **kw) -> WorkflowHandle:
    return await client.start_workflow(
        SupervisorWorkflow.run,
        SupervisorRequest(request=kw.pop("request", REQUEST), **kw),
        id=f"supervisor-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


def reject(question: ApprovalQuestion, reason: str = "", **changes: str) -> ApprovalAnswer:
    return ApprovalAnswer(
        question_id=question.id, approved=False, reason=reason, changes=changes, by="ana"
    )


def approve(question: ApprovalQuestion) -> ApprovalAnswer:
    return ApprovalAnswer(question_id=question.id, approved=True, by="ben")


def approvals(result: SupervisorResult, ledger: Ledger) -> list[ApprovalQuestion]:
    return [ledger.resolve(ref, ApprovalQuestion) for ref in result.approvals]


async def statuses(handle: WorkflowHandle) -> list[str]:
    page = await handle.query(SupervisorWorkflow.progress, 0)
    return [e.status for e in page.events if e.kind == "status"]


# --- approve and reject -------------------------------------------------------------


async def test_approved_by_signal_the_reply_comes_from_on_approve(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    question = await question_waiting(handle)

    assert question.id == approval_id(REQUEST, 1)
    assert (question.thread, question.n, question.kind) == (REQUEST, 1, "approve")
    assert question.text.startswith(f"Approve the budget report for {REQUEST!r}?")
    assert "Facts: scope=office kitchen, budget=3000 EUR, deadline=March" in question.text
    assert f"Report: report from llm:report:{REQUEST}" in question.text
    assert await handle.query(SupervisorWorkflow.status) == "awaiting_approval"
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(STATUS_ATTRIBUTE) == "awaiting_approval"
    assert attributes.get(RECIPE_ATTRIBUTE) == "supervisor"

    await handle.signal(SupervisorWorkflow.answer, ApprovalAnswer(approved=True, by="ben"))
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    assert (result.route, result.route_source, result.approved) == ("budget", "model", True)
    assert result.reply.approved and result.reply.text.startswith("Approved: the budget report")
    assert [c.activity_id for c in model.calls] == [
        f"llm:facts:{REQUEST}",
        f"llm:task:{REQUEST}",
        f"llm:report:{REQUEST}",
    ]
    assert ledger.resolve(result.facts, Facts) == Facts(**FACTS)
    assert ledger.resolve(result.task, Task) == Task(
        request=REQUEST, route="budget", source="model"
    )
    assert ledger.resolve(result.report, Report).text == f"report from llm:report:{REQUEST}"
    [asked] = approvals(result, ledger)
    assert (asked.id, asked.status, asked.answer and asked.answer.by) == (
        question.id,
        "approved",
        "ben",
    )

    links = {(link.source, link.relation, link.target) for link in ledger.links}
    assert {
        (f"facts:{REQUEST}", "from_request", f"request:{REQUEST}"),
        (f"task:{REQUEST}", "for_request", f"request:{REQUEST}"),
        (f"report:{REQUEST}", "based_on", f"task:{REQUEST}"),
        (f"report:{REQUEST}", "based_on", f"facts:{REQUEST}"),
        (f"reply:{REQUEST}", "based_on", f"report:{REQUEST}"),
        (f"reply:{REQUEST}", "approved_by", question.id),
    } <= links
    walk = [node.id for node in ledger.provenance(f"reply:{REQUEST}").walk()]
    assert walk[:2] == [f"reply:{REQUEST}", f"report:{REQUEST}"] and question.id in walk

    assert await statuses(handle) == [
        "facts",
        "routing",
        "reporting",
        "awaiting_approval",
        "approved",
    ]
    final = (await handle.describe()).typed_search_attributes
    assert final.get(STATUS_ATTRIBUTE) == "approved"


async def test_rejected_by_update_the_reply_comes_from_on_reject(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    question = await question_waiting(handle)
    outcome = await handle.execute_update(
        SupervisorWorkflow.decide, reject(question, "too expensive")
    )
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    assert outcome == ApprovalOutcome(
        question_id=question.id, approved=False, reason="too expensive"
    )
    assert not result.approved and not result.reply.approved
    assert result.reply.text.startswith("Rejected (too expensive): the budget report")
    assert ledger.links_from(f"reply:{REQUEST}", "rejected_by")[0].target == question.id
    assert [q.status for q in approvals(result, ledger)] == ["rejected"]
    assert len(model.calls) == 3  # no rebuild without changes
    assert (await statuses(handle))[-1] == "rejected"


async def test_activity_summaries_read_like_the_stages(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    await handle.signal(
        SupervisorWorkflow.answer, reject(await question_waiting(handle), budget="5000 EUR")
    )
    await handle.signal(SupervisorWorkflow.answer, approve(await question_waiting(handle, 2)))
    await handle.result()
    summaries = [s.summary for s in await scheduled_activities(client, handle)]
    assert summaries == [
        f"request model: facts of {REQUEST!r}",
        f"request model: route {REQUEST!r}",
        f"request model: budget report for {REQUEST!r}",
        f"request model: budget report for {REQUEST!r} (attempt 2)",
    ]


async def test_an_unanswered_question_escalates_then_rejects_as_timed_out(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(
        client, worker, approval_timeout=timedelta(seconds=1), on_timeout="escalate"
    )
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    first, second = approvals(result, ledger)
    assert (first.kind, first.status) == ("approve", "timed_out")
    assert (second.kind, second.status, second.escalates) == ("escalate", "timed_out", first.id)
    assert not result.approved
    assert result.reply.text.startswith("Rejected (nobody answered in time)")
    assert ledger.links_from(f"reply:{REQUEST}", "rejected_by")[0].target == second.id


# --- restarts -------------------------------------------------------------------------


async def listed_awaiting(client: Client, task_queue: str, workflow_id: str) -> set[str]:
    """The ids visibility lists as awaiting approval on `task_queue`, once `workflow_id` is
    among them (polled: visibility may trail the workflow's own state)."""
    query = f'DurafactStatus="awaiting_approval" AND TaskQueue="{task_queue}"'
    async with asyncio.timeout(30):
        while True:
            ids = {w.id async for w in client.list_workflows(query)}
            if workflow_id in ids:
                return ids
            await asyncio.sleep(0.05)


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        process.wait(timeout=30)


async def test_a_waiting_supervisor_survives_a_worker_kill_and_a_dev_server_restart(
    tmp_path: Path, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    database, port = tmp_path / "temporal.db", free_port()
    first = second = None
    server = await own_dev_server(database, port)
    try:
        first = start_worker(server.client, settings)  # `durafact-worker`
        handle = await start(server.client, settings)
        asked = await question_waiting(handle, timeout=60)
        first.kill()  # SIGKILL: no graceful shutdown while the question waits
        first.wait()
    finally:
        stop(first)
        await server.shutdown()

    server = await own_dev_server(database, port)  # the same file and port: a restart
    try:
        client = server.client
        second = start_worker(client, settings)
        again = client.get_workflow_handle_for(SupervisorWorkflow.run, handle.id)
        # The new worker rebuilds the wait from history: no model call is made again.
        pending = await question_waiting(again, timeout=60)
        status = (await again.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE)
        found = await listed_awaiting(client, settings.task_queue, handle.id)
        await again.signal(SupervisorWorkflow.answer, approve(pending))
        result: SupervisorResult = await asyncio.wait_for(again.result(), timeout=60)
        ledger = await ledger_of(again)
    finally:
        stop(second)
        await server.shutdown()

    assert first is not None and first.returncode == -9  # killed by SIGKILL
    assert second is not None and second.returncode == 0, second.stderr.read().decode()
    assert pending == asked and pending.id == approval_id(REQUEST, 1)
    assert status == "awaiting_approval" and found == {handle.id}
    assert result.approved and result.route == "budget"
    assert result.reply.text.startswith("Approved: the budget report (attempt 1)")
    [closed] = approvals(result, ledger)
    assert (closed.id, closed.status, closed.answer and closed.answer.by) == (
        asked.id,
        "approved",
        "ben",
    )
    # Each stage's model call was made once: nothing was redone after the restarts.
    assert Counter(call.activity_id for call in model.calls) == {
        f"llm:facts:{REQUEST}": 1,
        f"llm:task:{REQUEST}": 1,
        f"llm:report:{REQUEST}": 1,
    }


# --- the router's fallback ------------------------------------------------------------


async def test_a_route_outside_the_routes_falls_back_to_the_keywords(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    request = "The new tiles are cracked and the tap leaks"
    model.reply(
        specialist(route="weather", facts={"scope": "tiles", "budget": None, "deadline": None})
    )
    handle = await start(client, worker, request=request)
    await handle.signal(SupervisorWorkflow.answer, approve(await question_waiting(handle)))
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    assert (result.route, result.route_source) == ("quality", "fallback")
    assert (
        ledger.resolve(result.task, Task).reason
        == "classify answered 'weather', not one of budget, timeline, quality"
    )
    assert ledger.resolve(result.facts, Facts) == Facts(scope="tiles", budget=None, deadline=None)
    [report] = model.calls_for(f"llm:report:{request}")
    assert "quality specialist" in report.text
    page = await handle.query(SupervisorWorkflow.progress, 0)
    assert any(
        e.kind == "warning" and e.message.startswith("route: quality (fallback: ")
        for e in page.events
    )


async def test_a_classify_call_that_fails_for_good_falls_back(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    model.fail(401, when=lambda call: call.schema_name == "RouteChoice")
    handle = await start(client, worker, routes=("quality", "budget"))
    await handle.signal(SupervisorWorkflow.answer, approve(await question_waiting(handle)))
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    # 401 is not retryable: one classify call, then the keywords ("EUR" -> budget).
    assert len(model.calls_for(f"llm:task:{REQUEST}")) == 1
    assert (result.route, result.route_source, result.approved) == ("budget", "fallback", True)
    assert ledger.resolve(result.task, Task).reason.startswith(
        "the classify call failed: AuthenticationFailed: model endpoint answered 401"
    )


def test_keyword_route_counts_mentions_and_defaults_to_the_first_route() -> None:
    routes = ("budget", "timeline", "quality")
    assert keyword_route("Costs are over budget", routes) == "budget"
    assert keyword_route("The handover is delayed two weeks", routes) == "timeline"
    assert keyword_route("A defect in the finish", routes) == "quality"
    assert keyword_route("Hello there", routes) == "budget"
    assert keyword_route("Hello there", ("timeline", "budget")) == "timeline"
    # A tie goes to the earlier route; a route of its own matches its name.
    assert keyword_route("price and deadline", ("timeline", "budget")) == "timeline"
    assert keyword_route("Ask legal about the contract", (*routes, "legal")) == "legal"


# --- change -> rebuild ----------------------------------------------------------------


async def test_a_budget_change_reruns_exactly_the_report_and_asks_question_two(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    first = await question_waiting(handle)
    await handle.signal(SupervisorWorkflow.answer, reject(first, "more money", budget="5000 EUR"))
    second = await question_waiting(handle, 2)

    assert (second.id, second.thread, second.kind) == (approval_id(REQUEST, 2), REQUEST, "approve")
    assert "budget=5000 EUR" in second.text
    assert f"Report: report from llm:report:{REQUEST}:2" in second.text
    assert stage_counts(model) == {"facts": 1, "route": 1, "report": 2}
    [rebuilt] = model.calls_for(f"llm:report:{REQUEST}:2")
    assert '"budget":"5000 EUR"' in rebuilt.text and '"budget":"3000 EUR"' not in rebuilt.text

    await handle.signal(SupervisorWorkflow.answer, approve(second))
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    assert result.approved and result.route == "budget"
    # Upstream kept: the facts are corrected in place, the route was never redone.
    assert (result.facts.version, result.task.version, result.report.version) == (2, 1, 2)
    facts = ledger.resolve(result.facts, Facts)
    assert facts == Facts(scope="office kitchen", budget="5000 EUR", deadline="March")
    assert ledger.resolve(result.report, Report).attempt == 2
    assert [(q.n, q.status) for q in approvals(result, ledger)] == [
        (1, "rejected"),
        (2, "approved"),
    ]
    assert approvals(result, ledger)[0].answer.changes == {"budget": "5000 EUR"}
    assert ledger.links_from(f"reply:{REQUEST}", "approved_by")[0].target == second.id
    assert await statuses(handle) == [
        "facts",
        "routing",
        "reporting",
        "awaiting_approval",
        "rejected",
        "rebuilding:report",
        "awaiting_approval",
        "approved",
    ]
    page = await handle.query(SupervisorWorkflow.progress, 0)
    assert (
        "rebuilding from report: budget changed; rerunning report (they use budget, deadline)"
        in [e.message for e in page.events]
    )


async def test_a_scope_change_reruns_the_route_and_the_report(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    await handle.signal(
        SupervisorWorkflow.answer, reject(await question_waiting(handle), scope="kitchen schedule")
    )
    second = await question_waiting(handle, 2)
    assert second.text.startswith(f"Approve the timeline report for {REQUEST!r}?")
    await handle.execute_update(SupervisorWorkflow.decide, approve(second))
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    assert stage_counts(model) == {"facts": 1, "route": 2, "report": 2}
    assert [c.activity_id for c in model.calls][3:] == [
        f"llm:task:{REQUEST}:2",
        f"llm:report:{REQUEST}:2",
    ]
    assert (result.route, result.route_source) == ("timeline", "model")
    assert ledger.get(f"task:{REQUEST}").version == 2
    facts = ledger.resolve(result.facts, Facts)
    assert facts.scope == "kitchen schedule" and facts.budget == "3000 EUR"
    assert [s for s in await statuses(handle) if s.startswith("rebuilding")] == [
        "rebuilding:route",
        "rebuilding:report",
    ]


async def test_reentry_continues_one_chain_and_never_duplicates_a_question(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    first = await question_waiting(handle)
    correction = reject(first, budget="5000 EUR")
    await handle.signal(SupervisorWorkflow.answer, correction)
    await handle.signal(SupervisorWorkflow.answer, correction)  # a second click: dropped
    second = await question_waiting(handle, 2)
    await handle.signal(SupervisorWorkflow.answer, reject(second, deadline="June"))
    third = await question_waiting(handle, 3)
    await handle.signal(SupervisorWorkflow.answer, approve(third))
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    ids = [q.id for q in approvals(result, ledger)]
    assert ids == [approval_id(REQUEST, n) for n in (1, 2, 3)]
    assert {q.thread for q in approvals(result, ledger)} == {REQUEST}
    assert [q.status for q in approvals(result, ledger)] == ["rejected", "rejected", "approved"]
    assert stage_counts(model) == {"facts": 1, "route": 1, "report": 3}
    assert [c.activity_id for c in model.calls_for(f"llm:report:{REQUEST}")] == [
        f"llm:report:{REQUEST}",
        f"llm:report:{REQUEST}:2",
        f"llm:report:{REQUEST}:3",
    ]
    assert ledger.resolve(result.facts, Facts) == Facts(
        scope="office kitchen", budget="5000 EUR", deadline="June"
    )
    page = await handle.query(SupervisorWorkflow.progress, 0)
    dropped = [e.message for e in page.events if e.message.startswith("answer dropped")]
    assert dropped == [f"answer dropped: question {first.id!r} is already answered (rejected)"]


async def test_changes_that_change_no_fact_end_as_a_plain_rejection(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(specialist())
    handle = await start(client, worker)
    await handle.signal(
        SupervisorWorkflow.answer,
        reject(await question_waiting(handle), "no", budget="3000 EUR", colour="red", deadline=" "),
    )
    result: SupervisorResult = await handle.result()
    ledger = await ledger_of(handle)

    assert not result.approved and len(result.approvals) == 1
    assert len(model.calls) == 3
    assert ledger.get(f"facts:{REQUEST}").version == 1
    page = await handle.query(SupervisorWorkflow.progress, 0)
    warnings = [e.message for e in page.events if e.kind == "warning"]
    assert warnings == [
        "ignored changes to unknown facts: colour (facts: scope, budget, deadline)",
        "the changes change no fact: nothing to rebuild",
    ]


def test_bad_requests_are_rejected_before_anything_starts() -> None:
    assert SupervisorRequest(request="  Fix it  ", routes=(" a ", "b")).routes == ("a", "b")
    for bad in (
        {"request": "  "},
        {"request": "x", "routes": ()},
        {"request": "x", "routes": ("a", " ")},
        {"request": "x", "routes": ("a", "A")},
        {"request": "x", "approval_timeout": timedelta(0)},
        {"request": "x", "on_timeout": "ignore"},
    ):
        with pytest.raises(ValidationError):
            SupervisorRequest(**bad)


# --- The stages in a user's own recipes: deterministic hooks, no model ------------------


class Ticket(BaseModel):
    text: str
    hint: str | None = None


class Decision(BaseModel):
    text: str


DESK_ROUTES = ("billing", "bugs")


# The stages take plain functions as well as a recipe's methods.
async def hinted(ctx: RecipeContext, ticket: Ticket) -> str | None:
    return ticket.hint


def by_keywords(ctx: RecipeContext, ticket: Ticket) -> str:
    return keyword_route(ticket.text, DESK_ROUTES, {"billing": ("invoice",)})


def send_to(ctx: RecipeContext, report: Report) -> str:
    return f"Send to {report.route}?"


async def sent(ctx: RecipeContext, report: Report) -> Decision:
    return Decision(text=f"sent to {report.route}")


async def kept(ctx: RecipeContext, report: Report, answer: ApprovalOutcome) -> Decision:
    return Decision(text=f"kept: {answer.reason}")


@workflow.defn
class Triage(Recipe[Ticket, list[str]]):
    """A one-off recipe: routes by the ticket's hint, asks, and replies; takes no corrections."""

    recipe_name = "triage"

    def __init__(self) -> None:
        super().__init__()
        self.router = Router(DESK_ROUTES, classify=hinted, fallback=by_keywords)
        self.gate = ApprovalGate(question=send_to, on_approve=sent, on_reject=kept)

    @workflow.run
    async def run(self, ticket: Ticket) -> list[str]:
        return await self.execute(ticket)

    async def lifecycle(self, ctx: RecipeContext, ticket: Ticket) -> list[str]:
        task = await self.router.route(ctx, ticket)
        report = Report(route=task.route, text=f"{task.route}: {ticket.text}")
        gated = await self.gate.ask(ctx, ticket.text, report)
        return [task.route, task.source, gated.final.text]


async def test_a_user_router_and_gate_run_their_hooks_without_a_model(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[Triage]):

        async def run(ticket: Ticket, answer: ApprovalAnswer) -> tuple[list[str], WorkflowHandle]:
            handle = await client.start_workflow(
                Triage.run,
                ticket,
                id=f"triage-{uuid.uuid4().hex[:8]}",
                task_queue=settings.task_queue,
            )
            await question_waiting(handle)
            await handle.signal(Triage.answer, answer)
            return await handle.result(), handle

        by_hint, _ = await run(
            Ticket(text="App crashes", hint=" BUGS "), ApprovalAnswer(approved=True)
        )
        # No hint: the keywords; a rejection with changes and no `revise` ends it.
        fallback, handle = await run(
            Ticket(text="Wrong invoice"),
            ApprovalAnswer(approved=False, reason="not ours", changes={"route": "bugs"}),
        )
        ledger = await handle.query(Triage.artifacts)

    assert by_hint == ["bugs", "model", "sent to bugs"]
    assert fallback == ["billing", "fallback", "kept: not ours"]
    task = ledger.get("task:Wrong invoice").typed(Task).data
    assert task.reason == "classify gave no route"
    assert (
        ledger.links_from("task:Wrong invoice", "for_request")[0].target == "request:Wrong invoice"
    )
    assert ledger.links_from("reply:Wrong invoice", "rejected_by")[0].target == (
        approval_id("Wrong invoice", 1)
    )
    assert ledger.links_from("reply:Wrong invoice", "based_on") == []  # no report_id given
    assert model.calls == []


class Action(BaseModel):
    goal: str = ""
    index: int = 0
    text: str


class Done(BaseModel):
    goal: str = ""
    index: int = 0
    text: str


@workflow.defn
class TicketDesk(PlanExecute[Ticket, Action, Done, Decision]):
    """A user's PlanExecute that composes both stages: `plan` routes the ticket, `finish`
    asks a person to approve the work, and a rejection may send it to another route."""

    def __init__(self) -> None:
        super().__init__()
        self.router = Router(DESK_ROUTES, classify=hinted, fallback=by_keywords)
        self.gate = ApprovalGate(
            question=send_to, on_approve=sent, on_reject=kept, revise=self.reroute
        )

    @workflow.run
    async def run(self, ticket: Ticket) -> Decision:
        return await self.execute(ticket)

    async def plan(self, ctx: RecipeContext, ticket: Ticket) -> list[Action]:
        task = await self.router.route(ctx, ticket)
        return [Action(text=f"reproduce for {task.route}"), Action(text=f"fix as {task.route}")]

    async def execute_step(self, ctx: RecipeContext, action: Action, history: list[Done]) -> Done:
        return Done(text=f"did: {action.text}")

    async def finish(self, ctx: RecipeContext, ticket: Ticket, results: list[Done]) -> Decision:
        task = ctx.ledger.get(f"task:{ticket.text}").typed(Task).data
        report = Report(route=task.route, text="; ".join(r.text for r in results))
        gated = await self.gate.ask(ctx, ticket.text, report)
        return gated.final

    async def reroute(
        self, ctx: RecipeContext, report: Report, answer: ApprovalOutcome
    ) -> Report | None:
        route = answer.changes.get("route")
        if route not in DESK_ROUTES or route == report.route:
            return None
        return report.model_copy(update={"route": route, "attempt": report.attempt + 1})


async def test_a_plan_execute_routes_in_plan_and_asks_approval_in_finish(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[TicketDesk]):
        handle = await client.start_workflow(
            TicketDesk.run,
            Ticket(text="Wrong invoice"),
            id=f"desk-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        first = await question_waiting(handle)
        await handle.signal(TicketDesk.answer, reject(first, "a bug, not billing", route="bugs"))
        second = await question_waiting(handle, 2)
        outcome = await handle.execute_update(TicketDesk.decide, approve(second))
        decision = await handle.result()
        ledger = await handle.query(TicketDesk.artifacts)
        seen = await statuses(handle)

    # The Router stage: no hint, so the keywords chose; its task artifact is in the ledger.
    task = ledger.get("task:Wrong invoice").typed(Task).data
    assert (task.route, task.source, task.reason) == (
        "billing",
        "fallback",
        "classify gave no route",
    )
    assert [r.data.text for r in ledger.find_all(Done)] == [
        "did: reproduce for billing",
        "did: fix as billing",
    ]
    # The ApprovalGate stage: one thread, the rejection revised, the second question approved.
    assert (first.id, first.text) == (approval_id("Wrong invoice", 1), "Send to billing?")
    assert (second.id, second.text) == (approval_id("Wrong invoice", 2), "Send to bugs?")
    assert outcome == ApprovalOutcome(question_id=second.id, approved=True, reason="")
    assert decision == Decision(text="sent to bugs")
    questions = [a.data for a in ledger.find_all(ApprovalQuestion)]
    assert [(q.id, q.status) for q in questions] == [
        (first.id, "rejected"),
        (second.id, "approved"),
    ]
    assert ledger.links_from("reply:Wrong invoice", "approved_by")[0].target == second.id
    # PlanExecute's own guarantees hold around the stages.
    assert ledger.get("final:Wrong invoice").typed(Decision).data == decision
    assert len(ledger.links_from("final:Wrong invoice", "supported_by")) == 2
    assert seen == [
        "planning",
        "executing:1/2",
        "executing:2/2",
        "finishing",
        "awaiting_approval",
        "rejected",
        "awaiting_approval",
        "approved",
        "completed",
    ]
    assert model.calls == []
