"""The root app's trip planner in two versions (`trips_v1`, `trips_v2`: the planner's
prompt changed), what the scripted model answers them, and a score function: what
`durafact eval` is tested on (tests/cli/test_eval.py)."""

from __future__ import annotations

from durafact.testing import Call

# The cities each version of the planner's prompt gets: the same first two.
RECORDED_CITIES = ["Gdańsk", "Toruń", "Poznań"]
NEW_CITIES = ["Gdańsk", "Toruń", "Kraków"]


def trips(call: Call) -> str | dict:
    """Three cities (the changed prompt, which asks for cities "worth a whole day",
    gets another third one), then "a day in CITY" for each day."""
    if call.schema_name == "Cities":
        return {"cities": NEW_CITIES if "worth" in call.last_user else RECORDED_CITIES}
    return "a day in " + call.last_user.removeprefix("Plan a day in ").split(".")[0]
