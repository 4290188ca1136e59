"""durafact: durable agent recipes on Temporal.

This package is the pure core shared by workflows and activities: artifacts and
the ledger, stable ids, settings and the answer flow. Nothing here does I/O at
import time, so it is safe inside the Temporal workflow sandbox.
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

__all__ = [
    "BUDGET",
    "CHECK_ERROR",
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
    "Artifact",
    "Ledger",
    "LedgerError",
    "Link",
    "ProvenanceNode",
    "RecoveryResult",
    "ReviewPolicy",
    "Settings",
    "define_answer_flow",
    "final_id",
    "find",
    "find_all",
    "result_id",
    "step_id",
    "text_key",
    "validate_answer_batch",
]
