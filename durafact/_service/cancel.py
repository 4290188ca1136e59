"""Cancelling a run: Temporal's cancellation, with a reason the recipe keeps in its
ledger (the `cancellation` artifact). The run ends CANCELED once it sees the request;
a run that ended another way first says so.
"""

from __future__ import annotations

import contextlib
from typing import Any

from temporalio.client import WorkflowFailureError

from durafact._service.ledger import cancellation_reason
from durafact._service.runs import describe, running, state_name


async def cancel(client: Any, workflow_id: str, reason: str) -> Any:
    """Ask the running run to stop: its description; NotRunning when it has ended."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle, "there is nothing to cancel")
    await handle.cancel(reason=reason)
    return description


async def ended(handle: Any) -> tuple[str, str]:
    """Wait for the run to end: Temporal's state, and the reason it was cancelled for
    (when it ended CANCELED with one)."""
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    state = state_name(await describe(handle))
    return state, await cancellation_reason(handle) if state == "CANCELED" else ""
