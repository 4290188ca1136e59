"""PlanExecute: plan once, execute the steps strictly in order, then finish.

The recipe owns the order, the artifact ids, the links and the status; you write
only the three hooks that need judgement, and a three-line `run`:

    @workflow.defn
    class TripPlanner(PlanExecute[Trip, Day, DayPlan, Itinerary]):
        @workflow.run
        async def run(self, trip: Trip) -> Itinerary:
            return await self.execute(trip)

        async def plan(self, ctx, trip): ...                  # -> list[Day]
        async def execute_step(self, ctx, day, history): ...  # -> DayPlan
        async def finish(self, ctx, trip, results): ...       # -> Itinerary

Limits: `settings(goal)`, a `PlanExecuteSettings`: `max_steps`, the longest plan
(default 3, at most 100: durafact/_core/plan_limits.py), for `plan` to keep to (the ready
planner does). By default the input when it subclasses `PlanExecuteSettings` (as `Goal`
does), else the defaults; override `settings` to set them otherwise.

Guarantees: `plan` runs once; the steps run strictly one at a time, each given
the results of all earlier steps in order (`history`); `finish` runs when every
step has a result. A plan with no steps fails the run (`EmptyPlan`). Give the
model earlier results as `context=ctx.refs(history)`: one constant-size
reference, read by the model activity from the ledger, so history grows
linearly with the steps instead of storing every result again in every prompt.

Artifacts: `goal:{goal}`, `step:{goal}:{i}` (linked `from_goal`),
`result:step:{goal}:{i}` (linked `executes` its step) and `final:{goal}` (linked
`supported_by` every result). A step or result model with `goal` and `index`
fields gets them filled in. The model activities carry the same ids with an
`llm:` prefix (`llm:plan:{goal}`, `llm:step:{goal}:{i}`, `llm:final:{goal}`), so
the Web UI timeline reads like the ledger.

Status: `planning`, `executing:{i}/{n}`, `finishing`, `completed`; `failed` when a
hook raises. `DurafactStatus` holds the phase: `executing` for every step.

The ready planner's calls share their prefix: each sends the one system prompt (the
goal in it), then the results so far, one message each, then its own request ("Plan:
at most N steps.", "Step K: ...", "Write the final answer."). So every call's messages
begin with the previous call's, all but the last, byte for byte: an endpoint's prompt
cache serves that prefix instead of reading it again (`plan_messages`).
"""

from __future__ import annotations

import itertools
from typing import Annotated, Generic, Self, TypeVar, cast

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from durafact._core.forks import Editable, ForkRules, text_field
from durafact._core.ids import final_id, goal_id, plan_scope, result_id, step_id, text_key
from durafact._core.ledger import ArtifactRef, Ledger
from durafact._core.llm import ChatMessage, ContextRef, Usage
from durafact._core.plan_limits import DEFAULT_STEPS, MAX_STEPS
from durafact._core.ready_commands import PLAN
from durafact._core.text import indent, not_blank
from durafact._recipes.recipe import (
    Recipe,
    RecipeContext,
    RecipeSettings,
    quote,
    stamp,
    subject_text,
    type_arguments,
)

