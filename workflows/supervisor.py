"""Router + ApprovalGate: route a request, write the specialist report, ask a person.

Two independent recipe bases, and the ready `SupervisorWorkflow` that uses both.

`Router` picks one of a fixed set of `routes` for a request. A user writes the
two decisions:

    async def classify(self, ctx, request): ...   # -> a route, or None (usually a model call)
    def fallback_route(self, request): ...        # -> a route, deterministic, no model

and the recipe method `route(ctx, request)` owns the rest: a classification that
fails for good (an `ActivityError` once Temporal's retries are spent), returns
`None`, or names something outside `routes` falls back to `fallback_route`. The
task artifact `task:{request}` (a `Task`) records the route, whether it came from
the `model` or the `fallback` and why, and is linked `for_request` to the request
artifact `request:{request}`.

`ApprovalGate` asks a person to approve a report before it becomes the answer. A
user writes:

    def approval_question(self, ctx, report): ...         # -> the question's text
    async def on_approve(self, ctx, report): ...           # -> the final reply
    async def on_reject(self, ctx, report, outcome): ...   # -> the final reply
    async def revise(self, ctx, report, outcome): ...      # optional: -> a new report or None

and `gate(ctx, thread, report, policy)` asks through `ctx.ask_approval`, which
waits durably and keeps the thread's whole question history (`approval:{thread}:1`,
`:2`, ...), so re-entering the gate after a rejection continues the chain instead
of opening a second one. A rejection that carries `changes` goes to `revise`;
when it returns a new report the gate asks again (question n + 1 of the same
thread), otherwise `on_reject` ends it. The reply artifact `reply:{thread}` is
linked `based_on` the report and `approved_by` or `rejected_by` the question that
was answered.

`SupervisorWorkflow` tells the lifecycle in stages:

    facts   one structured model call extracts `Facts` (scope, budget, deadline)
    route   classify into budget / timeline / quality (configurable), with the fallback
    report  the specialist report for that route, given the facts
    then    approval: approve -> `on_approve`; reject -> `on_reject`;
            reject with changes -> the facts are updated and the stages from the
            earliest one they affect run again, then the gate asks again

Each fact feeds the first stage that uses it (`FIELD_STAGES`: scope -> route,
budget and deadline -> report), so `durafact.stages.earliest_stage` decides where
a rebuild starts; everything upstream of it is kept. Artifacts: `request:{r}`,
`facts:{r}` (linked `from_request`; updated in place, so its version counts the
corrections), `task:{r}`, `report:{r}` (linked `based_on` the task and the facts;
updated in place when rebuilt), the questions `approval:{r}:{n}` and `reply:{r}`.
Model activities carry the same ids: `llm:facts:{r}`, `llm:task:{r}`,
`llm:report:{r}`; a rebuild's calls add the attempt, the n of the question they
lead to (`llm:report:{r}:2`), so the Web UI timeline shows every rebuild.

Status (`DurafactStatus`): `facts`, `routing`, `reporting`, `awaiting_approval`,
then `approved` or `rejected` as the answer comes (a timed-out question is
rejected with the reason "timed out"). A rejection with changes goes on to
`rebuilding:route` / `rebuilding:report` while the rebuild reruns that stage, and
back to `awaiting_approval`. `failed` when a stage raises.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from durafact.approval import ApprovalOutcome, ApprovalPolicy, ApprovalQuestion
from durafact.ids import facts_id, reply_id, report_id, request_id, task_id, text_key
from durafact.ledger import Ledger
from durafact.llm import Usage
from durafact.stages import changed_fields, downstream_fields, earliest_stage
from workflows.recipe import RECIPE_ATTRIBUTE, Recipe, RecipeContext, quote, subject_text

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)
Fin = TypeVar("Fin", bound=BaseModel)

RouteSource = Literal["model", "fallback"]


def attempt_scope(artifact_id: str, attempt: int) -> str:
    """The activity scope of a stage's `attempt`: the artifact id, plus `:n` after the first."""
    return artifact_id if attempt <= 1 else f"{artifact_id}:{attempt}"


