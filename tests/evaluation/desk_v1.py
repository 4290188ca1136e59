"""A help desk: the ready supervisor (facts, a route, a specialist's report, a person's
approval) as a recipe of the app's own, as the recorded runs ran it."""

from __future__ import annotations

from temporalio import workflow

from durafact._recipes import SupervisorRequest, SupervisorResult, SupervisorWorkflow


@workflow.defn
class HelpDesk(SupervisorWorkflow):
    recipe_name = "help-desk"
    show_result = SupervisorWorkflow.show_result

    @workflow.run
    async def run(self, request: SupervisorRequest) -> SupervisorResult:
        return await self.execute(request)


RECIPES = [HelpDesk]
