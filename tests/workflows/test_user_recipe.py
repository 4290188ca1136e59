"""The examples of docs/guides/your-recipe.md, exactly as the page shows them: modules in
a package of the user's own, registered by module path, run by a worker on the scripted
model. A change of the page that breaks an example breaks this test."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durafact._recipes.recipe import RECIPE_ATTRIBUTE
from durafact._runtime.registry import load_registry
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, reject, waiting_question
from tests.docs.blocks import page_file

PAGE = "docs/guides/your-recipe.md"


def page_example(module: str = "recipes") -> str:
    """The page's module `trips/MODULE.py`."""
    return page_file(PAGE, f"trips/{module}.py")


@pytest.fixture
def trips_package(tmp_path: Path) -> Iterator[str]:
    """The page's modules as `trips.recipes` and `trips.booking` in a package outside the
    repository."""
    package = tmp_path / "trips"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module in ("recipes", "booking"):
        (package / f"{module}.py").write_text(page_example(module))
    sys.path.insert(0, str(tmp_path))
    try:
        yield "trips.recipes"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "trips" or n.startswith("trips.")]:
            del sys.modules[name]


def tour(call: Call) -> str | dict:
    if call.schema_name == "Cities":
        return {"cities": ["Gdańsk", "Toruń", "Poznań"]}
    city = call.last_user.removeprefix("Plan a day in ").rstrip(".")
    return f"walk the old town of {city}"


async def test_the_docs_recipe_runs_registered_by_module_path(
    client: Client, settings: Settings, model: ScriptedModel, trips_package: str
) -> None:
    model.reply(tour)
    registry = load_registry([trips_package], entry_points=False)
    planner = registry.get("TripPlanner")
    assert planner is not None
    trip_type = planner.inputs[0]
    async with build_worker(client, settings, recipes=[trips_package]):
        handle = await client.start_workflow(
            "TripPlanner",
            trip_type(text="Baltic coast", days=2),
            id=f"trip-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            result_type=planner.result_type,
        )
        itinerary = await handle.result()
        history = await handle.fetch_history()

    assert itinerary.days == ["walk the old town of Gdańsk", "walk the old town of Toruń"]
    assert type(itinerary).__name__ == "Itinerary"
    # The second day's model call saw the first day's result, read from the ledger...
    second = model.calls_for("llm:step:Baltic coast:1")[0]
    assert "walk the old town of Gdańsk" in second.text
    # ...and not through history: each text is stored once, as its activity's result.
    stored = [
        event.activity_task_scheduled_event_attributes.input
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert len(stored) == 3 and "walk the old town" not in str(stored)
    # A hook that makes no model call needs no activity: plan and two steps.
    assert [c.activity_id for c in model.calls] == [
        "llm:plan:Baltic coast",
        "llm:step:Baltic coast:0",
        "llm:step:Baltic coast:1",
    ]


async def test_the_docs_recipe_that_asks_a_person_books_once_approved_and_lists_as_itself(
    client: Client, settings: Settings, model: ScriptedModel, trips_package: str
) -> None:
    model.reply(lambda call: "Hotel Podewils")
    registry = load_registry(["trips.booking"], entry_points=False)
    booking = registry.get("BookStay")
    assert booking is not None
    async with build_worker(client, settings, recipes=["trips.booking"]):
        handle = await client.start_workflow(
            "BookStay",
            booking.inputs[0](city="Gdańsk", nights=2),
            id=f"stay-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            result_type=booking.result_type,
        )
        question = await waiting_question(handle)
        outcome = await reject(handle, reason="too dear")
        result = await handle.result()
    assert question.text == "Book Hotel Podewils for 2 nights?"
    assert (outcome.approved, result.booked, result.reason) == (False, False, "too dear")
    # A one-off recipe is listed under its own name (it was `recipe`).
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(RECIPE_ATTRIBUTE) == "BookStay"
