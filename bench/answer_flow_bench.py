"""AnswerFlowWorkflow: history events and bytes per round and per item.

    python -m bench.answer_flow_bench

One run starts a real dev server, the scripted model (no delay) and an in-process
worker (bench/_common.py), then answers a batch of 3 and a batch of 12 questions
with `max_repairs=2` and the optional review. A third of the items quote something
their source never says until the last round, another third fail the review until
the last round, the rest pass at once, so every round runs: `generate:0`,
`review:0`, `repair:1`, `review:1`, `repair:2`, `review:2`. Every item ends accepted.

For each model activity it prints how many items it covered, the payload bytes of
its input and result, and the text its context references named (what the activity
fetched from the workflow by query: what an inline design would have stored in its
input); then events and bytes per round (each round's activities with their
workflow tasks), and the growth checks of DESIGN.md section 6: with the number of
the round, and with the size of the batch. Bytes are protobuf
`HistoryEvent.ByteSize()`, as in `plan_execute_bench`.

Then the cost per item: batches of 10 and 3,000 one-line questions (one repair round,
a third failing the check and a third the review until then; `SizedAnswerFlow`, whose
result is counts only, tests/sized_answer_flow.py) and the workflow-task CPU time per
item. CPU time is measured inside the worker: a workflow runner that wraps the
sandboxed one times every activation of the run (`WorkflowInstance.activate`, which
runs the workflow code, decodes and encodes its payloads, and answers the activity's
`context_texts` queries) with `time.thread_time()`, the CPU time of the thread that
runs it; the longest activation is what Temporal's deadlock detector (2 s) watches.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from bench._common import dev_stack
from bench.plan_execute_bench import SENTENCES
from durafact._core.ledger import Ledger
from durafact._recipes import AnswerBatchInput, AnswerFlowWorkflow, Question
from durafact._runtime.plugin import with_passthrough
from tests.scripted_answers import answerer
from tests.sized_answer_flow import SizedAnswerFlow, tram_batch

SIZES = (3, 12)
CPU_SIZES = (10, 3000)
MAX_REPAIRS = 2
LAST = MAX_REPAIRS  # the round in which the failing items finally pass


def item_id(i: int) -> str:
    return f"q{i:02d}"  # the same length in both batches, so per-item bytes compare


def batch(n: int) -> AnswerBatchInput:
    """n questions, each with a 3-4 sentence source taken from the plan bench's texts."""
    questions = []
    for i in range(n):
        sentences = [SENTENCES[(5 * i + k) % len(SENTENCES)] for k in range(3 + i % 2)]
        questions.append(
            Question(
                id=item_id(i),
                question=f"What does note {i} say first about the Kraków weekend?",
                source=" ".join(sentences),
            )
        )
    return AnswerBatchInput(questions=questions, max_repairs=MAX_REPAIRS, max_items=n)


def failing(n: int) -> tuple[dict[str, int], dict[str, int]]:
    """(ungrounded, review_fails) for the scripted model: both until the last round."""
    ungrounded = {item_id(i): LAST for i in range(n) if i % 3 == 1}
    review_fails = {item_id(i): LAST for i in range(n) if i % 3 == 2}
    return ungrounded, review_fails


@dataclass
class Call:
    """One model activity as history holds it."""

    activity_id: str
    items: int
    input: int  # payload bytes of its input
    result: int  # payload bytes of its result
    fetched: int  # bytes of the texts its context references named (fetched by query)


@dataclass
class Round:
    events: int = 0
    bytes: int = 0
    upserts: int = 0  # status changes (UpsertWorkflowSearchAttributes events)
    calls: list[Call] = field(default_factory=list)

    def items(self, kind: str) -> int:
        """Items covered by this round's `generate`/`repair` (kind "gen") or `review` call."""
        review = [c.items for c in self.calls if c.activity_id.startswith("llm:review:")]
        other = [c.items for c in self.calls if not c.activity_id.startswith("llm:review:")]
        return sum(review if kind == "review" else other)


@dataclass
class Sample:
    n: int
    wall_ms: float
    events: int
    bytes: int
    result_bytes: int  # the WorkflowExecutionCompleted event: usage and the verdicts
    start_bytes: int  # the WorkflowExecutionStarted event: the batch itself
    rounds: dict[int, Round]
    own_text: int  # bytes of the items' own texts: questions, sources, answers, quotes


def _texts(ledger: Ledger, refs: list) -> int:
    return sum(len(a.text().encode()) for ref in refs for a in ledger.select(ref))


