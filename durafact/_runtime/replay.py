"""Histories replayed against the code of this process, as a worker of it would replay
them: a `Replayer` with `DurafactPlugin`, so with the same registered workflows, the same
data converter (the payload keys and store of the environment, DURAFACT_KEYS...) and
the same sandbox (durafact/_runtime/plugin.py).

What does not replay is reported by the caller (durafact/_service/check.py), so the
replay itself is quiet: its core runtime logs nothing, and the SDK's warning for each
failed workflow task of a replay (a traceback) is left out.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Sequence

from temporalio.client import WorkflowHistory
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.worker import Interceptor, Replayer, WorkflowReplayResult

from durafact._runtime.plugin import DurafactPlugin

# The namespace the replayer says its runs are in: how its own log records are told
# from a worker's that runs in the same process.
NAMESPACE = "durafact-replay"
# Where the SDK warns, with a traceback, about each workflow task that fails.
SDK_LOGGER = "temporalio.worker._workflow_instance"


@functools.cache
def quiet_runtime() -> Runtime:
    """A core runtime of its own that logs nothing: the core warns about every
    nondeterminism it finds, which is what the caller reports in its own words."""
    return Runtime(telemetry=TelemetryConfig(logging=None, metrics=None))


class ReplayWarnings(logging.Filter):
    """Leaves out the SDK's log records about the replayer's own runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        details = getattr(record, "temporal_workflow", None)
        return not (isinstance(details, dict) and details.get("namespace") == NAMESPACE)


@contextlib.asynccontextmanager
async def replays(
    plugin: DurafactPlugin,
    histories: AsyncIterator[WorkflowHistory],
    interceptors: Sequence[Interceptor] = (),
) -> AsyncIterator[AsyncIterator[WorkflowReplayResult]]:
    """Each of `histories` replayed in turn with `plugin`'s workflows, converter and
    sandbox (and `interceptors`, which see the replayed workflows): a result per
    history, its `replay_failure` None when it replays."""
    replayer = Replayer(
        workflows=[],
        plugins=[plugin],
        namespace=NAMESPACE,
        runtime=quiet_runtime(),
        interceptors=interceptors,
    )
    logger = logging.getLogger(SDK_LOGGER)
    quiet = ReplayWarnings()
    logger.addFilter(quiet)
    try:
        async with replayer.workflow_replay_iterator(histories) as results:
            yield results
    finally:
        logger.removeFilter(quiet)
