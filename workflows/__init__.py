"""Recipe workflows: one module per recipe lifecycle, plus the shared recipe base."""

from workflows.answer_flow import (
    AnswerBatchInput,
    AnswerFlowResult,
    AnswerFlowWorkflow,
    BatchAnswers,
    ItemAnswer,
    Question,
    Verdict,
    Verdicts,
    check_answer_batch,
    load_answer_batch,
)
from workflows.plan_execute import (
    FinalAnswer,
    Goal,
    Plan,
    PlanExecute,
    PlanExecuteResult,
    PlanExecuteWorkflow,
    PlanStep,
    StepResult,
)
from workflows.recipe import (
    SEARCH_ATTRIBUTES,
    Announcement,
    Progress,
    Recipe,
    RecipeContext,
)
from workflows.reflection import (
    Critique,
    Draft,
    FinalText,
    ReflectionInput,
    ReflectionLoop,
    ReflectionOutcome,
    ReflectionResult,
    ReflectionWorkflow,
    Review,
)

# Every ready workflow the worker runs.
WORKFLOWS = [PlanExecuteWorkflow, ReflectionWorkflow, AnswerFlowWorkflow]

__all__ = [
    "SEARCH_ATTRIBUTES",
    "WORKFLOWS",
    "Announcement",
    "AnswerBatchInput",
    "AnswerFlowResult",
    "AnswerFlowWorkflow",
    "BatchAnswers",
    "Critique",
    "Draft",
    "FinalAnswer",
    "FinalText",
    "Goal",
    "ItemAnswer",
    "Plan",
    "PlanExecute",
    "PlanExecuteResult",
    "PlanExecuteWorkflow",
    "PlanStep",
    "Progress",
    "Question",
    "Recipe",
    "RecipeContext",
    "ReflectionInput",
    "ReflectionLoop",
    "ReflectionOutcome",
    "ReflectionResult",
    "ReflectionWorkflow",
    "Review",
    "StepResult",
    "Verdict",
    "Verdicts",
    "check_answer_batch",
    "load_answer_batch",
]
