"""A tool of this app: what a model may call in a tool loop (`@tool` makes its JSON
schema from the signature, and the worker runs each call as an activity)."""

from durafact import tool


@tool
def packing_list(days: int, weather: str = "mild") -> list[str]:
    """What to pack for a trip of `days` days in the given weather."""
    items = ["passport", "charger", f"{days} shirts", f"{days} pairs of socks"]
    if "rain" in weather or "wind" in weather:
        items.append("a rain jacket")
    return items
