"""What one worker of a `DurafactPlugin` owns: its model clients, MCP sessions, handoff
store and the activities bound to them.

Only a worker needs this, and it is what costs most to import (the `openai` client, the
`mcp` SDK, every activity and their libraries): `DurafactPlugin` imports this module
when it configures a worker, so a client with the plugin, such as the command line's,
loads none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import openai
from temporalio.client import Client

from durafact._activities.chat import ChatActivities
from durafact._activities.llm import ModelActivities
from durafact._activities.mcp import McpServer, close_servers
from durafact._activities.sources import SourceActivities
from durafact._activities.tools import ToolActivities, ToolCatalog
from durafact._core.prices import Prices
from durafact._core.sources import DEFAULT_ENDPOINT
from durafact._runtime.endpoints import Endpoint, split_query
from durafact._runtime.handoff import Handoff
from durafact._runtime.registry import Registry

# The openai client insists on a key; local servers accept any. Not a credential.
NO_KEY = "unused"


def endpoint_client(endpoint: Endpoint) -> openai.AsyncOpenAI:
    """A client for one endpoint, with its own key only (never the environment's):
    no client-side retries, since Temporal owns them; a query in its URL goes with every
    request (`split_query`)."""
    base_url, query = split_query(endpoint.base_url)
    return openai.AsyncOpenAI(
        base_url=base_url,
        default_query=query or None,
        api_key=endpoint.api_key or NO_KEY,
        max_retries=0,
        timeout=openai.Timeout(90.0, connect=5.0),
    )


class WorkerKit:
    """The activities of one worker and what they hold open. `servers` are the MCP
    servers its tools come from; it closes those it does not find in `given` (whoever
    made those closes them) and its model clients on `close()`."""

    def __init__(
        self,
        client: Client,
        registry: Registry,
        servers: Mapping[str, McpServer],
        given: Mapping[str, McpServer],
        endpoints: Mapping[str, Endpoint],
        model: str,
        prices: Prices | None,
    ) -> None:
        self.own_servers = [s for s in servers.values() if s not in given.values()]
        catalog = ToolCatalog(registry.tools.values(), servers)
        self.clients: dict[str, openai.AsyncOpenAI] = {
            name: endpoint_client(endpoint) for name, endpoint in endpoints.items()
        }
        self.handoff = Handoff()
        self.models = ModelActivities(
            self.clients[DEFAULT_ENDPOINT],
            client,
            model,
            registry.output_models.values(),
            tools=catalog,
            endpoints={n: c for n, c in self.clients.items() if n != DEFAULT_ENDPOINT},
            handed=self.handoff.take,
            models={n: e.model for n, e in endpoints.items() if e.model},
            prices=prices,
        )
        self.sources = SourceActivities(endpoints=self.clients)
        self.tools = ToolActivities(catalog)
        self.chat = ChatActivities(client)
        self.activities: list[Callable[..., Any]] = [
            self.models.request_model,
            self.sources.search_source,
            self.sources.resolve_ref,
            self.tools.list_tools,
            self.tools.bind_tool_call,
            self.tools.call_tool,
            self.chat.read_reply,
            *registry.activities.values(),
        ]

    async def close(self) -> None:
        await close_servers(self.own_servers)  # and their stdio processes
        for endpoint in self.clients.values():
            await endpoint.close()
