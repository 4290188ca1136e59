"""A user's trip planner as recorded runs ran it: the model picks the cities (the plan),
then plans one day per city, each day seeing the days before it."""

from pydantic import BaseModel
from temporalio import workflow

from durafact import PlanExecute, RecipeContext


class Trip(BaseModel):
    text: str
    days: int


class Day(BaseModel):
    city: str
    goal: str = ""
    index: int = 0


class DayPlan(BaseModel):
    text: str


class Itinerary(BaseModel):
    days: list[str]


class Cities(BaseModel):
    cities: list[str]


PLAN_PROMPT = "{days} cities for: {text}"


@workflow.defn
class TripPlanner(PlanExecute[Trip, Day, DayPlan, Itinerary]):
    recipe_name = "trips"  # what `durafact eval --recipe trips` selects
    plan_prompt = PLAN_PROMPT

    @workflow.run
    async def run(self, trip: Trip) -> Itinerary:
        return await self.execute(trip)

    async def plan(self, ctx: RecipeContext, trip: Trip) -> list[Day]:
        prompt = self.plan_prompt.format(days=trip.days, text=trip.text)
        cities = await ctx.llm.structured(Cities, prompt)
        return [Day(city=city) for city in cities.cities[: trip.days]]

    async def execute_step(self, ctx: RecipeContext, day: Day, history: list[DayPlan]) -> DayPlan:
        text = await ctx.llm.text(f"Plan a day in {day.city}.", context=ctx.refs(history))
        return DayPlan(text=text)

    async def finish(self, ctx: RecipeContext, trip: Trip, results: list[DayPlan]) -> Itinerary:
        return Itinerary(days=[r.text for r in results])


RECIPES = [TripPlanner]
OUTPUT_MODELS = [Cities]
