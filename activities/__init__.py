"""This app's activities and tools, registered with its recipes (`DURAFACT_RECIPES=
workflows,activities`, or `DurafactPlugin(recipes=[...])` in worker.py)."""

from activities.packing import packing_list
from activities.weather import forecast

ACTIVITIES = [forecast]  # plain Temporal activities this app's recipes call
TOOLS = [packing_list]  # tools a model may call: ReActWorkflow with tools=["packing_list"]
