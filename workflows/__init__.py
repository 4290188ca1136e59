"""Recipe workflows: one module per recipe lifecycle, plus the shared recipe base."""

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
WORKFLOWS = [PlanExecuteWorkflow, ReflectionWorkflow]

__all__ = [
    "SEARCH_ATTRIBUTES",
    "WORKFLOWS",
    "Announcement",
    "Critique",
    "Draft",
    "FinalAnswer",
    "FinalText",
    "Goal",
    "Plan",
    "PlanExecute",
    "PlanExecuteResult",
    "PlanExecuteWorkflow",
    "PlanStep",
    "Progress",
    "Recipe",
    "RecipeContext",
    "ReflectionInput",
    "ReflectionLoop",
    "ReflectionOutcome",
    "ReflectionResult",
    "ReflectionWorkflow",
    "Review",
    "StepResult",
]
