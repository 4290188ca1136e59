"""ReflectionWorkflow: history events and bytes per round, and whether anything grows.

    python -m bench.reflection_bench

One run starts a real dev server, the scripted model (no delay) and an in-process
worker (bench/_common.py), then runs ReflectionWorkflow with `max_rounds=2` and
`max_rounds=8`. The critique scores low until the last allowed round
(`max_rounds + 1`), which accepts, so the runs make 3 and 9 critiques and 2 and 8
rewrites. Drafts and rewrites are 500-1500 characters, feedback 200-500.

Per run it prints events and bytes for the whole history and per round, the payload
bytes of every critique and rewrite activity's input, and the bytes of the texts
those inputs name by artifact id (the draft, and the feedback for a rewrite: what
an inline design would store in them again). Then the growth checks of DESIGN.md
section 6: the last round's inputs against round 1's, and bytes per round from 2 to
8 rewrites, also without the model's own texts and the event timestamps (`own`), so
that what the model happens to write does not hide what the recipe adds. Bytes are
protobuf `HistoryEvent.ByteSize()`, as in the other benches.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from bench._common import dev_stack
from bench.plan_execute_bench import SENTENCES
from durafact._recipes import ReflectionInput, ReflectionWorkflow
from durafact.testing import Call

TOPIC = "A long weekend in Kraków for two people on a mid-range budget"
MAX_ROUNDS = (2, 8)  # rewrites allowed; the runs make max_rounds + 1 critiques
ACCEPT_AT = 0.8
FEEDBACK = [
    "The budget paragraph gives a total but no per-day figure; add one for each day.",
    "Saturday is overloaded: the salt mine and Kazimierz do not both fit before dinner.",
    "Say which hotel was booked and why, instead of listing all three again.",
    "The airport transfer is mentioned twice with different prices; keep one.",
    "Cut the history of the trumpet call; it does not help anyone plan the trip.",
    "Monday needs a fallback for rain, since most museums are closed that day.",
    "Give opening hours for Wawel Castle, not only for the Cloth Hall market.",
    "The ending trails off; close with the three things to book first.",
]


def _prose(seed: bytes, pool: list[str], lo: int, hi: int) -> str:
    """lo-hi characters of sentences from `pool`, chosen and ordered by `seed`."""
    target = lo + int.from_bytes(seed[:2], "big") % (hi - lo)
    text, k = "", 0
    while len(text) < target:
        text += pool[(seed[2 + k % 30] + k) % len(pool)] + " "
        k += 1
    return text[:hi].rstrip()


def critic(last_round: int) -> Callable[[Call], str | dict]:
    """The scripted model for one run: critiques score low until `last_round`, which
    accepts. Texts depend on the activity id only, so round r reads the same in every run."""

    def reply(call: Call) -> str | dict:
        seed = hashlib.sha256(call.activity_id.encode()).digest()
        if call.schema_name == "Critique":
            round_ = int(call.activity_id.rsplit(":", 1)[-1])
            score = 0.9 if round_ >= last_round else round(min(0.3 + 0.05 * round_, 0.7), 2)
            return {"score": score, "feedback": _prose(seed, FEEDBACK, 200, 500)}
        return _prose(seed, SENTENCES, 500, 1500)  # the draft, or a rewrite

    return reply


@dataclass
class Round:
    """Round r: from the scheduling of critique r to that of critique r + 1, so its
    critique, its rewrite and the workflow tasks after each. Round 0 is the draft."""

    events: int = 0
    bytes: int = 0
    critique_in: int = 0  # payload bytes of the critique activity's input
    rewrite_in: int | None = None  # ... of the rewrite's; None in the last round
    critique_names: int = 0  # bytes of the texts the critique's input names by id
    rewrite_names: int = 0  # ... the rewrite's: the draft and the feedback
    wrote: int = 0  # payload bytes of this round's activity results (the model's texts)
    own: int = 0  # bytes minus `wrote` and minus the events' timestamps: the machinery


@dataclass
class Sample:
    max_rounds: int
    wall_ms: float
    events: int
    bytes: int
    start_bytes: int  # WorkflowExecutionStarted: the input
    result_bytes: int  # WorkflowExecutionCompleted: final text, scores, references, usage
    rounds: dict[int, Round] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Critique rounds."""
        return max(self.rounds)

    def full(self) -> list[Round]:
        """The rounds with a rewrite: every round but the draft and the last."""
        return [self.rounds[r] for r in range(1, self.n)]


