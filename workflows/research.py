"""ResearchWorkflow: answer a question from configured sources, with full provenance.

Top to bottom, a run:

1. **Searches** every source in parallel (`fan_out_sources`): one `search_source`
   activity per source, the refs merged, ranked and stored as
   `ref:{stable_id}:{turn}`. A source that fails for good is recorded and the
   others still count.
2. **Chooses** (`llm:select:{turn}`, one structured call): the model sees the refs
   by id with their previews (as context, never inlined) and names at most
   `max_docs` of them. Unknown ids are ignored. The choice is `choice:{turn}`,
   linked `chooses` -> each chosen ref.
3. **Materializes** only the chosen refs (`materialize_doc`, in parallel): pages and
   files that were not chosen are never fetched or read. Each document is
   `resolved:{ref}`, linked `materialized_from` -> its ref.
4. **Extracts evidence** (`llm:evidence:{turn}`): quotes with the document they come
   from. The grounding rule of AnswerFlow (`grounding_issues`) is checked in code:
   a quote must be a passage of a few words that occurs verbatim in its document
   (case, spacing and typography aside). What passes is `evidence:{turn}:{n}`,
   linked `quoted_from` -> the document; what fails is kept as
   `rejected:evidence:{turn}:{n}` with its issue codes.
5. **States claims** (`llm:claims:{turn}`): each claim cites evidence ids, and may
   rest on a calculation over table rows that the model only *names*: `op` (sum,
   mean, min, max, count), `column` and `row_ids` (the materialized CSV rows). Code
   computes it from the rows' exact cells (`Decimal`, via `durafact.sources.csv`)
   into `calc:{turn}:{name}` (linked `computed_from` -> each row); the claim holds
   the placeholder `{{name}}`, so the model never sees, copies or computes the
   number. A claim is kept (`claim:{turn}:{n}`, linked `supported_by` -> its
   evidence and calculations) when it cites at least one valid support, every
   placeholder names a computed calculation, and every number it states occurs in
   its evidence quotes or in the question.
6. **Answers** (`llm:answer:{turn}`): the model writes the answer from the claims
   (as context, placeholders included) and a description of each calculation
   without its value. Code puts the exact computed values in place of the
   placeholders and adds a line for a calculation the text left out. An answer that
   states a number its claims and evidence do not hold, or names an unknown
   placeholder, is replaced by the claims themselves (`composed`). The answer is
   `answer:{turn}`, linked `supported_by` -> every kept claim.

So the provenance of an answer walks Answer -> Claim -> Evidence | Calculation ->
Doc -> SourceRef -> SourceSpec (`ResearchResult.provenance()`).

Skills. The workflow does no I/O, so skills arrive loaded, in the input (the
starter reads `skills/`). Each model call describes its situation in words and adds
the instruction of each skill `match_skills` picks for it; the answer call's
situation says a computed number backs the answer whenever one does, which is what
the shipped `cost-reporting` skill is for.

Status. A `StatusMachine` (`EvaluateTurn`) drives the `turn:{turn}` artifact
(`ResearchTurn`) from the ledger alone, advanced after every change: `researching`
-> `answerable` once evidence survived the check -> `answered` once an answer
exists, or `insufficient` once an `insufficient:{turn}` artifact says no source
has the answer (nothing found, nothing chosen, nothing resolved, no quote
grounded, or no claim backed). `DurafactStatus` follows it; `failed` if the run
fails.
"""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator
from temporalio import workflow

from durafact.arithmetic import (
    PLACEHOLDER,
    Operation,
    column_values,
    compute,
    plain,
    unsupported_numbers,
)
from durafact.grounding import grounding_issues
from durafact.ids import (
    calc_id,
    choice_id,
    claim_id,
    evidence_id,
    insufficient_id,
    rejected_id,
    research_answer_id,
    text_key,
    turn_id,
)
from durafact.ledger import Artifact, Ledger, ProvenanceNode
from durafact.llm import ContextRef, Usage
from durafact.skills import Skill, match_skills
from durafact.sources import Doc, SourceError, SourceRef, SourceSpec
from durafact.status_machine import StatusMachine
from workflows.recipe import RECIPE_ATTRIBUTE, Recipe, RecipeContext, quote
from workflows.sources import fan_out_sources, materialize_doc, register_sources, source_spec

