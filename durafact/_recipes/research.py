"""Research: answer a question from sources, every statement traced to what it rests on.

The recipe owns the search, what gets read, the checks, the arithmetic, the ids,
the links and the status; you write only the four judgement hooks, and a
three-line `run`:

    @workflow.defn
    class PriceDesk(Research[ResearchInput, ResearchResult]):
        @workflow.run
        async def run(self, request: ResearchInput) -> ResearchResult:
            return await self.execute(request)

        async def choose(self, ctx, request, refs): ...                   # -> RefChoice
        async def extract(self, ctx, request, docs): ...                  # -> list[EvidenceDraft]
        async def state_claims(self, ctx, request, evidence, docs): ...   # -> ClaimSet
        async def write_answer(self, ctx, request, claims, calculations): ...  # -> str | AnswerText

Optional: `finish(ctx, request, ending)`, the closing hook (see Endings).

The input is a `ResearchInput` (or a subclass): the question, the sources and
how much to read. Hooks get artifacts (`Artifact[SourceRef]`, `Artifact[Doc]`, ...)
because what they return cites ids; give them to the model as
`context=[a.id for a in docs]`, so a text is stored in history once.

Limits: `settings(request)`, a `ResearchSettings`: `limit` (refs kept after
ranking), `max_docs` (refs that may be read) and `max_doc_chars` (longer
documents are cut). By default the input itself (`ResearchInput` subclasses
`ResearchSettings`); override `settings` to set them otherwise.

Guarantees, in the order of a run (`{turn}` is the question's `text_key`):

1. **Search**: every source at once (`fan_out_sources`); the best `limit` refs
   are `ref:{stable_id}:{turn}`, linked `found_by` -> `source:{source_id}`. A
   source that fails for good is a `SourceFailure`; the others still count.
2. **`choose`** names the refs worth reading. Unknown ids are ignored, at most
   `max_docs` are kept: `choice:{turn}`, linked `chooses` -> each. When it names
   none that exist, the best `max_docs` by score are read instead, announced as a
   warning and stored with `fallback: true` (a deterministic fallback, as the
   Router's).
3. **Read** only those (`materialize_doc`, in parallel): `resolved:{ref}`, a
   `Doc` linked `materialized_from` -> its ref. Nothing else is fetched.
4. **`extract`** quotes the docs. A quote is kept only when the grounding rule
   finds it verbatim in its own document: `evidence:{turn}:{n}`, linked
   `quoted_from` -> the doc. Else `rejected:evidence:{turn}:{n}` with its issue
   codes (`NOT_IN_SOURCE`, `QUOTE_TOO_SHORT`, `UNKNOWN_DOC`).
5. **`state_claims`** gets the evidence and the docs (table rows have `fields`),
   and returns claims citing evidence ids and calculations it only *names* (`op`,
   `column`, `row_ids`). Code computes each in `Decimal` from the rows' exact
   cells: `calc:{turn}:{name}`, linked `computed_from` -> each row. A claim is
   kept (`claim:{turn}:{n}`, linked `supported_by` -> its evidence and
   calculations) when it cites a valid support, each `{{name}}` in it is a
   computed calculation, and every number it states is in its quotes or the
   question; else `rejected:claim:{turn}:{n}`.
6. **`write_answer`** gets the kept claims and their calculations and writes the
   text with computed values as `{{name}}`. Code puts the exact values in, adds
   a line for one the text left out, and replaces a text that states a number
   its claims and quotes do not hold (or names an unknown placeholder) by the
   claims themselves (`composed`). `answer:{turn}` is linked `supported_by` ->
   each claim and `answers` -> `turn:{turn}`.

So a provenance walk goes Answer -> Claim -> Evidence | Calculation -> Doc ->
SourceRef -> SourceSpec (`ResearchResult.provenance(ledger)`, the ledger from the
`artifacts` query).

Endings. A stage that leaves nothing (no ref found, none chosen, none read, no
quote grounded, no claim backed) ends the run with `insufficient:{turn}` (its
stage and reason), and no later hook runs but the closing one: `finish(ctx,
request, ending)` turns the `ResearchAnswer` or `Insufficient` into the run's
output; the default is a `ResearchResult`.

Status. `EvaluateTurn` drives `turn:{turn}` (`ResearchTurn`) from the ledger
alone: `researching` -> `answerable` once evidence is kept -> `answered` or
`insufficient`. `DurafactStatus` follows it; `failed` when a hook raises.
Activities: `search:{source_id}:{turn}`, `resolve:{ref}`, and the hooks' model
calls `llm:select:{turn}`, `llm:evidence:{turn}`, `llm:claims:{turn}`,
`llm:answer:{turn}`.

`ResearchWorkflow`, at the bottom, is the ready LLM-driven Research: one
structured model call per hook, skills matched per call.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar, cast

from pydantic import BaseModel, Field
from temporalio import workflow

from durafact._core.forks import Editable, ForkRules
from durafact._core.ids import (
    claims_scope,
    evidence_scope,
    insufficient_id,
    research_answer_id,
    resolved_id,
    select_scope,
    text_key,
    turn_id,
)
from durafact._core.ledger import Artifact, Ledger
from durafact._core.llm import ContextRef
from durafact._core.ready_commands import RESEARCH
from durafact._core.skills import Skill, match_skills
from durafact._core.sources import Doc, SourceFailure, SourceRef, SourceSpec
from durafact._core.text import counted, indent, one_line
from durafact._recipes.recipe import Recipe, RecipeContext, quote
from durafact._recipes.research_checks import (
    calculate,
    keep_answer,
    keep_backed,
    keep_choice,
    keep_grounded,
)
from durafact._recipes.research_models import (
    AnswerText,
    Calculation,
    Claim,
    ClaimSet,
    EvaluateTurn,
    Evidence,
    EvidenceDraft,
    Insufficient,
    RefChoice,
    RefSelection,
    Rejection,
    ResearchAnswer,
    ResearchInput,
    ResearchResult,
    ResearchSettings,
    ResearchTurn,
    Stage,
)
from durafact._recipes.sources import fan_out_sources, materialize_doc

# --- The lifecycle -------------------------------------------------------------------

In = TypeVar("In", bound=ResearchInput)
Out = TypeVar("Out")


class Research(Recipe[In, Out]):
    """Search -> choose -> read the chosen -> quote -> claim and compute -> answer."""

    recipe_name = "research"
    settings_model = ResearchSettings
    forks = True

    def settings(self, request: In) -> ResearchSettings:
        """This run's limits (see `Recipe.settings`)."""
        return cast(ResearchSettings, super().settings(request))

    async def choose(
        self, ctx: RecipeContext, request: In, refs: list[Artifact[SourceRef]]
    ) -> RefChoice:
        raise NotImplementedError

    async def extract(
        self, ctx: RecipeContext, request: In, docs: list[Artifact[Doc]]
    ) -> list[EvidenceDraft]:
        raise NotImplementedError

    async def state_claims(
        self,
        ctx: RecipeContext,
        request: In,
        evidence: list[Artifact[Evidence]],
        docs: list[Artifact[Doc]],
    ) -> ClaimSet:
        raise NotImplementedError

    async def write_answer(
        self,
        ctx: RecipeContext,
        request: In,
        claims: list[Artifact[Claim]],
        calculations: list[Calculation],
    ) -> str | AnswerText:
        raise NotImplementedError

    async def finish(
        self, ctx: RecipeContext, request: In, ending: ResearchAnswer | Insufficient
    ) -> Out:
        """The run's output from its ending: a `ResearchResult` unless overridden."""
        answered = isinstance(ending, ResearchAnswer)
        return cast(
            Out,
            ResearchResult(
                question=request.question,
                turn=ending.query_id,
                status="answered" if answered else "insufficient",
                answer=ending.text if isinstance(ending, ResearchAnswer) else None,
                reason=ending.reason if isinstance(ending, Insufficient) else None,
                usage=ctx.usage,
                claims=ctx.ledger.refs(Claim),
                evidence=ctx.ledger.refs(Evidence),
                calculations=ctx.ledger.refs(Calculation),
            ),
        )

    async def lifecycle(self, ctx: RecipeContext, request: In) -> Out:
        ledger = ctx.ledger
        turn = text_key(request.question)
        turns = EvaluateTurn(ctx.set_status)
        limits = self.settings(request)

        async def insufficient(stage: Stage, reason: str) -> Out:
            ending = Insufficient(query_id=turn, stage=stage, reason=reason)
            ledger.create(insufficient_id(turn), ending)
            ctx.announce(f"insufficient: {reason}", kind="warning")
            turns.advance(ledger)
            return await self.finish(ctx, request, ending)

        ledger.create(turn_id(turn), ResearchTurn(query_id=turn, question=request.question))
        ctx.set_status(
            "researching",
            f"researching {quote(request.question)} in {counted(len(request.sources), 'source')}",
        )
        # A fork takes each stage it keeps from the run it was forked from, instead of
        # running it (`fork_rules`): the same artifacts, ids and links, and no call.
        kept = ctx.kept("search", STAGE_MODELS["search"])
        if kept is None:
            refs = await fan_out_sources(
                ctx,
                request.question,
                sources=request.sources,
                owner_id=turn,
                limit=limits.limit,
                on_start=lambda source: ctx.announce(f"searching {source}"),
                on_count=lambda source, n: ctx.announce(f"{source}: {counted(n, 'hit')}"),
            )
        else:
            refs = [artifact.typed(SourceRef) for artifact in _of(kept, SourceRef)]
        if not refs:
            return await insufficient("search", "no source found anything for the question")

        kept = ctx.kept("select", STAGE_MODELS["select"])
        if kept is None:
            with ctx.scoped(select_scope(turn)):
                choice = await self.choose(ctx, request, refs)
            chosen = keep_choice(ctx, turn, refs, choice, limits.max_docs)
        else:
            by_id = {ref.id: ref for ref in refs}
            picked = [i for a in _of(kept, RefSelection) for i in a.data.ref_ids if i in by_id]
            chosen = [by_id[i] for i in picked]
        if not chosen:
            return await insufficient("select", "no search result looked relevant")

        kept = ctx.kept("resolve", STAGE_MODELS["resolve"])
        if kept is None:
            ctx.announce(f"reading {counted(len(chosen), 'document')}")
            read = await asyncio.gather(
                *(materialize_doc(ctx, ref, max_chars=limits.max_doc_chars) for ref in chosen)
            )
            docs = [doc.typed(Doc) for doc in read if doc is not None]
        else:
            read_ids = [resolved_id(ref.id) for ref in chosen]
            docs = [ledger.get(i).typed(Doc) for i in read_ids if i in ledger]
        if not docs:
            return await insufficient("resolve", "none of the chosen documents could be read")

        kept = ctx.kept("evidence", STAGE_MODELS["evidence"])
        if kept is None:
            with ctx.scoped(evidence_scope(turn)):
                drafts = await self.extract(ctx, request, docs)
            evidence = keep_grounded(ctx, turn, docs, drafts)
        else:
            evidence = _of(kept, Evidence)
        turns.advance(ledger)
        if not evidence:
            return await insufficient(
                "evidence", "no quote from the documents answers the question"
            )

        kept = ctx.kept("claims", STAGE_MODELS["claims"])
        if kept is None:
            with ctx.scoped(claims_scope(turn)):
                stated = await self.state_claims(ctx, request, evidence, docs)
            calculations = calculate(ctx, turn, stated.calculations)
            claims = keep_backed(ctx, turn, request.question, stated.claims, evidence, calculations)
        else:
            claims = _of(kept, Claim)
        if not claims:
            return await insufficient("claims", "no claim was backed by the evidence")

        used = list(dict.fromkeys(k for c in claims for k in c.data.calculation_ids))
        calcs = [ledger.get(k).typed(Calculation).data for k in used]
        with ctx.scoped(research_answer_id(turn)):
            written = await self.write_answer(ctx, request, claims, calcs)
        answer = keep_answer(ctx, turn, request.question, written, claims, calcs)
        turns.advance(ledger)
        return await self.finish(ctx, request, answer)

    @classmethod
    def fork_rules(cls, ledger: Ledger) -> ForkRules | None:
        """Research's stages (`STAGES`), each artifact the one of the stage that made it.
        A fork edits a document (its `text`; the quotes are taken again), a quote (its
        `quote`, or removes it; the claims are stated again) or a claim (its `text`, or
        removes it; the answer is written again), and keeps every stage before."""
        if ledger.find(ResearchTurn) is None:
            return None
        rules = ForkRules(order=list(STAGES), made_by={})
        for artifact in ledger.all():
            stage = _stage_of(artifact)
            if stage is not None:
                rules.made_by[artifact.id] = stage
            if artifact.type == "Doc":
                rules.editable[artifact.id] = Editable("evidence", Doc, "text")
            elif artifact.type == "Evidence":
                rules.editable[artifact.id] = Editable("claims", Evidence, "quote", removable=True)
            elif artifact.type == "Claim":
                rules.editable[artifact.id] = Editable("answer", Claim, "text", removable=True)
        return rules


