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

# Every ready workflow the worker runs.
WORKFLOWS = [PlanExecuteWorkflow]

__all__ = [
    "SEARCH_ATTRIBUTES",
    "WORKFLOWS",
    "Announcement",
    "FinalAnswer",
    "Goal",
    "Plan",
    "PlanExecute",
    "PlanExecuteResult",
    "PlanExecuteWorkflow",
    "PlanStep",
    "Progress",
    "Recipe",
    "RecipeContext",
    "StepResult",
]