TurnStatus = Literal["researching", "answerable", "answered", "insufficient"]

# Situations, written by code, that skills are matched against (never the question).
SELECT_SITUATION = "choosing which search results to read for a research question"
EVIDENCE_SITUATION = "extracting verbatim quotes from documents as evidence"
CLAIMS_SITUATION = "stating claims that cite quoted evidence and naming table calculations"
ANSWER_SITUATION = "writing the answer to a research question from claims with quoted evidence"
COMPUTED_SITUATION = "reporting an answer backed by a number computed in code from structured data"

# Claim and answer issue codes.
NO_SUPPORT = "NO_SUPPORT"
UNKNOWN_CALCULATION = "UNKNOWN_CALCULATION"
UNSUPPORTED_NUMBER = "UNSUPPORTED_NUMBER"

CALC_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")


# --- Input and result -----------------------------------------------------------------


class ResearchInput(BaseModel):
    """A question, the sources to research it in, and how much to read."""

    question: str
    sources: list[SourceSpec] = Field(min_length=1)
    limit: int = Field(default=8, ge=1, le=20, description="Refs kept after ranking.")
    max_docs: int = Field(default=4, ge=1, le=10, description="Refs the model may choose.")
    max_doc_chars: int = Field(default=20_000, ge=200, description="Longer documents are cut.")
    skills: list[Skill] = Field(
        default_factory=list, description="Loaded skills (`load_skills`); matched per call."
    )

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the question is empty")
        return value.strip()

    @field_validator("sources")
    @classmethod
    def _distinct(cls, value: list[SourceSpec]) -> list[SourceSpec]:
        ids = [spec.source_id for spec in value]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"two sources are named {twice[0]!r}")
        return value


class ResearchTurn(BaseModel):
    """The lifecycle artifact `turn:{turn}`; `EvaluateTurn` moves its status."""

    query_id: str
    question: str
    status: TurnStatus = "researching"


class RefChoice(BaseModel):
    """The model's structured output for choosing what to read."""

    ref_ids: list[str] = Field(description="Ids of the search results to read, best first.")
    reason: str = Field(description="One sentence: why these.")


class RefSelection(BaseModel):
    """`choice:{turn}`: the refs that will be materialized."""

    query_id: str
    ref_ids: list[str]
    reason: str


class EvidenceDraft(BaseModel):
    doc_id: str = Field(description="The id of the document the quote is from.")
    quote: str = Field(description="A passage of a few words copied verbatim from that document.")
    point: str = Field(description="What the quote shows, in one short sentence.")


class EvidenceSet(BaseModel):
    """The model's structured output for evidence extraction."""

    evidence: list[EvidenceDraft]


class Evidence(BaseModel):
    """`evidence:{turn}:{n}`: a quote that occurs verbatim in its document."""

    query_id: str
    doc_id: str
    quote: str
    point: str


class CalculationRequest(BaseModel):
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
    """The model's structured output for stating claims."""

    claims: list[ClaimDraft]
    calculations: list[CalculationRequest]


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
        """What was computed, without the value (what the answer call is told)."""
        rows = ", ".join(self.row_keys)
        what = "number of rows" if self.op == "count" else f"{self.op} of column {self.column!r}"
        sources = ", ".join(self.source_ids)
        return f"the {what} over {len(self.row_keys)} row(s) ({rows}) of source {sources}"


class Claim(BaseModel):
    """`claim:{turn}:{n}`: a statement that cites its evidence and calculations."""

    query_id: str
    text: str = Field(description="As the model wrote it: computed values are {{name}}.")
    evidence_ids: list[str]
    calculation_ids: list[str] = Field(default_factory=list)


class Rejection(BaseModel):
    """`rejected:{stage}:{turn}:{n}`: what a check refused, and why."""

    query_id: str
    stage: Literal["evidence", "calculation", "claim", "answer"]
    issues: list[str]
    item: dict[str, Any]