# The stages of a research run, in order, and the models of what each makes.
STAGES = ("search", "select", "resolve", "evidence", "claims", "answer")
STAGE_MODELS: dict[str, tuple[type[BaseModel], ...]] = {
    "search": (SourceSpec, SourceRef, SourceFailure),
    "select": (RefSelection,),
    "resolve": (Doc, SourceFailure),
    "evidence": (Evidence, Rejection),
    "claims": (Calculation, Claim, Rejection),
    "answer": (ResearchAnswer, Rejection),
}
# Which stage a rejection was made by, by what it rejected.
REJECTED_BY = {
    "evidence": "evidence",
    "calculation": "claims",
    "claim": "claims",
    "answer": "answer",
}


def _stage_of(artifact: Artifact[Any]) -> str | None:
    """The stage that made `artifact`; None for what the lifecycle makes from the input
    (the turn) and what no stage is (an ending, a prompt, a fork's origin)."""
    if artifact.type == "SourceFailure":
        return "search" if artifact.typed(SourceFailure).data.stage == "search" else "resolve"
    if artifact.type == "Rejection":
        return REJECTED_BY[artifact.typed(Rejection).data.stage]
    return next(
        (stage for stage, models in STAGE_MODELS.items() if artifact.type in _names(models)),
        None,
    )


