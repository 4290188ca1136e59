"""What every route works with: the Temporal client (made by `connect`, so with the
plugin's data converter: pydantic, the codec with keys, the payload store), the
settings (the task queue its runs start on, Web UI links), the registered recipes,
whose declarations (durafact/_runtime/registry.py) say what a run of each can do, and
the feeds every stream follows (durafact/_api/feeds.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import Request
from pydantic import BaseModel
from temporalio.client import Client

from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings

if TYPE_CHECKING:
    from durafact._api.feeds import Feeds


@dataclass(frozen=True)
class Services:
    client: Client
    settings: Settings
    registry: Registry
    feeds: Feeds

    def result_type(self, workflow_type: str) -> Any:
        return result_type(self.registry, workflow_type)

    def correctable(self, workflow_type: str) -> list[str]:
        """The facts a rejection of the type's question may correct."""
        recipe = self.registry.get(workflow_type)
        return list(recipe.correctable) if recipe else []


def result_type(registry: Registry, workflow_type: str) -> Any:
    """How to decode a run's result: its registered type's, else plain JSON."""
    recipe = registry.get(workflow_type)
    return recipe.result_type if recipe else None


def services(request: Request) -> Services:
    """The route dependency."""
    return request.app.state.services


def jsonable(value: Any) -> Any:
    """A decoded result as JSON data."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