class AnswerDraft(BaseModel):
    """The model's structured output for the answer."""

    text: str = Field(description="The answer, from the claims only, placeholders kept.")


class ResearchAnswer(BaseModel):
    """`answer:{turn}`: the final text, with the exact computed values in it."""

    query_id: str
    question: str
    text: str
    claim_ids: list[str]
    calculation_ids: list[str] = Field(default_factory=list)
    skills: list[str] = Field(default_factory=list, description="Skills the answer call used.")
    composed: bool = Field(default=False, description="True when code composed it from the claims.")


class Insufficient(BaseModel):
    """`insufficient:{turn}`: no source has the answer, and where the search ran dry."""

    query_id: str
    stage: Literal["search", "select", "resolve", "evidence", "claims"]
    reason: str


class ResearchResult(BaseModel):
    """The ending, the answer text (None when insufficient), usage and the ledger."""

    question: str
    turn: str
    status: Literal["answered", "insufficient"]
    answer: str | None = None
    reason: str | None = None
    usage: Usage
    ledger: Ledger

    @property
    def research_answer_id(self) -> str:
        return research_answer_id(self.turn)

    def provenance(self) -> ProvenanceNode | None:
        """Answer -> claims -> evidence and calculations -> docs -> refs -> sources."""
        if self.answer_id not in self.ledger:
            return None
        return self.ledger.provenance(self.answer_id)

    @property
    def claims(self) -> list[Artifact[Claim]]:
        return self.ledger.find_all(Claim)

    @property
    def evidence(self) -> list[Artifact[Evidence]]:
        return self.ledger.find_all(Evidence)

    @property
    def calculations(self) -> list[Artifact[Calculation]]:
        return self.ledger.find_all(Calculation)


# --- The status machine ---------------------------------------------------------------


class EvaluateTurn(StatusMachine[ResearchTurn]):
    """researching -> answerable -> answered | insufficient, from the ledger alone."""

    artifact_type = ResearchTurn
    terminal = frozenset({"answered", "insufficient"})

    def __init__(self, ctx: RecipeContext) -> None:
        super().__init__()
        self.ctx = ctx

    def next_status(self, ledger: Ledger, key: str) -> str | None:
        if any(a.data.query_id == key for a in ledger.find_all(ResearchAnswer)):
            return "answered"
        if any(a.data.query_id == key for a in ledger.find_all(Insufficient)):
            return "insufficient"
        if any(a.data.query_id == key for a in ledger.find_all(Evidence)):
            return "answerable"
        return None

    def on_transition(self, ledger: Ledger, key: str, old: str, new: str) -> None:
        self.ctx.set_status(new, f"research status: {old} -> {new}")


# --- The workflow ----------------------------------------------------------------------

