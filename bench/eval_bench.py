"""What `durafact eval` costs against a full rerun: recorded plans, one prompt changed.

    python -m bench.eval_bench [--runs 10] [--days 5]

Records `--runs` trips of the root app's trip planner (workflows/trips.py, as
tests/evaluation/trips_v1.py registers it: one planning call for the cities, then for
each day the app's `forecast` activity and one model call, which sees the days before
it) on a real dev server with the scripted model, then evaluates them in this process
(durafact/_service/evaluation.py, its own dev server included): once with nothing
changed, once against the second version, whose planner prompt changed
(tests/evaluation/trips_v2.py). The scripted model answers the changed prompt with the
same cities but one, the (i mod days)-th for trip i: the planning call is sent, and so
is every day from the changed city on (each sees the days before it); the days before
it are the same requests as recorded. The new city's forecast is not in the recording,
so the activities run live (`--live-tools`). Printed: model calls answered from the
recording and sent, the tokens and cost of the sent ones, and what re-running every
call would have cost, on PRICES.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from decimal import Decimal

from bench._common import dev_stack
from durafact._core.llm import Usage
from durafact._core.prices import ModelPrice, Prices
from durafact._runtime.worker import build_worker
from durafact._service.evaluation import EvalOptions, evaluate
from durafact.testing import Call
from workflows.trips import Trip

V1 = "tests.evaluation.trips_v1"
V2 = "tests.evaluation.trips_v2"
# Illustrative prices of the scripted model, per million tokens (gpt-4o's list prices).
PRICES = Prices(
    currency="USD", models={"scripted": ModelPrice(input=Decimal("2.50"), output=Decimal(10))}
)
CITIES = ["Gdańsk", "Toruń", "Poznań", "Wrocław", "Kraków", "Lublin", "Łódź", "Olsztyn"]
# A day's plan: about as long as a model's paragraph (60 words).
DAY = "Morning: the old town on foot, a museum of the city's history. " * 5


def trip_of(call: Call) -> int:
    return int(call.last_user.rsplit("#", 1)[-1]) if "#" in call.last_user else 0


def reply(days: int):  # noqa: ANN201 - the scripted model's reply function
    def answer(call: Call) -> str | dict:
        if call.schema_name == "Cities":
            i = trip_of(call)
            cities = CITIES[:days]
            if "worth" in call.last_user:  # the changed prompt: one city differs
                cities = [*cities[: i % days], CITIES[-1], *cities[i % days + 1 :]]
            return {"cities": cities}
        return f"{call.last_user} {DAY}"

    return answer


async def main(runs: int, days: int) -> None:
    async with dev_stack(reply(days)) as stack:
        ids = []
        async with build_worker(stack.client, stack.settings, recipes=[V1]):
            for i in range(runs):
                ids.append(f"trip-{uuid.uuid4().hex[:8]}")
                trip = Trip(text=f"A week by train #{i}", days=days)
                await stack.client.execute_workflow(
                    "TripPlanner", trip, id=ids[-1], task_queue=stack.settings.task_queue
                )
        before = len(stack.model.calls)
        started = time.monotonic()
        same = stack.model.plugin(recipes=[V1], prices=PRICES)
        unchanged = await evaluate(stack.client, same, ids, EvalOptions())
        took_unchanged = time.monotonic() - started
        plugin = stack.model.plugin(recipes=[V2], prices=PRICES)
        started = time.monotonic()
        report = await evaluate(stack.client, plugin, ids, EvalOptions(live_tools=True))
        took = time.monotonic() - started
        sent_here = len(stack.model.calls) - before
    replayed, sent = report.usage("recording"), report.usage("model")
    full = replayed + sent
    calls = report.count("recording") + report.count("model")
    print(f"{runs} recorded plans of {days} days: {calls} model calls")
    print(
        f"nothing changed: {unchanged.count('recording')} answered from the recording, "
        f"{unchanged.count('model')} sent; outputs the same: "
        f"{sum(run.identical for run in unchanged.runs)} of {runs}; {took_unchanged:.1f} s"
    )
    print(
        f"the planner's prompt changed: {report.count('recording')} answered from the "
        f"recording, {report.count('model')} sent (the scripted model saw {sent_here}); "
        f"outputs changed: {sum(not run.identical for run in report.runs)} of {runs}; "
        f"{took:.1f} s"
    )
    print(f"  sent: {tokens(sent)}; cost {sent.cost:.5f} {sent.currency}")
    print(f"  a full rerun: {tokens(full)}; cost {full.cost:.5f} {full.currency}")


def tokens(usage: Usage) -> str:
    spent = f"{usage.prompt_tokens:,} in, {usage.completion_tokens:,} out"
    return f"{usage.total_tokens:,} tokens ({spent})"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--days", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.days))