def _names(models: tuple[type[BaseModel], ...]) -> set[str]:
    return {model.__name__ for model in models}


M = TypeVar("M", bound=BaseModel)


def _of(artifacts: list[Artifact[Any]], model: type[M]) -> list[Artifact[M]]:
    """The artifacts of `model` among `artifacts` (what a fork kept of a stage), typed."""
    return [artifact.typed(model) for artifact in artifacts if artifact.type == model.__name__]


# --- The ready, LLM-driven Research -----------------------------------------------------

# Situations, written by code, that skills are matched against (never the question).
SELECT_SITUATION = "choosing which search results to read for a research question"
EVIDENCE_SITUATION = "extracting verbatim quotes from documents as evidence"
CLAIMS_SITUATION = "stating claims that cite quoted evidence and naming table calculations"
ANSWER_SITUATION = "writing the answer to a research question from claims with quoted evidence"
COMPUTED_SITUATION = "reporting an answer backed by a number computed in code from structured data"

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


class EvidenceSet(BaseModel):
    """The model's structured output for `extract`."""

    evidence: list[EvidenceDraft]


class AnswerDraft(BaseModel):
    """The model's structured output for `write_answer`."""

    text: str = Field(description="The answer, from the claims only, placeholders kept.")


def _system(base: str, skills: list[Skill]) -> str:
    return "\n\n".join([base, *(skill.instruction() for skill in skills)])