def activity_failure(exc: ActivityError) -> str:
    """`Type: message` of why an activity failed for good."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause or exc)


# --- Router -------------------------------------------------------------------------


class Task(BaseModel):
    """The artifact `task:{request}`: the route a request takes, and who chose it."""

    request: str
    route: str
    source: RouteSource
    reason: str = Field(default="", description="Why the fallback chose; empty for the model.")


def matching_route(answer: str, routes: Sequence[str]) -> str | None:
    """The route `answer` names (ignoring case and surrounding space), or None."""
    wanted = answer.strip().casefold()
    return next((route for route in routes if route.casefold() == wanted), None)


class Router(Generic[Req]):
    """Classify a request into one of `routes`; a deterministic fallback when that fails."""

    routes: ClassVar[tuple[str, ...]] = ()

    async def classify(self, ctx: RecipeContext, request: Req) -> str | None:
        raise NotImplementedError

    def fallback_route(self, request: Req) -> str:
        raise NotImplementedError

    def routes_for(self, request: Req) -> tuple[str, ...]:
        """The routes of this request: `routes`, unless a recipe lets requests choose."""
        return self.routes

    async def route(self, ctx: RecipeContext, request: Req, *, attempt: int = 1) -> Task:
        """Classify `request`, falling back when needed; record `task:{request}`.

        `attempt` > 1 reruns the classification (a rebuild): the activity id gets
        `:{attempt}` and the task artifact is updated in place.
        """
        ledger = ctx.ledger
        text = subject_text(request, "request", "text")
        rid, tid = request_id(text), task_id(text)
        routes = self.routes_for(request)
        if not routes:
            raise ApplicationError("the router has no routes", type="NoRoutes", non_retryable=True)
        ledger.create(rid, request)
        reason = ""
        try:
            with ctx.scoped(attempt_scope(tid, attempt)):
                answer = await self.classify(ctx, request)
        except ActivityError as exc:
            answer, reason = None, f"the classify call failed: {activity_failure(exc)}"
        chosen = None if answer is None else matching_route(answer, routes)
        if chosen is None and not reason:
            reason = (
                "classify gave no route"
                if answer is None
                else f"classify answered {answer!r}, not one of {', '.join(routes)}"
            )
        if chosen is not None:
            task = Task(request=text_key(text), route=chosen, source="model")
            ctx.announce(f"route: {chosen} (model)")
        else:
            fallback = self.fallback_route(request)
            if fallback not in routes:
                raise ApplicationError(
                    f"fallback_route returned {fallback!r}, not one of {', '.join(routes)}",
                    type="InvalidRoute",
                    non_retryable=True,
                )
            task = Task(request=text_key(text), route=fallback, source="fallback", reason=reason)
            ctx.announce(f"route: {fallback} (fallback: {reason})", kind="warning")
        if tid in ledger:
            ledger.update(tid, task)
        else:
            ledger.create(tid, task)
        ledger.link(tid, "for_request", rid)
        return task


# Keywords of the default routes; any other route matches its own name.
ROUTE_KEYWORDS: dict[str, tuple[str, ...]] = {
    "budget": (
        "budget", "cost", "price", "pricing", "money", "spend", "expensive", "cheap",
        "afford", "invoice", "eur", "usd", "dollar", "euro", "overrun",
    ),
    "timeline": (
        "timeline", "deadline", "schedule", "late", "delay", "date", "week", "month",
        "milestone", "when", "due", "slip",
    ),
    "quality": (
        "quality", "defect", "bug", "broken", "review", "test", "standard", "complaint",
        "crack", "leak", "faulty",
    ),
}  # fmt: skip


def keyword_route(
    text: str,
    routes: Sequence[str],
    keywords: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """The route whose keywords (and own name) `text` mentions most; ties go to the
    earlier route, no mention at all to the first. A keyword of 4 letters or more
    also matches as a word's prefix ("costs", "delayed")."""
    table = ROUTE_KEYWORDS if keywords is None else keywords
    words = re.findall(r"\w+", text.casefold())

    def hits(route: str) -> int:
        terms = {route.casefold(), *table.get(route, ())}
        return sum(any(w == t or (len(t) >= 4 and w.startswith(t)) for w in words) for t in terms)

    scores = [hits(route) for route in routes]
    return routes[scores.index(max(scores))]


# --- ApprovalGate -------------------------------------------------------------------


@dataclass
class GateResult(Generic[Fin]):
    """How a gate ended: the outcome that decided it and the final reply."""

    outcome: ApprovalOutcome
    final: Fin

    @property
    def approved(self) -> bool:
        return self.outcome.approved


