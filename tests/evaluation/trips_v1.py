"""The root app's trip planner (workflows/trips.py), as the recorded runs ran it: the
model picks the cities (the plan), the app's `forecast` activity tells each day's
weather, and the model plans each day, seeing the days before it."""

from activities.weather import forecast
from workflows.trips import Cities, TripPlanner

RECIPES = [TripPlanner]
OUTPUT_MODELS = [Cities]
ACTIVITIES = [forecast]
