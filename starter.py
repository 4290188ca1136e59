"""This app's command line: every `durafact` command, with this app's recipes
(workflows/) and tools (activities/) registered beside the ready ones:

    python starter.py plan "Plan a weekend in Kraków"
    python starter.py start TripPlanner --input '{"text": "Baltic coast", "days": 2}'
    python starter.py trip "Baltic coast" --days 2      # the same, by its own command

`durafact` alone is the same without this app's recipes."""

import os
import runpy

if __name__ == "__main__":
    os.environ.setdefault("DURAFACT_RECIPES", "workflows,activities")
    runpy.run_module("durafact", run_name="__main__")
