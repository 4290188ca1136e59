"""A plain Temporal activity of this app: the weather of a city. A real app asks a
weather service here; this one reads a small table, so the demo needs no network."""

from temporalio import activity

KNOWN = {"Gdańsk": "windy, 12 °C", "Kraków": "sunny, 18 °C", "Toruń": "cloudy, 15 °C"}


@activity.defn
async def forecast(city: str) -> str:
    return KNOWN.get(city, "mild, 16 °C")
