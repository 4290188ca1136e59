"""A user's own PlanExecute: three hooks and a three-line run, as README shows."""

from __future__ import annotations

import uuid

from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client

from workflows import PlanExecute, RecipeContext

# The workflow sandbox re-imports this module; the worker side is not workflow code.
with workflow.unsafe.imports_passed_through():
    from cli.settings import Settings
    from cli.worker import build_worker
    from tests.scripted_model import Call, ScriptedModel


class Trip(BaseModel):
    text: str
    days: int


class Day(BaseModel):
    goal: str = ""
    index: int = 0
    city: str


class DayPlan(BaseModel):
    goal: str = ""
    index: int = 0
    text: str


class Itinerary(BaseModel):
    days: list[str]


class Cities(BaseModel):
    cities: list[str]


@workflow.defn
class TripPlanner(PlanExecute[Trip, Day, DayPlan, Itinerary]):
    @workflow.run
    async def run(self, trip: Trip) -> Itinerary:
        return await self.execute(trip)

    async def plan(self, ctx: RecipeContext, trip: Trip) -> list[Day]:
        cities = await ctx.llm.structured(Cities, f"{trip.days} cities for: {trip.text}")
        return [Day(city=c) for c in cities.cities[: trip.days]]

    async def execute_step(self, ctx: RecipeContext, day: Day, history: list[DayPlan]) -> DayPlan:
        seen = ", ".join(h.text for h in history) or "nothing yet"
        return DayPlan(text=await ctx.llm.text(f"Day in {day.city}; before: {seen}"))

    async def finish(self, ctx: RecipeContext, trip: Trip, results: list[DayPlan]) -> Itinerary:
        return Itinerary(days=[r.text for r in results])


def tour(call: Call) -> str | dict:
    if call.schema_name == "Cities":
        return {"cities": ["Gdańsk", "Toruń", "Poznań"]}
    return call.last_user.split(";")[0].replace("Day in ", "walk ")


async def test_a_user_recipe_runs_its_hooks_in_order(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(tour)
    async with build_worker(
        client, settings, extra_workflows=[TripPlanner], output_models=[Cities]
    ):
        handle = await client.start_workflow(
            TripPlanner.run,
            Trip(text="Baltic coast", days=2),
            id=f"trip-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        itinerary = await handle.result()
        ledger = await handle.query(TripPlanner.artifacts)

    assert itinerary == Itinerary(days=["walk Gdańsk", "walk Toruń"])
    # The second day's hook saw the first day's result.
    assert "before: walk Gdańsk" in model.calls_for("llm:step:Baltic coast:1")[0].last_user
    # The recipe stamped goal/index and linked the final artifact to every result.
    day = ledger.get("step:Baltic coast:1").typed(Day).data
    assert (day.goal, day.index, day.city) == ("Baltic coast", 1, "Toruń")
    assert {link.target for link in ledger.links_from("final:Baltic coast", "supported_by")} == {
        "result:step:Baltic coast:0",
        "result:step:Baltic coast:1",
    }
    # A hook that makes no model call needs no activity: two steps + plan, no finish call.
    assert [c.activity_id for c in model.calls] == [
        "llm:plan:Baltic coast",
        "llm:step:Baltic coast:0",
        "llm:step:Baltic coast:1",
    ]
