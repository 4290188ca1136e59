"""What a research run checks and computes in code, between its hooks: the refs a
choice may name, the quotes found verbatim in their documents, the calculations from a
table's exact cells, the claims their support backs, and an answer that states only
what its claims hold (the guarantees 2 to 6 of durafact/_recipes/research.py)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from durafact._core.arithmetic import (
    PLACEHOLDER,
    column_values,
    compute,
    plain,
    unsupported_numbers,
)
from durafact._core.grounding import grounding_issues
from durafact._core.ids import (
    calc_id,
    choice_id,
    claim_id,
    evidence_id,
    rejected_id,
    research_answer_id,
    turn_id,
)
from durafact._core.ledger import Artifact
from durafact._core.sources import Doc, SourceError, SourceRef
from durafact._core.text import counted
from durafact._recipes.recipe import RecipeContext
from durafact._recipes.research_models import (
    CALC_NAME,
    NO_SUPPORT,
    UNKNOWN_CALCULATION,
    UNKNOWN_DOC,
    UNSUPPORTED_NUMBER,
    AnswerText,
    Calculation,
    CalculationRequest,
    Claim,
    ClaimDraft,
    Evidence,
    EvidenceDraft,
    RefChoice,
    RefSelection,
    Rejection,
    ResearchAnswer,
)
from durafact._recipes.sources import source_spec

# --- What the lifecycle checks and computes, in code ------------------------------------


def keep_choice(
    ctx: RecipeContext,
    turn: str,
    refs: list[Artifact[SourceRef]],
    choice: RefChoice,
    max_docs: int,
) -> list[Artifact[SourceRef]]:
    """The chosen refs that exist, once each, at most `max_docs`; stored as `choice:{turn}`.

    When the model chose none that exist, the best `max_docs` by score are read instead
    (`fallback`), as the Router falls back to keywords: a weak model that picks nothing
    must not end a run whose search found the answer."""
    by_id = {ref.id: ref for ref in refs}
    picked = list(dict.fromkeys(i for i in choice.ref_ids if i in by_id))
    unknown = [i for i in choice.ref_ids if i not in by_id]
    if unknown:
        ctx.announce(f"ignored unknown ref ids: {', '.join(unknown)}", kind="warning")
    fallback = not picked and bool(refs)
    if fallback:  # `refs` come ranked by score (fan_out_sources)
        picked = [ref.id for ref in refs[:max_docs]]
        ctx.announce(
            f"the model chose no search result: reading the {len(picked)} best by score (fallback)",
            kind="warning",
        )
    if len(picked) > max_docs:
        ctx.announce(f"{len(picked)} refs chosen; reading {max_docs}")
        picked = picked[:max_docs]
    if picked:
        cid = choice_id(turn)
        reason = "the best by score (fallback)" if fallback else choice.reason
        selection = RefSelection(query_id=turn, ref_ids=picked, reason=reason, fallback=fallback)
        ctx.ledger.create(cid, selection)
        for rid in picked:
            ctx.ledger.link(cid, "chooses", rid)
    return [by_id[i] for i in picked]


def keep_grounded(
    ctx: RecipeContext, turn: str, docs: list[Artifact[Doc]], drafts: list[EvidenceDraft]
) -> list[Artifact[Evidence]]:
    """The quotes that occur verbatim in their own document, as `evidence:{turn}:{n}`."""
    ledger = ctx.ledger
    texts = {doc.id: doc.data.text for doc in docs}
    kept: list[Artifact[Evidence]] = []
    rejected = 0
    for draft in drafts:
        if draft.doc_id not in texts:
            issues = [UNKNOWN_DOC]
        else:
            found = grounding_issues(draft.point, draft.quote, texts[draft.doc_id])
            issues = [i.code for i in found]
        if issues:
            rejected += 1
            _reject(ctx, turn, "evidence", rejected, issues, draft)
            continue
        eid = evidence_id(turn, len(kept) + 1)
        ledger.create(
            eid, Evidence(query_id=turn, doc_id=draft.doc_id, quote=draft.quote, point=draft.point)
        )
        ledger.link(eid, "quoted_from", draft.doc_id)
        kept.append(ledger.get(eid).typed(Evidence))
    ctx.announce(
        f"evidence: {len(kept)} kept"
        + (f", {rejected} rejected (not verbatim in its document)" if rejected else "")
    )
    return kept


def calculate(
    ctx: RecipeContext, turn: str, requests: list[CalculationRequest]
) -> dict[str, Artifact[Calculation]]:
    """Each named calculation computed from the exact cells of its rows, by name."""
    done: dict[str, Artifact[Calculation]] = {}
    rejected = 0
    for request in requests:
        try:
            calculation = _compute(ctx, turn, request, done)
        except ValueError as exc:
            rejected += 1
            _reject(ctx, turn, "calculation", rejected, [str(exc)], request)
            ctx.announce(f"calculation {request.name!r} refused: {exc}", kind="warning")
            continue
        kid = calc_id(turn, calculation.name)
        ctx.ledger.create(kid, calculation)
        for row in calculation.row_ids:
            ctx.ledger.link(kid, "computed_from", row)
        done[calculation.name] = ctx.ledger.get(kid).typed(Calculation)
        ctx.announce(
            f"computed {calculation.name} = {calculation.op}({calculation.column}) over "
            f"{counted(len(calculation.row_ids), 'row')}"
        )
    return done


def _compute(
    ctx: RecipeContext, turn: str, request: CalculationRequest, done: dict[str, Any]
) -> Calculation:
    if not CALC_NAME.fullmatch(request.name):
        raise ValueError(f"the name {request.name!r} is not a short identifier")
    if request.name in done:
        raise ValueError(f"a calculation named {request.name!r} already exists")
    row_ids = list(dict.fromkeys(request.row_ids))
    if not row_ids:
        raise ValueError("no rows named")
    docs: list[Doc] = []
    for rid in row_ids:
        artifact = ctx.ledger.artifacts.get(rid)
        doc = artifact.typed(Doc).data if artifact is not None and artifact.type == "Doc" else None
        if doc is None or doc.fields is None:
            raise ValueError(f"{rid} is not a table row that was read")
        docs.append(doc)
    if request.op == "count":
        values = [Decimal(0)] * len(docs)
    else:
        try:
            values = [
                column_values(
                    [doc.fields or {}], request.column, decimal_comma=_decimal_comma(ctx, doc)
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


def _decimal_comma(ctx: RecipeContext, doc: Doc) -> bool:
    spec = source_spec(ctx, doc.source_id)
    return bool(spec and spec.decimal_comma)


def keep_backed(
    ctx: RecipeContext,
    turn: str,
    question: str,
    drafts: list[ClaimDraft],
    evidence: list[Artifact[Evidence]],
    calculations: dict[str, Artifact[Calculation]],
) -> list[Artifact[Claim]]:
    """The claims that cite a valid support and state no number it does not hold."""
    ledger = ctx.ledger
    quotes = {e.id: e.data.quote for e in evidence}
    kept: list[Artifact[Claim]] = []
    rejected = 0
    for draft in drafts:
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
        loose = unsupported_numbers(draft.text, " ".join([question, *(quotes[i] for i in cited)]))
        if loose:
            issues.append(f"{UNSUPPORTED_NUMBER}: {', '.join(loose)}")
        if issues:
            rejected += 1
            _reject(ctx, turn, "claim", rejected, issues, draft)
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
        + (f"; {counted(len(calculations), 'calculation')}" if calculations else "")
    )
    return kept


def keep_answer(
    ctx: RecipeContext,
    turn: str,
    question: str,
    written: str | AnswerText,
    claims: list[Artifact[Claim]],
    calcs: list[Calculation],
) -> ResearchAnswer:
    """`answer:{turn}`: the text with the exact values in it, or the claims themselves
    when the text adds a number of its own or names an unknown placeholder."""
    ledger = ctx.ledger
    draft = AnswerText(text=written) if isinstance(written, str) else written
    by_name = {c.name: c for c in calcs}
    quotes = [ledger.get(e).typed(Evidence).data.quote for c in claims for e in c.data.evidence_ids]
    support = " ".join([question, *(c.data.text for c in claims), *quotes])
    issues = []
    unknown = [n for n in PLACEHOLDER.findall(draft.text) if n not in by_name]
    if unknown:
        issues.append(f"{UNKNOWN_CALCULATION}: {', '.join(unknown)}")
    loose = unsupported_numbers(draft.text, support)
    if loose:
        issues.append(f"{UNSUPPORTED_NUMBER}: {', '.join(loose)}")
    if not draft.text.strip():
        issues.append("EMPTY_ANSWER")
    text = draft.text
    if issues:
        _reject(ctx, turn, "answer", 1, issues, draft)
        text = " ".join(c.data.text for c in claims)
    stated = set(PLACEHOLDER.findall(text))
    text = PLACEHOLDER.sub(lambda m: by_name[m[1]].display(), text).strip()
    for calc in calcs:
        if calc.name not in stated:  # the value is always in the answer, exactly
            text += f"\n{calc.display()}: {calc.description()}, computed in code."
    aid = research_answer_id(turn)
    answer = ResearchAnswer(
        query_id=turn,
        question=question,
        text=text,
        claim_ids=[c.id for c in claims],
        calculation_ids=[calc_id(turn, c.name) for c in calcs],
        skills=draft.skills,
        composed=bool(issues),
    )
    ledger.create(aid, answer)
    for claim in claims:
        ledger.link(aid, "supported_by", claim.id)
    ledger.link(aid, "answers", turn_id(turn))
    return answer


def _reject(
    ctx: RecipeContext, turn: str, stage: str, n: int, issues: list[str], item: BaseModel
) -> None:
    ctx.ledger.create(
        rejected_id(stage, turn, n),
        Rejection(query_id=turn, stage=stage, issues=issues, item=item.model_dump()),  # type: ignore[arg-type]
    )
    ctx.announce(f"rejected {stage} {n}: {'; '.join(issues)}", kind="warning")
