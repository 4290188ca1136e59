"""PlanReAct: plan once, then carry out each step with a ReAct agent, then finish.

The seed's recommendation for tool-using work: a planner that sees the whole goal,
and for each step an agent that may call tools. It is a `PlanExecute` (the order,
the ids, the `supported_by` links and the statuses are that recipe's), whose
`execute_step` runs `ReActWorkflow` as a child workflow:

    PlanReActWorkflow.run(PlanReActInput(text="...", max_steps=3,
                                         tools=["calculator"], protocol="text", max_turns=6))

- `plan`: one structured model call (`Plan`), as in `PlanExecuteWorkflow`, cut to
  `max_steps`. The input is both recipes' settings: `PlanExecuteSettings` for the
  plan, `ReActSettings` for every step's agent.
- `execute_step`: one child `ReActWorkflow` per step, id
  `{parent workflow id}/step:{goal}:{i}` (derived from the step, so a replay or a
  retried task never starts a second one), summary "run agent: step N ...". Its
  question is the step, with the goal and the earlier steps' findings in words (a
  child cannot read its parent's ledger); its tools, MCP servers and every
  `ReActSettings` field (protocol, max_turns, observation policy, loop guard,
  approval policy, tool policy) are the parent input's. A tool question is asked in
  the child: answer the child workflow. Each agent gets the parent input's remembered
  decisions and those of the agents before it (`ReActResult.remembered`, `call` scope:
  an answer remembered for one call in step 1 decides the same call in step 3), all
  kept in the parent's ledger too; a `tool` one stays in its child. The child is
  started with `ctx.run_child`: it draws from what is left of the parent's budget,
  and its usage (from its result, or from its failure) adds to the parent's; a child
  its budget stopped stops the parent (`over_budget`).
- The step result (`AgentStepResult`) records the child's answer, its workflow id,
  its ending, its turns and its tool calls. A child that ends `turn_limit` or
  `looping` is not a failure: its result says that the agent stopped without an
  answer, and why, and the plan goes on.
- `finish`: one model call that writes the final answer from the results, given by
  reference (`ctx.refs`), so no result text is stored again in its input.

Provenance. The child's answer is copied into the parent's ledger as
`child:{step}:answer:{run}` (`ReActAnswer`) and each of its tool calls as
`child:{step}:tool:{run}:{turn}:{k}` (`ToolCallRecord`); the answer is linked
`based_on` every tool call, and the step result `supported_by` the answer (a step
without an answer: `based_on` the calls directly). So `ledger.provenance(final)`
walks final -> results -> the child's answer -> the child's tool calls. A
result's links are made as soon as it is stored (when the next step starts, or
at `finish`). The full observations stay in the child's ledger (query the child
by its id).

Statuses are PlanExecute's: `planning`, `executing:{i}/{n}`, `finishing`,
`completed`; a child's own status shows on the child.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator
from temporalio import workflow

from durafact._core.ids import child_artifact_id, child_workflow_id, result_id, step_id
from durafact._core.react import ToolCallRecord
from durafact._core.text import not_blank
from durafact._core.tool_policy import RememberedDecision
from durafact._core.tools import checked_tool_names
from durafact._recipes.plan_execute import (
    FinalAnswer,
    PlanExecute,
    PlanExecuteResult,
    PlanExecuteSettings,
    PlanStep,
    final_answer,
    plan_steps,
    show_plan,
)
from durafact._recipes.react import (
    Ending,
    ReActAnswer,
    ReActInput,
    ReActResult,
    ReActSettings,
    ReActWorkflow,
)
from durafact._recipes.recipe import RecipeContext, quote
from durafact._recipes.tool_gate import hold_remembered, remembered


class PlanReActInput(PlanExecuteSettings, ReActSettings):
    """The goal, the plan's limits, and what each step's agent may use and how it behaves."""

    text: Annotated[str, not_blank("goal")] = Field(description="What the plan should achieve.")
    tools: list[str] = Field(
        default_factory=lambda: ["calculator"],
        description="Names of the worker's tools every step's agent may use.",
    )
    mcp_servers: list[str] = Field(
        default_factory=list, description="MCP servers (by name) whose every tool it may use."
    )

    @field_validator("tools", "mcp_servers")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        return checked_tool_names(names)


class AgentStepResult(BaseModel):
    """What one step's agent found, and how its child workflow ended."""

    goal: str = ""
    index: int = 0
    text: str = Field(description="The agent's answer, or why there is none.")
    child_id: str = Field(description="The child ReActWorkflow's workflow id.")
    ending: Ending
    turns: int
    answer_id: str | None = Field(
        default=None, description="The parent's copy of the child's answer, if it answered."
    )
    tool_calls: list[ToolCallRecord] = Field(
        default_factory=list, description="The child's tool calls, with the child's ids."
    )


