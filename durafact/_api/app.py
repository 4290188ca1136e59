"""The ASGI app of `durafact serve`: the HTTP API under `/api`, its OpenAPI document
(`/openapi.json`, read at `/docs`, served from this machine: no CDN), and the web
console at `/`.

A thin client, like the command line: it starts, answers and reads workflows through
a Temporal client made by `connect` (the plugin's data converter), and the operations
of the service layer (durafact/_service/) the command line presents too, so a run
started here is the same as one started there.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from temporalio.client import Client

from durafact._api.ag_ui import router as ag_ui
from durafact._api.ai_sdk import router as ai_sdk
from durafact._api.approvals import router as approvals
from durafact._api.chats import router as chats
from durafact._api.console import STATIC
from durafact._api.console import router as pages
from durafact._api.errors import install as answer_errors_in_one_shape
from durafact._api.events import router as events
from durafact._api.feeds import Feeds
from durafact._api.runs import ids_in_the_path, one_run
from durafact._api.runs import router as runs
from durafact._api.security import Guard, require_token
from durafact._api.services import Services
from durafact._api.sites import Sites, allowed_hosts
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings

DESCRIPTION = """Start durafact recipes, follow them, answer their questions and chat.

Every `/api` call needs `Authorization: Bearer <DURAFACT_API_TOKEN>` when the server has
a token. A change (every POST) needs `Content-Type: application/json` or `X-Durafact: 1`,
and is refused from a page of another site (403); a request that names another host than
this server's is refused (421). Errors are `{"error": {"type", "message"}}` (a 422 adds
pydantic's `errors`). Events are Server-Sent Events; reconnect with `Last-Event-ID` to
miss nothing."""


def create_app(
    client: Client,
    settings: Settings,
    registry: Registry,
    token: str | None = None,
    host: str | None = None,
    allow_hosts: Sequence[str] = (),
) -> FastAPI:
    """The app over `client` (its namespace), starting runs on `settings.task_queue`;
    with `token`, every API call needs it. It answers a request that names this server:
    a loopback name, the address `host` it is served on or the connection's, with its
    port; or one of `allow_hosts` (`name` or `name:port`, as a Host header writes it)."""
    app = FastAPIOffline(
        title="durafact",
        description=DESCRIPTION,
        version="1",
        docs_url="/docs",
        redoc_url=None,
        static_url="/static/docs",
    )
    services = Services(client, settings, registry, Feeds(client, registry))
    app.state.services = services
    app.state.token = token
    answer_errors_in_one_shape(app)
    app.add_middleware(Guard, sites=Sites(host, allowed_hosts(allow_hosts, None)))
    api = APIRouter(prefix="/api", dependencies=[Depends(require_token), Depends(ids_in_the_path)])
    for routes in (runs, events, approvals, chats, ai_sdk, ag_ui, one_run):  # one_run: last
        api.include_router(routes)
    app.include_router(api)
    app.include_router(pages)
    app.mount("/static/console", StaticFiles(directory=STATIC), name="console")

    @app.get("/health", include_in_schema=False)
    async def health() -> dict[str, bool]:
        return {"ok": True}

    return app
