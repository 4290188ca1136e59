"""SupervisorWorkflow: facts -> route -> report -> a person's approval -> reply.

The ready, LLM-driven use of the two stages `Router` (durafact/_recipes/router.py) and
`ApprovalGate` (durafact/_recipes/approval_gate.py); no user code needed. Its lifecycle:

    facts     one structured model call extracts `Facts` (scope, budget, deadline)
    route     the `Router` classifies into the request's `routes` (budget / timeline /
              quality by default); the keywords of the request and its scope decide
              when the model cannot
    report    the route's specialist writes a report, given the facts
    approval  the `ApprovalGate` asks a person: approve -> the approved reply;
              reject -> the rejected reply; reject with `changes` -> the facts are
              corrected, the stages from the earliest one they affect run again, and
              the gate asks again in the same thread
    reply     the reply, and the result: route, reply, usage and references to the
              facts, task, report and questions (their texts are in the ledger)

Each fact feeds the first stage that uses it (`FIELD_STAGES`: scope -> route,
budget and deadline -> report), so `durafact._core.stages.earliest_stage` decides where
a rebuild starts; everything upstream of it is kept. Changes to names that are
not facts are ignored with a warning; changes that change no fact end the gate
as a plain rejection.

Artifacts: `request:{r}`, `facts:{r}` (linked `from_request`; updated in place,
so its version counts the corrections), `task:{r}`, `report:{r}` (linked
`based_on` the task and the facts; updated in place when rebuilt, its `attempt`
counts the builds), the questions `approval:{r}:{n}` and `reply:{r}`. Model
activities carry the same ids: `llm:facts:{r}`, `llm:task:{r}`,
`llm:report:{r}`; a rebuild's calls add the build's attempt
(`llm:report:{r}:2`), so the Web UI timeline shows every rebuild.

Status: `facts`, `routing`, `reporting`, `awaiting_approval`, then `approved`
or `rejected` as the answer comes (a timed-out question is rejected with the
reason "timed out"). A rejection with changes goes on to `rebuilding:route` /
`rebuilding:report` while the rebuild reruns that stage, and back to
`awaiting_approval`. `failed` when a stage raises. `DurafactStatus` holds the
phase (`rebuilding` for both rebuilds).
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
from temporalio import workflow

from durafact._core.approval import ApprovalOutcome, ApprovalPolicy, ApprovalQuestion
from durafact._core.ids import attempt_scope, facts_id, report_id, request_id, task_id, text_key
from durafact._core.ledger import ArtifactRef, Ledger
from durafact._core.llm import Usage
from durafact._core.ready_commands import ROUTE
from durafact._core.stages import changed_fields, downstream_fields, earliest_stage
from durafact._core.text import assignments, indent, not_blank, shorten
from durafact._recipes.approval_gate import ApprovalGate
from durafact._recipes.recipe import Recipe, RecipeContext, RecipeSettings, quote
from durafact._recipes.router import Router, RouteSource, Task, keyword_route

DEFAULT_ROUTES = ("budget", "timeline", "quality")
STAGES = ("facts", "route", "report")
# The first stage that uses each fact: a correction rebuilds from there.
FIELD_STAGES = {"scope": "route", "budget": "report", "deadline": "report"}


class SupervisorRequest(RecipeSettings):
    """A request, where it may be routed, and how long its approval waits; like every
    recipe's input, it may carry a `budget` and the run's model `endpoints`."""

    request: Annotated[str, not_blank("request")] = Field(
        description="What the person asks for, in their words."
    )
    routes: tuple[str, ...] = Field(
        default=DEFAULT_ROUTES, description="The specialists a request can be routed to."
    )
    approval_timeout: timedelta | None = Field(
        default=None, description="How long the approval waits; None: as long as it takes."
    )
    on_timeout: Literal["reject", "escalate"] = Field(
        default="reject",
        description="After the timeout: reject, or escalate (a second question with the same "
        "timeout, then reject).",
    )

    @field_validator("routes")
    @classmethod
    def _routes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        routes = tuple(route.strip() for route in value)
        if not routes or not all(routes):
            raise ValueError("routes must be one or more non-blank names")
        if len({r.casefold() for r in routes}) != len(routes):
            raise ValueError(f"routes must be distinct: {', '.join(routes)}")
        return routes

    @field_validator("approval_timeout")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("the approval timeout must be positive")
        return value


class Facts(BaseModel):
    """What the request says, extracted once; a person may correct it when rejecting."""

    scope: str | None = Field(description="What the request is about, in a few words.")
    budget: str | None = Field(description="The money available, as written; null if not said.")
    deadline: str | None = Field(description="When it is due, as written; null if not said.")

    def line(self) -> str:
        """`scope=..., budget=..., deadline=...` (`-` for what is not known)."""
        return ", ".join(f"{name}={value or '-'}" for name, value in self.model_dump().items())


class RouteChoice(BaseModel):
    """The model's structured output for the classify call."""

    route: str = Field(description="Exactly one of the route names offered.")
    reason: str = Field(description="One sentence: why this route.")


