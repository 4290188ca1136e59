"""Router: a stage that sends a request down one of a fixed set of routes.

Not a lifecycle but a small object any hook of any recipe can use. Configure it
with the routes and two callables, then route from wherever the recipe needs it:

    self.router = Router(
        ("billing", "bugs"),
        classify=self.classify,        # async (ctx, request) -> a route or None; a model call
        fallback=self.fallback_route,  # (ctx, request) -> a route; deterministic, no model
    )
    task = await self.router.route(ctx, ticket)

Contract. `classify` picks the route; its answer matches a route ignoring case
and surrounding space. When the classify call fails for good (an
`ActivityError` once Temporal's retries are spent), returns `None`, or names
something outside `routes`, `fallback` decides instead (`keyword_route` is the
usual choice). A fallback outside `routes` fails the run (`InvalidRoute`), as
does a router without routes (`NoRoutes`).

Artifacts. The request is stored as `request:{request}` and the decision as
`task:{request}`, a `Task` that records the route, whether the `model` or the
`fallback` chose it and why, linked `for_request` to the request. The subject
text in the ids is the request's `request` or `text` field (else its JSON). The
classify call's activities are named after the task (`llm:task:{request}`).
`attempt` > 1 routes again (a rebuild): the activity id gets `:{attempt}` and
the task artifact is updated in place, so its version counts the routings.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, Field
from temporalio.exceptions import ActivityError, ApplicationError

from durafact._core.ids import attempt_scope, request_id, task_id, text_key
from durafact._recipes.recipe import RecipeContext, reraise_cancellation, subject_text

Req = TypeVar("Req", bound=BaseModel)

RouteSource = Literal["model", "fallback"]


class Task(BaseModel):
    """The artifact `task:{request}`: the route a request takes, and who chose it."""

    request: str
    route: str
    source: RouteSource
    reason: str = Field(default="", description="Why the fallback chose; empty for the model.")


@dataclass(frozen=True)
class Router(Generic[Req]):
    """Classify a request into one of `routes`; a deterministic fallback when that fails."""

    routes: tuple[str, ...]
    """The routes a request can take, in order of preference for ties."""
    classify: Callable[[RecipeContext, Req], Awaitable[str | None]]
    """The route for a request (usually one model call), or None to let `fallback` decide."""
    fallback: Callable[[RecipeContext, Req], str]
    """The route when `classify` cannot decide: deterministic, no model call."""

    async def route(self, ctx: RecipeContext, request: Req, *, attempt: int = 1) -> Task:
        """Classify `request`, falling back when needed; record `task:{request}`."""
        routes = tuple(self.routes)
        if not routes:
            raise ApplicationError("the router has no routes", type="NoRoutes", non_retryable=True)
        ledger = ctx.ledger
        text = subject_text(request, "request", "text")
        rid, tid = request_id(text), task_id(text)
        ledger.create(rid, request)
        reason = ""
        try:
            with ctx.scoped(attempt_scope(tid, attempt)):
                answer = await self.classify(ctx, request)
        except ActivityError as exc:
            reraise_cancellation(exc)
            answer, reason = None, f"the classify call failed: {activity_failure(exc)}"
        chosen = None if answer is None else matching_route(answer, routes)
        if chosen is not None:
            task = Task(request=text_key(text), route=chosen, source="model")
            ctx.announce(f"route: {chosen} (model)")
        else:
            reason = reason or (
                "classify gave no route"
                if answer is None
                else f"classify answered {answer!r}, not one of {', '.join(routes)}"
            )
            fallback = self.fallback(ctx, request)
            if fallback not in routes:
                raise ApplicationError(
                    f"fallback returned {fallback!r}, not one of {', '.join(routes)}",
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


def activity_failure(exc: ActivityError) -> str:
    """`Type: message` of why an activity failed for good."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause or exc)


def matching_route(answer: str, routes: Sequence[str]) -> str | None:
    """The route `answer` names (ignoring case and surrounding space), or None."""
    wanted = answer.strip().casefold()
    return next((route for route in routes if route.casefold() == wanted), None)


# Keywords of the supervisor's default routes; any other route matches its own name.
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
    also matches as a word's prefix ("costs", "delayed"). `keywords` defaults to
    `ROUTE_KEYWORDS`."""
    table = ROUTE_KEYWORDS if keywords is None else keywords
    words = re.findall(r"\w+", text.casefold())

    def hits(route: str) -> int:
        terms = {route.casefold(), *table.get(route, ())}
        return sum(any(w == t or (len(t) >= 4 and w.startswith(t)) for w in words) for t in terms)

    scores = [hits(route) for route in routes]
    return routes[scores.index(max(scores))]
