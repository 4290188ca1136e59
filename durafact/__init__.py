"""durafact: durable agent recipes on Temporal.

Everything you write a recipe, a tool or a worker with is imported from here; test
helpers from `durafact.testing`. The rest of the package (every `durafact._*`) is
private and may change in any release.

    from durafact import DurafactPlugin, PlanExecute, RecipeContext, tool

The names are loaded when first used, so `import durafact` is cheap: a command that
reads its arguments, or a client, does not import the recipes, the activities and
their libraries with the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durafact._activities.tools import ToolUnavailable, tool
    from durafact._core.answer_flow import AnswerIssue, AnswerItem, AnswerResult
    from durafact._core.approval import ApprovalAnswer, ApprovalOutcome, ApprovalPolicy
    from durafact._core.budget import Budget
    from durafact._core.commands import Command, Option
    from durafact._core.ledger import Artifact, Ledger
    from durafact._core.llm import Usage
    from durafact._core.sources import SourceSpec
    from durafact._core.tool_policy import ToolPolicy
    from durafact._recipes.answer_flow import (
        AnswerBatchInput,
        AnswerFlow,
        AnswerFlowResult,
        AnswerFlowSettings,
        AnswerFlowWorkflow,
    )
    from durafact._recipes.approval_gate import ApprovalGate
    from durafact._recipes.chat import ChatInput, ChatReply, ChatSend, ChatWorkflow
    from durafact._recipes.plan_execute import (
        Goal,
        PlanExecute,
        PlanExecuteResult,
        PlanExecuteSettings,
        PlanExecuteWorkflow,
    )
    from durafact._recipes.plan_react import PlanReActInput, PlanReActResult, PlanReActWorkflow
    from durafact._recipes.react import (
        ReAct,
        ReActInput,
        ReActOutcome,
        ReActResult,
        ReActSettings,
        ReActWorkflow,
    )
    from durafact._recipes.recipe import Recipe, RecipeContext, RecipeSettings
    from durafact._recipes.reflection import (
        ReflectionInput,
        ReflectionLoop,
        ReflectionResult,
        ReflectionSettings,
        ReflectionWorkflow,
        Review,
    )
    from durafact._recipes.research import Research, ResearchWorkflow
    from durafact._recipes.research_models import ResearchInput, ResearchResult, ResearchSettings
    from durafact._recipes.router import Router
    from durafact._recipes.supervisor import SupervisorRequest, SupervisorResult, SupervisorWorkflow
    from durafact._runtime.plugin import DurafactPlugin

# Where each public name lives: the one list of what durafact exports.
_HOMES = {
    # writing a recipe
    "Recipe": "durafact._recipes.recipe",
    "RecipeContext": "durafact._recipes.recipe",
    "RecipeSettings": "durafact._recipes.recipe",
    "PlanExecute": "durafact._recipes.plan_execute",
    "PlanExecuteSettings": "durafact._recipes.plan_execute",
    "ReflectionLoop": "durafact._recipes.reflection",
    "ReflectionSettings": "durafact._recipes.reflection",
    "Review": "durafact._recipes.reflection",
    "AnswerFlow": "durafact._recipes.answer_flow",
    "AnswerFlowSettings": "durafact._recipes.answer_flow",
    "AnswerItem": "durafact._core.answer_flow",
    "AnswerIssue": "durafact._core.answer_flow",
    "AnswerResult": "durafact._core.answer_flow",
    "ReAct": "durafact._recipes.react",
    "ReActSettings": "durafact._recipes.react",
    "ReActOutcome": "durafact._recipes.react",
    "Research": "durafact._recipes.research",
    "ResearchSettings": "durafact._recipes.research_models",
    "Router": "durafact._recipes.router",
    "ApprovalGate": "durafact._recipes.approval_gate",
    "ApprovalPolicy": "durafact._core.approval",
    "ApprovalOutcome": "durafact._core.approval",
    "ApprovalAnswer": "durafact._core.approval",
    "Ledger": "durafact._core.ledger",
    "Artifact": "durafact._core.ledger",
    "Usage": "durafact._core.llm",
    "SourceSpec": "durafact._core.sources",
    "Budget": "durafact._core.budget",
    "ToolPolicy": "durafact._core.tool_policy",
    # what the front doors may do with a recipe's runs (`Recipe.command`)
    "Command": "durafact._core.commands",
    "Option": "durafact._core.commands",
    # tools
    "tool": "durafact._activities.tools",
    "ToolUnavailable": "durafact._activities.tools",
    # the ready workflows, their inputs and results
    "PlanExecuteWorkflow": "durafact._recipes.plan_execute",
    "Goal": "durafact._recipes.plan_execute",
    "PlanExecuteResult": "durafact._recipes.plan_execute",
    "ReflectionWorkflow": "durafact._recipes.reflection",
    "ReflectionInput": "durafact._recipes.reflection",
    "ReflectionResult": "durafact._recipes.reflection",
    "AnswerFlowWorkflow": "durafact._recipes.answer_flow",
    "AnswerBatchInput": "durafact._recipes.answer_flow",
    "AnswerFlowResult": "durafact._recipes.answer_flow",
    "SupervisorWorkflow": "durafact._recipes.supervisor",
    "SupervisorRequest": "durafact._recipes.supervisor",
    "SupervisorResult": "durafact._recipes.supervisor",
    "ReActWorkflow": "durafact._recipes.react",
    "ReActInput": "durafact._recipes.react",
    "ReActResult": "durafact._recipes.react",
    "PlanReActWorkflow": "durafact._recipes.plan_react",
    "PlanReActInput": "durafact._recipes.plan_react",
    "PlanReActResult": "durafact._recipes.plan_react",
    "ResearchWorkflow": "durafact._recipes.research",
    "ResearchInput": "durafact._recipes.research_models",
    "ResearchResult": "durafact._recipes.research_models",
    "ChatWorkflow": "durafact._recipes.chat",
    "ChatInput": "durafact._recipes.chat",
    "ChatSend": "durafact._recipes.chat",
    "ChatReply": "durafact._recipes.chat",
    # a worker and a client
    "DurafactPlugin": "durafact._runtime.plugin",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'durafact' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