class ApprovalGate(Generic[Rep, Fin]):
    """Ask a person to approve a report; the reply comes from `on_approve` or `on_reject`."""

    def approval_question(self, ctx: RecipeContext, report: Rep) -> str:
        raise NotImplementedError

    async def on_approve(self, ctx: RecipeContext, report: Rep) -> Fin:
        raise NotImplementedError

    async def on_reject(self, ctx: RecipeContext, report: Rep, answer: ApprovalOutcome) -> Fin:
        raise NotImplementedError

    async def revise(self, ctx: RecipeContext, report: Rep, answer: ApprovalOutcome) -> Rep | None:
        """A rejection carried `changes`: the report rebuilt from them, to be asked about
        again, or None to end with `on_reject`. By default changes are not taken."""
        return None

    async def gate(
        self,
        ctx: RecipeContext,
        thread: str,
        report: Rep,
        policy: ApprovalPolicy | None = None,
        *,
        report_id: str | None = None,
    ) -> GateResult[Fin]:
        """Ask in `thread` until approved, or rejected without a revision; record the reply.

        `report_id` names the report's artifact, which the reply is linked `based_on`.
        """
        while True:
            outcome = await ctx.ask_approval(thread, self.approval_question(ctx, report), policy)
            if outcome.approved or not outcome.changes:
                break
            revised = await self.revise(ctx, report, outcome)
            if revised is None:
                break
            report = revised
        fid = reply_id(thread)
        with ctx.scoped(fid):
            if outcome.approved:
                final = await self.on_approve(ctx, report)
            else:
                final = await self.on_reject(ctx, report, outcome)
        ledger = ctx.ledger
        ledger.create(fid, final)
        if report_id is not None:
            ledger.link(fid, "based_on", report_id)
        ledger.link(fid, "approved_by" if outcome.approved else "rejected_by", outcome.question_id)
        return GateResult(outcome=outcome, final=final)


# --- The ready supervisor -----------------------------------------------------------

DEFAULT_ROUTES = ("budget", "timeline", "quality")
STAGES = ("facts", "route", "report")
# The first stage that uses each fact: a correction rebuilds from there.
FIELD_STAGES = {"scope": "route", "budget": "report", "deadline": "report"}


class SupervisorRequest(BaseModel):
    request: str = Field(description="What the person asks for, in their words.")
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

    @field_validator("request")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the request is empty")
        return value.strip()

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
    """The route, the reply and the ledger; facts, report and every approval question are
    read from the ledger, so the result (stored in history) holds each text once."""

    request: str
    route: str
    route_source: RouteSource
    reply: Reply
    usage: Usage
    ledger: Ledger

    @property
    def approved(self) -> bool:
        return self.reply.approved

    @property
    def approvals(self) -> list[ApprovalQuestion]:
        """Every question of the request's thread, in the order asked."""
        return sorted((a.data for a in self.ledger.find_all(ApprovalQuestion)), key=lambda q: q.n)

    @property
    def facts(self) -> Facts:
        return self.ledger.get(facts_id(self.request)).typed(Facts).data

    @property
    def task(self) -> Task:
        return self.ledger.get(task_id(self.request)).typed(Task).data

    @property
    def report(self) -> Report:
        return self.ledger.get(report_id(self.request)).typed(Report).data


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


