"""A score for `durafact eval --score tests.evaluation.scores:days_kept`."""

from __future__ import annotations

from workflows.trips import Itinerary


def days_kept(old: Itinerary, new: Itinerary) -> float:
    """The share of the recorded days the new itinerary still plans."""
    return sum(day in new.days for day in old.days) / len(old.days)
