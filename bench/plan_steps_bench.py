"""How often the local model's plans name things to do, over seeds.

    python -m bench.plan_steps_bench [--seeds 20] [--goal TEXT]

Asks the local model (durafact/_local/local_model.py, SmolLM2-135M) for a plan as the
ready planner does (its messages, `Plan` as `strict_json_schema`), one seed at a time,
and counts the plans whose every step is a phrase: three words or more, and not a piece
of what the model was shown (the goal, the planner's request, its worked examples: a
weak model lifts "plan", "to", "kraków" from them). Prints the count and the plans that are not.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from openai import OpenAI

from durafact._core.llm import strict_json_schema
from durafact._recipes.plan_execute import Plan, planning_messages
from tests.helpers import start_local_model

MODEL = "smollm2-135m-instruct"
DEMO_GOAL = "Plan a weekend trip to Kraków"  # what `make demo` asks


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def is_phrase(step: str, lifted_from: list[str]) -> bool:
    """Three words or more, and not a run of words found in the goal or the request."""
    found = words(step)
    if len(found) < 3:
        return False
    return not any(" ".join(found) in " ".join(words(text)) for text in lifted_from)


def plan(llm: OpenAI, goal: str, seed: int) -> list[str]:
    messages = planning_messages(goal, 3)
    completion = llm.chat.completions.create(
        model=MODEL,
        messages=[{"role": m.role, "content": m.content} for m in messages],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "Plan", "schema": strict_json_schema(Plan), "strict": True},
        },
        seed=seed,
    )
    return Plan.model_validate(json.loads(completion.choices[0].message.content or "")).steps[:3]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--goal", default=DEMO_GOAL)
    args = parser.parse_args(argv)
    # What the model was shown: the goal, the request and the worked examples.
    shown = [m.content for m in planning_messages(args.goal, 3)]
    with tempfile.TemporaryDirectory() as scratch:
        proc, url = start_local_model(Path(scratch) / "server.log")
        try:
            llm = OpenAI(base_url=url, api_key="local", max_retries=0, timeout=300)
            plans = {seed: plan(llm, args.goal, seed) for seed in range(1, args.seeds + 1)}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    good = {s: p for s, p in plans.items() if all(is_phrase(x, shown) for x in p)}
    print(f"goal: {args.goal}")
    print(f"plans whose every step is a phrase: {len(good)} of {len(plans)}")
    for seed, steps in plans.items():
        mark = "ok " if seed in good else "no "
        print(f"  {mark} seed {seed}: {' | '.join(steps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