def measure(max_rounds: int, history: WorkflowHistory, wall_ms: float) -> Sample:
    s = Sample(max_rounds, wall_ms, len(history.events), 0, 0, 0)
    current = 0
    kinds: dict[int, str] = {}  # scheduled event id -> "draft" | "review" | "rewrite"
    draft, feedback = 0, 0  # bytes of the current draft's text and the last feedback
    for event in history.events:
        size = event.ByteSize()
        s.bytes += size
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            s.start_bytes = size
            continue
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            s.result_bytes = size
            continue
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            kind = attributes.activity_id.removeprefix("llm:").split(":", 1)[0]
            kinds[event.event_id] = kind
            size_in = sum(len(p.data) for p in attributes.input.payloads)
            if kind == "review":
                current = int(attributes.activity_id.rsplit(":", 1)[-1])
                s.rounds.setdefault(current, Round())
                s.rounds[current].critique_in = size_in
                s.rounds[current].critique_names = draft
            elif kind == "rewrite":
                s.rounds[current].rewrite_in = size_in
                s.rounds[current].rewrite_names = draft + feedback
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            data = attributes.result.payloads[0].data
            s.rounds.setdefault(current, Round()).wrote += len(data)
            response = json.loads(data)
            if kinds[attributes.scheduled_event_id] == "review":
                feedback = len(response["data"]["feedback"].encode())
            else:
                draft = len(response["text"].encode())
        round_ = s.rounds.setdefault(current, Round())
        round_.events += 1
        round_.bytes += size
        untimed = HistoryEvent()
        untimed.CopyFrom(event)
        untimed.ClearField("event_time")
        round_.own += untimed.ByteSize()
    for round_ in s.rounds.values():
        round_.own -= round_.wrote
    return s


