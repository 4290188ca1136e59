"""What a budget saves: a 30-turn ReAct loop with and without one.

    python -m bench.budget_bench [--turns 30] [--tokens 5000]

One run starts a real dev server, the scripted model (no delay; it counts a request's
and a reply's words as their tokens) and an in-process worker with the calculator. The
agent never answers: every turn it asks for a new calculation, so without a budget the
loop runs all its turns (`turn_limit`), and with `--tokens` it stops `over_budget`
before the first call that would start with the budget spent. Printed for both: model
calls, tokens (prompt / completion / total) as the runs recorded them, and their cost on
an illustrative price table for the scripted model (PRICES: per million tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from decimal import Decimal

from temporalio.client import WorkflowFailureError

from bench._common import dev_stack
from durafact._core.budget import Budget, Spent
from durafact._core.llm import Usage
from durafact._recipes import ReActInput, ReActResult, ReActWorkflow
from durafact.testing import Call

# Illustrative prices of the scripted model, per million tokens: input, output.
PRICES = (Decimal("2.00"), Decimal("8.00"))


def busy(call: Call) -> str:
    turn = call.activity_id.rsplit(":", 1)[-1]
    return f"Thought: compute it.\nAction: calculator\nAction Input: {turn} * 7\nPAUSE"


def cost(usage: Usage) -> Decimal:
    per_input, per_output = PRICES
    return (usage.prompt_tokens * per_input + usage.completion_tokens * per_output) / 10**6


async def main(turns: int, tokens: int) -> None:
    async with dev_stack(busy) as stack, stack.worker():
        rows = []
        for budget in (None, Budget(tokens=tokens)):
            stack.model.reset()
            stack.model.reply(busy)
            try:
                result: ReActResult = await stack.client.execute_workflow(
                    ReActWorkflow.run,
                    ReActInput(question="What is 7 times each number?", max_turns=turns,
                               budget=budget),
                    id=f"budget-bench-{uuid.uuid4().hex[:8]}",
                    task_queue=stack.settings.task_queue,
                )  # fmt: skip
                ending, usage = result.ending, result.usage
            except WorkflowFailureError as failed:
                spent = Spent.among(getattr(failed.cause, "details", ()))
                assert spent is not None, failed
                ending, usage = "over_budget", spent.usage
            label = "none" if budget is None else f"{tokens:,} tokens"
            rows.append((label, ending, len(stack.model.calls), usage))
    print(f"A {turns}-turn ReAct loop on the scripted model; cost at {PRICES[0]} per million")
    print(f"input and {PRICES[1]} per million output tokens (illustrative prices)")
    print()
    print("| budget | ending | model calls | prompt | completion | total tokens | cost |")
    print("|---|---|---|---|---|---|---|")
    for label, ending, calls, usage in rows:
        print(
            f"| {label} | {ending} | {calls} | {usage.prompt_tokens:,} | "
            f"{usage.completion_tokens:,} | {usage.total_tokens:,} | {cost(usage):.5f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=5000)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.tokens))