class PlanReActResult(PlanExecuteResult):
    """The answer, and references to the steps, the results (`AgentStepResult`) and
    the final answer; the ledger also holds the children's answers and tool calls
    (read it with the `artifacts` query, as for `PlanExecuteResult`). `usage` counts
    the parent's model calls and every child's."""


STOPPED = {
    "turn_limit": "No answer: the agent used all its {turns} turns without finding one.",
    "looping": "No answer: the agent repeated the same failing tool call and was stopped "
    "after {turns} turns.",
}


@workflow.defn
class PlanReActWorkflow(PlanExecute[PlanReActInput, PlanStep, AgentStepResult, FinalAnswer]):
    """Goal and tools in; a plan whose every step a ReAct child carries out; a final answer."""

    recipe_name = "plan_react"
    step_agents = True
    # Each step's result rests on a child workflow's artifacts, which a fork would have
    # to copy too: not yet.
    forks = False
    show_result = staticmethod(show_plan)

    @workflow.init
    def __init__(self, goal: PlanReActInput) -> None:
        super().__init__()
        self.goal = goal

    @workflow.run
    async def run(self, goal: PlanReActInput) -> PlanReActResult:
        answer = await self.execute(goal)
        return PlanReActResult.of(goal.text, answer, self.usage, self.ledger)

    async def plan(self, ctx: RecipeContext, goal: PlanReActInput) -> list[PlanStep]:
        return await plan_steps(ctx, goal.text, self.settings(goal).max_steps)

    async def execute_step(
        self, ctx: RecipeContext, step: PlanStep, history: list[AgentStepResult]
    ) -> AgentStepResult:
        self._link_results(ctx, history)
        sid = step_id(self.goal.text, step.index)
        child_id = child_workflow_id(workflow.info().workflow_id, ctx.temporal_id(sid))
        hold_remembered(ctx.ledger, self.goal.tool_policy.remembered)
        child = await ctx.run_child(
            ReActWorkflow.run,
            self._child_input(step, history, remembered(ctx.ledger)),
            id=child_id,
            result_type=ReActResult,
            summary=f"run agent: step {step.index + 1} {quote(step.description)}",
        )
        for call in child.tool_calls:
            ctx.ledger.create(child_artifact_id(sid, call.id), call)
        hold_remembered(ctx.ledger, child.remembered)
        answer_id = None
        if child.answer is not None and child.answer_id is not None:
            answer_id = child_artifact_id(sid, child.answer_id)
            ctx.ledger.create(answer_id, ReActAnswer(question=child.question, text=child.answer))
            for call in child.tool_calls:
                ctx.ledger.link(answer_id, "based_on", child_artifact_id(sid, call.id))
            text = child.answer
        else:
            text = STOPPED[child.ending].format(turns=child.turns)
        ctx.announce(
            f"step {step.index + 1}: agent {child_id} ended {child.ending} after {child.turns} "
            f"turns, {len(child.tool_calls)} tool calls",
            kind=child.ending,
        )
        return AgentStepResult(
            text=text,
            child_id=child_id,
            ending=child.ending,
            turns=child.turns,
            answer_id=answer_id,
            tool_calls=child.tool_calls,
        )

    async def finish(
        self, ctx: RecipeContext, goal: PlanReActInput, results: list[AgentStepResult]
    ) -> FinalAnswer:
        self._link_results(ctx, results)
        return FinalAnswer(goal=goal.text, text=await final_answer(ctx, goal.text, results))

    # --- the parts --------------------------------------------------------------------

    def _child_input(
        self,
        step: PlanStep,
        history: list[AgentStepResult],
        decisions: list[RememberedDecision],
    ) -> ReActInput:
        """The step as the agent's question, the goal and earlier findings in words; the
        tool policy with every decision remembered so far (`decisions`)."""
        question = (
            f"{step.description}\n\n(This is step {step.index + 1} of a plan towards the "
            f"goal: {self.goal.text})"
        )
        if history:
            found = "\n".join(f"{r.index + 1}. {r.text}" for r in history)
            question += f"\nWhat the earlier steps found:\n{found}"
        settings = {name: getattr(self.goal, name) for name in ReActSettings.model_fields}
        settings["tool_policy"] = self.goal.tool_policy.model_copy(update={"remembered": decisions})
        return ReActInput(
            question=question,
            tools=self.goal.tools,
            mcp_servers=self.goal.mcp_servers,
            **settings,
        )

    def _link_results(self, ctx: RecipeContext, results: list[AgentStepResult]) -> None:
        """Each stored result -> the child's answer (or its calls). Links are kept once."""
        for result in results:
            sid = step_id(self.goal.text, result.index)
            if result.answer_id is not None:
                ctx.ledger.link(result_id(sid), "supported_by", result.answer_id)
            else:
                for call in result.tool_calls:
                    ctx.ledger.link(result_id(sid), "based_on", child_artifact_id(sid, call.id))
