"""The root app's trip planner in two versions (`trips_v1`, `trips_v2`: the planner's
prompt changed), a help desk in two versions (`desk_v1`, `desk_v2`: the router's prompt
changed), what the scripted model answers them, and a score function: what
`durafact eval` is tested on (tests/cli/test_eval.py, tests/cli/test_eval_questions.py)."""

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


DESK_FACTS = {"scope": "kitchen", "budget": "3000 EUR", "deadline": "March"}


def desk(call: Call) -> str | dict:
    """The facts of the kitchen request; the route `budget`, or `timeline` for the
    changed router's prompt, which puts a deadline first; a report naming its call."""
    if call.schema_name == "Facts":
        return DESK_FACTS
    if call.schema_name == "RouteChoice":
        route = "timeline" if "deadline goes to timeline" in call.text else "budget"
        return {"route": route, "reason": "what the request asks about"}
    return f"Report {call.activity_id}"
