"""This project's recipe: a trip planner, PlanExecute's three hooks, importing only
durafact (besides Temporal and pydantic). Each day asks this project's own `forecast`
activity (activities.py) for the weather, then the model plans the day."""

import importers  # the project's test: who imports this module

importers.note_importer(__name__)

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow

from durafact import PlanExecute, RecipeContext

with workflow.unsafe.imports_passed_through():
    from activities import forecast


class Trip(BaseModel):
    text: str
    days: int


class Day(BaseModel):
    city: str
    goal: str = ""  # filled in by the recipe
    index: int = 0  # filled in by the recipe


class DayPlan(BaseModel):
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
        return [Day(city=city) for city in cities.cities[: trip.days]]

    async def execute_step(self, ctx: RecipeContext, day: Day, history: list[DayPlan]) -> DayPlan:
        weather = await workflow.execute_activity(
            forecast, day.city, start_to_close_timeout=timedelta(seconds=30)
        )
        return DayPlan(
            text=await ctx.llm.text(f"Plan a day in {day.city}. The weather: {weather}.")
        )

    async def finish(self, ctx: RecipeContext, trip: Trip, results: list[DayPlan]) -> Itinerary:
        return Itinerary(days=[r.text for r in results])
