"""Research's input, what its hooks return, and the artifacts a run makes (the
recipe is durafact/_recipes/research.py; its guarantees are in that module's
docstring), with `EvaluateTurn`, which drives a turn's status from the ledger."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from durafact._core.arithmetic import Operation
from durafact._core.ids import research_answer_id
from durafact._core.ledger import ArtifactRef, Ledger, ProvenanceNode
from durafact._core.llm import Usage
from durafact._core.skills import Skill
from durafact._core.sources import SourceSpec
from durafact._core.status_machine import StatusMachine
from durafact._core.text import not_blank
from durafact._recipes.recipe import RecipeSettings

TurnStatus = Literal["researching", "answerable", "answered", "insufficient"]
Stage = Literal["search", "select", "resolve", "evidence", "claims"]

# Claim and answer issue codes.
UNKNOWN_DOC = "UNKNOWN_DOC"
NO_SUPPORT = "NO_SUPPORT"
UNKNOWN_CALCULATION = "UNKNOWN_CALCULATION"
UNSUPPORTED_NUMBER = "UNSUPPORTED_NUMBER"

CALC_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")


# --- Input, what hooks return, and the artifacts ---------------------------------------


class ResearchSettings(RecipeSettings):
    """The limits of a Research run: how much to read."""

    limit: int = Field(default=8, ge=1, le=20, description="Refs kept after ranking.")
    max_docs: int = Field(default=4, ge=1, le=10, description="Refs that may be read.")
    max_doc_chars: int = Field(default=20_000, ge=200, description="Longer documents are cut.")


class ResearchInput(ResearchSettings):
    """A question, the sources to research it in, and how much to read."""

    question: Annotated[str, not_blank("question")]
    sources: list[SourceSpec] = Field(min_length=1)
    skills: list[Skill] = Field(
        default_factory=list, description="Loaded skills (`load_skills`) hooks may match."
    )

    @field_validator("sources")
    @classmethod
    def _distinct(cls, value: list[SourceSpec]) -> list[SourceSpec]:
        ids = [spec.source_id for spec in value]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"two sources are named {twice[0]!r}")
        return value


class RefChoice(BaseModel):
    """What `choose` returns: the refs to read."""

    ref_ids: list[str] = Field(description="Ids of the search results to read, best first.")
    reason: str = Field(description="One sentence: why these.")


class EvidenceDraft(BaseModel):
    """One quote `extract` proposes; kept only if it is verbatim in its document."""

    doc_id: str = Field(description="The id of the document the quote is from.")
    quote: str = Field(description="A passage of a few words copied verbatim from that document.")
    point: str = Field(description="What the quote shows, in one short sentence.")


class CalculationRequest(BaseModel):
    """A number `state_claims` names; code computes it."""

    name: str = Field(description="A short name; claims write {{name}} where the value goes.")
    op: Operation
    column: str = Field(description="The column to compute over (any column for count).")
    row_ids: list[str] = Field(description="The ids of exactly the table rows to use.")
    unit: str = Field(description="The value's unit or currency, e.g. EUR; empty if none.")


class ClaimDraft(BaseModel):
    text: str = Field(
        description="One sentence. A computed value is written {{name}}, never as a number."
    )
    evidence_ids: list[str] = Field(description="Ids of the evidence that supports it.")
    calculation: str | None = Field(description="The name of the calculation it states, if any.")


class ClaimSet(BaseModel):
    """What `state_claims` returns: claims, and the calculations they name."""

    claims: list[ClaimDraft]
    calculations: list[CalculationRequest]


class AnswerText(BaseModel):
    """What `write_answer` returns (or just the text): computed values as {{name}}."""

    text: str
    skills: list[str] = Field(default_factory=list, description="Skills the hook used.")


class ResearchTurn(BaseModel):
    """The lifecycle artifact `turn:{turn}`; `EvaluateTurn` moves its status."""

    query_id: str
    question: str
    status: TurnStatus = "researching"


class RefSelection(BaseModel):
    """`choice:{turn}`: the refs that will be read."""

    query_id: str
    ref_ids: list[str]
    reason: str
    fallback: bool = Field(
        default=False,
        description="The model chose nothing that exists: these are the best refs by score.",
    )


class Evidence(BaseModel):
    """`evidence:{turn}:{n}`: a quote that occurs verbatim in its document."""

    query_id: str
    doc_id: str
    quote: str
    point: str


class Calculation(BaseModel):
    """`calc:{turn}:{name}`: a number computed in code from exact table cells."""

    query_id: str
    name: str
    op: Operation
    column: str
    row_ids: list[str]
    row_keys: list[str]
    source_ids: list[str]
    value: str
    unit: str = ""
    rounded: bool = Field(default=False, description="A mean cut to a few decimal places.")
    at: list[str] = Field(default_factory=list, description="The rows holding a min or max.")

    def display(self) -> str:
        shown = f"{self.value} {self.unit}".strip()
        return f"{shown} (rounded)" if self.rounded else shown

    def description(self) -> str:
        """What was computed, without the value."""
        rows = ", ".join(self.row_keys)
        what = "number of rows" if self.op == "count" else f"{self.op} of column {self.column!r}"
        sources = ", ".join(self.source_ids)
        return f"the {what} over {len(self.row_keys)} row(s) ({rows}) of source {sources}"


class Claim(BaseModel):
    """`claim:{turn}:{n}`: a statement that cites its evidence and calculations."""

    query_id: str
    text: str = Field(description="As the hook wrote it: computed values are {{name}}.")
    evidence_ids: list[str]
    calculation_ids: list[str] = Field(default_factory=list)


class Rejection(BaseModel):
    """`rejected:{stage}:{turn}:{n}`: what a check refused, and why."""

    query_id: str
    stage: Literal["evidence", "calculation", "claim", "answer"]
    issues: list[str]
    item: dict[str, Any]


class ResearchAnswer(BaseModel):
    """`answer:{turn}`: the final text, with the exact computed values in it."""

    query_id: str
    question: str
    text: str
    claim_ids: list[str]
    calculation_ids: list[str] = Field(default_factory=list)
    skills: list[str] = Field(default_factory=list, description="Skills the answer hook used.")
    composed: bool = Field(default=False, description="True when code composed it from the claims.")


class Insufficient(BaseModel):
    """`insufficient:{turn}`: no source has the answer, and where the search ran dry."""

    query_id: str
    stage: Stage
    reason: str


class ResearchResult(BaseModel):
    """The ending and the answer text (None when insufficient), with references to the
    claims, evidence and calculations behind it: their texts are stored in history once,
    from the calls that made them. Read them, and the provenance down to the sources,
    from the run's ledger (the `artifacts` query, or `python starter.py artifacts ID`):
    `result.provenance(ledger)`."""

    question: str
    turn: str
    status: Literal["answered", "insufficient"]
    answer: str | None = None
    reason: str | None = None
    usage: Usage
    claims: list[ArtifactRef] = Field(default_factory=list)
    evidence: list[ArtifactRef] = Field(default_factory=list)
    calculations: list[ArtifactRef] = Field(default_factory=list)

    @property
    def answer_id(self) -> str:
        return research_answer_id(self.turn)

    def provenance(self, ledger: Ledger) -> ProvenanceNode | None:
        """Answer -> claims -> evidence and calculations -> docs -> refs -> sources."""
        if self.answer_id not in ledger:
            return None
        return ledger.provenance(self.answer_id)


class EvaluateTurn(StatusMachine[ResearchTurn]):
    """researching -> answerable -> answered | insufficient, from the ledger alone;
    each transition is handed to `set_status(status, message)`."""

    artifact_type = ResearchTurn
    terminal = frozenset({"answered", "insufficient"})

    def __init__(self, set_status: Callable[[str, str], None]) -> None:
        super().__init__()
        self.set_status = set_status

    def next_status(self, ledger: Ledger, key: str) -> str | None:
        if any(a.data.query_id == key for a in ledger.find_all(ResearchAnswer)):
            return "answered"
        if any(a.data.query_id == key for a in ledger.find_all(Insufficient)):
            return "insufficient"
        if any(a.data.query_id == key for a in ledger.find_all(Evidence)):
            return "answerable"
        return None

    def on_transition(self, ledger: Ledger, key: str, old: str, new: str) -> None:
        self.set_status(new, f"research status: {old} -> {new}")
