"""What each model call of a recorded run saw, read by replaying its history with the
current code (Temporal's `Replayer` with `DurafactPlugin`, in this process, no server:
durafact/_runtime/replay.py).

A model request names its context by reference (artifact ids, a conversation span),
and only the workflow's state at the moment of the call says what those references
held. So the recorded history is replayed with the current code: every recorded answer
comes back from history, the workflow rebuilds its ledger from them, and
`CaptureInterceptor` reads, as each `request_model` call is scheduled again, the texts
that the recorded request's references hold at that moment, and the request the
current code makes there instead, with its own context. Replay does not compare an
activity's input with the recorded one, so a changed prompt replays; a change in what
is scheduled (a hook added or reordered) stops the replay there (`failures`), and
the calls after it have no capture.

At the end of a replayed run its ledger is kept (`ledgers`): how the recorded result
reads (`Recipe.show_result`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from durafact._core.ledger import Ledger
from durafact._core.llm import LLMRequest, ResolvedContext
from durafact._runtime.handoff import MODEL_ACTIVITY, resolve
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.recording import RecordedRun, failure_line
from durafact._runtime.replay import replays


@dataclass
class Seen:
    """One model call as the replay met it: the recorded request's references resolved
    there, and the request the current code made instead, with its own."""

    recorded: ResolvedContext
    request: LLMRequest
    context: ResolvedContext


@dataclass
class Capture:
    """What replaying a recording saw, by workflow id and activity id."""

    calls: dict[tuple[str, str], list[Seen]] = field(default_factory=lambda: defaultdict(list))
    ledgers: dict[str, Ledger] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    # The recorded requests not met yet, by run id and activity id, in order.
    recorded: dict[str, dict[str, list[LLMRequest]]] = field(default_factory=dict)

    def seen(self, workflow_id: str, activity_id: str, n: int = 0) -> Seen | None:
        found = self.calls.get((workflow_id, activity_id), [])
        return found[n] if n < len(found) else None


async def replay_runs(
    runs: Sequence[RecordedRun],
    requests: dict[str, dict[str, list[LLMRequest]]],
    plugin: DurafactPlugin,
) -> Capture:
    """Replay each recorded run with `plugin`'s workflows (the current code), converter
    and sandbox (durafact/_runtime/replay.py); `requests` are the recorded model requests
    of each run, by run id and activity id."""
    capture = Capture(recorded={run: dict(calls) for run, calls in requests.items()})

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for run in runs:
            yield run.history

    async with replays(plugin, histories(), [CaptureInterceptor(capture)]) as results:
        done = [result async for result in results]
    for run, result in zip(runs, done, strict=True):
        if result.replay_failure is not None:
            capture.failures[run.workflow_id] = failure_line(result.replay_failure)
    return capture


class CaptureInterceptor(Interceptor):
    """Fills `capture` as replayed workflows schedule model calls and end."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        capture = self.capture

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_Outbound(outbound, capture))

            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                try:
                    return await super().execute_workflow(input)
                finally:
                    ledger = getattr(workflow.instance(), "ledger", None)
                    if isinstance(ledger, Ledger):
                        capture.ledgers[workflow.info().workflow_id] = ledger

        return Inbound


class _Outbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, capture: Capture) -> None:
        super().__init__(next)
        self._capture = capture

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        request = input.args[0] if input.args else None
        run = self._capture.recorded.get(workflow.info().run_id, {})
        recorded = run.get(input.activity_id or "")
        reader = workflow.instance()
        if (
            input.activity == MODEL_ACTIVITY
            and isinstance(request, LLMRequest)
            and recorded
            and hasattr(reader, "context_texts")
        ):
            seen = Seen(
                recorded=resolved(reader, recorded.pop(0)),
                request=request,
                context=resolved(reader, request),
            )
            self._capture.calls[workflow.info().workflow_id, input.activity_id or ""].append(seen)
        return super().start_activity(input)


def resolved(reader: Any, request: LLMRequest) -> ResolvedContext:
    """What `request`'s references hold in the workflow `reader`, now."""
    found = resolve(reader, request)
    return found or ResolvedContext(texts=tuple(() for _ in request.messages), turns=None)