G = TypeVar("G", bound=BaseModel)
S = TypeVar("S", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
F = TypeVar("F", bound=BaseModel)


class PlanExecuteSettings(RecipeSettings):
    """The limits of a PlanExecute run."""

    max_steps: int = Field(
        default=DEFAULT_STEPS,
        ge=1,
        le=MAX_STEPS,
        description=f"Upper bound on plan length, 1-{MAX_STEPS}.",
    )


class PlanExecute(Recipe[G, F], Generic[G, S, R, F]):
    """Plan -> execute each step with the results before it -> finish."""

    recipe_name = "plan_execute"
    settings_model = PlanExecuteSettings
    forks = True

    def settings(self, goal: G) -> PlanExecuteSettings:
        """This run's limits (see `Recipe.settings`)."""
        return cast(PlanExecuteSettings, super().settings(goal))

    async def plan(self, ctx: RecipeContext, goal: G) -> list[S]:
        raise NotImplementedError

    async def execute_step(self, ctx: RecipeContext, step: S, history: list[R]) -> R:
        raise NotImplementedError

    async def finish(self, ctx: RecipeContext, goal: G, results: list[R]) -> F:
        raise NotImplementedError

    async def lifecycle(self, ctx: RecipeContext, goal: G) -> F:
        ledger = ctx.ledger
        text = subject_text(goal, "text")
        key = text_key(text)
        ledger.create(goal_id(text), goal)
        ctx.set_status("planning", f"planning: {key}")
        # A fork takes the stages it keeps (the plan, the first results) from the run it
        # was forked from, instead of running them (see `fork_rules`).
        _, step_type, result_type, _ = type_arguments(type(self), PlanExecute) or (None,) * 4
        kept_steps = ctx.kept(plan_scope(text), [step_type] if step_type else [])
        if kept_steps is None:
            steps = await self._planned(ctx, goal, text, key)
        else:
            steps = [artifact.data for artifact in kept_steps]
        ctx.announce(f"planned {len(steps)} step{'' if len(steps) == 1 else 's'}")

        results: list[R] = []
        for i, step in enumerate(steps):
            sid = step_id(text, i)
            ctx.set_status(f"executing:{i + 1}/{len(steps)}", f"step {i + 1}/{len(steps)}")
            kept_result = ctx.kept(sid, [result_type] if result_type else [])
            if kept_result is None:
                with ctx.scoped(sid):
                    result = await self.execute_step(ctx, step, list(results))
                result = stamp(result, goal=key, index=i)
                ledger.create(result_id(sid), result)
                ledger.link(result_id(sid), "executes", sid)
            else:
                result = kept_result[0].data
            results.append(result)
            ctx.announce(f"step {i + 1}/{len(steps)} done")

        ctx.set_status("finishing")
        fid = final_id(text)
        with ctx.scoped(fid):
            final = await self.finish(ctx, goal, list(results))
        ledger.create(fid, final)
        for i in range(len(steps)):
            ledger.link(fid, "supported_by", result_id(step_id(text, i)))
        ctx.set_status("completed")
        return final

    async def _planned(self, ctx: RecipeContext, goal: G, text: str, key: str) -> list[S]:
        """The `plan` hook's steps, stamped and stored, each linked to the goal."""
        with ctx.scoped(plan_scope(text)):
            planned = await self.plan(ctx, goal)
        if not planned:
            raise ApplicationError("the plan has no steps", type="EmptyPlan", non_retryable=True)
        steps = [stamp(step, goal=key, index=i) for i, step in enumerate(planned)]
        for i, step in enumerate(steps):
            ctx.ledger.create(step_id(text, i), step)
            ctx.ledger.link(step_id(text, i), "from_goal", goal_id(text))
        return steps

    @classmethod
    def fork_rules(cls, ledger: Ledger) -> ForkRules | None:
        """A plan's stages: the plan, each step's execution, the final answer. A step is
        used first by its own execution, a step's result by the next step's (the last
        one's by the final answer): a fork reruns from there, and keeps the plan and the
        results before it. The goal is the input, and nothing uses the final answer: a
        fork edits neither. Of a run that ended early, what it did not reach neither."""
        _, step_type, result_type, _ = type_arguments(cls, PlanExecute) or (None,) * 4
        goals = [artifact.id for artifact in ledger.all() if artifact.id.startswith("goal:")]
        if step_type is None or result_type is None or not goals:
            return None
        key = goals[0].removeprefix("goal:")
        steps = [step_id(key, i) for i in itertools.takewhile(
            lambda i: step_id(key, i) in ledger, itertools.count()
        )]  # fmt: skip
        done = sum(result_id(sid) in ledger for sid in steps)
        stages = [plan_scope(key), *steps, final_id(key)]
        rules = ForkRules(order=stages, made_by={final_id(key): final_id(key)})
        for i, sid in enumerate(steps):
            rules.made_by[sid] = plan_scope(key)
            rules.made_by[result_id(sid)] = sid
            if i <= done:
                rules.editable[sid] = Editable(sid, step_type, text_field(step_type))
            if i < done:
                rules.editable[result_id(sid)] = Editable(
                    stages[i + 2], result_type, text_field(result_type)
                )
        return rules


# --- The ready, LLM-driven PlanExecute --------------------------------------------


class Goal(PlanExecuteSettings):
    """The input of `PlanExecuteWorkflow`: what to achieve, and the run's limits."""

    text: Annotated[str, not_blank("goal")] = Field(description="What the plan should achieve.")


class Plan(BaseModel):
    """The model's structured output for the planning call."""

    steps: list[str] = Field(min_length=1, max_length=MAX_STEPS)


class PlanStep(BaseModel):
    goal: str = ""
    index: int = 0
    description: str


class StepResult(BaseModel):
    goal: str = ""
    index: int = 0
    text: str


class FinalAnswer(BaseModel):
    goal: str
    text: str


class PlanExecuteResult(BaseModel):
    """The answer, and references to the steps, results and final answer behind it.

    Each text is stored in history once, as the result of the model call that made it;
    the result names the artifacts by id and version instead of carrying them again.
    Read them from the run's ledger, the `artifacts` query (a closed run's too, while a
    worker runs; `python starter.py artifacts ID` prints it):

        ledger = await handle.query(PlanExecuteWorkflow.artifacts)
        steps = [ledger.resolve(ref, PlanStep) for ref in result.steps]
        tree = ledger.provenance(result.final.id)
    """

    answer: FinalAnswer = Field(description="The final answer, with the goal it answers.")
    usage: Usage
    steps: list[ArtifactRef] = Field(description="`step:{goal}:{i}`, in plan order.")
    results: list[ArtifactRef] = Field(description="`result:step:{goal}:{i}`, in plan order.")
    final: ArtifactRef = Field(description="`final:{goal}`: where its provenance starts.")

    @classmethod
    def of(cls, goal: str, answer: FinalAnswer, usage: Usage, ledger: Ledger) -> Self:
        """The result of a run on `goal` whose artifacts are in `ledger`."""
        steps = ledger.refs(PlanStep)
        return cls(
            answer=answer,
            usage=usage,
            steps=steps,
            results=[ledger.ref(result_id(step.id)) for step in steps],
            final=ledger.ref(final_id(goal)),
        )


# The ready planner's prompts (`plan_messages`): one system prompt for every kind of
# call, so that each call's messages begin with the previous call's.
GOAL_SYSTEM = (
    "You help reach a goal in three kinds of request: first its plan, then the result of "
    "each step of the plan in turn, using the results of the earlier steps given before "
    "it, then the final answer from the results of all the steps. Answer each request "
    "briefly, concretely, and only that request.\n\nGoal: {goal}"
)
# The plan request says what a plan is and repeats the goal, last: a small model given
# only "at most N steps" here, with the request kinds quoted in the system prompt,
# planned the words of the requests ("Plan", "Step K:") instead of the goal.
PLAN_REQUEST = (
    "Goal: {goal}\nList at most {n} steps that reach this goal, to be carried out one "
    "after another. Each step is one sentence that starts with a verb and says what to do."
)
# Two plans worked out before the plan request, as earlier turns of the conversation:
# given the request alone, the local SmolLM2-135M planned words lifted from it ("plan |
# to | kraków") for 20 seeds of 20; with these, 16 of 20 plans for the demo's goal have
# every step a phrase of its own (bench/plan_steps_bench.py). An example inside the
# request was copied instead, and a grammar asking for phrases of 3 to 12 words gave
# made-up words. Only the plan call has them: the calls after it share its system prompt.
PLAN_EXAMPLES = (
    (
        "Plan a day at the seaside",
        ["Check the weather and the tides", "Pack towels, sun cream and lunch",
         "Take the morning train to the coast"],
    ),
    (
        "Host a dinner for six friends",
        ["Choose a menu with three courses", "Buy the food and the wine", "Cook and set the table"],
    ),
)  # fmt: skip
RESULTS = "The results of the steps so far:"
FINISH_REQUEST = "Write the final answer."


def plan_messages(goal: str, request: str, results: list[ContextRef]) -> list[ChatMessage]:
    """The messages of every call of the ready planner: the system prompt with `goal`,
    the `results` so far (references; each its own message, `ChatMessage.separate`), and
    the call's `request` last. Consecutive calls differ only after the earlier results."""
    messages = [ChatMessage(role="system", content=GOAL_SYSTEM.format(goal=goal))]
    if results:
        messages.append(ChatMessage(role="user", content=RESULTS, context=results, separate=True))
    messages.append(ChatMessage(role="user", content=request))
    return messages


def planning_messages(goal: str, max_steps: int) -> list[ChatMessage]:
    """The plan call's messages: the system prompt, the worked examples (PLAN_EXAMPLES) as
    earlier requests and answers, and the request for `goal`'s plan."""
    system, request = plan_messages(goal, PLAN_REQUEST.format(n=max_steps, goal=goal), [])
    examples = [
        message
        for example, steps in PLAN_EXAMPLES
        for message in (
            ChatMessage(role="user", content=PLAN_REQUEST.format(n=max_steps, goal=example)),
            ChatMessage(role="assistant", content=Plan(steps=steps).model_dump_json()),
        )
    ]
    return [system, *examples, request]


async def plan_steps(ctx: RecipeContext, goal: str, max_steps: int) -> list[PlanStep]:
    """The ready planner: one structured model call, kept to `max_steps` steps."""
    summary = f"request model: plan steps for {quote(goal)}"
    messages = planning_messages(goal, max_steps)
    plan = Plan.model_validate((await ctx.llm.request(messages, output=Plan, summary=summary)).data)
    if len(plan.steps) > max_steps:
        ctx.announce(f"the model planned {len(plan.steps)} steps; keeping {max_steps}")
    return [PlanStep(description=s) for s in plan.steps[:max_steps]]


def show_plan(result: PlanExecuteResult, ledger: Ledger | None) -> str:
    """A plan's result as the command line shows it: each step with its result, then the
    answer (the step count only, when the run's ledger was not read)."""
    lines = []
    if ledger is not None:
        results = (ledger.resolve(ref, StepResult) for ref in result.results)
        texts = {r.index: r.text for r in results}
        lines.append("steps:")
        for step in (ledger.resolve(ref, PlanStep) for ref in result.steps):
            lines.append(indent(step.description, f"  {step.index + 1}. "))
            if step.index in texts:
                lines.append(indent(texts[step.index], "     -> "))
    else:
        lines.append(f"steps: {len(result.steps)} (their texts: see artifacts)")
    return "\n".join([*lines, "answer:", indent(result.answer.text, "  ")])


@workflow.defn
class PlanExecuteWorkflow(PlanExecute[Goal, PlanStep, StepResult, FinalAnswer]):
    """Goal in; a plan of steps, each executed with the earlier results; a final answer."""

    command = PLAN
    show_result = staticmethod(show_plan)

    @workflow.init
    def __init__(self, goal: Goal) -> None:
        super().__init__()
        self.goal = goal

    @workflow.run
    async def run(self, goal: Goal) -> PlanExecuteResult:
        answer = await self.execute(goal)
        return PlanExecuteResult.of(goal.text, answer, self.usage, self.ledger)

    async def plan(self, ctx: RecipeContext, goal: Goal) -> list[PlanStep]:
        return await plan_steps(ctx, goal.text, self.settings(goal).max_steps)

    async def execute_step(
        self, ctx: RecipeContext, step: PlanStep, history: list[StepResult]
    ) -> StepResult:
        # The goal goes with the system prompt, which is the same for every call and so
        # stored whole once (see RecipeContext._sent_once); the step's own line is new.
        request = f"Step {step.index + 1}: {step.description}"
        summary = f"request model: step {step.index + 1} {quote(step.description)}"
        messages = plan_messages(self.goal.text, request, ctx.refs(history))
        return StepResult(text=(await ctx.llm.request(messages, summary=summary)).text)

    async def finish(
        self, ctx: RecipeContext, goal: Goal, results: list[StepResult]
    ) -> FinalAnswer:
        return FinalAnswer(goal=goal.text, text=await final_answer(ctx, goal.text, results))


async def final_answer(ctx: RecipeContext, goal: str, results: list[BaseModel]) -> str:
    """The ready finisher: one model call over the steps' `results` (by reference)."""
    summary = f"request model: final answer for {quote(goal)}"
    messages = plan_messages(goal, FINISH_REQUEST, ctx.refs(results))
    return (await ctx.llm.request(messages, summary=summary)).text
