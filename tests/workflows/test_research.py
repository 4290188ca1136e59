"""Research end to end on a real dev server: the ready ResearchWorkflow with the scripted
model, real files, a real CSV and a real HTTP server on loopback (computed numbers that
never pass through the model, the provenance walk for every claim, lazy page fetches,
the `insufficient` ending, the status transitions, the checks on evidence, claims and
answers), and a user's own Research whose hooks are plain code."""

from __future__ import annotations

import csv
import json
import math
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

from pydantic import ValidationError
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle

from durafact._core.arithmetic import compute, numbers_in, unsupported_numbers
from durafact._core.ledger import Artifact, Ledger, ProvenanceNode
from durafact._core.sources import Doc, SourceFailure, SourceRef, SourceSpec
from durafact._recipes.recipe import STATUS_ATTRIBUTE, RecipeContext
from durafact._recipes.research import COMPUTED_SITUATION, Research, ResearchWorkflow
from durafact._recipes.research_models import (
    Calculation,
    Claim,
    ClaimDraft,
    ClaimSet,
    Evidence,
    EvidenceDraft,
    Insufficient,
    RefChoice,
    RefSelection,
    Rejection,
    ResearchAnswer,
    ResearchInput,
    ResearchResult,
    ResearchTurn,
)

# The workflow sandbox re-imports this module for the recipe defined here; the test
# side is not workflow code.
with workflow.unsafe.imports_passed_through():
    import openai
    import pytest

    from durafact._activities.embedding_source import (
        LOCAL_EMBEDDING_MODEL,
        OpenAIEmbeddings,
        cosine,
    )
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from durafact.testing import ScriptedModel, bag_of_words
    from tests.helpers import ledger_of, scheduled_activities
    from tests.loopback_web import LoopbackWeb, Page
    from tests.scripted_research import (
        KAYAK_QUESTION,
        LATE_QUESTION,
        MEAN_QUESTION,
        SAMPLE_PRICES,
        SUM_QUESTION,
        Script,
        kayak_script,
        mean_script,
        sample_sources,
        shipped_skills,
        sum_script,
        system_prompt,
    )

SKILL_LINE = "State the exact computed value as it came out of the calculation"


@pytest.fixture
def web() -> Iterator[LoopbackWeb]:
    server = LoopbackWeb(
        pages={
            "/news/late-returns": Page(
                "Late returns at Riverside Cycles",
                "From this season a bike returned after closing time is charged one extra "
                "rental day, and the deposit is returned the next morning.",
            ),
            "/news/new-helmets": Page(
                "New helmets", "We bought twenty new helmets in bright colours for the summer."
            ),
            "/news/mill-cafe": Page(
                "The mill cafe reopens", "The cafe at the old mill reopens for the tour stop."
            ),
        }
    ).start()
    server.add_results("/news/late-returns", "/news/new-helmets", "/news/mill-cafe")
    yield server
    server.stop()


def web_spec(web: LoopbackWeb) -> SourceSpec:
    return SourceSpec.web(search_endpoint=web.search_endpoint, allow_private=True)


