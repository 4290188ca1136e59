"""What every route works with: the Temporal client (made by `connect`, so with the
plugin's data converter: pydantic, the codec with keys, the payload store), the
settings (the task queue its runs start on, Web UI links), the registered recipes,
whose declarations (durafact/_runtime/registry.py) say what a run of each can do, and
the feeds every stream follows (durafact/_api/feeds.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from temporalio.client import Client

from durafact._api.feeds import Feeds
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings
from durafact._service.runs import result_type


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


def services(request: Request) -> Services:
    """The route dependency."""
    return request.app.state.services
