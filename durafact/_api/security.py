"""Who may use the API, and how much they may send.

- Only this server's own host, and for a change only its own pages or a program, not
  another site's page (sites.py): no DNS rebinding, no cross-site request.
- With a token (`DURAFACT_API_TOKEN`), every API call needs `Authorization: Bearer
  TOKEN`; the console asks for it once and keeps it in the tab's session storage. No
  cookie carries authority: a page elsewhere has nothing to send.
- `durafact serve` refuses a non-loopback address without a token (`check_bind`).
- Request bodies are capped at `MAX_BODY` bytes, counted as they arrive, so neither a
  false Content-Length nor a chunked body gets more through.
- Console pages get a content security policy that lets only the console's own
  scripts run: model text is always written as text, and this is the second wall.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from durafact._api.errors import ApiError, answer
from durafact._api.sites import Sites

TOKEN_ENV = "DURAFACT_API_TOKEN"
# One MiB: a recipe's input, a chat message, an answer. Larger content belongs in a
# source the run reads (a directory, a CSV file, a URL), not in a request.
MAX_BODY = 1_048_576
CONSOLE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)

bearer = HTTPBearer(auto_error=False, description=f"the token in {TOKEN_ENV}")


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) only ever reaches this machine."""
    if host.strip("[]").lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> str | None:
    """Why `serve` must not listen on `host` with this token; None when it may."""
    if token is not None and not token.strip():
        return f"{TOKEN_ENV} is set but empty"
    if token is None and not is_loopback(host):
        return (
            f"serving on {host} would let anyone who reaches it start and approve runs: "
            f"set {TOKEN_ENV} (clients send it as `Authorization: Bearer ...`), or serve "
            "on 127.0.0.1"
        )
    return None


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """The dependency of every API route: the bearer token, when the app has one."""
    token: str | None = request.app.state.token
    if token is None:
        return
    given = credentials.credentials if credentials else ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(
            401,
            "Unauthorized",
            f"this API needs its token: send `Authorization: Bearer <{TOKEN_ENV}>`"
            if not given
            else "the token is wrong",
        )


class Guard:
    """ASGI middleware: the sites that may send a request (`sites`), the body cap for
    every request, and the headers every answer carries (the content security policy on
    the console's pages)."""

    def __init__(self, app: ASGIApp, sites: Sites, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.sites = sites
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.sites.refusal(scope)
        if refused:
            await answer(refused)(scope, receive, send)
            return
        too_large = f"the request body is over {self.max_body:,} bytes, the most taken"
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_body:
            await answer(ApiError(413, "TooLarge", too_large))(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                # An HTTPException passes through FastAPI's body parsing as it is.
                raise HTTPException(413, too_large)
            return message

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.headers(scope)]
            await send(message)

        await self.app(scope, counted, with_headers)

    @staticmethod
    def headers(scope: Scope) -> list[tuple[bytes, bytes]]:
        extra: list[tuple[bytes, Any]] = [(b"x-content-type-options", b"nosniff")]
        path: str = scope.get("path", "")
        if not path.startswith(("/api/", "/docs", "/openapi.json", "/static/docs")):
            extra.append((b"content-security-policy", CONSOLE_POLICY.encode()))
            extra.append((b"referrer-policy", b"no-referrer"))
        return extra