class Report(BaseModel):
    request: str = ""
    route: str = ""
    attempt: int = Field(default=1, description="The build it came from: 1, then +1 per rebuild.")
    text: str


class Reply(BaseModel):
    request: str
    route: str
    approved: bool
    text: str


class SupervisorResult(BaseModel):
    """The route and the reply, with references to the facts, the task, the report and
    every approval question: their texts are stored in history once, from the calls and
    answers that made them, and their versions count corrections and rebuilds. Read them
    from the run's ledger (the `artifacts` query, or `python starter.py artifacts ID`):
    `ledger.resolve(result.report, Report)`."""

    request: str
    route: str
    route_source: RouteSource
    reply: Reply
    usage: Usage
    facts: ArtifactRef = Field(description="`facts:{r}`; its version counts the corrections.")
    task: ArtifactRef = Field(description="`task:{r}`: the route and how it was chosen.")
    report: ArtifactRef = Field(description="`report:{r}`; its version counts the builds.")
    approvals: list[ArtifactRef] = Field(description="`approval:{r}:{n}`, in the order asked.")

    @property
    def approved(self) -> bool:
        return self.reply.approved


FACT_FINDER = (
    "You extract facts from a request. scope: what it is about, in a few words. budget: "
    "the money available, as written. deadline: when it is due, as written. Use null for "
    "anything the request does not say; never guess."
)
CLASSIFIER = (
    "You route a request to exactly one specialist: {routes}. The request's facts are "
    "given as context. Answer with the route's name as written and a one-sentence reason."
)
SPECIALISTS = {
    "budget": "You are a budget specialist: costs, what fits the budget, where to save.",
    "timeline": "You are a scheduling specialist: milestones, what fits the deadline, risks.",
    "quality": "You are a quality specialist: standards, checks, what could go wrong.",
}
SPECIALIST = "You are the {route} specialist."
REPORTER = (
    " Write a short report on the request for a person who approves it, using the facts "
    "given as context. Be concrete. Answer with the report only."
)


def _attempt_note(attempt: int) -> str:
    return f" (attempt {attempt})" if attempt > 1 else ""


def show_supervised(result: SupervisorResult, ledger: Ledger | None) -> str:
    """The route, the facts, the report and every approval question, then the reply."""
    if ledger is None:
        lines = [f"route: {result.route} ({result.route_source})"]
    else:
        task = ledger.resolve(result.task, Task)
        how = f"fallback: {task.reason}" if task.source == "fallback" else "model"
        report = ledger.resolve(result.report, Report)
        lines = [
            f"route: {result.route} ({how})",
            f"facts: {ledger.resolve(result.facts, Facts).line()}",
            f"report (attempt {report.attempt}):",
            indent(report.text, "  "),
            "approvals:",
        ]
        for question in (ledger.resolve(ref, ApprovalQuestion) for ref in result.approvals):
            answer = question.answer
            by = f" by {answer.by}" if answer and answer.by else ""
            why = f": {answer.reason}" if answer and answer.reason else ""
            edits = assignments(answer.changes) if answer else ""
            changed = f" (changes: {edits})" if edits else ""
            lines.append(f"  {question.id} ({question.kind}) {question.status}{by}{why}{changed}")
    return "\n".join([*lines, "reply:", indent(result.reply.text, "  ")])


