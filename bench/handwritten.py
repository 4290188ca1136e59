"""The baseline: plan-and-execute as a person writes it on Temporal without durafact.

It calls the same `request_model` activity, with the same prompts, timeouts and
retry policy as `PlanExecuteWorkflow`, but the usual way: every step's request
carries the full text of all earlier step results inline, and so does the final
request. That is what makes its history grow with the square of the steps.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from durafact.llm import ChatMessage, LLMRequest, LLMResponse, type_path
    from workflows.plan_execute import EXECUTOR, FINISHER, PLANNER, Goal, Plan

# The same settings as durafact's Recipe (the bench checks that they still match).
TIMEOUT = timedelta(minutes=2)
HEARTBEAT = timedelta(seconds=10)
RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=6,
)


@workflow.defn
class HandWritten:
    @workflow.run
    async def run(self, goal: Goal) -> str:
        plan = await self._ask(
            [
                ChatMessage(role="system", content=PLANNER.format(n=goal.max_steps)),
                ChatMessage(role="user", content=f"Goal: {goal.text}"),
            ],
            output_type=type_path(Plan),
        )
        steps = Plan.model_validate(plan.data).steps[: goal.max_steps]

        results: list[str] = []
        for i, step in enumerate(steps):
            answer = await self._ask(
                [
                    ChatMessage(role="system", content=EXECUTOR),
                    *self._context(results),
                    ChatMessage(role="user", content=f"Goal: {goal.text}\nStep {i + 1}: {step}"),
                ]
            )
            results.append(answer.text)

        final = await self._ask(
            [
                ChatMessage(role="system", content=FINISHER),
                *self._context(results),
                ChatMessage(role="user", content=f"Goal: {goal.text}\nWrite the final answer."),
            ]
        )
        return final.text

    @staticmethod
    def _context(results: list[str]) -> list[ChatMessage]:
        if not results:
            return []
        parts = [f"[step {i + 1}] {text}" for i, text in enumerate(results)]
        return [ChatMessage(role="user", content="Context:\n\n" + "\n\n".join(parts))]

    async def _ask(
        self, messages: list[ChatMessage], output_type: str | None = None
    ) -> LLMResponse:
        return await workflow.execute_activity(
            "request_model",
            LLMRequest(messages=messages, output_type=output_type),
            result_type=LLMResponse,
            start_to_close_timeout=TIMEOUT,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )
