"""`QueryRetry`: a client interceptor that asks a query again when the worker that
answered it reports nondeterminism, up to four times over about 3 seconds.

A query that reaches a worker just after a run has closed is answered by a replay of
the run's history. Now and then that replay goes wrong: about once in a run of the
test suite (which asks hundreds of such queries), the worker replayed a finished plan
as though the patch marker of its first workflow task were missing (`workflow.patched`
false, so the replay upserted a search attribute where the history schedules an
activity) and failed the query with `[TMPRL1100]`. The same history, fetched and
replayed by a `Replayer`, replays cleanly, and the same query 0.3 s later was
answered. A query changes nothing, so asking again is safe; a history that truly does
not replay fails every time, and its error comes through after the last attempt.
`DurafactPlugin` installs this on every client it configures (the command line's, the
API's, yours) and `durafact.testing` on the test server's client.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowQueryFailedError,
)

# How a worker's query failure names a replay that did not match the history.
NONDETERMINISM = "[TMPRL1100]"
# Seconds before each new attempt; the race was seen to last up to about a second.
DELAYS = (0.2, 0.4, 0.8, 1.6)


class QueryRetry(Interceptor):
    """Asks a query again after a nondeterminism failure (see the module doc)."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next)


class _Outbound(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        for delay in DELAYS:
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as exc:
                if NONDETERMINISM not in str(exc):
                    raise
            await asyncio.sleep(delay)
        return await super().query_workflow(input)
