"""The trip planner with its planner's prompt changed, and nothing else: what
`durafact eval` is asked about."""

from temporalio import workflow

from activities.weather import forecast
from durafact import RecipeContext
from workflows import trips
from workflows.trips import Cities, Day, Itinerary, Trip

PLAN_PROMPT = "{days} cities worth a whole day each, for: {text}"


@workflow.defn
class TripPlanner(trips.TripPlanner):
    show_result = staticmethod(trips.TripPlanner.show_result)

    @workflow.run
    async def run(self, trip: Trip) -> Itinerary:
        return await self.execute(trip)

    async def plan(self, ctx: RecipeContext, trip: Trip) -> list[Day]:
        prompt = PLAN_PROMPT.format(days=trip.days, text=trip.text)
        cities = await ctx.llm.structured(Cities, prompt)
        return [Day(city=city) for city in cities.cities[: trip.days]]


RECIPES = [TripPlanner]
OUTPUT_MODELS = [Cities]
ACTIVITIES = [forecast]
