"""PlanExecuteWorkflow vs a hand-written Temporal workflow: time and history per step.

    python -m bench.plan_execute_bench [--reps N]

One run starts a real dev server, the scripted model (no delay) and an in-process
worker, then runs both workflows for a 3-, a 12- and a 30-step plan, interleaved, and
prints wall time (median), history events and history bytes per step. See
bench/README.md for how to read the table.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import statistics
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from bench import handwritten
from bench._common import dev_stack
from bench.handwritten import HandWritten
from durafact._core.ids import result_id, step_id, steps_prefix
from durafact._core.llm import ArtifactSpan, ContextText
from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact._recipes.recipe import Recipe
from durafact.testing import Call, ScriptedModel

GOAL = "Plan a long weekend in Kraków for two people on a mid-range budget"
SIZES = (3, 12, 30)
KINDS = ("durafact", "hand-written")

STEPS = [
    "Pick the dates, checking flight prices from Berlin for Friday to Monday.",
    "Set a total budget and split it into travel, lodging, food and tickets.",
    "Shortlist three hotels within walking distance of the Old Town square.",
    "Book the hotel with the best cancellation terms and a quiet room.",
    "List the main sights: Wawel Castle, the Cloth Hall and St Mary's Basilica.",
    "Reserve timed tickets for the Wieliczka Salt Mine on Saturday morning.",
    "Plan a half day in Kazimierz with lunch at a local milk bar.",
    "Find two dinner places that take reservations and serve pierogi.",
    "Check opening hours of the museums and drop any closed on Monday.",
    "Arrange the airport transfer both ways and note the train times.",
    "Draft an hour-by-hour itinerary for each of the three days.",
    "Collect bookings, tickets and addresses into one shareable document.",
]
SENTENCES = [
    "The cheapest option leaves on Friday at 07:40 and returns on Monday evening.",
    "Prices for the same weekend a fortnight later are about 18 percent higher.",
    "Three hotels fit: Hotel Wentzl on the square, Puro Stare Miasto and Hotel Pollera.",
    "Puro has free cancellation until 48 hours before arrival and rooms facing a courtyard.",
    "Wawel Castle state rooms need a timed ticket; the cathedral is free in the morning.",
    "The Cloth Hall market is open daily, and the underground museum closes on Tuesdays.",
    "St Mary's trumpet call is played every hour from the taller tower.",
    "Wieliczka tours in English start every half hour and last about three hours.",
    "Kazimierz is a fifteen-minute walk from the Old Town along Starowiślna street.",
    "Milk bars serve set lunches for under 30 złoty per person.",
    "Both restaurants take online bookings; the later slot on Saturday is still free.",
    "The airport train runs every 30 minutes and takes about 18 minutes to the centre.",
    "A taxi from the airport costs roughly 90 złoty at night.",
    "Most museums are closed on Mondays, so Monday morning is kept for a river walk.",
    "The budget comes to about 1,900 złoty per person including flights.",
    "Lodging is the largest item at 42 percent, food the second at 25 percent.",
    "Keep an hour of slack after the salt mine; the return bus is often full.",
]


def plan_of(n: int) -> list[str]:
    """`n` distinct steps: the twelve above, then the same again for later weekends."""
    return [
        STEPS[i] if i < len(STEPS) else f"{STEPS[i % len(STEPS)][:-1]} (weekend {i // 12 + 1})."
        for i in range(n)
    ]


def scripted_reply(call: Call) -> str | dict:
    """Plan: as many steps as the planner prompt allows. Steps: 300-600 chars of prose."""
    if call.schema_name == "Plan":
        n = int(re.search(r"at most (\d+)", call.text).group(1))
        return {"steps": plan_of(n)}
    seed = hashlib.sha256(call.last_user.encode()).digest()
    target = 300 + int.from_bytes(seed[:2], "big") % 300
    text, k = "", 0
    while len(text) < target:
        text += SENTENCES[(seed[2 + k % 30] + k) % len(SENTENCES)] + " "
        k += 1
    return text[:600].rstrip()


@dataclass
class Sample:
    wall_ms: float
    events: int
    bytes: int  # sum of HistoryEvent.ByteSize(): the protobuf bytes the server stores
    json_bytes: int  # len(history.to_json()), payloads base64-encoded
    result_fields: dict[str, int]  # JSON bytes of each top-level field of the result
    input_bytes: int  # sum of activity input payload data (JSON)
    step_inputs: list[int]  # input payload bytes of each step's activity, in order
    by_type: dict[str, int] = field(default_factory=dict)  # bytes by event type
    # Server-side timestamps, summed over the step activities: waiting to be picked
    # up, running (the activity, incl. durafact's context query), and the workflow
    # task between one activity's completion and the next one's scheduling.
    queued_ms: float = 0.0
    running_ms: float = 0.0
    between_ms: float = 0.0
    # Per run: workflow started -> first activity scheduled (the first workflow task,
    # incl. sandbox set-up), and last activity completed -> workflow completed.
    first_ms: float = 0.0
    last_ms: float = 0.0


def _ms(event: Any) -> float:
    return event.event_time.seconds * 1000 + event.event_time.nanos / 1e6


def measure(history: WorkflowHistory, wall_ms: float) -> Sample:
    by_type: dict[str, int] = defaultdict(int)
    inputs: list[int] = []
    marks: dict[str, list[float]] = defaultdict(list)
    for event in history.events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        by_type[name] += event.ByteSize()
        if name.startswith(("ACTIVITY_TASK_", "WORKFLOW_EXECUTION_")):
            marks[name].append(_ms(event))
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payloads = event.activity_task_scheduled_event_attributes.input.payloads
            inputs.append(sum(len(p.data) for p in payloads))
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            result = json.loads(
                event.workflow_execution_completed_event_attributes.result.payloads[0].data
            )
            fields = result if isinstance(result, dict) else {"(text)": result}
            result_fields = {
                k: len(json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode())
                for k, v in fields.items()
            }
    sched, started, done = (
        marks[f"ACTIVITY_TASK_{k}"] for k in ("SCHEDULED", "STARTED", "COMPLETED")
    )
    steps = range(1, len(sched) - 1)  # plan first, final last
    return Sample(
        queued_ms=sum(started[i] - sched[i] for i in steps),
        running_ms=sum(done[i] - started[i] for i in steps),
        between_ms=sum(sched[i] - done[i - 1] for i in steps),
        first_ms=sched[0] - marks["WORKFLOW_EXECUTION_STARTED"][0],
        last_ms=marks["WORKFLOW_EXECUTION_COMPLETED"][0] - done[-1],
        wall_ms=wall_ms,
        events=len(history.events),
        bytes=sum(by_type.values()),
        json_bytes=len(history.to_json()),
        result_fields=result_fields,
        input_bytes=sum(inputs),
        step_inputs=inputs[1:-1],  # plan first, final last
        by_type=dict(by_type),
    )


async def run_once(client: Client, queue: str, kind: str, steps: int) -> Sample:
    goal = Goal(text=GOAL, max_steps=steps)
    wid = f"bench-{kind}-{steps}-{uuid.uuid4().hex[:8]}"
    run = PlanExecuteWorkflow.run if kind == "durafact" else HandWritten.run
    start = time.perf_counter()
    handle = await client.start_workflow(run, goal, id=wid, task_queue=queue)
    await handle.result()
    wall_ms = (time.perf_counter() - start) * 1000
    return measure(await handle.fetch_history(), wall_ms)


async def time_context_query(client: Client, queue: str, model: ScriptedModel) -> list[float]:
    """The query durafact's activity makes for its context, timed against a live run."""
    second_step = "llm:" + step_id(GOAL, 1)

    def is_second_step(call: Call) -> bool:
        return call.activity_id == second_step

    held = model.hold(is_second_step)
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL, max_steps=3),
        id=f"bench-query-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    try:
        await asyncio.to_thread(model.wait_for, is_second_step)
        refs = [ArtifactSpan(prefix=result_id(steps_prefix(GOAL)), count=1)]
        times = []
        for _ in range(20):
            start = time.perf_counter()
            await handle.query("context_texts", refs, result_type=list[ContextText])
            times.append((time.perf_counter() - start) * 1000)
    finally:
        held.set()
        model.release_all()
    await handle.result()
    return times


