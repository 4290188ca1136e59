"""A trip planner written as a user writes a recipe: PlanExecute's three hooks, each
call one activity: the model picks the cities, this app's `forecast` activity
(activities/weather.py) tells each day's weather, and the model plans the day.

It declares its own command and how its result reads, so the command line has them
as it has the ready recipes': `python starter.py trip "Baltic coast" --days 2`."""

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow

from durafact import Command, Ledger, Option, PlanExecute, RecipeContext

with workflow.unsafe.imports_passed_through():
    from activities.weather import forecast


class Trip(BaseModel):
    text: str
    days: int = 2


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
    command = Command(
        "trip",
        "plan a trip day by day, with each day's weather",
        argument="text",
        argument_help="where to go",
        options=[Option("--days", type=int, help="how many days (default 2)")],
    )

    @staticmethod
    def show_result(itinerary: Itinerary, ledger: Ledger | None) -> str:
        return "\n".join(f"day {n}: {text}" for n, text in enumerate(itinerary.days, 1))

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
        # The earlier days reach the model as one reference that the model activity
        # reads from the ledger: each text is stored in history once.
        text = await ctx.llm.text(
            f"Plan a day in {day.city}. The weather: {weather}.", context=ctx.refs(history)
        )
        return DayPlan(text=text)

    async def finish(self, ctx: RecipeContext, trip: Trip, results: list[DayPlan]) -> Itinerary:
        return Itinerary(days=[r.text for r in results])