def measure(n: int, history: WorkflowHistory, ledger: Ledger, wall_ms: float) -> Sample:
    """Split the history into rounds: round r is everything from the scheduling of its
    generate/repair activity up to the next round's; the first workflow task goes to
    round 0, the start event (the batch) and the completion event (the result) are
    counted on their own."""
    rounds: dict[int, Round] = defaultdict(Round)
    current, total, completed, started = 0, 0, 0, 0
    for event in history.events:
        size = event.ByteSize()
        total += size
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = size
            continue
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            completed = size
            continue
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            stage, number = attributes.activity_id.removeprefix("llm:").split(":")
            current = int(number)
            request = json.loads(attributes.input.payloads[0].data)
            refs = [ref for m in request["messages"] for ref in m.get("context", [])]
            questions = [r for r in refs if isinstance(r, str) and r.startswith("question:")]
            rounds[current].calls.append(
                Call(
                    activity_id=attributes.activity_id,
                    items=len(questions),
                    input=len(attributes.input.payloads[0].data),
                    result=0,
                    fetched=_texts(ledger, refs),
                )
            )
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads = event.activity_task_completed_event_attributes.result.payloads
            rounds[current].calls[-1].result = len(payloads[0].data)
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            rounds[current].upserts += 1
        rounds[current].events += 1
        rounds[current].bytes += size
    own = 0
    for artifact in ledger.all():
        data = artifact.data
        if artifact.type == "Question":
            own += len((data["question"] + (data["source"] or "")).encode())
        elif artifact.type == "ItemAnswer":
            own += len((data["answer"] + data["quote"]).encode())
    return Sample(
        n=n,
        wall_ms=wall_ms,
        events=len(history.events),
        bytes=total,
        result_bytes=completed,
        start_bytes=started,
        rounds=dict(rounds),
        own_text=own,
    )


async def run_once(client: Client, queue: str, n: int) -> Sample:
    handle = await client.start_workflow(
        AnswerFlowWorkflow.run,
        batch(n),
        id=f"bench-answer-{n}-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    began = time.perf_counter()
    result = await handle.result()
    wall_ms = (time.perf_counter() - began) * 1000
    if result.counts["accepted"] != n:
        raise SystemExit(f"expected every item accepted, got {result.counts}")
    ledger = await handle.query(AnswerFlowWorkflow.artifacts)
    return measure(n, await handle.fetch_history(), ledger, wall_ms)


def report(samples: dict[int, Sample]) -> None:
    print()
    print(
        f"AnswerFlowWorkflow, max_repairs={MAX_REPAIRS}, review optional; a third of the items "
        "fail the check and a third the review until the last round. Bytes: protobuf "
        "HistoryEvent.ByteSize(); payload bytes: the JSON of an activity's input or result."
    )
    for n, s in samples.items():
        print()
        print(
            f"{n} items: {s.events} events, {s.bytes} B of history in {s.wall_ms:.0f} ms "
            f"({s.events / n:.1f} events/item, {s.bytes / n:.0f} B/item); batch input "
            f"{s.start_bytes} B, result (usage + verdicts) {s.result_bytes} B"
        )
        head = (
            f"  {'activity':<16} {'items':>5} {'input B':>8} {'in B/item':>9} {'result B':>9}"
            f" {'res B/item':>10} {'fetched B':>9}"
        )
        print(head)
        for round_ in s.rounds.values():
            for c in round_.calls:
                print(
                    f"  {c.activity_id:<16} {c.items:>5} {c.input:>8} {c.input / c.items:>9.0f} "
                    f"{c.result:>9} {c.result / c.items:>10.0f} {c.fetched:>9}"
                )
        print(
            f"  {'round':<16} {'items':>5} {'reviewed':>8} {'events':>9} {'upserts':>9}"
            f" {'bytes':>9} {'B/item':>9}"
        )
        for r, round_ in sorted(s.rounds.items()):
            items = round_.items("gen")
            print(
                f"  {r:<16} {items:>5} {round_.items('review'):>8} {round_.events:>9} "
                f"{round_.upserts:>9} {round_.bytes:>9} {round_.bytes / items:>9.0f}"
            )
    print()

    big, small = samples[max(SIZES)], samples[min(SIZES)]
    calls = {c.activity_id: c for r in big.rounds.values() for c in r.calls}
    print(f"Growth with the round number ({big.n} items; the same items fail in rounds 1 and 2):")
    for later, earlier in (("llm:repair:2", "llm:repair:1"), ("llm:review:2", "llm:review:0")):
        a, b = calls[earlier], calls[later]
        print(
            f"  {later} input {b.input / b.items:.0f} B/item vs {earlier} "
            f"{a.input / a.items:.0f} B/item ({b.input / b.items - a.input / a.items:+.0f})"
        )
    for r in sorted(big.rounds):
        round_ = big.rounds[r]
        calls = len(round_.calls)
        extra = round_.events - round_.upserts - 6 * calls
        print(
            f"  round {r}: {round_.events} events = {calls} activities x 6 (3 activity + 3 "
            f"workflow task) + {round_.upserts} status upsert(s)"
            + (f" + {extra} (the run's first workflow task)" if extra else "")
        )
    print(f"Growth with the batch size ({small.n} -> {big.n} items):")
    for label, f in (
        ("generate:0 input", lambda s: s.rounds[0].calls[0].input),
        ("history", lambda s: s.bytes),
        ("history excl. result", lambda s: s.bytes - s.result_bytes),
        ("result (verdicts)", lambda s: s.result_bytes),
        ("items' own text", lambda s: s.own_text),
    ):
        a, b = f(small) / small.n, f(big) / big.n
        print(f"  {label:<21} {a:>6.0f} -> {b:>6.0f} B/item (x{b / a:.2f})")
    for name in ("llm:generate:0", "llm:repair:1", "llm:review:0"):
        a, b = (
            next(c for r in x.rounds.values() for c in r.calls if c.activity_id == name)
            for x in (small, big)
        )
        print(
            f"  {name} input: +{(b.input - a.input) / (b.items - a.items):.0f} B per extra item "
            f"({a.items} -> {b.items} items), whatever the length of its texts"
        )
    fetched = sum(c.fetched for r in big.rounds.values() for c in r.calls)
    inputs = sum(c.input for r in big.rounds.values() for c in r.calls)
    print(
        f"Context by reference ({big.n} items): the activities' inputs hold {inputs} B; the "
        f"texts they fetched by query ({fetched} B) would have been stored in them again "
        "if passed inline."
    )


class TimedRunner(WorkflowRunner):
    """The worker's workflow runner, with the CPU time of every activation by run id."""

    def __init__(self, inner: WorkflowRunner) -> None:
        self.inner = inner
        self.cpu: dict[str, list[float]] = defaultdict(list)

    def prepare_workflow(self, defn: Any) -> None:
        self.inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _TimedInstance(self.inner.create_instance(det), self.cpu)

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self.inner.set_worker_level_failure_exception_types(types)


class _TimedInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, cpu: dict[str, list[float]]) -> None:
        self.inner = inner
        self.cpu = cpu

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        began = time.thread_time()
        try:
            return self.inner.activate(act)
        finally:
            self.cpu[act.run_id].append(time.thread_time() - began)

    def get_serialization_context(self, command_info: Any) -> Any:
        return self.inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self.inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self.inner.get_info()

    def get_thread_id(self) -> int | None:
        return self.inner.get_thread_id()