SELECTOR = (
    "You choose which search results are worth reading to answer a research question. "
    "Each result is given as context as its id in brackets followed by its source, locator, "
    "preview and score. Choose at most {n} results whose preview suggests they hold the "
    "answer or part of it; for a question about prices, totals or averages include the "
    "table rows of the items it asks about. Give the ids exactly as shown, best first. "
    "Choose none if nothing is relevant."
)
EXTRACTOR = (
    "You extract evidence for a research question from documents, each given as context as "
    "its id in brackets followed by its text. For every fact that helps answer the question "
    "give the document id, a `quote` copied verbatim from that document (a passage of at "
    "least a few words, unchanged) and the `point` it shows in one short sentence. Quote "
    "only text that is in the document. Give no evidence if the documents do not answer "
    "the question."
)
CLAIMER = (
    "You state the claims that answer a research question. Evidence is given as context "
    "(evidence ids with their quotes), and so are table rows (ids with `column: value` "
    "lines). Each claim is one sentence that says only what its evidence says and names "
    "the ids of that evidence; every number in a claim must appear in its evidence quotes. "
    "When the answer needs a number computed from table rows (a total, an average, a "
    "minimum, a maximum or a count), do not compute it: add a calculation with a `name`, "
    "the `op` (sum, mean, min, max or count), the `column`, the `row_ids` of exactly the "
    "rows to use and the `unit`, and write {{name}} in the claim where the value goes and "
    "the name in its `calculation`. Code computes the value from the rows."
)
ANSWERER = (
    "You write the answer to a research question from claims that were checked against "
    "their evidence, given as context. Use only these claims: add no facts and no numbers. "
    "Where a claim has a placeholder such as {{total}}, write that placeholder exactly as it "
    "is: code replaces it with the exact computed value. Answer briefly and directly."
)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@workflow.defn
class ResearchWorkflow(Recipe):
    """A question and sources in; a grounded answer with its provenance, or `insufficient`."""

    recipe_name = "research"

    def __init__(self) -> None:
        super().__init__()
        self.turns = EvaluateTurn(self._ctx)
        self._skills: list[Skill] = []

    @workflow.run
    async def run(self, request: ResearchInput) -> ResearchResult:
        ctx, ledger = self._ctx, self._ctx.ledger
        workflow.upsert_search_attributes([RECIPE_ATTRIBUTE.value_set(self.recipe_name)])
        self._skills = list(request.skills)
        turn = text_key(request.question)
        try:
            ledger.create(turn_id(turn), ResearchTurn(query_id=turn, question=request.question))
            ctx.set_status(
                "researching",
                f"researching {quote(request.question)} in "
                f"{_count(len(request.sources), 'source')}",
            )
            register_sources(ctx, request.sources)
            ending = await self._research(request, turn)
        except Exception:
            ctx.set_status("failed")
            raise
        if isinstance(ending, ResearchAnswer):
            return ResearchResult(
                question=request.question,
                turn=turn,
                status="answered",
                answer=ending.text,
                usage=ctx.usage,
                ledger=ledger,
            )
        return ResearchResult(
            question=request.question,
            turn=turn,
            status="insufficient",
            reason=ending.reason,
            usage=ctx.usage,
            ledger=ledger,
        )

    # --- the stages ---------------------------------------------------------------------

    async def _research(self, request: ResearchInput, turn: str) -> ResearchAnswer | Insufficient:
        ctx = self._ctx
        refs = await fan_out_sources(
            ctx,
            request.question,
            sources=request.sources,
            owner_id=turn,
            limit=request.limit,
            on_start=lambda source: ctx.announce(f"searching {source}"),
            on_count=lambda source, n: ctx.announce(f"{source}: {_count(n, 'hit')}"),
        )
        self.turns.advance(ctx.ledger)
        if not refs:
            return self._insufficient(turn, "search", "no source found anything for the question")

        chosen = await self.select(request, turn, refs)
        self.turns.advance(ctx.ledger)
        if not chosen:
            return self._insufficient(turn, "select", "no search result looked relevant")

        ctx.announce(f"reading {_count(len(chosen), 'document')}")
        docs = [
            doc
            for doc in await asyncio.gather(
                *(materialize_doc(ctx, ref, max_chars=request.max_doc_chars) for ref in chosen)
            )
            if doc is not None
        ]
        self.turns.advance(ctx.ledger)
        if not docs:
            return self._insufficient(turn, "resolve", "none of the chosen documents could be read")

        evidence = await self.extract(request, turn, docs)
        self.turns.advance(ctx.ledger)
        if not evidence:
            return self._insufficient(
                turn, "evidence", "no quote from the documents answers the question"
            )

        claims = await self.state_claims(request, turn, evidence, docs)
        self.turns.advance(ctx.ledger)
        if not claims:
            return self._insufficient(turn, "claims", "no claim was backed by the evidence")

        answer = await self.write_answer(request, turn, claims)
        self.turns.advance(ctx.ledger)
        return answer

    async def select(
        self, request: ResearchInput, turn: str, refs: list[Artifact[SourceRef]]
    ) -> list[Artifact[SourceRef]]:
        """One model call names the refs worth reading; at most `max_docs` are kept."""
        ctx = self._ctx
        by_id = {ref.id: ref for ref in refs}
        with ctx.scoped(f"select:{turn}"):
            choice = await ctx.llm.structured(
                RefChoice,
                f"Question: {request.question}\n\nChoose at most {request.max_docs} of the "
                f"{_count(len(refs), 'search result')} to read.",
                system=self._system(SELECTOR.format(n=request.max_docs), SELECT_SITUATION),
                context=list(by_id),
                summary=f"request model: choose sources for {quote(request.question)}",
            )
        picked = list(dict.fromkeys(i for i in choice.ref_ids if i in by_id))
        unknown = [i for i in choice.ref_ids if i not in by_id]
        if unknown:
            ctx.announce(f"ignored unknown ref ids: {', '.join(unknown)}", kind="warning")
        if len(picked) > request.max_docs:
            ctx.announce(f"the model chose {len(picked)} refs; reading {request.max_docs}")
            picked = picked[: request.max_docs]
        if picked:
            cid = choice_id(turn)
            ctx.ledger.create(
                cid, RefSelection(query_id=turn, ref_ids=picked, reason=choice.reason)
            )
            for rid in picked:
                ctx.ledger.link(cid, "chooses", rid)
        return [by_id[i] for i in picked]

    async def extract(
        self, request: ResearchInput, turn: str, docs: list[Artifact[Any]]
    ) -> list[Artifact[Evidence]]:
        """One model call quotes the documents; only verbatim quotes are kept."""
        ctx, ledger = self._ctx, self._ctx.ledger
        texts = {doc.id: doc.typed(Doc).data.text for doc in docs}
        with ctx.scoped(f"evidence:{turn}"):
            found = await ctx.llm.structured(
                EvidenceSet,
                f"Question: {request.question}\n\nQuote the evidence from the "
                f"{_count(len(docs), 'document')} given as context.",
                system=self._system(EXTRACTOR, EVIDENCE_SITUATION),
                context=list(texts),
                summary=f"request model: extract evidence from {_count(len(docs), 'doc')}",
            )
        kept: list[Artifact[Evidence]] = []
        rejected = 0
        for draft in found.evidence:
            if draft.doc_id not in texts:
                issues = ["UNKNOWN_DOC"]
            else:
                issues = [
                    i.code for i in grounding_issues(draft.point, draft.quote, texts[draft.doc_id])
                ]
            if issues:
                rejected += 1
                self._reject(turn, "evidence", rejected, issues, draft)
                continue
            eid = evidence_id(turn, len(kept) + 1)
            ledger.create(
                eid,
                Evidence(query_id=turn, doc_id=draft.doc_id, quote=draft.quote, point=draft.point),
            )
            ledger.link(eid, "quoted_from", draft.doc_id)
            kept.append(ledger.get(eid).typed(Evidence))
        ctx.announce(
            f"evidence: {len(kept)} kept"
            + (f", {rejected} rejected (not verbatim in its document)" if rejected else "")
        )
        return kept

    async def state_claims(
        self,
        request: ResearchInput,
        turn: str,
        evidence: list[Artifact[Evidence]],
        docs: list[Artifact[Any]],
    ) -> list[Artifact[Claim]]:
        """One model call states claims and names calculations; code checks the claims
        and computes the calculations."""
        ctx, ledger = self._ctx, self._ctx.ledger
        rows = [doc.id for doc in docs if doc.typed(Doc).data.fields is not None]
        context: list[ContextRef] = [e.id for e in evidence] + rows
        table = f" and {_count(len(rows), 'table row')}" if rows else ""
        with ctx.scoped(f"claims:{turn}"):
            drafted = await ctx.llm.structured(
                ClaimSet,
                f"Question: {request.question}\n\nState the claims that answer it from the "
                f"{_count(len(evidence), 'evidence item')}{table} given as context.",
                system=self._system(CLAIMER, CLAIMS_SITUATION),
                context=context,
                summary=f"request model: state claims from {_count(len(evidence), 'evidence')}",
            )
        calculations = self._calculate(turn, drafted.calculations)
        quotes = {e.id: e.data.quote for e in evidence}
        kept: list[Artifact[Claim]] = []
        rejected = 0
        for draft in drafted.claims:
            issues: list[str] = []
            cited = list(dict.fromkeys(i for i in draft.evidence_ids if i in quotes))
            names = list(dict.fromkeys(PLACEHOLDER.findall(draft.text)))
            if draft.calculation and draft.calculation not in names:
                names.append(draft.calculation)
            unknown = [n for n in names if n not in calculations]
            if unknown:
                issues.append(f"{UNKNOWN_CALCULATION}: {', '.join(unknown)}")
            if not cited and not names:
                issues.append(NO_SUPPORT)
            support = " ".join([request.question, *(quotes[i] for i in cited)])
            loose = unsupported_numbers(draft.text, support)
            if loose:
                issues.append(f"{UNSUPPORTED_NUMBER}: {', '.join(loose)}")
            if issues:
                rejected += 1
                self._reject(turn, "claim", rejected, issues, draft)
                continue
            cid = claim_id(turn, len(kept) + 1)
            calc_ids = [calculations[n].id for n in names]
            ledger.create(
                cid,
                Claim(query_id=turn, text=draft.text, evidence_ids=cited, calculation_ids=calc_ids),
            )
            for target in [*cited, *calc_ids]:
                ledger.link(cid, "supported_by", target)
            kept.append(ledger.get(cid).typed(Claim))
        ctx.announce(
            f"claims: {len(kept)} kept"
            + (f", {rejected} rejected" if rejected else "")
            + (f"; {_count(len(calculations), 'calculation')}" if calculations else "")
        )
        return kept

    def _calculate(
        self, turn: str, requests: list[CalculationRequest]
    ) -> dict[str, Artifact[Calculation]]:
        """Compute each named calculation from the exact cells of its rows."""
        ctx, ledger = self._ctx, self._ctx.ledger
        done: dict[str, Artifact[Calculation]] = {}
        rejected = 0
        for request in requests:
            try:
                calculation = self._compute(turn, request, done)
            except ValueError as exc:
                rejected += 1
                self._reject(turn, "calculation", rejected, [str(exc)], request)
                ctx.announce(f"calculation {request.name!r} refused: {exc}", kind="warning")
                continue
            kid = calc_id(turn, calculation.name)
            ledger.create(kid, calculation)
            for row in calculation.row_ids:
                ledger.link(kid, "computed_from", row)
            done[calculation.name] = ledger.get(kid).typed(Calculation)
            ctx.announce(
                f"computed {calculation.name} = {calculation.op}({calculation.column}) over "
                f"{_count(len(calculation.row_ids), 'row')}"
            )
        return done

    def _compute(self, turn: str, request: CalculationRequest, done: dict[str, Any]) -> Calculation:
        ledger = self._ctx.ledger
        if not CALC_NAME.fullmatch(request.name):
            raise ValueError(f"the name {request.name!r} is not a short identifier")
        if request.name in done:
            raise ValueError(f"a calculation named {request.name!r} already exists")
        row_ids = list(dict.fromkeys(request.row_ids))
        if not row_ids:
            raise ValueError("no rows named")
        docs: list[Doc] = []
        for rid in row_ids:
            artifact = ledger.artifacts.get(rid)
            doc = (
                artifact.typed(Doc).data
                if artifact is not None and artifact.type == "Doc"
                else None
            )
            if doc is None or doc.fields is None:
                raise ValueError(f"{rid} is not a table row that was read")
            docs.append(doc)
        if request.op == "count":
            values = [Decimal(0)] * len(docs)
        else:
            try:
                values = [
                    column_values(
                        [doc.fields or {}], request.column, decimal_comma=self._comma(doc)
                    )[0]
                    for doc in docs
                ]
            except SourceError as exc:
                raise ValueError(str(exc)) from None
        value, rounded = compute(request.op, values)
        at: list[str] = []
        if request.op in ("min", "max"):
            at = [doc.uid for doc, v in zip(docs, values, strict=True) if v == value]
        return Calculation(
            query_id=turn,
            name=request.name,
            op=request.op,
            column=request.column,
            row_ids=row_ids,
            row_keys=[doc.uid for doc in docs],
            source_ids=list(dict.fromkeys(doc.source_id for doc in docs)),
            value=plain(value),
            unit=request.unit.strip(),
            rounded=rounded,
            at=at,
        )

    async def write_answer(
        self, request: ResearchInput, turn: str, claims: list[Artifact[Claim]]
    ) -> ResearchAnswer:
        """One model call writes the answer from the claims; code puts the computed
        values in and checks that the text adds no number of its own."""
        ctx, ledger = self._ctx, self._ctx.ledger
        calc_ids = list(dict.fromkeys(k for c in claims for k in c.data.calculation_ids))
        calcs = [ledger.get(k).typed(Calculation).data for k in calc_ids]
        situation = COMPUTED_SITUATION if calcs else ANSWER_SITUATION
        skills = match_skills(self._skills, situation)
        lines = [
            f"Question: {request.question}",
            "",
            "Write the answer from the claims given as context.",
        ]
        if calcs:
            lines += [
                "",
                "Computed values (code puts each exact value in place of its placeholder):",
            ]
            lines += [f"- {{{{{c.name}}}}}: {c.description()}" for c in calcs]
        with ctx.scoped(f"answer:{turn}"):
            draft = await ctx.llm.structured(
                AnswerDraft,
                "\n".join(lines),
                system=self._system(ANSWERER, situation, skills),
                context=[c.id for c in claims],
                summary=f"request model: write the answer to {quote(request.question)}",
            )
        by_name = {c.name: c for c in calcs}
        evidence = [
            ledger.get(e).typed(Evidence).data.quote for c in claims for e in c.data.evidence_ids
        ]
        support = " ".join([request.question, *(c.data.text for c in claims), *evidence])
        issues = []
        unknown = [n for n in PLACEHOLDER.findall(draft.text) if n not in by_name]
        if unknown:
            issues.append(f"{UNKNOWN_CALCULATION}: {', '.join(unknown)}")
        loose = unsupported_numbers(draft.text, support)
        if loose:
            issues.append(f"{UNSUPPORTED_NUMBER}: {', '.join(loose)}")
        if not draft.text.strip():
            issues.append("EMPTY_ANSWER")
        composed = bool(issues)
        text = draft.text
        if composed:
            self._reject(turn, "answer", 1, issues, draft)
            text = " ".join(c.data.text for c in claims)
        stated = set(PLACEHOLDER.findall(text))
        text = PLACEHOLDER.sub(lambda m: by_name[m[1]].display(), text).strip()
        for calc in calcs:
            if calc.name not in stated:  # the value is always in the answer, exactly
                text += f"\n{calc.display()}: {calc.description()}, computed in code."
        aid = research_answer_id(turn)
        ledger.create(
            aid,
            ResearchAnswer(
                query_id=turn,
                question=request.question,
                text=text,
                claim_ids=[c.id for c in claims],
                calculation_ids=calc_ids,
                skills=[s.name for s in skills],
                composed=composed,
            ),
        )
        for claim in claims:
            ledger.link(aid, "supported_by", claim.id)
        ledger.link(aid, "answers", turn_id(turn))
        return ledger.get(aid).typed(ResearchAnswer).data

    def _comma(self, doc: Doc) -> bool:
        spec = source_spec(self._ctx, doc.source_id)
        return bool(spec and spec.decimal_comma)

    # --- helpers --------------------------------------------------------------------

    def _system(self, base: str, situation: str, skills: list[Skill] | None = None) -> str:
        chosen = match_skills(self._skills, situation) if skills is None else skills
        return "\n\n".join([base, *(skill.instruction() for skill in chosen)])

    def _insufficient(self, turn: str, stage: str, reason: str) -> Insufficient:
        ending = Insufficient(query_id=turn, stage=stage, reason=reason)  # type: ignore[arg-type]
        self._ctx.ledger.create(insufficient_id(turn), ending)
        self._ctx.announce(f"insufficient: {reason}", kind="warning")
        self.turns.advance(self._ctx.ledger)
        return ending

    def _reject(self, turn: str, stage: str, n: int, issues: list[str], item: BaseModel) -> None:
        self._ctx.ledger.create(
            rejected_id(stage, turn, n),
            Rejection(query_id=turn, stage=stage, issues=issues, item=item.model_dump()),  # type: ignore[arg-type]
        )
        self._ctx.announce(f"rejected {stage} {n}: {'; '.join(issues)}", kind="warning")
