"""The local model's plans and calculator calls, counted over seeds.

    python -m bench.local_model_bench [--seeds 40]

Starts durafact/_local/local_model.py from the checkout this runs in and, for each
seed, asks it the two things a weak model is most likely to get wrong:

- a plan, as the model activity asks for one (`durafact._recipes.plan_execute.Plan` as
  `strict_json_schema`, the planner's prompt, a goal from GOALS): counted as usable
  when its content is strict JSON (no raw control characters) that validates, and
  the longest reply's tokens are printed;
- `What is 17 times 23?` with the `calculator` tool (native `tools=`, its schema as
  the worker sends it, ReAct's system prompt): counted are the seeds for which the
  model calls it (it may answer instead), and the calls whose `expression` the
  calculator evaluates.

Prints the counts, and the first few failures of each kind.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from openai import OpenAI
from pydantic import ValidationError

from durafact._activities.calculator import calculator, evaluate
from durafact._activities.llm import tool_schema
from durafact._core.llm import strict_json_schema
from durafact._local.local_model import DEFAULT_SCHEMA_MAX_TOKENS
from durafact._recipes.plan_execute import Plan, planning_messages
from durafact._recipes.react import SYSTEM
from tests.helpers import start_local_model

MODEL = "smollm2-135m-instruct"
GOALS = (
    "Plan a picnic in the park",
    "Plan a weekend trip to Kraków",
    "Write a short poem about the sea",
    "Organise a birthday party for a five-year-old",
    "Learn the basics of Python in a week",
    "Compare three laptops for a student",
    "Clean out the garage",
    "Prepare for a job interview at a bank",
    "Write a cover letter with a greeting, two paragraphs and a signature",
    "List the steps to bake sourdough bread",
)
SHOWN_FAILURES = 3


def plan_failure(llm: OpenAI, seed: int, tokens: list[int]) -> str | None:
    """Why the plan for this seed is unusable, or None; its length goes to `tokens`."""
    goal = GOALS[seed % len(GOALS)]
    completion = llm.chat.completions.create(
        model=MODEL,
        messages=[{"role": m.role, "content": m.content} for m in planning_messages(goal, 3)],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "Plan", "schema": strict_json_schema(Plan), "strict": True},
        },
        seed=seed,
    )
    content = completion.choices[0].message.content or ""
    tokens.append(completion.usage.completion_tokens)
    try:
        Plan.model_validate(json.loads(content))
    except (ValueError, ValidationError) as exc:
        reason = completion.choices[0].finish_reason
        return f"seed {seed} ({reason}): {type(exc).__name__}: {str(exc)[:80]!r}"
    return None


def calculator_call(llm: OpenAI, seed: int) -> str | None:
    """The expression of the calculator call for this seed, None when it answered instead."""
    completion = llm.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is 17 times 23?"},
        ],
        tools=[tool_schema(calculator.spec)],
        seed=seed,
    )
    calls = completion.choices[0].message.tool_calls
    return json.loads(calls[0].function.arguments).get("expression", "") if calls else None


def expression_failure(seed: int, expression: str) -> str | None:
    try:
        evaluate(expression)
    except ValueError as exc:
        return f"seed {seed}: {expression!r:.60}: {str(exc)[:60]}"
    return None


def count(name: str, failures: list[str | None]) -> None:
    found = [f for f in failures if f is not None]
    print(f"{name}: {len(failures) - len(found)} of {len(failures)} usable")
    for failure in found[:SHOWN_FAILURES]:
        print(f"  {failure}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args(argv)
    print(f"calculator parameters: {json.dumps(calculator.spec.parameters)}")
    with tempfile.TemporaryDirectory() as scratch:
        proc, url = start_local_model(Path(scratch) / "server.log")
        try:
            llm = OpenAI(base_url=url, api_key="local", max_retries=0, timeout=300)
            seeds = range(1, args.seeds + 1)
            tokens: list[int] = []
            count("plans", [plan_failure(llm, seed, tokens) for seed in seeds])
            print(f"plans' length: at most {max(tokens)} tokens of {DEFAULT_SCHEMA_MAX_TOKENS}")
            calls = {seed: calculator_call(llm, seed) for seed in seeds}
            print(f"calculator: called for {sum(e is not None for e in calls.values())} seeds")
            made = [(seed, e) for seed, e in calls.items() if e is not None]
            count("calculator calls", [expression_failure(seed, e) for seed, e in made])
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
