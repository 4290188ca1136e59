"""The baselines: plan-and-execute and a tool loop as a person writes them on Temporal
without durafact.

They call the same `request_model` and `call_tool` activities, with the same
timeouts and retry policy as durafact's recipes, but the usual way: every model
request carries the whole text so far inline (the earlier step results; the whole
conversation). That is what makes their histories grow with the square of the
steps or turns.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from durafact._core.llm import ChatMessage, LLMRequest, LLMResponse, type_path
    from durafact._core.react import ReActAction, parse_reply
    from durafact._core.tools import ToolCall, ToolRequest, ToolResult
    from durafact._recipes.plan_execute import Goal, Plan

# The same settings as durafact's Recipe (the bench checks that they still match).
TIMEOUT = timedelta(minutes=2)
HEARTBEAT = timedelta(seconds=10)
DEADLINE = timedelta(hours=24)  # retries until then, like Recipe.model_deadline
RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)
# A system prompt per kind of call, as one writes them (and as durafact's planner did
# before 0.2.0, when its calls came to share one system prompt: bench/README.md).
PLANNER = (
    "You are a planner. Break the user's goal into at most {n} short, concrete steps "
    "that can be carried out one after another. Each step is one sentence."
)
EXECUTOR = (
    "You carry out one step of a plan towards a goal. Use the results of the earlier "
    "steps given as context. Answer with the result of this step only, briefly."
)
FINISHER = (
    "You write the final answer to a goal from the results of its plan's steps, given "
    "as context. Be concise and concrete."
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
            schedule_to_close_timeout=DEADLINE,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )


QUESTION = "Use the lookup tool to research durable execution, then answer: why does size matter?"


@workflow.defn
class HandWrittenLoop:
    """The usual way: the whole conversation inline in every model call's input."""

    @workflow.run
    async def run(self, turns: int) -> str:
        messages = [ChatMessage(role="user", content=QUESTION)]
        for turn in range(1, turns + 2):
            reply: LLMResponse = await workflow.execute_activity(
                "request_model",
                LLMRequest(messages=messages, stop=["Observation:"]),
                result_type=LLMResponse,
                start_to_close_timeout=TIMEOUT,
                schedule_to_close_timeout=DEADLINE,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=RETRY,
            )
            messages = [*messages, ChatMessage(role="assistant", content=reply.text)]
            parsed = parse_reply(reply.text)
            if not isinstance(parsed, ReActAction):
                return reply.text
            result: ToolResult = await workflow.execute_activity(
                "call_tool",
                ToolRequest(
                    call=ToolCall(id=f"c{turn}", name=parsed.tool, arguments=parsed.arguments),
                    idempotency_key=f"{workflow.info().workflow_id}:{turn}",
                ),
                result_type=ToolResult,
                start_to_close_timeout=timedelta(minutes=1),
                schedule_to_close_timeout=DEADLINE,
                retry_policy=RETRY,
            )
            messages = [
                *messages,
                ChatMessage(role="user", content=f"Observation: {result.content}"),
            ]
        return ""
