"""Human approval: the question a workflow asks, the answer a person gives, the outcome.

One vocabulary for every gate in the project (the ApprovalGate of a router, a
destructive tool in ReAct): a question is an artifact `approval:{thread}:{n}`,
answered by the `answer` signal or the `decide` update that every recipe
workflow has (see `durafact/_recipes/recipe.py`). Pure pydantic models and one pure
validator, so the workflow sandbox, the starter and the tests share them.

An answer has exactly the fields of `ApprovalAnswer`: one written by hand with
another (`approve` for `approved`) is refused by `answer_of` in one line naming it,
instead of being taken with the field ignored. `validate_answer` is where an answer
is judged against the questions a workflow holds, so the `decide` update's validator
can refuse a bad one before anything reaches history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from durafact._core.mistakes import first_mistake

ApprovalKind = Literal["approve", "escalate"]
QuestionStatus = Literal["pending", "approved", "rejected", "timed_out"]
# How long an answer to a tool question decides later calls (durafact/_core/tool_policy.py):
# `call` the same tool with the same arguments, `tool` any arguments in this run,
# `chat` any arguments in this chat, across continue-as-new.
RememberScope = Literal["call", "tool", "chat"]

TIMED_OUT = "timed out"


class ApprovalAnswer(BaseModel):
    """A person's answer to a question.

    `question_id=None` (the signal only) answers the oldest pending question.
    `changes` are edited facts (`{"budget": "5000"}`); with a rejection they ask the
    workflow to rebuild from them and ask again. An approval carries them only to a
    question that names them `settable` (a budget question's new limit).

    Sent by hand, as JSON (`execute_update("decide", {...})`, a signal from the Temporal
    CLI), it is an object with these fields only:

        {"question_id": "approval:release:1", "approved": true, "reason": "fine"}
    """

    model_config = ConfigDict(extra="forbid")

    question_id: str | None = None
    approved: bool
    reason: str = ""
    changes: dict[str, str] = Field(default_factory=dict)
    by: str = ""
    remember: RememberScope | None = Field(
        default=None,
        description="Let this answer decide later calls without asking (tool questions only, "
        "each names the scopes it takes in `remember`).",
    )


class ApprovalQuestion(BaseModel):
    """The artifact `approval:{thread}:{n}`: one question, and once closed, how.

    `n` counts the thread's questions from 1; a thread keeps its whole history,
    so asking again after a rejection opens `n + 1`. A question of kind
    `escalate` was asked because the one it `escalates` timed out.
    """

    id: str
    thread: str
    n: int
    kind: ApprovalKind = "approve"
    text: str
    status: QuestionStatus = "pending"
    answer: ApprovalAnswer | None = None
    escalates: str | None = None
    settable: list[str] = Field(
        default_factory=list,
        description="What an approval may set (`approve --set FIELD=VALUE`): a budget "
        "question's `tokens` and `cost`. Other questions take changes with a rejection only.",
    )
    rule: str | None = Field(
        default=None,
        description="Which policy rule asked (a tool question): `default: ask before a "
        "destructive tool`, or `rule N: ask ...`.",
    )
    remember: list[RememberScope] = Field(
        default_factory=list,
        description="The scopes an answer may `remember` (tool questions only).",
    )
    tool: str | None = Field(default=None, description="A tool question: the tool it would run.")
    arguments_hash: str | None = Field(
        default=None,
        description="A tool question: the hash of the call's arguments, as a `call` "
        "decision that covers it holds.",
    )
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="A tool question: the call's arguments whole, as the tool will receive "
        "them (bound and validated by its model).",
    )
    tool_call_id: str | None = Field(
        default=None,
        description="A tool question: the id of the call it is about, as the run's "
        "`action` line and a front end's tool part name it.",
    )


class ApprovalPolicy(BaseModel):
    """How long a question waits, and what its silence means.

    `timeout=None` waits for as long as it takes. When the timeout passes,
    `reject` closes the question as rejected with the reason "timed out";
    `escalate` marks it `timed_out` and asks a second question of kind
    `escalate` that waits `escalation_timeout` (None: for ever), and whose own
    timeout rejects with the reason "timed out". Timers are durable Temporal timers.
    """

    timeout: timedelta | None = None
    on_timeout: Literal["reject", "escalate"] = "reject"
    escalation_timeout: timedelta | None = None

    @field_validator("timeout", "escalation_timeout")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("a timeout must be positive (None waits for ever)")
        return value


class ApprovalOutcome(BaseModel):
    """How a wait for approval ended: what `ask_approval` and the `decide` update return.

    `question_id` is the question that was finally answered (the escalation, when
    there was one); `timed_out` says nobody answered in time.
    """

    question_id: str
    approved: bool
    reason: str
    changes: dict[str, str] = Field(default_factory=dict)
    timed_out: bool = False
    remember: RememberScope | None = None


def answer_of(data: ApprovalAnswer | Mapping[str, Any]) -> ApprovalAnswer:
    """`data` as an answer; a ValueError of one line naming the field that is wrong."""
    if isinstance(data, ApprovalAnswer):
        return data
    try:
        return ApprovalAnswer.model_validate(data)
    except ValidationError as exc:
        raise ValueError(
            first_mistake(exc.errors(), ApprovalAnswer.model_fields, "an answer")
        ) from None


def validate_answer(
    questions: Sequence[ApprovalQuestion], answer: ApprovalAnswer
) -> ApprovalQuestion:
    """The question `answer` is for, among `questions` (oldest first); or a ValueError
    that says why the answer cannot be taken."""
    if any(not key.strip() for key in answer.changes):
        raise ValueError("a change needs a field name; got an empty one")
    question = _answered_question(questions, answer)
    if answer.remember is not None and answer.remember not in question.remember:
        if not question.remember:
            raise ValueError(
                f"{question.id} is not a tool approval: remember is taken on tool questions only"
            )
        raise ValueError(
            f"{question.id} remembers {' or '.join(question.remember)}, not {answer.remember}"
        )
    unsettable = sorted(set(answer.changes) - set(question.settable))
    if answer.approved and unsettable:
        if not question.settable:
            raise ValueError("changes go with a rejection only; an approval cannot carry them")
        raise ValueError(
            f"an approval of {question.id!r} sets only {', '.join(question.settable)}, "
            f"not {unsettable[0]}"
        )
    return question


def _answered_question(
    questions: Sequence[ApprovalQuestion], answer: ApprovalAnswer
) -> ApprovalQuestion:
    if answer.question_id is None:
        pending = next((q for q in questions if q.status == "pending"), None)
        if pending is None:
            raise ValueError("no question is pending")
        return pending
    if not answer.question_id.strip():
        raise ValueError("the question id is blank")
    question = next((q for q in questions if q.id == answer.question_id), None)
    if question is None:
        raise ValueError(f"no question {answer.question_id!r} was asked")
    if question.status != "pending":
        how = "closed" if question.status == "timed_out" else "answered"
        raise ValueError(f"question {question.id!r} is already {how} ({question.status})")
    return question
