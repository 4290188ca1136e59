"""Why an operation did not happen: one domain error each, with a one-line reason a
person can act on, and how a Temporal failure reads in one line (`failure_text`).

Each front door says them its own way, in one place: the command line as
`starter: <reason>` with exit code 2 for what was given wrong (`Invalid`,
`UnknownType`) and 1 for the rest (durafact/_cli/starter.py); the HTTP API as a status
code (durafact/_api/errors.py): `NotFound` 404, `Invalid` 400 (`InvalidInput` 422),
`Unanswered` and `NotRegistered` 503, `TurnFailed` 502, `MessageRefused` 409
`Refused`, and `NotRunning`, `AlreadyAnswered` and `Refused` 409 `Conflict`.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError, FailureError

from durafact._core.text import one_line


class ServiceError(Exception):
    """A one-line reason an operation did not happen."""


class Invalid(ServiceError):
    """What was given is wrong (an id, an input, an option): nothing was done."""


class InvalidInput(Invalid):
    """Input that does not fit the recipe's input model; `errors` are pydantic's."""

    def __init__(self, message: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.errors = errors


class NotFound(ServiceError):
    """No run (or chat) has the id."""


class UnknownType(NotFound):
    """No registered recipe has the workflow type."""


class NotRunning(ServiceError):
    """The run has ended (or is no such thing as the operation needs): nothing to do."""


class AlreadyAnswered(ServiceError):
    """The question was answered (or escalated) before this answer came."""


class Refused(ServiceError):
    """The run refused it (its validator said why), or takes no such thing."""


class MessageRefused(Refused):
    """A chat refused a message or a stop: its reason."""


class TurnFailed(ServiceError):
    """A chat's turn failed while it answered."""


class Unanswered(ServiceError):
    """No worker answered a query in time: none runs, or none took it."""


class NotRegistered(ServiceError):
    """No worker on the task queue has the workflow type: how to get one."""


def failure_text(exc: BaseException) -> str:
    """`Type: message` of what failed: the first ApplicationError under the wrappers
    (workflow, activity or child failure); its own causes are detail."""
    chain = []
    node: BaseException | None = exc
    while node is not None and len(chain) < 20:
        chain.append(node)
        node = node.__cause__
    app = next((e for e in chain if isinstance(e, ApplicationError)), None)
    if app is not None:
        return f"{app.type or 'ApplicationError'}: {one_line(app.message)}"
    root = chain[-1]
    message = root.message if isinstance(root, FailureError) else str(root)
    return f"{type(root).__name__}: {one_line(message)}"