async def cpu_per_item() -> None:
    """Workflow-task CPU per item at each of CPU_SIZES (see the module docstring)."""
    runner = TimedRunner(with_passthrough(None))
    ungrounded: dict[str, int] = {}
    review_fails: dict[str, int] = {}
    for n in CPU_SIZES:  # ids are shared between batches and fail the same way
        _, u, r = tram_batch(n)
        ungrounded |= u
        review_fails |= r
    stack_up = dev_stack(answerer(ungrounded, review_fails))
    async with stack_up as stack, stack.worker(workflows=[SizedAnswerFlow], workflow_runner=runner):
        rows = []
        for n in (min(CPU_SIZES), *CPU_SIZES):  # the first one warms up
            handle = await stack.client.start_workflow(
                SizedAnswerFlow.run,
                tram_batch(n)[0],
                id=f"bench-answer-cpu-{n}-{uuid.uuid4().hex[:8]}",
                task_queue=stack.settings.task_queue,
            )
            counts = await handle.result()
            if counts.accepted != n:
                raise SystemExit(f"expected every item accepted, got {counts}")
            times = runner.cpu[handle.result_run_id or ""]
            rows.append((n, len(times), sum(times), max(times)))
    print()
    print(
        "Workflow-task CPU per item (SizedAnswerFlow, one repair round, review optional; "
        "time.thread_time() around each activation in the worker):"
    )
    print(
        f"  {'items':>6} {'activations':>11} {'CPU ms':>9} {'CPU ms/item':>12} {'longest ms':>11}"
    )
    for n, activations, total, longest in rows[1:]:
        print(
            f"  {n:>6} {activations:>11} {total * 1000:>9.1f} {total * 1000 / n:>12.3f} "
            f"{longest * 1000:>11.1f}"
        )


async def main() -> None:
    began = time.perf_counter()
    ungrounded: dict[str, int] = {}
    review_fails: dict[str, int] = {}
    for n in SIZES:  # item ids are shared between batches, and fail the same way in both
        u, r = failing(n)
        ungrounded |= u
        review_fails |= r
    async with dev_stack(answerer(ungrounded, review_fails)) as stack:
        client, queue = stack.client, stack.settings.task_queue
        async with stack.worker():
            await run_once(client, queue, min(SIZES))  # warm up: sandbox imports, caches
            samples = {n: await run_once(client, queue, n) for n in SIZES}
    report(samples)
    await cpu_per_item()
    print(f"(whole run {time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
