"""A run's ledger: every artifact it made, texts included, read with the workflow's
`artifacts` query. It answers for a running run and for a closed one, as long as a
worker runs: a closed run's query is answered by a worker replaying its history.

A tool loop that continued as new holds its earlier runs' artifacts in those runs: the
latest run's ledger names each (`earlier_runs`), and its run id reads one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from durafact._core.ids import CANCELLATION_ID
from durafact._core.ledger import Ledger, LedgerError, ProvenanceNode
from durafact._recipes.react_long import EarlierRun
from durafact._recipes.recipe import Cancellation
from durafact._runtime.codec import PayloadDecryptError
from durafact._service.errors import NotFound, Unanswered
from durafact._service.runs import describe, unanswered

# A closed run's queries are answered by a worker replaying its history: more than a poll.
ARTIFACTS_TIMEOUT = timedelta(seconds=10)


async def query_ledger(handle: Any, timeout: timedelta | None = ARTIFACTS_TIMEOUT) -> Ledger:
    """The run's ledger (the `artifacts` query); raises what the query raised."""
    return await handle.query("artifacts", result_type=Ledger, rpc_timeout=timeout)


async def ledger_of(handle: Any) -> Ledger | None:
    """The run's ledger, or None when no worker answered the `artifacts` query."""
    try:
        return await query_ledger(handle)
    except Exception:
        return None


async def read_ledger(
    client: Any, workflow_id: str, run_id: str | None = None
) -> tuple[Any, Ledger]:
    """The run's description and its ledger; NotFound, or Unanswered saying why not."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    description = await describe(handle)
    try:
        ledger = await query_ledger(handle)
    except (RPCError, WorkflowQueryFailedError, PayloadDecryptError) as exc:
        raise Unanswered(f"workflow {workflow_id}: {unanswered('artifacts', exc)}") from None
    return description, ledger


def earlier_runs(ledger: Ledger) -> list[EarlierRun]:
    """The earlier runs of a loop that continued as new, each with the turns it holds."""
    return [artifact.data for artifact in ledger.find_all(EarlierRun)]


async def provenance(client: Any, workflow_id: str, artifact: str) -> ProvenanceNode:
    """What the run's artifact rests on, down its links; NotFound for no such artifact."""
    _, ledger = await read_ledger(client, workflow_id)
    try:
        return ledger.provenance(artifact)
    except LedgerError:
        raise NotFound(f"run {workflow_id} has no artifact {artifact!r}") from None


async def cancellation_reason(handle: Any) -> str:
    """Why a cancelled run was cancelled (its `cancellation` artifact); '' when it was
    given no reason or no worker answered."""
    ledger = await ledger_of(handle)
    found = ledger.get(CANCELLATION_ID) if ledger and CANCELLATION_ID in ledger else None
    return found.typed(Cancellation).data.reason if found else ""
