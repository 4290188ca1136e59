"""durafact: durable agent recipes on Temporal; this package is their pure core.

What a recipe is written with besides its base class (`workflows`): the ledger
and its artifacts, the approval and source contracts, context references for
model calls, and the pure helpers hooks call. Nothing here does I/O, reads a
clock or draws a random number, so all of it is safe inside the workflow sandbox
(`tests/durafact/test_purity.py` enforces it). Everything else lives in its
module: ids in `durafact.ids`, the AnswerFlow engine in `durafact.answer_flow`,
the grounding rule in `durafact.grounding`, Decimal arithmetic in
`durafact.arithmetic`, the model-call contract in `durafact.llm`, the tool approval
policy in `durafact.tool_policy`.
"""

from durafact.answer_flow import AnswerCheck, AnswerIssue, AnswerItem, AnswerResult, RecoveryResult
from durafact.approval import ApprovalAnswer, ApprovalOutcome, ApprovalPolicy, ApprovalQuestion
from durafact.budget import Budget
from durafact.ids import text_key
from durafact.ledger import Artifact, ArtifactRef, Ledger, ProvenanceNode, find, find_all
from durafact.llm import ArtifactSpan, ContextRef, Usage
from durafact.skills import Skill, match_skills
from durafact.sources import Doc, SourceRef, SourceSpec
from durafact.stages import changed_fields, downstream_fields, earliest_stage
from durafact.status_machine import StatusMachine
from durafact.text import keyword_score
from durafact.tool_policy import PolicyRule, RememberedDecision, ToolPolicy

__all__ = [
    "AnswerCheck",
    "AnswerIssue",
    "AnswerItem",
    "AnswerResult",
    "ApprovalAnswer",
    "ApprovalOutcome",
    "ApprovalPolicy",
    "ApprovalQuestion",
    "Artifact",
    "ArtifactRef",
    "ArtifactSpan",
    "Budget",
    "ContextRef",
    "Doc",
    "Ledger",
    "PolicyRule",
    "ProvenanceNode",
    "RecoveryResult",
    "RememberedDecision",
    "Skill",
    "SourceRef",
    "SourceSpec",
    "StatusMachine",
    "ToolPolicy",
    "Usage",
    "changed_fields",
    "downstream_fields",
    "earliest_stage",
    "find",
    "find_all",
    "keyword_score",
    "match_skills",
    "text_key",
]
