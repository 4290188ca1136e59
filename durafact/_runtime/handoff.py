"""Context handed from a workflow to its model activity inside one worker process.

A model request names its context by reference (artifact ids, a conversation span),
so that a text is stored in history once. The activity reads the texts with the
queries `context_texts` and `context_messages` of its own workflow: a round trip
through the server, about 10 ms on a dev server, on every model call. Usually the
activity runs in the worker process whose workflow scheduled it. So when a workflow
schedules `request_model`, `HandoffInterceptor` (installed by `DurafactPlugin`) asks
those same query methods in the workflow, at once, and puts their answers in this
worker's `Handoff`, keyed by run id and activity id; the activity takes them from
there. On a miss (the activity landed on another worker, the process restarted, a
retry, an entry pushed out) the activity sends the queries as before: this only saves
time, and the model sees the same text either way.

Nothing happens while the workflow replays (the activity ran long ago). A put is not
a command and changes nothing the workflow does, so replay and determinism are
untouched, and workflow code knows nothing of it. Workflow threads put and the
activities' event loop takes, each with one dict operation, which the interpreter lock
makes atomic. Entries are taken once; past `max_entries` the oldest go first, so a
worker whose activities run elsewhere does not grow; a context over `max_chars` is not
handed over at all.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from temporalio import workflow
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from durafact._core.llm import LLMRequest, ResolvedContext

MAX_ENTRIES = 512
MAX_CHARS = 256_000
MODEL_ACTIVITY = "request_model"


class Handoff:
    """One worker's store of resolved contexts, by (run id, activity id)."""

    def __init__(self, max_entries: int | None = None, max_chars: int | None = None) -> None:
        self.max_entries = MAX_ENTRIES if max_entries is None else max_entries
        self.max_chars = MAX_CHARS if max_chars is None else max_chars
        self._entries: OrderedDict[tuple[str, str], ResolvedContext] = OrderedDict()

    def put(self, run_id: str, activity_id: str, context: ResolvedContext) -> None:
        if context.chars() > self.max_chars:
            return
        self._entries[run_id, activity_id] = context
        while len(self._entries) > self.max_entries:
            try:
                self._entries.popitem(last=False)
            except KeyError:  # another thread took the rest meanwhile
                break

    def take(self, run_id: str, activity_id: str) -> ResolvedContext | None:
        return self._entries.pop((run_id, activity_id), None)


def resolve(reader: Any, request: LLMRequest) -> ResolvedContext | None:
    """What the activity would get from `reader`'s queries for `request`; None when the
    request names no context."""
    conversation = request.conversation
    if conversation is not None and not conversation.count:
        conversation = None
    if conversation is None and not any(m.references() for m in request.messages):
        return None
    texts = tuple(tuple(reader.context_texts(m.references())) for m in request.messages)
    turns = tuple(reader.context_messages(conversation)) if conversation else None
    return ResolvedContext(texts=texts, turns=turns)


class HandoffInterceptor(Interceptor):
    """Fills `handoff` as workflows of this worker schedule model calls."""

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        handoff = self.handoff

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_Outbound(outbound, handoff))

        return Inbound


class _Outbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, handoff: Handoff) -> None:
        super().__init__(next)
        self._handoff = handoff

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        reader = workflow.instance()
        request = input.args[0] if input.args else None
        if (
            input.activity == MODEL_ACTIVITY
            and isinstance(request, LLMRequest)
            and input.activity_id
            and hasattr(reader, "context_texts")
            and not workflow.unsafe.is_replaying()
        ):
            context = resolve(reader, request)
            if context is not None:
                self._handoff.put(workflow.info().run_id, input.activity_id, context)
        return super().start_activity(input)
