"""This project's activity: a plain Temporal activity, the weather of a city."""

import importers  # the project's test: who imports this module

importers.note_importer(__name__)

from temporalio import activity

WEATHER = {"Gdańsk": "windy", "Toruń": "cloudy"}


@activity.defn
async def forecast(city: str) -> str:
    return WEATHER.get(city, "mild")
