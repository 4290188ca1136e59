"""The help desk with its router's prompt changed, and nothing else: a schedule comes
first (the scripted model routes it to `timeline`, tests/evaluation/__init__.py)."""

from __future__ import annotations

from temporalio import workflow

from durafact._core.ids import facts_id
from durafact._recipes import (
    RecipeContext,
    RouteChoice,
    SupervisorRequest,
    SupervisorResult,
    SupervisorWorkflow,
)
from durafact._recipes.supervisor import CLASSIFIER

ROUTER = CLASSIFIER + " A request with a deadline goes to timeline first."


@workflow.defn
class HelpDesk(SupervisorWorkflow):
    recipe_name = "help-desk"
    show_result = SupervisorWorkflow.show_result

    @workflow.run
    async def run(self, request: SupervisorRequest) -> SupervisorResult:
        return await self.execute(request)

    async def classify(
        self, ctx: RecipeContext, request: SupervisorRequest, attempt: int = 1
    ) -> str | None:
        choice = await ctx.llm.structured(
            RouteChoice,
            f"Request: {request.request}\nRoutes: {', '.join(request.routes)}",
            system=ROUTER.format(routes=", ".join(request.routes)),
            context=[facts_id(request.request)],
            summary=f"request model: route {request.request!r}",
        )
        return choice.route


RECIPES = [HelpDesk]