async def start(
    client: Client, settings: Settings, question: str, sources: list[SourceSpec], **kw
) -> WorkflowHandle[ResearchWorkflow, ResearchResult]:
    kw.setdefault("skills", shipped_skills())
    return await client.start_workflow(
        ResearchWorkflow.run,
        ResearchInput(question=question, sources=sources, **kw),
        id=f"research-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def research(client, settings, question, sources, **kw) -> tuple[ResearchResult, Ledger]:
    handle = await start(client, settings, question, sources, **kw)
    return await handle.result(), await ledger_of(handle)


def csv_prices(path: Path = SAMPLE_PRICES) -> dict[str, Decimal]:
    with path.open(newline="") as handle:
        return {row["item"]: Decimal(row["price_per_day_eur"]) for row in csv.DictReader(handle)}


def assert_walk_complete(ledger: Ledger, answer: ProvenanceNode) -> None:
    """Every claim of the answer reaches a SourceRef through every path: claim ->
    evidence or calculation -> doc -> ref, with no node missing on the way."""
    claims = [c for c in answer.children if c.type == "Claim"]
    assert claims, answer.render()
    assert {c.id for c in claims} == set(ledger.get(answer.id).typed(ResearchAnswer).data.claim_ids)
    for claim in claims:
        assert claim.children, f"{claim.id} rests on nothing"
        for support in claim.children:
            assert support.type in ("Evidence", "Calculation"), support
            docs = support.children
            assert docs and all(d.type == "Doc" for d in docs), support
            for doc in docs:
                refs = [r for r in doc.children if r.relation == "materialized_from"]
                assert len(refs) == 1 and refs[0].type == "SourceRef", doc
                assert [s.type for s in refs[0].children] == ["SourceSpec"]


def statuses(events) -> list[str]:
    return [e.message.removeprefix("research status: ") for e in events if e.kind == "status"]


# --- pure helpers (no server) -----------------------------------------------------------


def test_numbers_are_compared_by_value_and_placeholders_are_not_numbers() -> None:
    assert numbers_in("costs 14 EUR, or 14.00, by 1,047 and 12,5 {{total}}") == {
        Decimal(14),
        Decimal(1047),
        Decimal("12.5"),
    }
    assert unsupported_numbers("costs 14 per day", "price: 14.00") == []
    assert unsupported_numbers("costs {{total}} for 2 days", "price: 14.00") == ["2"]


def test_compute_is_exact_decimal_arithmetic() -> None:
    values = [Decimal("14.00"), Decimal("4.50"), Decimal("2.00")]
    assert compute("sum", values) == (Decimal("20.50"), False)
    assert compute("mean", [Decimal("32.00"), Decimal("39.00")]) == (Decimal("35.50"), False)
    assert compute("mean", [Decimal("1.00"), Decimal("1.00"), Decimal("2.00")]) == (
        Decimal("1.3333"),
        True,
    )
    assert compute("min", values) == (Decimal("2.00"), False)
    assert compute("max", values) == (Decimal("14.00"), False)
    assert compute("count", values) == (Decimal(3), False)


def test_bad_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    docs = SourceSpec.files(str(tmp_path))
    with pytest.raises(ValidationError, match="the question is empty"):
        ResearchInput(question="  ", sources=[docs])
    with pytest.raises(ValidationError, match="two sources are named 'docs'"):
        ResearchInput(question="?", sources=[docs, docs])
    with pytest.raises(ValidationError, match="at least 1 item"):
        ResearchInput(question="?", sources=[])
    with pytest.raises(ValidationError, match=r"key does not apply; it takes root"):
        SourceSpec(kind="files", source_id="docs", root=str(tmp_path), key="item")
    with pytest.raises(ValidationError, match=r"\(csv\) needs key"):
        SourceSpec(kind="csv", source_id="prices", path="p.csv")
    with pytest.raises(ValidationError, match="needs search_endpoint or urls"):
        SourceSpec.web()
    with pytest.raises(ValidationError, match="source id 'a b'"):
        SourceSpec.files(str(tmp_path), source_id="a b")


async def test_the_scripted_embeddings_rank_texts_that_share_words(model: ScriptedModel) -> None:
    async with openai.AsyncOpenAI(base_url=model.url, api_key="test", max_retries=0) as llm:
        embedder = OpenAIEmbeddings(llm, model=LOCAL_EMBEDDING_MODEL)
        texts = ["We rent kayaks by the hour.", "The shop opens at nine.", ""]
        kayaks, shop, empty = await embedder.embed(texts)
        (query,) = await embedder.embed(["Do you rent kayaks?"])
        # The openai client's default is base64 (float32): the same vectors, to float32
        # precision.
        raw = await llm.embeddings.create(model=LOCAL_EMBEDDING_MODEL, input=texts[0])
    assert kayaks == bag_of_words(texts[0]) and len(kayaks) == 64
    assert math.isclose(math.fsum(x * x for x in kayaks), 1.0) and not any(empty)
    assert cosine(query, kayaks) > cosine(query, shop)
    assert [round(x, 5) for x in raw.data[0].embedding] == [round(x, 5) for x in kayaks]
    inputs = [c.body["input"] for c in model.embedding_calls]
    assert inputs == [texts, ["Do you rent kayaks?"], texts[0]]
    assert [c.body.get("encoding_format") for c in model.embedding_calls] == [
        "float",
        "float",
        "base64",
    ]
    assert model.calls == []  # chat calls are counted apart


def test_the_computed_situation_matches_the_shipped_cost_reporting_skill() -> None:
    from durafact._core.skills import match_skills

    assert [s.name for s in match_skills(shipped_skills(), COMPUTED_SITUATION)] == [
        "cost-reporting"
    ]


# --- end to end ---------------------------------------------------------------------------


async def test_a_total_is_computed_in_code_from_the_csv_rows_the_model_named(
    client: Client, worker: Settings, model: ScriptedModel, web: LoopbackWeb
) -> None:
    model.reply(sum_script())
    # Web scores are the engine's, scaled to 1.0 for its top hit: keep enough refs for
    # the three rows to rank in beside the three pages.
    sources = [*sample_sources(), web_spec(web)]
    handle = await start(client, worker, SUM_QUESTION, sources, limit=12)
    result = await handle.result()
    ledger = await ledger_of(handle)

    assert result.status == "answered", result.reason
    prices = csv_prices()
    expected = prices["city-bike"] + prices["child-seat"] + prices["helmet"]
    (calc,) = [ledger.resolve(r, Calculation) for r in result.calculations]
    assert calc.op == "sum" and calc.column == "price_per_day_eur"
    assert calc.row_keys == ["city-bike", "child-seat", "helmet"]
    assert Decimal(calc.value) == expected and calc.value == "20.50"
    assert result.answer is not None
    assert result.answer.startswith(
        "Renting a city bike with a child seat and a helmet costs 20.50 EUR per day"
    )
    # The number never passed through the model: no prompt holds it, and the
    # model's own output only named rows, a column and an operation.
    assert all("20.50" not in call.text for call in model.calls)
    (answer_call,) = [c for c in model.calls if c.schema_name == "AnswerDraft"]
    assert SKILL_LINE in system_prompt(answer_call)
    assert "{{total}}: the sum of column 'price_per_day_eur' over 3 row(s)" in answer_call.text
    stored = ledger.get(result.answer_id).typed(ResearchAnswer).data
    assert stored.skills == ["cost-reporting"] and not stored.composed
    for call in model.calls:
        if call.schema_name != "AnswerDraft":
            assert SKILL_LINE not in call.text, call.activity_id

    assert_walk_complete(ledger, result.provenance(ledger))
    # Web results were found but not chosen: no page was fetched.
    assert web.requests["/search"] == 1
    assert sum(n for path, n in web.requests.items() if path.startswith("/news/")) == 0

    # Status transitions, in the order the starter's feed shows them.
    progress = await handle.query(ResearchWorkflow.progress, 0)
    assert statuses(progress.events)[0].startswith("researching")
    assert statuses(progress.events)[1:] == ["researching -> answerable", "answerable -> answered"]
    turn = ledger.find(ResearchTurn)
    assert turn is not None and turn.data.status == "answered" and turn.version == 3
    description = await handle.describe()
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "answered"

    # The Web UI reads like the ledger.
    scheduled = {a.activity_id: a.summary for a in await scheduled_activities(client, handle)}
    turn_key = result.turn
    assert scheduled[f"search:docs:{turn_key}"] == "search source: docs"
    assert scheduled[f"search:prices:{turn_key}"] == "search source: prices"
    assert scheduled[f"search:web:{turn_key}"] == "search source: web"
    resolves = sorted(s for i, s in scheduled.items() if i.startswith("resolve:"))
    assert resolves == [
        "resolve doc: child-seat",
        "resolve doc: city-bike",
        "resolve doc: helmet",
    ]
    assert scheduled[f"llm:select:{turn_key}"].startswith("request model: choose sources for")
    assert scheduled[f"llm:answer:{turn_key}"].startswith("request model: write the answer")


async def test_a_mean_over_the_rows_is_exact_and_reported_with_the_skill(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(mean_script())
    result, ledger = await research(client, worker, MEAN_QUESTION, sample_sources())

    prices = csv_prices()
    expected = (prices["e-bike"] + prices["cargo-e-bike"]) / 2
    (calc,) = [ledger.resolve(r, Calculation) for r in result.calculations]
    assert Decimal(calc.value) == expected and not calc.rounded
    assert result.answer == f"On average an electric bike costs {calc.value} EUR per day."
    assert all(calc.value not in call.text for call in model.calls)
    (answer_call,) = [c for c in model.calls if c.schema_name == "AnswerDraft"]
    assert SKILL_LINE in system_prompt(answer_call)
    assert_walk_complete(ledger, result.provenance(ledger))


async def test_a_computed_value_the_answer_left_out_is_added_by_code(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    script = mean_script()
    script.answer = "The electric bikes are the dearest of the fleet."
    model.reply(script)
    result, ledger = await research(client, worker, MEAN_QUESTION, sample_sources())

    assert result.answer == (
        "The electric bikes are the dearest of the fleet.\n35.50 EUR: the mean of column "
        "'price_per_day_eur' over 2 row(s) (e-bike, cargo-e-bike) of source prices, "
        "computed in code."
    )


async def test_only_the_chosen_page_is_fetched_and_quoted(
    client: Client, worker: Settings, model: ScriptedModel, web: LoopbackWeb
) -> None:
    late = web.url("/news/late-returns")
    model.reply(
        Script(
            pick=[late, "rental-terms.md"],
            quotes=[
                "Bikes returned after closing time are charged one extra rental day.",
                "the deposit is returned the next morning",
            ],
            claims=[
                (
                    "A bike returned after closing time costs one extra rental day.",
                    ["Bikes returned after closing time are charged one extra rental day."],
                    None,
                ),
                (
                    "The deposit comes back the next morning.",
                    ["the deposit is returned the next morning"],
                    None,
                ),
            ],
            answer="Returning late costs one extra rental day; the deposit comes back the "
            "next morning.",
        )
    )
    result, ledger = await research(
        client, worker, LATE_QUESTION, [*sample_sources(), web_spec(web)]
    )

    assert result.status == "answered"
    assert web.requests["/news/late-returns"] == 1
    assert web.requests["/news/new-helmets"] == 0 and web.requests["/news/mill-cafe"] == 0
    docs = {d.data.uid: d.data for d in ledger.find_all(Doc)}
    assert set(docs) == {late, "rental-terms.md"}
    assert docs[late].text.startswith("Late returns at Riverside Cycles")
    assert "var x" not in docs[late].text  # scripts are not text
    evidence = {e.data.quote: e.data.doc_id for e in ledger.find_all(Evidence)}
    assert evidence["the deposit is returned the next morning"] == f"resolved:{docs[late].ref_id}"
    assert result.calculations == []
    stored = ledger.get(result.answer_id).typed(ResearchAnswer).data
    assert stored.skills == []  # no computed number: the cost-reporting skill stays out
    assert all(SKILL_LINE not in call.text for call in model.calls)
    assert_walk_complete(ledger, result.provenance(ledger))
    tree = result.provenance(ledger).render()
    assert "supported_by -> claim:" in tree and "materialized_from -> ref:" in tree


async def test_when_the_model_chooses_nothing_the_best_refs_by_score_are_read(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    script = sum_script()
    script.pick = ["nothing-that-was-found.md"]  # a weak model's choice: none that exists
    model.reply(script)
    handle = await start(client, worker, SUM_QUESTION, sample_sources(), limit=12)
    await handle.result()
    ledger = await ledger_of(handle)

    choice = ledger.find(RefSelection)
    assert choice is not None and choice.data.fallback
    ending = ledger.find(Insufficient)
    assert ending is None or ending.data.stage != "select"  # it went on to read
    assert {d.data.ref_id for d in ledger.find_all(Doc)} == set(choice.data.ref_ids)
    assert choice.data.reason == "the best by score (fallback)"
    refs = ledger.find_all(SourceRef)
    best = sorted(refs, key=lambda r: -r.data.score)[: len(choice.data.ref_ids)]
    assert choice.data.ref_ids == [r.id for r in best]
    progress = await handle.query(ResearchWorkflow.progress, 0)
    assert any("(fallback)" in e.message and e.kind == "warning" for e in progress.events)


async def test_no_source_with_the_answer_ends_insufficient(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(kayak_script())
    handle = await start(client, worker, KAYAK_QUESTION, sample_sources())
    result = await handle.result()
    ledger = await ledger_of(handle)

    assert result.status == "insufficient" and result.answer is None
    assert result.reason == "no quote from the documents answers the question"
    assert result.provenance(ledger) is None
    ending = ledger.find(Insufficient)
    assert ending is not None and ending.data.stage == "evidence"
    (rejected,) = ledger.find_all(Rejection)
    assert rejected.data.stage == "evidence" and rejected.data.issues == ["NOT_IN_SOURCE"]
    assert ledger.find_all(Evidence) == [] and ledger.find_all(Claim) == []
    # No claims or answer call once no evidence survived.
    assert [c.schema_name for c in model.calls] == ["RefChoice", "EvidenceSet"]
    progress = await handle.query(ResearchWorkflow.progress, 0)
    assert statuses(progress.events)[1:] == ["researching -> insufficient"]
    description = await handle.describe()
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "insufficient"


async def test_nothing_found_anywhere_is_insufficient_without_a_model_call(
    client: Client, worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    (tmp_path / "notes.md").write_text("# Opening hours\n\nWe open at nine.")
    result, ledger = await research(
        client, worker, "kayak paddles", [SourceSpec.files(str(tmp_path), source_id="docs")]
    )
    assert result.status == "insufficient"
    assert ledger.find(Insufficient).data.stage == "search"
    assert model.calls == []


async def test_claims_with_unbacked_numbers_are_dropped_and_an_inventive_answer_is_replaced(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    script = sum_script()
    script.claims.append(
        ("A helmet costs 3.00 per day.", ["price_per_day_eur: 2.00"], None)  # not its quote
    )
    script.claims.append(("Helmets are free.", ["a quote nobody extracted"], None))
    script.answer = "It costs {{total}} per day, about 21 EUR."
    model.reply(script)
    result, ledger = await research(client, worker, SUM_QUESTION, sample_sources())

    rejected = {r.id: r.data.issues for r in ledger.find_all(Rejection)}
    turn = result.turn
    assert rejected[f"rejected:claim:{turn}:1"] == ["UNSUPPORTED_NUMBER: 3.00"]
    assert rejected[f"rejected:claim:{turn}:2"] == ["NO_SUPPORT"]
    assert rejected[f"rejected:answer:{turn}:1"] == ["UNSUPPORTED_NUMBER: 21"]
    assert [c.data.text for c in ledger.find_all(Claim)] == [script.claims[0][0]]
    # The answer is the claims, with the computed value in place of the placeholder.
    assert result.answer == (
        "A city bike, a child seat and a helmet together cost 20.50 EUR per day."
    )
    assert ledger.get(result.answer_id).typed(ResearchAnswer).data.composed is True
    assert_walk_complete(ledger, result.provenance(ledger))


async def test_a_calculation_over_rows_that_were_not_read_is_refused(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    script = sum_script()
    script.calculations = [("total", "sum", "price_per_day_eur", ["city-bike", "tandem"], "EUR")]
    model.reply(script)
    result, ledger = await research(client, worker, SUM_QUESTION, sample_sources())

    assert result.calculations == []
    issues = [r.data.issues for r in ledger.find_all(Rejection)]
    assert ["resolved:tandem is not a table row that was read"] in issues
    assert any(i[0].startswith("UNKNOWN_CALCULATION: total") for i in issues)
    assert result.status == "insufficient"
    assert ledger.find(Insufficient).data.stage == "claims"


async def test_a_source_that_fails_is_recorded_and_the_research_goes_on(
    client: Client, worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(mean_script())
    broken = SourceSpec.csv(str(tmp_path / "missing.csv"), key="item", source_id="old-prices")
    result, ledger = await research(client, worker, MEAN_QUESTION, [*sample_sources(), broken])

    assert result.status == "answered"
    failure = ledger.get(f"failure:search:old-prices:{result.turn}").typed(SourceFailure)
    failure = failure.data
    assert failure.error_type == "SourceError" and "CSV file not found" in failure.message
    assert result.calculations[0].type == "Calculation"


KAYAK_CORPUS = {
    "kayak-rental": "Kayak rental: we rent kayaks by the hour from the river pier.",
    "opening-hours": "The shop opens at nine and closes at six on weekdays.",
    "bike-wash": "Every bike is washed after it is returned.",
}


async def test_an_embedding_source_is_searched_by_vector_chosen_quoted_and_walked_to(
    client: Client, worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(KAYAK_CORPUS))
    quote = "we rent kayaks by the hour from the river pier"
    model.reply(
        Script(
            pick=["kayak-rental"],
            quotes=[quote],
            claims=[("Kayaks are rented by the hour at the river pier.", [quote], None)],
            answer="Yes: kayaks are rented by the hour at the river pier.",
        )
    )
    vectors = SourceSpec.embedding(str(corpus), source_id="vectors")
    result, ledger = await research(client, worker, KAYAK_QUESTION, [*sample_sources(), vectors])

    assert result.status == "answered", result.reason
    assert result.answer == "Yes: kayaks are rented by the hour at the river pier."
    # The worker embedded the corpus once, on the model endpoint, then the question.
    assert [c.body["input"] for c in model.embedding_calls] == [
        list(KAYAK_CORPUS.values()),
        [KAYAK_QUESTION],
    ]
    assert {c.body["model"] for c in model.embedding_calls} == {LOCAL_EMBEDDING_MODEL}
    # Ranked by cosine similarity: the kayak entry first among the corpus refs.
    found = [r.data for r in ledger.find_all(SourceRef)]
    by_vector = sorted(
        (r for r in found if r.source_id == "vectors"), key=lambda r: r.score, reverse=True
    )
    assert by_vector[0].uid == "kayak-rental" and by_vector[0].score > 0.3
    # Only the chosen entry was materialized; the answer's evidence quotes it.
    (doc,) = ledger.find_all(Doc)
    assert (doc.data.source_id, doc.data.uid) == ("vectors", "kayak-rental")
    assert doc.data.text == KAYAK_CORPUS["kayak-rental"]
    (evidence,) = ledger.find_all(Evidence)
    assert [ref.id for ref in result.evidence] == [evidence.id]
    assert evidence.data.quote == quote and evidence.data.doc_id == doc.id
    # The provenance walk: answer -> claim -> evidence -> doc -> ref -> source:vectors.
    answer = result.provenance(ledger)
    assert_walk_complete(ledger, answer)
    ref_id = doc.data.ref_id
    (ref_node,) = [n for n in answer.walk() if n.id == ref_id]
    assert ref_node.type == "SourceRef"
    assert [(s.id, s.type) for s in ref_node.children] == [("source:vectors", "SourceSpec")]
    spec = ledger.get("source:vectors").typed(SourceSpec).data
    assert spec.kind == "embedding" and spec.corpus == str(corpus)
    assert ledger.get(ref_id).typed(SourceRef).data.uid == "kayak-rental"


# --- a user's own Research: the hooks are plain code, the recipe does the rest ------------

HANDBOOK = {
    "helmets.md": "# Helmets\n\nEvery helmet is cleaned and checked after a rental.",
    "bikes.md": "# Bikes\n\nOur bikes and helmets: city bike, e-bike, cargo bike.",
    "opening.md": "# Opening hours\n\nOpen from nine to seven, helmets included.",
}
GROUNDED = "Every helmet is cleaned and checked after a rental"
INVENTED = "Helmets are washed in the river every Sunday"


@workflow.defn
class HelmetDesk(Research[ResearchInput, ResearchResult]):
    """Reads only the helmet page, quotes it (once truly, once not), answers from the claim."""

    @workflow.run
    async def run(self, request: ResearchInput) -> ResearchResult:
        return await self.execute(request)

    async def choose(
        self, ctx: RecipeContext, request: ResearchInput, refs: list[Artifact[SourceRef]]
    ) -> RefChoice:
        wanted = [r.id for r in refs if r.data.uid == "helmets.md"]
        return RefChoice(ref_ids=[*wanted, "ref:not-found"], reason="the helmet page")

    async def extract(
        self, ctx: RecipeContext, request: ResearchInput, docs: list[Artifact[Doc]]
    ) -> list[EvidenceDraft]:
        (doc,) = docs
        assert GROUNDED in doc.data.text  # the hook reads the document it was given
        return [
            EvidenceDraft(doc_id=doc.id, quote=INVENTED, point="washed weekly"),
            EvidenceDraft(doc_id=doc.id, quote=GROUNDED, point="cleaned after each rental"),
        ]

    async def state_claims(
        self,
        ctx: RecipeContext,
        request: ResearchInput,
        evidence: list[Artifact[Evidence]],
        docs: list[Artifact[Doc]],
    ) -> ClaimSet:
        return ClaimSet(
            claims=[
                ClaimDraft(
                    text="Helmets are cleaned and checked after every rental.",
                    evidence_ids=[e.id for e in evidence],
                    calculation=None,
                )
            ],
            calculations=[],
        )

    async def write_answer(
        self,
        ctx: RecipeContext,
        request: ResearchInput,
        claims: list[Artifact[Claim]],
        calculations: list[Calculation],
    ) -> str:
        return "Yes: " + " ".join(c.data.text for c in claims)


async def test_a_user_research_with_plain_code_hooks_gets_the_recipes_guarantees(
    client: Client, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    for name, text in HANDBOOK.items():
        (tmp_path / name).write_text(text)
    request = ResearchInput(
        question="Are helmets cleaned after a rental?",
        sources=[SourceSpec.files(str(tmp_path), source_id="handbook")],
    )
    async with build_worker(client, settings, workflows=[HelmetDesk]):
        handle = await client.start_workflow(
            HelmetDesk.run,
            request,
            id=f"helmets-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        result = await handle.result()
        ledger = await ledger_of(handle)
        scheduled = [a.activity_id for a in await scheduled_activities(client, handle)]

    assert result.status == "answered", result.reason
    assert result.answer == "Yes: Helmets are cleaned and checked after every rental."
    turn = result.turn
    # Every page was found; only the one the hook chose was read, and no model was asked.
    found = {r.data.uid: r.id for r in ledger.find_all(SourceRef)}
    assert set(found) == set(HANDBOOK)
    assert scheduled == [f"search:handbook:{turn}", f"resolve:{found['helmets.md']}"]
    assert [d.data.uid for d in ledger.find_all(Doc)] == ["helmets.md"]
    choice = ledger.get(f"choice:{turn}").typed(RefSelection).data
    assert choice.ref_ids == [found["helmets.md"]]
    assert model.calls == []
    # The invented quote was refused in code; the verbatim one became the evidence.
    rejected = ledger.get(f"rejected:evidence:{turn}:1").typed(Rejection).data
    assert rejected.issues == ["NOT_IN_SOURCE"] and rejected.item["quote"] == INVENTED
    assert [e.data.quote for e in ledger.find_all(Evidence)] == [GROUNDED]
    # The provenance walk: answer -> claim -> evidence -> doc -> ref -> source.
    path, node = [], result.provenance(ledger)
    while node is not None:
        path.append((node.relation, node.id, node.type))
        node = node.children[0] if node.children else None
    doc_id = f"resolved:{found['helmets.md']}"
    assert path == [
        (None, f"answer:{turn}", "ResearchAnswer"),
        ("supported_by", f"claim:{turn}:1", "Claim"),
        ("supported_by", f"evidence:{turn}:1", "Evidence"),
        ("quoted_from", doc_id, "Doc"),
        ("materialized_from", found["helmets.md"], "SourceRef"),
        ("found_by", "source:handbook", "SourceSpec"),
    ]
    assert [c.id for c in result.provenance(ledger).children] == [f"claim:{turn}:1", f"turn:{turn}"]
