"""Recipe workflows: one module per recipe lifecycle, plus the shared recipe base."""

from durafact.sources import Doc, ResolvedDoc, SourceFailure, SourceSpec
from workflows.answer_flow import (
    AnswerBatchInput,
    AnswerFlow,
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
from workflows.approval_gate import ApprovalGate, GateResult
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
from workflows.research import (
    AnswerDraft,
    Calculation,
    Claim,
    ClaimSet,
    Evidence,
    EvidenceSet,
    RefChoice,
    ResearchAnswer,
    ResearchInput,
    ResearchResult,
    ResearchTurn,
    ResearchWorkflow,
)
from workflows.router import Router, Task, keyword_route
from workflows.sources import fan_out_sources, materialize_doc
from workflows.supervisor import (
    Facts,
    Reply,
    Report,
    RouteChoice,
    SupervisorRequest,
    SupervisorResult,
    SupervisorWorkflow,
)

# The built-ins' registration, in the form every recipes module uses (`--recipes
# MODULE`, DURAFACT_RECIPES or the `durafact.recipes` entry point group): the ready
# workflows, and the pydantic models their `ctx.llm.structured(...)` calls ask for.
# The model activity answers only for registered output models.
RECIPES = [
    PlanExecuteWorkflow,
    ReflectionWorkflow,
    AnswerFlowWorkflow,
    SupervisorWorkflow,
    ResearchWorkflow,
]
OUTPUT_MODELS = [
    Plan,
    Critique,
    BatchAnswers,
    Verdicts,
    Facts,
    RouteChoice,
    RefChoice,
    EvidenceSet,
    ClaimSet,
    AnswerDraft,
]
# The name the replay tests and benches know the ready workflows by.
WORKFLOWS = RECIPES

__all__ = [
    "OUTPUT_MODELS",
    "RECIPES",
    "SEARCH_ATTRIBUTES",
    "WORKFLOWS",
    "Announcement",
    "AnswerBatchInput",
    "AnswerFlow",
    "AnswerFlowResult",
    "AnswerFlowWorkflow",
    "ApprovalGate",
    "BatchAnswers",
    "Calculation",
    "Claim",
    "Critique",
    "Doc",
    "Draft",
    "Evidence",
    "Facts",
    "FinalAnswer",
    "FinalText",
    "GateResult",
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
    "Reply",
    "Report",
    "ResearchAnswer",
    "ResearchInput",
    "ResearchResult",
    "ResearchTurn",
    "ResearchWorkflow",
    "ResolvedDoc",
    "Review",
    "RouteChoice",
    "Router",
    "SourceFailure",
    "SourceSpec",
    "StepResult",
    "SupervisorRequest",
    "SupervisorResult",
    "SupervisorWorkflow",
    "Task",
    "Verdict",
    "Verdicts",
    "check_answer_batch",
    "fan_out_sources",
    "keyword_route",
    "load_answer_batch",
    "materialize_doc",
]
