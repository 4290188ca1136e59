"""The trip planner with its planner's prompt changed, and nothing else: what
`durafact eval` is asked about."""

from temporalio import workflow

from tests.evaluation import trips_v1
from tests.evaluation.trips_v1 import Cities, Itinerary, Trip

PLAN_PROMPT = "{days} cities worth a whole day each, for: {text}"


@workflow.defn
class TripPlanner(trips_v1.TripPlanner):
    plan_prompt = PLAN_PROMPT

    @workflow.run
    async def run(self, trip: Trip) -> Itinerary:
        return await self.execute(trip)


RECIPES = [TripPlanner]
OUTPUT_MODELS = [Cities]