def check_same_settings() -> None:
    ours = (handwritten.TIMEOUT, handwritten.HEARTBEAT, handwritten.RETRY, handwritten.DEADLINE)
    theirs = (
        Recipe.llm_timeout,
        Recipe.llm_heartbeat_timeout,
        Recipe.llm_retry,
        Recipe.model_deadline,
    )
    if ours != theirs:
        raise SystemExit("bench/handwritten.py no longer uses Recipe's timeouts and retries")


def report(samples: dict[tuple[str, int], list[Sample]], reps: int, query_ms: list[float]) -> None:
    def first(kind: str, n: int) -> Sample:
        return samples[kind, n][0]  # history sizes differ by a few bytes at most between runs

    def median_ms(kind: str, n: int) -> float:
        return statistics.median(s.wall_ms for s in samples[kind, n])

    print()
    print(f"Plan-and-execute, scripted model with no delay; median of {reps} runs per cell.")
    print("bytes = sum of protobuf HistoryEvent.ByteSize() over the whole history.")
    print()
    head = (
        f"{'steps':>5} {'workflow':<13} {'ms/plan':>8} {'ms/step':>8} {'ratio':>6} "
        f"{'events':>7} {'ev/step':>8} {'bytes':>8} {'B/step':>7} {'act.input B':>11}"
    )
    print(head)
    print("-" * len(head))
    for n in SIZES:
        base = median_ms("hand-written", n)
        for kind in KINDS:
            s, ms = first(kind, n), median_ms(kind, n)
            ratio = f"{ms / base:.2f}" if kind == "durafact" else ""
            print(
                f"{n:>5} {kind:<13} {ms:>8.1f} {ms / n:>8.1f} {ratio:>6} "
                f"{s.events:>7} {s.events / n:>8.1f} {s.bytes:>8} {s.bytes / n:>7.0f} "
                f"{s.input_bytes:>11}"
            )
    print()
    print("Where the time goes, median ms from server event times:")
    print(
        f"  {'steps':>5} {'workflow':<13} {'queued':>7} {'running':>8} {'wf task':>8}"
        f" {'first task':>11} {'last task':>10}"
    )
    for n in SIZES:
        for kind in KINDS:
            q, r, b = (
                statistics.median(getattr(s, f) / n for s in samples[kind, n])
                for f in ("queued_ms", "running_ms", "between_ms")
            )
            f1, f2 = (
                statistics.median(getattr(s, f) for s in samples[kind, n])
                for f in ("first_ms", "last_ms")
            )
            print(f"  {n:>5} {kind:<13} {q:>7.1f} {r:>8.1f} {b:>8.1f} {f1:>11.1f} {f2:>10.1f}")
    print("  Per step activity: queued = scheduled->started, running = started->completed,")
    print("  wf task = previous activity completed -> this one scheduled. Once per run:")
    print("  first task = workflow started -> plan activity scheduled, last task = final")
    print("  activity completed -> workflow completed.")
    print(
        f"  durafact's context query (context_texts) against a live run: median "
        f"{statistics.median(query_ms):.1f} ms over {len(query_ms)} queries."
    )
    print()
    lo, hi = SIZES[0], SIZES[-1]
    print(f"Growth from {lo} to {hi} steps (B/step: whole history; excl. result: without")
    print("the WorkflowExecutionCompleted event; step input: payload bytes of the first and")
    print(f"last step activity of the {hi}-step plan):")
    growth: dict[str, float] = {}
    slopes: dict[str, float] = {}
    for kind in KINDS:
        a, b = first(kind, lo), first(kind, hi)
        growth[kind] = (b.bytes / hi) / (a.bytes / lo)
        done = "WORKFLOW_EXECUTION_COMPLETED"
        ex_lo = (a.bytes - a.by_type[done]) / lo
        ex_hi = (b.bytes - b.by_type[done]) / hi
        inputs = b.step_inputs
        slopes[kind] = (inputs[-1] - inputs[0]) / (len(inputs) - 1)
        print(
            f"  {kind:<13} B/step {a.bytes / lo:>5.0f} -> {b.bytes / hi:>5.0f} "
            f"(x{growth[kind]:.2f}); excl. result {ex_lo:>5.0f} -> {ex_hi:>5.0f} "
            f"(x{ex_hi / ex_lo:.2f}); step input {inputs[0]} -> {inputs[-1]} B, "
            f"+{slopes[kind]:.0f} B per earlier step"
        )
    print()
    print(f"Where the bytes go, {lo}- and {hi}-step plans (bytes by event type):")
    types = sorted(
        {t for kind in KINDS for n in (lo, hi) for t in first(kind, n).by_type},
        key=lambda t: -max(first(k, hi).by_type.get(t, 0) for k in KINDS),
    )
    print(f"  {'event type':<40} " + " ".join(f"{f'{k} {n}':>16}" for n in (lo, hi) for k in KINDS))
    for t in types:
        sizes = (first(k, n).by_type.get(t, 0) for n in (lo, hi) for k in KINDS)
        print(f"  {t:<40} " + " ".join(f"{b:>16}" for b in sizes))
    for n in (lo, hi):
        fields = first("durafact", n).result_fields
        print(
            f"  durafact's {n}-step result (JSON bytes by field): "
            + ", ".join(f"{k} {v}" for k, v in sorted(fields.items(), key=lambda kv: -kv[1]))
        )
    json_sizes = ", ".join(f"{k} {first(k, hi).json_bytes}" for k in KINDS)
    print(f"  for reference, len(history.to_json()) at {hi} steps: {json_sizes}")
    print()
    ratios = [median_ms("durafact", n) / median_ms("hand-written", n) for n in SIZES]
    extra = [(median_ms("durafact", n) - median_ms("hand-written", n)) / n for n in SIZES]
    print(
        f"Verdict: durafact takes {min(ratios):.2f}-{max(ratios):.2f}x the hand-written wall "
        f"time (+{min(extra):.0f}-{max(extra):.0f} ms/step); its bytes/step go "
        f"x{growth['durafact']:.2f} from {lo} to {hi} steps vs x{growth['hand-written']:.2f} "
        f"hand-written, with step inputs growing +{slopes['durafact']:.0f} vs "
        f"+{slopes['hand-written']:.0f} B per earlier step."
    )
    per_step = {n: [first(k, n).bytes / n for k in KINDS] for n in SIZES}
    held = all(ours <= theirs for ours, theirs in per_step.values())
    print(
        "History bytes/step, durafact vs hand-written: "
        + ", ".join(f"{n} steps {a:.0f} vs {b:.0f}" for n, (a, b) in per_step.items())
        + f" ({'at most' if held else 'NOT at most'} the hand-written at every length)."
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11, help="timed runs per cell (default 11)")
    args = parser.parse_args()
    check_same_settings()

    began = time.perf_counter()
    async with dev_stack(scripted_reply) as stack:
        client, queue, model = stack.client, stack.settings.task_queue, stack.model
        cells = [(kind, n) for n in SIZES for kind in KINDS]
        samples: dict[tuple[str, int], list[Sample]] = {cell: [] for cell in cells}
        async with stack.worker(workflows=[HandWritten]):
            for cell in cells * 2:  # warm up: sandbox imports, sticky caches, connections
                await run_once(client, queue, *cell)
            for rep in range(args.reps):
                # Interleave, and alternate the order so neither side always goes first.
                for cell in cells if rep % 2 == 0 else cells[::-1]:
                    samples[cell].append(await run_once(client, queue, *cell))
                model.calls.clear()
            query_ms = await time_context_query(client, queue, model)
        report(samples, args.reps, query_ms)
        print(f"(whole run {time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