def show_research(result: ResearchResult, ledger: Ledger | None) -> str:
    """The answer and its provenance (or why there is none), then every source that failed."""
    if result.answer is None:
        lines = [f"insufficient: {result.reason}"]
    else:
        lines = ["answer:", indent(result.answer, "  ")]
        provenance = result.provenance(ledger) if ledger is not None else None
        if provenance is not None:
            lines += ["provenance:", indent(provenance.render(), "  ")]
    for failure in ledger.find_all(SourceFailure) if ledger is not None else []:
        f = failure.data
        where = f.uid or f.source_id
        lines.append(f"  {f.stage} failed: {where}: {f.error_type}: {one_line(f.message)}")
    return "\n".join(lines)


@workflow.defn
class ResearchWorkflow(Research[ResearchInput, ResearchResult]):
    """A question and sources in; a grounded answer with its provenance, or `insufficient`.

    One structured model call per hook. The model sees refs, documents, evidence and
    claims by id, as context, and never a computed value: it is told what each
    calculation is, not what it came to. Each call adds the instruction of the skill
    `match_skills` picks for its situation; the answer's situation says a computed
    number backs it whenever one does (the shipped `cost-reporting` skill).
    """

    command = RESEARCH
    show_result = staticmethod(show_research)

    @workflow.run
    async def run(self, request: ResearchInput) -> ResearchResult:
        return await self.execute(request)

    async def choose(
        self, ctx: RecipeContext, request: ResearchInput, refs: list[Artifact[SourceRef]]
    ) -> RefChoice:
        max_docs = self.settings(request).max_docs
        return await ctx.llm.structured(
            RefChoice,
            f"Question: {request.question}\n\nChoose at most {max_docs} of the "
            f"{counted(len(refs), 'search result')} to read.",
            system=_system(
                SELECTOR.format(n=max_docs),
                match_skills(request.skills, SELECT_SITUATION),
            ),
            context=[ref.id for ref in refs],
            summary=f"request model: choose sources for {quote(request.question)}",
        )

    async def extract(
        self, ctx: RecipeContext, request: ResearchInput, docs: list[Artifact[Doc]]
    ) -> list[EvidenceDraft]:
        found = await ctx.llm.structured(
            EvidenceSet,
            f"Question: {request.question}\n\nQuote the evidence from the "
            f"{counted(len(docs), 'document')} given as context.",
            system=_system(EXTRACTOR, match_skills(request.skills, EVIDENCE_SITUATION)),
            context=[doc.id for doc in docs],
            summary=f"request model: extract evidence from {counted(len(docs), 'doc')}",
        )
        return found.evidence

    async def state_claims(
        self,
        ctx: RecipeContext,
        request: ResearchInput,
        evidence: list[Artifact[Evidence]],
        docs: list[Artifact[Doc]],
    ) -> ClaimSet:
        rows = [doc.id for doc in docs if doc.data.fields is not None]
        context: list[ContextRef] = [e.id for e in evidence] + rows
        table = f" and {counted(len(rows), 'table row')}" if rows else ""
        return await ctx.llm.structured(
            ClaimSet,
            f"Question: {request.question}\n\nState the claims that answer it from the "
            f"{counted(len(evidence), 'evidence item')}{table} given as context.",
            system=_system(CLAIMER, match_skills(request.skills, CLAIMS_SITUATION)),
            context=context,
            summary=f"request model: state claims from {counted(len(evidence), 'evidence')}",
        )

    async def write_answer(
        self,
        ctx: RecipeContext,
        request: ResearchInput,
        claims: list[Artifact[Claim]],
        calculations: list[Calculation],
    ) -> AnswerText:
        situation = COMPUTED_SITUATION if calculations else ANSWER_SITUATION
        skills = match_skills(request.skills, situation)
        lines = [
            f"Question: {request.question}",
            "",
            "Write the answer from the claims given as context.",
        ]
        if calculations:
            lines += [
                "",
                "Computed values (code puts each exact value in place of its placeholder):",
            ]
            lines += [f"- {{{{{c.name}}}}}: {c.description()}" for c in calculations]
        draft = await ctx.llm.structured(
            AnswerDraft,
            "\n".join(lines),
            system=_system(ANSWERER, skills),
            context=[c.id for c in claims],
            summary=f"request model: write the answer to {quote(request.question)}",
        )
        return AnswerText(text=draft.text, skills=[s.name for s in skills])