def _excerpt(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@workflow.defn
class SupervisorWorkflow(Recipe, Router[SupervisorRequest], ApprovalGate[Report, Reply]):
    """Request in; facts, a route, a specialist report, a person's approval; a reply."""

    recipe_name = "supervisor"
    routes = DEFAULT_ROUTES
    stages: ClassVar[tuple[str, ...]] = STAGES
    field_stages: ClassVar[dict[str, str]] = FIELD_STAGES

    @workflow.run
    async def run(self, request: SupervisorRequest) -> SupervisorResult:
        ctx, ledger = self._ctx, self._ctx.ledger
        workflow.upsert_search_attributes([RECIPE_ATTRIBUTE.value_set(self.recipe_name)])
        self._request = request
        text = self._text = request.request
        key = text_key(text)
        ledger.create(request_id(text), request)
        self.attempt = 1
        try:
            ctx.set_status("facts", f"facts: {key}")
            with ctx.scoped(facts_id(text)):
                facts = await self.extract_facts(ctx, request)
            ledger.create(facts_id(text), facts)
            ledger.link(facts_id(text), "from_request", request_id(text))
            ctx.announce(f"facts: {facts.line()}")

            report = await self.build(self.stages[1])
            gated = await self.gate(
                ctx,
                text,
                report,
                ApprovalPolicy(
                    timeout=request.approval_timeout,
                    on_timeout=request.on_timeout,
                    escalation_timeout=request.approval_timeout,
                ),
                report_id=report_id(text),
            )
        except Exception:
            ctx.set_status("failed")
            raise
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
            ledger=ledger,
        )

    # --- the stages, and the rebuild from any of them -------------------------------

    async def build(self, first: str) -> Report:
        """Run the stages from `first` to the report, in order; return the report."""
        ctx, ledger, text = self._ctx, self._ctx.ledger, self._text
        rebuild = self.attempt > 1
        for stage in self.stages[self.stages.index(first) :]:
            if stage == "route":
                ctx.set_status("rebuilding:route" if rebuild else "routing")
                await self.route(ctx, self._request, attempt=self.attempt)
            elif stage == "report":
                ctx.set_status("rebuilding:report" if rebuild else "reporting")
                task = ledger.get(task_id(text)).typed(Task).data
                rid = report_id(text)
                with ctx.scoped(attempt_scope(rid, self.attempt)):
                    report = await self.write_report(ctx, task.route)
                report = report.model_copy(
                    update={"request": text_key(text), "route": task.route, "attempt": self.attempt}
                )
                if rid in ledger:
                    ledger.update(rid, report)
                else:
                    ledger.create(rid, report)
                ledger.link(rid, "based_on", task_id(text))
                ledger.link(rid, "based_on", facts_id(text))
                ctx.announce(f"{task.route} report written (attempt {self.attempt})")
            else:
                raise ApplicationError(
                    f"stage {stage!r} cannot be rebuilt", type="InvalidStage", non_retryable=True
                )
        return ledger.get(report_id(self._text)).typed(Report).data

    async def revise(
        self, ctx: RecipeContext, report: Report, answer: ApprovalOutcome
    ) -> Report | None:
        """Apply the corrected facts and rebuild from the earliest stage they affect."""
        ledger, fid = ctx.ledger, facts_id(self._text)
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
        target = earliest_stage(changed, field_stages=self.field_stages, order=self.stages)
        if target is None:
            ctx.announce("the changes change no fact: nothing to rebuild", kind="warning")
            return None
        ledger.update(fid, facts.model_copy(update={name: edited[name] for name in changed}))
        self.attempt += 1
        rerun = self.stages[self.stages.index(target) :]
        uses = downstream_fields(target, field_stages=self.field_stages, order=self.stages)
        ctx.announce(
            f"rebuilding from {target}: {', '.join(sorted(changed))} changed; "
            f"rerunning {', '.join(rerun)} (they use {', '.join(sorted(uses))})"
        )
        return await self.build(target)

    # --- hooks: the model calls and the decisions -----------------------------------

    async def extract_facts(self, ctx: RecipeContext, request: SupervisorRequest) -> Facts:
        return await ctx.llm.structured(
            Facts,
            f"Request: {request.request}",
            system=FACT_FINDER,
            summary=f"request model: facts of {quote(request.request)}",
        )

    def routes_for(self, request: SupervisorRequest) -> tuple[str, ...]:
        return request.routes

    async def classify(self, ctx: RecipeContext, request: SupervisorRequest) -> str | None:
        # The facts travel as their ledger id; a corrected scope is what the model sees.
        choice = await ctx.llm.structured(
            RouteChoice,
            f"Request: {request.request}\nRoutes: {', '.join(request.routes)}",
            system=CLASSIFIER.format(routes=", ".join(request.routes)),
            context=[facts_id(request.request)],
            summary=f"request model: route {quote(request.request)}{self._attempt_note()}",
        )
        return choice.route

    def fallback_route(self, request: SupervisorRequest) -> str:
        scope = self._ctx.ledger.get(facts_id(request.request)).typed(Facts).data.scope
        return keyword_route(f"{request.request} {scope or ''}", request.routes)

    async def write_report(self, ctx: RecipeContext, route: str) -> Report:
        system = SPECIALISTS.get(route, SPECIALIST.format(route=route)) + REPORTER
        text = await ctx.llm.text(
            f"Request: {self._text}\nWrite the {route} report.",
            system=system,
            context=[facts_id(self._text)],
            summary=f"request model: {route} report for {quote(self._text)}{self._attempt_note()}",
        )
        return Report(text=text)

    def approval_question(self, ctx: RecipeContext, report: Report) -> str:
        facts = ctx.ledger.get(facts_id(self._text)).typed(Facts).data
        return (
            f"Approve the {report.route} report for {quote(self._text, 80)}?\n"
            f"Facts: {facts.line()}\n"
            f"Report: {_excerpt(report.text)}"
        )

    async def on_approve(self, ctx: RecipeContext, report: Report) -> Reply:
        return Reply(
            request=self._text,
            route=report.route,
            approved=True,
            text=f"Approved: the {report.route} report (attempt {report.attempt}) answers "
            f"{quote(self._text, 80)}.",
        )

    async def on_reject(self, ctx: RecipeContext, report: Report, answer: ApprovalOutcome) -> Reply:
        why = "nobody answered in time" if answer.timed_out else answer.reason or "no reason given"
        return Reply(
            request=self._text,
            route=report.route,
            approved=False,
            text=f"Rejected ({why}): the {report.route} report does not answer "
            f"{quote(self._text, 80)}.",
        )

    def _attempt_note(self) -> str:
        return f" (attempt {self.attempt})" if self.attempt > 1 else ""
