"""This app's recipes, beside durafact's ready ones: what `worker.py` runs and
`starter.py` starts (`DURAFACT_RECIPES=workflows` registers them with any durafact
worker or command)."""

from workflows.trips import Cities, TripPlanner

RECIPES = [TripPlanner]  # what the worker and the command line register
OUTPUT_MODELS = [Cities]  # the models its ctx.llm.structured calls ask for
