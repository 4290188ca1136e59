"""durafact: durable agent recipes on Temporal.

This package is the pure core shared by workflows and activities: artifacts and
the ledger, stable ids, the answer flow, approvals, stage helpers, text scoring,
skills, the status machine, the `Source` protocol and settings. Nothing here does
I/O at import time, so it is safe inside the Temporal workflow sandbox. The source
implementations (files, CSV, web, embeddings) are in `durafact.sources`; only
activities call them.
"""

from durafact.answer_flow import (
    BUDGET,
    CHECK_ERROR,
    FALLBACK_ERROR,
    MISSING_VALUE,
    REVIEW_POLICIES,
    REVIEW_UNRESOLVED,
    SOURCE_UNAVAILABLE,
    AnswerBatchError,
    AnswerCheck,
    AnswerFlow,
    AnswerFlowDefinitionError,
    AnswerIssue,
    AnswerItem,
    AnswerResult,
    RecoveryResult,
    ReviewPolicy,
    define_answer_flow,
    validate_answer_batch,
)
from durafact.approval import (
    ApprovalAnswer,
    ApprovalKind,
    ApprovalOutcome,
    ApprovalPolicy,
    ApprovalQuestion,
    validate_answer,
)
from durafact.ids import final_id, result_id, step_id, text_key
from durafact.ledger import (
    Artifact,
    Ledger,
    LedgerError,
    Link,
    ProvenanceNode,
    find,
    find_all,
)
from durafact.settings import Settings
from durafact.skills import Skill, SkillError, load_skills, match_skills
from durafact.sources.base import Source, SourceError, SourceRef
from durafact.stages import changed_fields, downstream_fields, earliest_stage
from durafact.status_machine import StatusMachine, StatusMachineError, Transition
from durafact.text import EN_STOPWORDS, keyword_score, stem_words

__all__ = [
    "BUDGET",
    "CHECK_ERROR",
    "EN_STOPWORDS",
    "FALLBACK_ERROR",
    "MISSING_VALUE",
    "REVIEW_POLICIES",
    "REVIEW_UNRESOLVED",
    "SOURCE_UNAVAILABLE",
    "AnswerBatchError",
    "AnswerCheck",
    "AnswerFlow",
    "AnswerFlowDefinitionError",
    "AnswerIssue",
    "AnswerItem",
    "AnswerResult",
    "ApprovalAnswer",
    "ApprovalKind",
    "ApprovalOutcome",
    "ApprovalPolicy",
    "ApprovalQuestion",
    "Artifact",
    "Ledger",
    "LedgerError",
    "Link",
    "ProvenanceNode",
    "RecoveryResult",
    "ReviewPolicy",
    "Settings",
    "Skill",
    "SkillError",
    "Source",
    "SourceError",
    "SourceRef",
    "StatusMachine",
    "StatusMachineError",
    "Transition",
    "changed_fields",
    "define_answer_flow",
    "downstream_fields",
    "earliest_stage",
    "final_id",
    "find",
    "find_all",
    "keyword_score",
    "load_skills",
    "match_skills",
    "result_id",
    "stem_words",
    "step_id",
    "text_key",
    "validate_answer",
    "validate_answer_batch",
]
