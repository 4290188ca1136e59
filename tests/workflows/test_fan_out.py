"""fan_out_sources and materialize_doc on a real dev server, with real sources: files
in a temporary directory, a CSV file, and a real HTTP server on loopback for the web
source. Ranking and limits across sources, refs that stay single under a retried
search, failures recorded instead of raised, lazy page fetches counted on the wire,
refused traversal and refused private addresses; and the source activities' error
classification on their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durafact._core.ids import ref_id
from durafact._core.ledger import Ledger
from durafact._core.sources import (
    Doc,
    ResolveRequest,
    SearchRequest,
    SourceFailure,
    SourceRef,
    SourceSpec,
)
from durafact._recipes.recipe import Recipe, RecipeContext
from durafact._recipes.sources import fan_out_sources, materialize_doc

# The workflow sandbox re-imports this module; the worker side is not workflow code.
with workflow.unsafe.imports_passed_through():
    from durafact._activities.sources import SourceActivities, build_source
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from tests.helpers import scheduled_activities
    from tests.loopback_web import LoopbackWeb, Page


class Probe(BaseModel):
    query: str
    sources: list[SourceSpec]
    owner: str = "turn-1"
    limit: int = 5
    materialize: list[str] = Field(default_factory=list, description="uids to resolve")
    planted: list[SourceRef] = Field(
        default_factory=list, description="refs stored as if found, then resolved"
    )
    rounds: int = 1


class ProbeResult(BaseModel):
    ranked: list[list[str]]
    docs: list[str | None]
    ledger: Ledger
    announced: list[str]


@workflow.defn
class FanOutProbe(Recipe[Probe, ProbeResult]):
    """fan_out_sources `rounds` times, then materialize_doc for the named refs."""

    recipe_name = "probe"

    @workflow.run
    async def run(self, probe: Probe) -> ProbeResult:
        return await self.execute(probe)

    async def lifecycle(self, ctx: RecipeContext, probe: Probe) -> ProbeResult:
        ranked = []
        for _ in range(probe.rounds):
            refs = await fan_out_sources(
                ctx,
                probe.query,
                sources=probe.sources,
                owner_id=probe.owner,
                limit=probe.limit,
                on_start=lambda s: ctx.announce(f"start {s}"),
                on_count=lambda s, n: ctx.announce(f"count {s} {n}"),
            )
            ranked.append([r.id for r in refs])
        for ref in probe.planted:
            ctx.ledger.create(ref_id(ref, probe.owner), ref)
        wanted = [
            a
            for a in ctx.ledger.find_all(SourceRef)
            if a.data.uid in probe.materialize or a.data in probe.planted
        ]
        docs = []
        for ref in wanted:
            doc = await materialize_doc(ctx, ref)
            docs.append(doc.id if doc else None)
        return ProbeResult(
            ranked=ranked,
            docs=docs,
            ledger=ctx.ledger,
            announced=[e.message for e in ctx.events],
        )


@pytest.fixture
async def probe_worker(client: Client, settings: Settings) -> Iterator[Settings]:
    async with build_worker(client, settings, workflows=[FanOutProbe]):
        yield settings


async def run_probe(client: Client, settings: Settings, probe: Probe):
    handle = await client.start_workflow(
        FanOutProbe.run,
        probe,
        id=f"probe-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )
    return handle, await handle.result()


@pytest.fixture
def library(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "helmets.md").write_text("# Helmets\n\nEvery helmet is cleaned after a rental.")
    (docs / "bikes.md").write_text("# Bikes\n\nOur bikes and helmets: city bike, e-bike.")
    (docs / "opening.md").write_text("# Opening hours\n\nOpen from nine to seven.")
    (tmp_path / "secret.txt").write_text("the safe code is 1234")
    (tmp_path / "prices.csv").write_text(
        "item,name,price\nhelmet,Bike helmet,2.00\ncity-bike,City bike,14.00\n"
        "e-bike,Electric bike,32.00\nlock,Extra lock,1.50\n"
    )
    return tmp_path


def specs(library: Path) -> list[SourceSpec]:
    return [
        SourceSpec.files(str(library / "docs"), source_id="docs"),
        SourceSpec.csv(str(library / "prices.csv"), key="item", source_id="prices"),
    ]


@pytest.fixture
def web() -> Iterator[LoopbackWeb]:
    server = LoopbackWeb(
        pages={
            "/a": Page("Helmet sizes", "Helmets come in three sizes."),
            "/b": Page("Helmet cleaning", "Helmets are cleaned with mild soap."),
            "/c": Page("Helmet colours", "Red, blue and yellow helmets."),
        }
    ).start()
    server.add_results("/a", "/b", "/c")
    yield server
    server.stop()


# --- ranking, limits, idempotence --------------------------------------------------------


async def test_refs_from_all_sources_are_merged_ranked_and_limited(
    client: Client, probe_worker: Settings, library: Path
) -> None:
    sources = specs(library)
    handle, result = await run_probe(
        client, probe_worker, Probe(query="bike helmet price", sources=sources, limit=4)
    )

    # What each source finds on its own, merged: best score first, ties by source, uid.
    found = []
    for spec in sources:
        found += await build_source(spec).search("bike helmet price", 4)
    expected = sorted(found, key=lambda r: (-r.score, r.source_id, r.uid))[:4]
    assert result.ranked == [[ref_id(r, "turn-1") for r in expected]]
    assert len(found) > 4  # the limit cut something
    assert {r.source_id for r in expected} == {"docs", "prices"}
    stored = result.ledger.find_all(SourceRef)
    assert [a.id for a in stored] == result.ranked[0]
    assert all(a.data.metadata["owner_id"] == "turn-1" for a in stored)
    assert all(
        [link.target for link in result.ledger.links_from(a.id, "found_by")]
        == [f"source:{a.data.source_id}"]
        for a in stored
    )
    assert result.announced[:2] == ["start docs", "start prices"]
    assert sorted(result.announced[2:]) == sorted(
        [
            f"count docs {sum(r.source_id == 'docs' for r in found)}",
            f"count prices {sum(r.source_id == 'prices' for r in found)}",
        ]
    )

    # One activity per source, legible, each asked for `limit`, started together.
    scheduled = await scheduled_activities(client, handle)
    assert [(a.activity_id, a.summary) for a in scheduled] == [
        ("search:docs:turn-1", "search source: docs"),
        ("search:prices:turn-1", "search source: prices"),
    ]
    assert [a.input["limit"] for a in scheduled] == [4, 4]
    events = [e.event_type for e in (await handle.fetch_history()).events]
    first_done = events.index(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    assert events[:first_done].count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 2


async def test_a_retried_search_and_a_repeated_fan_out_make_no_duplicate_refs(
    client: Client, probe_worker: Settings, web: LoopbackWeb
) -> None:
    web.fail("/search", 500, times=1)
    spec = SourceSpec.web(search_endpoint=web.search_endpoint, allow_private=True)
    handle, result = await run_probe(
        client, probe_worker, Probe(query="helmet", sources=[spec], rounds=2)
    )

    assert web.requests["/search"] == 3  # a 500, its retry, then the second fan-out
    history = await handle.fetch_history()
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert started == [2, 1]  # the first search succeeded on its second attempt
    refs = result.ledger.find_all(SourceRef)
    assert len(refs) == 3 == len({a.data.uid for a in refs})
    assert result.ranked[0] == result.ranked[1] == [a.id for a in refs]
    assert [a.data.uid for a in refs] == [web.url("/a"), web.url("/b"), web.url("/c")]
    assert result.ledger.find_all(SourceFailure) == []
    assert sum(p.startswith("/a") or p in ("/b", "/c") for p in web.requests) == 0


async def test_a_rate_limited_search_is_waited_out_past_the_four_attempts_it_once_had(
    client: Client, probe_worker: Settings, web: LoopbackWeb
) -> None:
    web.fail("/search", 429, times=5, retry_after="1")
    spec = SourceSpec.web(search_endpoint=web.search_endpoint, allow_private=True)
    _, result = await run_probe(client, probe_worker, Probe(query="helmet", sources=[spec]))

    assert web.requests["/search"] == 6
    assert result.ledger.find_all(SourceFailure) == []
    assert [a.data.uid for a in result.ledger.find_all(SourceRef)] == [
        web.url("/a"),
        web.url("/b"),
        web.url("/c"),
    ]


async def test_a_source_that_fails_for_good_is_recorded_and_the_others_still_count(
    client: Client, probe_worker: Settings, library: Path
) -> None:
    broken = SourceSpec.files(str(library / "no-such-dir"), source_id="archive")
    _, result = await run_probe(
        client, probe_worker, Probe(query="helmet", sources=[*specs(library), broken])
    )

    failure = result.ledger.get("failure:search:archive:turn-1").typed(SourceFailure).data
    assert failure.stage == "search" and failure.error_type == "SourceError"
    assert "root is not a directory" in failure.message
    assert any(m.startswith("search source archive failed (SourceError)") for m in result.announced)
    assert "count archive" not in " ".join(result.announced)
    assert {a.data.source_id for a in result.ledger.find_all(SourceRef)} == {"docs", "prices"}


async def test_two_sources_with_one_id_fail_the_run_at_once(
    client: Client, probe_worker: Settings, library: Path
) -> None:
    docs, prices = specs(library)
    twin = prices.model_copy(update={"source_id": "docs"})
    handle = await client.start_workflow(
        FanOutProbe.run,
        Probe(query="helmet", sources=[docs, twin]),
        id=f"probe-{uuid.uuid4().hex[:8]}",
        task_queue=probe_worker.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidSources"
    assert cause.message == "two sources are named 'docs'"
    assert await scheduled_activities(client, handle) == []


# --- materialization ------------------------------------------------------------------


async def test_only_the_refs_asked_for_are_fetched(
    client: Client, probe_worker: Settings, web: LoopbackWeb
) -> None:
    spec = SourceSpec.web(search_endpoint=web.search_endpoint, allow_private=True)
    handle, result = await run_probe(
        client,
        probe_worker,
        Probe(query="helmet", sources=[spec], materialize=[web.url("/b")]),
    )

    assert web.requests == {"/search": 1, "/b": 1}  # /a and /c were found, never fetched
    (doc_id,) = result.docs
    ref = next(a for a in result.ledger.find_all(SourceRef) if a.data.uid == web.url("/b"))
    assert doc_id == f"resolved:{ref.id}"
    doc = result.ledger.get(doc_id).typed(Doc).data
    assert doc.text == "Helmet cleaning\n\nHelmets are cleaned with mild soap."
    assert doc.title == "Helmet cleaning" and doc.ref_id == ref.id
    assert [(link.relation, link.target) for link in result.ledger.links_from(doc_id)] == [
        ("materialized_from", ref.id)
    ]
    resolves = [a for a in await scheduled_activities(client, handle) if a.activity_id != ""]
    assert [(a.activity_id, a.summary) for a in resolves][-1] == (
        f"resolve:{ref.id}",
        f"resolve doc: {web.url('/b')}",
    )


async def test_refused_traversal_and_a_missing_source_are_recorded_not_raised(
    client: Client, probe_worker: Settings, library: Path
) -> None:
    escape = SourceRef(source_id="docs", uid="../secret.txt")
    orphan = SourceRef(source_id="nowhere", uid="a.md")
    _, result = await run_probe(
        client,
        probe_worker,
        Probe(
            query="helmet",
            sources=specs(library),
            materialize=["helmets.md"],
            planted=[escape, orphan],
        ),
    )

    assert result.docs[0] is not None and result.docs[1:] == [None, None]
    refused = result.ledger.get(f"failure:resolve:{ref_id(escape, 'turn-1')}")
    refused = refused.typed(SourceFailure).data
    assert refused.error_type == "RefusedLocation" and "'..' escapes the root" in refused.message
    missing = result.ledger.get(f"failure:resolve:{ref_id(orphan, 'turn-1')}")
    assert missing.typed(SourceFailure).data.error_type == "SourceMissing"
    assert "1234" not in result.ledger.model_dump_json()
    assert any("resolve doc ../secret.txt failed (RefusedLocation)" in m for m in result.announced)


async def test_a_private_address_is_refused_unless_allowed(
    client: Client, probe_worker: Settings, web: LoopbackWeb
) -> None:
    # Registered URLs on loopback: found by their title words, refused on resolve.
    spec = SourceSpec.web(urls=[web.url("/a"), {"url": web.url("/b"), "title": "cleaning"}])
    _, result = await run_probe(
        client,
        probe_worker,
        Probe(query="helmet cleaning", sources=[spec], materialize=[web.url("/b")]),
    )

    assert result.docs == [None]
    (failure,) = result.ledger.find_all(SourceFailure)
    assert failure.data.error_type == "RefusedLocation"
    assert "loopback address" in failure.data.message
    assert web.requests == {}  # nothing was fetched, not even the search

    allowed = spec.model_copy(update={"allow_private": True})
    _, result = await run_probe(
        client,
        probe_worker,
        Probe(query="helmet cleaning", sources=[allowed], materialize=[web.url("/b")]),
    )
    assert result.docs[0] is not None and web.requests == {"/b": 1}


# --- the activities on their own -----------------------------------------------------


async def test_source_errors_become_application_errors_that_name_the_cause(
    library: Path, web: LoopbackWeb
) -> None:
    activities = SourceActivities()
    env = ActivityEnvironment()
    docs = SourceSpec.files(str(library / "docs"), source_id="docs")

    with pytest.raises(ApplicationError) as refused:
        await env.run(
            activities.resolve_ref,
            ResolveRequest(spec=docs, ref=SourceRef(source_id="docs", uid="/etc/passwd")),
        )
    assert refused.value.type == "RefusedLocation" and refused.value.non_retryable

    with pytest.raises(ApplicationError) as missing:
        await env.run(
            activities.resolve_ref,
            ResolveRequest(spec=docs, ref=SourceRef(source_id="docs", uid="gone.md")),
        )
    assert missing.value.type == "DocumentNotFound" and missing.value.non_retryable

    web.fail("/search", 503)
    endpoint = SourceSpec.web(search_endpoint=web.search_endpoint)
    with pytest.raises(ApplicationError) as transient:
        await env.run(activities.search_source, SearchRequest(spec=endpoint, query="helmet"))
    assert transient.value.type == "SourceUnavailable" and not transient.value.non_retryable
    assert transient.value.next_retry_delay is None  # the policy's own backoff applies

    web.fail("/search", 429, retry_after="7")
    with pytest.raises(ApplicationError) as limited:
        await env.run(activities.search_source, SearchRequest(spec=endpoint, query="helmet"))
    assert limited.value.type == "SourceUnavailable" and not limited.value.non_retryable
    assert limited.value.next_retry_delay == timedelta(seconds=7)  # what the server asked

    prices = SourceSpec.csv(str(library / "prices.csv"), key="item")
    row = await env.run(
        activities.resolve_ref,
        ResolveRequest(spec=prices, ref=SourceRef(source_id="prices", uid="city-bike")),
    )
    assert row.fields == {"item": "city-bike", "name": "City bike", "price": "14.00"}
    assert row.text == "item: city-bike\nname: City bike\nprice: 14.00"

    long = await env.run(
        activities.resolve_ref,
        ResolveRequest(spec=docs, ref=SourceRef(source_id="docs", uid="bikes.md"), max_chars=10),
    )
    assert long.truncated and long.text == "# Bikes\n\nO" and long.chars > 10