async def run_once(client: Client, queue: str, max_rounds: int) -> Sample:
    handle = await client.start_workflow(
        ReflectionWorkflow.run,
        ReflectionInput(topic=TOPIC, accept_at=ACCEPT_AT, max_rounds=max_rounds),
        id=f"bench-reflect-{max_rounds}-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    began = time.perf_counter()
    result = await handle.result()
    wall_ms = (time.perf_counter() - began) * 1000
    if (result.ending, result.rounds) != ("accepted", max_rounds + 1):
        raise SystemExit(
            f"expected acceptance in round {max_rounds + 1}, got {result.ending} "
            f"in round {result.rounds}"
        )
    return measure(max_rounds, await handle.fetch_history(), wall_ms)


def report(samples: dict[int, Sample]) -> None:
    print()
    print(
        f"ReflectionWorkflow, accept_at={ACCEPT_AT}; the critique scores low until the last "
        "allowed round (max_rounds + 1), which accepts. Drafts and rewrites 500-1500 chars, "
        "feedback 200-500. Bytes: protobuf HistoryEvent.ByteSize(); in/names/wrote: payload "
        "bytes (JSON) of an activity's input, of the texts the input names by artifact id, "
        "and of the round's activity results; own: bytes - wrote - event timestamps."
    )
    for s in samples.values():
        core = s.bytes - s.start_bytes - s.result_bytes
        print()
        print(
            f"max_rounds={s.max_rounds}: {s.n} critique rounds, {s.events} events "
            f"({s.events / s.n:.1f}/round), {s.bytes} B of history ({s.bytes / s.n:.0f} "
            f"B/round; {core / s.n:.0f} excl. start and result) in {s.wall_ms:.0f} ms; "
            f"start {s.start_bytes} B, result (final text, scores, references) {s.result_bytes} B"
        )
        print(
            f"  {'round':<7} {'events':>6} {'bytes':>6} {'critique in':>11} {'names':>6}"
            f" {'rewrite in':>10} {'names':>6} {'wrote':>6} {'own':>5}"
        )
        for r, round_ in sorted(s.rounds.items()):
            label = "0 draft" if r == 0 else f"{r} last" if r == s.n else str(r)
            crit = f"{round_.critique_in:>11} {round_.critique_names:>6}" if r else " " * 18
            rewr = (
                f"{round_.rewrite_in:>10} {round_.rewrite_names:>6}"
                if round_.rewrite_in is not None
                else " " * 17
            )
            print(
                f"  {label:<7} {round_.events:>6} {round_.bytes:>6} {crit} {rewr} "
                f"{round_.wrote:>6} {round_.own:>5}"
            )
    print()

    print("Round N vs round 1 (payload bytes of the activity inputs):")
    deltas: list[int] = []
    for s in samples.values():
        first, last, last_rewrite = s.rounds[1], s.rounds[s.n], s.rounds[s.n - 1]
        dc = last.critique_in - first.critique_in
        dr = last_rewrite.rewrite_in - first.rewrite_in
        deltas += [dc, dr]
        print(
            f"  max_rounds={s.max_rounds}: critique round {s.n} {last.critique_in} B vs round 1 "
            f"{first.critique_in} B ({dc:+d}), naming {last.critique_names} vs "
            f"{first.critique_names} B of text; rewrite round {s.n - 1} "
            f"{last_rewrite.rewrite_in} B vs round 1 {first.rewrite_in} B ({dr:+d}), naming "
            f"{last_rewrite.rewrite_names} vs {first.rewrite_names} B"
        )
    lo, hi = (samples[m] for m in MAX_ROUNDS)
    print(f"From {lo.max_rounds} to {hi.max_rounds} rewrites ({lo.n} -> {hi.n} critique rounds):")
    ratios: dict[str, tuple[float, float]] = {}
    for label, f in (
        ("B/round, whole history", lambda s: s.bytes / s.n),
        ("result B/round", lambda s: s.result_bytes / s.n),
        ("B per full round", lambda s: sum(r.bytes for r in s.full()) / len(s.full())),
        ("own B per full round", lambda s: sum(r.own for r in s.full()) / len(s.full())),
    ):
        a, b = f(lo), f(hi)
        ratios[label] = (a, b)
        print(f"  {label:<27} {a:>6.0f} -> {b:>6.0f} (x{b / a:.2f})")
    per_extra = (hi.bytes - lo.bytes) / (hi.n - lo.n)
    print(f"  each extra round adds {per_extra:.0f} B of history (its critique, rewrite, review)")
    own = [r.own for r in hi.full()]
    drift = own[-1] - own[0]
    # Counters in the events (event ids, history size) widen by a byte at varint
    # boundaries (128, 16384): logarithmic, and at most a byte per event.
    slack = hi.rounds[1].events
    print(
        f"  own bytes of a full round in the {hi.max_rounds}-rewrite run: {min(own)}-{max(own)} "
        f"B; round {hi.n - 1} vs round 1 {drift:+d} B (up to {slack}: varint counters widening)"
    )
    print()

    grows = []
    if any(d > 0 for d in deltas):
        grows.append(f"activity inputs grow with the round ({max(deltas):+d} B by the last)")
    if drift > slack:
        grows.append(f"a full round's own bytes grow ({drift:+d} B from round 1 to {hi.n - 1})")
    for label in ("own B per full round", "B/round, whole history"):
        a, b = ratios[label]
        if b > a * 1.01:
            grows.append(f"{label} x{b / a:.2f} from {lo.n} to {hi.n} rounds")
    (a, b), (oa, ob) = ratios["B/round, whole history"], ratios["own B per full round"]
    figures = (
        f"last-round critique/rewrite inputs vs round 1 {', '.join(f'{d:+d}' for d in deltas)} "
        f"B; history {a:.0f} -> {b:.0f} B/round (x{b / a:.2f}), a full round's own bytes "
        f"{oa:.0f} -> {ob:.0f} (x{ob / oa:.2f}) from {lo.n} to {hi.n} rounds"
    )
    if grows:
        print(f"Verdict: GROWS: {'; '.join(grows)} ({figures}).")
    else:
        print(
            f"Verdict: nothing grows with the round number: {figures}; draft and feedback "
            "travel as artifact ids, so history is linear in the rounds."
        )


async def main() -> None:
    began = time.perf_counter()
    async with dev_stack(critic(MAX_ROUNDS[0] + 1)) as stack:
        client, queue, model = stack.client, stack.settings.task_queue, stack.model
        async with stack.worker():
            await run_once(client, queue, MAX_ROUNDS[0])  # warm up: sandbox imports, caches
            samples = {}
            for max_rounds in MAX_ROUNDS:
                model.reply(critic(max_rounds + 1))
                samples[max_rounds] = await run_once(client, queue, max_rounds)
    report(samples)
    print(f"(whole run {time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
