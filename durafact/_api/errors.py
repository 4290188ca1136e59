"""Every error the API answers, in one JSON shape a person can act on:

    {"error": {"type": "NotFound", "message": "no workflow with id 'x'"}}

(a 422 adds pydantic's `errors`; its message names a misspelt field and the field it
looks like). An operation's domain error (durafact/_service/errors.py) is answered
here, in one place, with its status (`STATUSES`): `NotFound` 404,
`InvalidInput` 422, another mistake in what was sent (`Invalid`) 400, `Unanswered` (no
worker answered a query) and `NotRegistered` 503, a chat's failed turn 502, and a
refusal by what already runs (a settled run, a refused answer) 409. Messages pass
through URL redaction, and an unexpected error shows only its type: keys, endpoint URLs
and payload-store paths never reach a client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from temporalio.service import RPCError, RPCStatusCode

from durafact._core.mistakes import first_mistake
from durafact._core.redaction import redact_urls
from durafact._core.text import one_line
from durafact._service.errors import (
    Invalid,
    InvalidInput,
    MessageRefused,
    NotFound,
    NotRegistered,
    ServiceError,
    TurnFailed,
    Unanswered,
)

log = logging.getLogger("durafact._api")

# What a Temporal status means to an API client: a missing run, or a server that did
# not answer (no worker took a query in time, the server is down).
RPC_STATUSES = {RPCStatusCode.NOT_FOUND: 404, RPCStatusCode.INVALID_ARGUMENT: 400}
# Each domain error's status and type, the first that matches: subclasses first; any
# other (NotRunning, AlreadyAnswered, Refused) is a conflict with what already runs.
STATUSES: tuple[tuple[type[ServiceError], int, str], ...] = (
    (InvalidInput, 422, "InvalidInput"),
    (NotFound, 404, "NotFound"),
    (Invalid, 400, "BadRequest"),
    (Unanswered, 503, "NoWorkerAnswered"),
    (NotRegistered, 503, "NotRegistered"),
    (TurnFailed, 502, "TurnFailed"),
    (MessageRefused, 409, "Refused"),
    (ServiceError, 409, "Conflict"),
)


class ApiError(Exception):
    """An answer other than success: its HTTP status, a type a program can switch on,
    and a message a person can act on."""

    def __init__(self, status: int, type: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.extra = extra


def body(type: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": type, "message": redact_urls(one_line(message)), **extra}}


def answer(error: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(
        body(error.type, error.message, **error.extra), status_code=error.status, headers=headers
    )


def from_service(exc: ServiceError) -> ApiError:
    """An operation's domain error as an API error (see `STATUSES`)."""
    status, kind = next((s, k) for error, s, k in STATUSES if isinstance(exc, error))
    extra = {"errors": exc.errors} if isinstance(exc, InvalidInput) else {}
    return ApiError(status, kind, str(exc), **extra)


def from_rpc(exc: RPCError) -> ApiError:
    status = RPC_STATUSES.get(exc.status, 503)
    kind = {404: "NotFound", 400: "BadRequest"}.get(status, "TemporalUnavailable")
    return ApiError(status, kind, f"Temporal: {exc.message}")


def body_fields(request: Request) -> Iterable[str]:
    """The fields of the body `request`'s route takes: what a misspelt one is guessed
    from when it was not missing (`reasn` for `reason`)."""
    body = getattr(request.scope.get("route"), "body_field", None)
    model = body.field_info.annotation if body is not None else None
    return model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else ()


def install(app: FastAPI) -> None:
    """Answer every error of `app` in the one shape."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return answer(exc)

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        return answer(from_service(exc))

    async def rpc(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RPCError)
        return answer(from_rpc(exc))

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        # A misspelt field is named with its guess (`'approve' is not a field of body
        # (did you mean 'approved'?)`), as the `decide` update names it.
        message = first_mistake(errors, body_fields(request)) if errors else "invalid request"
        return answer(ApiError(422, "InvalidRequest", message, errors=errors))

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kinds = {404: "NotFound", 405: "MethodNotAllowed", 413: "TooLarge"}
        return answer(ApiError(exc.status_code, kinds.get(exc.status_code, "Error"), exc.detail))

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        message = f"unexpected {type(exc).__name__} (the server's log has the details)"
        return answer(ApiError(500, "InternalError", message))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(ServiceError, refused)
    app.add_exception_handler(RPCError, rpc)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http)
    app.add_exception_handler(Exception, unexpected)