@workflow.defn
class SupervisorWorkflow(Recipe[SupervisorRequest, SupervisorResult]):
    """Request in; facts, a route, a specialist report, a person's approval; a reply."""

    recipe_name = "supervisor"
    command = ROUTE
    correctable = Facts
    show_result = staticmethod(show_supervised)

    @workflow.init
    def __init__(self, request: SupervisorRequest) -> None:
        super().__init__()
        self.request = request
        self.gate = ApprovalGate(
            question=self.approval_question,
            on_approve=self.on_approve,
            on_reject=self.on_reject,
            revise=self.revise,
        )

    @workflow.run
    async def run(self, request: SupervisorRequest) -> SupervisorResult:
        return await self.execute(request)

    async def lifecycle(self, ctx: RecipeContext, request: SupervisorRequest) -> SupervisorResult:
        ledger, text = ctx.ledger, request.request
        ledger.create(request_id(text), request)
        ctx.set_status("facts", f"facts: {text_key(text)}")
        with ctx.scoped(facts_id(text)):
            facts = await self.extract_facts(ctx, request)
        ledger.create(facts_id(text), facts)
        ledger.link(facts_id(text), "from_request", request_id(text))
        ctx.announce(f"facts: {facts.line()}")

        report = await self.build(ctx, request, "route", attempt=1)
        policy = ApprovalPolicy(
            timeout=request.approval_timeout,
            on_timeout=request.on_timeout,
            escalation_timeout=request.approval_timeout,
        )
        # Rebuilds happen inside the gate: a rejection with changes goes to `revise`.
        gated = await self.gate.ask(ctx, text, report, policy, report_id=report_id(text))

        # ask_approval set `approved`/`rejected` when the answer came, unless another
        # question still waited then.
        verdict = "approved" if gated.approved else "rejected"
        if ctx.status != verdict:
            ctx.set_status(verdict)
        ctx.announce(f"reply: {gated.final.text}")
        task = ledger.get(task_id(text)).typed(Task).data
        return SupervisorResult(
            request=text,
            route=task.route,
            route_source=task.source,
            reply=gated.final,
            usage=ctx.usage,
            facts=ledger.ref(facts_id(text)),
            task=ledger.ref(task_id(text)),
            report=ledger.ref(report_id(text)),
            approvals=ledger.refs(ApprovalQuestion),
        )

    async def build(
        self, ctx: RecipeContext, request: SupervisorRequest, first: str, attempt: int
    ) -> Report:
        """Build `attempt` of the report from stage `first`: route (unless `first` is
        `report`), then write the report."""
        ledger, text, rebuild = ctx.ledger, request.request, attempt > 1
        if first == "route":
            ctx.set_status("rebuilding:route" if rebuild else "routing")
            # The request names the routes; the attempt goes into the call's summary.
            router = Router(
                request.routes,
                classify=partial(self.classify, attempt=attempt),
                fallback=self.fallback_route,
            )
            await router.route(ctx, request, attempt=attempt)

        ctx.set_status("rebuilding:report" if rebuild else "reporting")
        task = ledger.get(task_id(text)).typed(Task).data
        rid = report_id(text)
        with ctx.scoped(attempt_scope(rid, attempt)):
            report = await self.write_report(ctx, request, task.route, attempt)
        report = report.model_copy(
            update={"request": text_key(text), "route": task.route, "attempt": attempt}
        )
        if rid in ledger:
            ledger.update(rid, report)
        else:
            ledger.create(rid, report)
        ledger.link(rid, "based_on", task_id(text))
        ledger.link(rid, "based_on", facts_id(text))
        ctx.announce(f"{task.route} report written (attempt {attempt})")
        return report

    async def revise(
        self, ctx: RecipeContext, report: Report, answer: ApprovalOutcome
    ) -> Report | None:
        """Correct the facts and rebuild from the earliest stage they affect; None when
        the changes change no fact."""
        ledger, fid = ctx.ledger, facts_id(self.request.request)
        facts = ledger.get(fid).typed(Facts).data
        unknown = sorted(set(answer.changes) - set(Facts.model_fields))
        if unknown:
            ctx.announce(
                f"ignored changes to unknown facts: {', '.join(unknown)} "
                f"(facts: {', '.join(Facts.model_fields)})",
                kind="warning",
            )
        edited = {
            name: value.strip() or None
            for name, value in answer.changes.items()
            if name in Facts.model_fields
        }
        changed = changed_fields(facts, edited)
        target = earliest_stage(changed, field_stages=FIELD_STAGES, order=STAGES)
        if target is None:
            ctx.announce("the changes change no fact: nothing to rebuild", kind="warning")
            return None
        ledger.update(fid, facts.model_copy(update={name: edited[name] for name in changed}))
        rerun = STAGES[STAGES.index(target) :]
        uses = downstream_fields(target, field_stages=FIELD_STAGES, order=STAGES)
        ctx.announce(
            f"rebuilding from {target}: {', '.join(sorted(changed))} changed; "
            f"rerunning {', '.join(rerun)} (they use {', '.join(sorted(uses))})"
        )
        return await self.build(ctx, self.request, target, report.attempt + 1)

    # --- hooks: the model calls and the decisions -----------------------------------

    async def extract_facts(self, ctx: RecipeContext, request: SupervisorRequest) -> Facts:
        return await ctx.llm.structured(
            Facts,
            f"Request: {request.request}",
            system=FACT_FINDER,
            summary=f"request model: facts of {quote(request.request)}",
        )

    async def classify(
        self, ctx: RecipeContext, request: SupervisorRequest, attempt: int = 1
    ) -> str | None:
        # The facts travel as their ledger id; a corrected scope is what the model sees.
        choice = await ctx.llm.structured(
            RouteChoice,
            f"Request: {request.request}\nRoutes: {', '.join(request.routes)}",
            system=CLASSIFIER.format(routes=", ".join(request.routes)),
            context=[facts_id(request.request)],
            summary=f"request model: route {quote(request.request)}{_attempt_note(attempt)}",
        )
        return choice.route

    def fallback_route(self, ctx: RecipeContext, request: SupervisorRequest) -> str:
        scope = ctx.ledger.get(facts_id(request.request)).typed(Facts).data.scope
        return keyword_route(f"{request.request} {scope or ''}", request.routes)

    async def write_report(
        self, ctx: RecipeContext, request: SupervisorRequest, route: str, attempt: int
    ) -> Report:
        text = request.request
        system = SPECIALISTS.get(route, SPECIALIST.format(route=route)) + REPORTER
        answer = await ctx.llm.text(
            f"Request: {text}\nWrite the {route} report.",
            system=system,
            context=[facts_id(text)],
            summary=f"request model: {route} report for {quote(text)}{_attempt_note(attempt)}",
        )
        return Report(text=answer)

    def approval_question(self, ctx: RecipeContext, report: Report) -> str:
        text = self.request.request
        facts = ctx.ledger.get(facts_id(text)).typed(Facts).data
        return (
            f"Approve the {report.route} report for {quote(text, 80)}?\n"
            f"Facts: {facts.line()}\n"
            f"Report: {shorten(report.text, 300, one_line=True)}"
        )

    async def on_approve(self, ctx: RecipeContext, report: Report) -> Reply:
        text = self.request.request
        return Reply(
            request=text,
            route=report.route,
            approved=True,
            text=f"Approved: the {report.route} report (attempt {report.attempt}) answers "
            f"{quote(text, 80)}.",
        )

    async def on_reject(self, ctx: RecipeContext, report: Report, answer: ApprovalOutcome) -> Reply:
        text = self.request.request
        why = "nobody answered in time" if answer.timed_out else answer.reason or "no reason given"
        return Reply(
            request=text,
            route=report.route,
            approved=False,
            text=f"Rejected ({why}): the {report.route} report does not answer {quote(text, 80)}.",
        )
