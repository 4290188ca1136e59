"""Endpoints are worker configuration: a workflow names an endpoint, the worker knows
its URL and key. Three loopback servers that record every request's headers (the
scripted model server) stand for the default endpoint, a configured one and a
stranger's; the Authorization headers each one saw prove that no key reaches a
server the worker was not configured with, and that each endpoint gets its own key
and no other. The configuration's mistakes are one line, at worker start."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from durafact._core.ledger import Ledger
from durafact._core.llm import ChatMessage, LLMRequest
from durafact._core.sources import SearchRequest, SourceFailure, SourceRef, SourceSpec
from durafact._recipes.recipe import Recipe, RecipeContext
from durafact._recipes.sources import fan_out_sources

with workflow.unsafe.imports_passed_through():
    from durafact._activities.embedding_source import LOCAL_EMBEDDING_MODEL, OpenAIEmbeddings
    from durafact._runtime.endpoints import Endpoint, EndpointError, configured_endpoints
    from durafact._runtime.settings import Settings, SettingsError
    from durafact._runtime.worker import build_worker
    from durafact.testing import ScriptedModel
    from tests.helpers import DURAFACT_WORKER, ROOT, free_port, run_command

DEFAULT_KEY = "sk-default-worker-key"
EMBED_KEY = "sk-embed-endpoint-key"
CORPUS = {
    "kayaks": "Kayak rental: we rent kayaks by the hour from the river pier.",
    "hours": "The shop opens at nine and closes at six on weekdays.",
}


class Search(BaseModel):
    query: str
    sources: list[SourceSpec]


class Found(BaseModel):
    ledger: Ledger


@workflow.defn
class EndpointProbe(Recipe[Search, Found]):
    """One search of every source; failures stay in the ledger."""

    recipe_name = "endpoint-probe"

    @workflow.run
    async def run(self, search: Search) -> Found:
        return await self.execute(search)

    async def lifecycle(self, ctx: RecipeContext, search: Search) -> Found:
        await fan_out_sources(ctx, search.query, sources=search.sources, owner_id="turn-1")
        return Found(ledger=ctx.ledger)


class Ask(BaseModel):
    question: str
    endpoint: str | None = None


@workflow.defn
class ModelProbe(Recipe[Ask, str]):
    """One model request on the endpoint the input names."""

    recipe_name = "model-probe"

    @workflow.run
    async def run(self, ask: Ask) -> str:
        return await self.execute(ask)

    async def lifecycle(self, ctx: RecipeContext, ask: Ask) -> str:
        messages = [ChatMessage(role="user", content=ask.question)]
        return (await ctx.llm.request(messages, endpoint=ask.endpoint)).text


@pytest.fixture
def embed_server() -> Iterator[ScriptedModel]:
    server = ScriptedModel().start()
    yield server
    server.stop()


@pytest.fixture
def stranger() -> Iterator[ScriptedModel]:
    """A server nobody configured: whoever starts a workflow may know its URL."""
    server = ScriptedModel().start()
    yield server
    server.stop()


@pytest.fixture
async def endpoint_worker(
    client: Client, model: ScriptedModel, embed_server: ScriptedModel
) -> AsyncIterator[Settings]:
    settings = Settings(
        openai_base_url=model.url,
        openai_api_key=DEFAULT_KEY,
        endpoints={"embed": Endpoint(name="embed", base_url=embed_server.url, api_key=EMBED_KEY)},
        model="scripted",
        task_queue=f"test-{uuid.uuid4().hex[:8]}",
    )
    async with build_worker(client, settings, workflows=[EndpointProbe, ModelProbe]):
        yield settings


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(CORPUS))
    return path


async def probe(client: Client, settings: Settings, sources: list[SourceSpec]) -> Ledger:
    result = await client.execute_workflow(
        EndpointProbe.run,
        Search(query="rent a kayak", sources=sources),
        id=f"endpoints-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )
    return result.ledger


def authorizations(server: ScriptedModel) -> set[str]:
    """Every Authorization header the server saw, on any path."""
    calls = [*server.calls, *server.embedding_calls]
    return {call.headers.get("authorization", "") for call in calls}


# --- a workflow cannot send the worker's key anywhere ----------------------------------


def test_a_spec_naming_an_embedding_url_is_refused(stranger: ScriptedModel, corpus: Path) -> None:
    # A field a spec does not declare (the pre-release embedding_base_url) is refused,
    # never dropped: nobody believes the URL they gave is in use.
    with pytest.raises(ValidationError, match="embedding_base_url\n  Extra inputs"):
        SourceSpec.embedding(str(corpus), embedding_base_url=stranger.url)
    # The same in raw workflow or activity input (JSON), for files sources too.
    raw = {"kind": "files", "source_id": "docs", "root": str(corpus.parent)}
    raw |= {"embedding_model": LOCAL_EMBEDDING_MODEL, "embedding_base_url": stranger.url}
    with pytest.raises(ValidationError, match="embedding_base_url\n  Extra inputs"):
        SearchRequest.model_validate({"spec": raw, "query": "kayak"})
    # A URL where the endpoint's name goes is not a name.
    with pytest.raises(ValidationError, match="is not an endpoint name"):
        SourceSpec.embedding(str(corpus), embedding_endpoint=stranger.url)
    assert stranger.embedding_calls == [] and stranger.calls == []


async def test_raw_workflow_input_naming_a_url_reaches_nobody(
    client: Client,
    endpoint_worker: Settings,
    model: ScriptedModel,
    stranger: ScriptedModel,
    corpus: Path,
) -> None:
    """Input that skips the starter's checks (plain JSON, as any client may send) still
    meets SourceSpec at workflow entry: its task fails saying what to use instead, and
    the URL it names is never called."""
    raw = {"kind": "embedding", "source_id": "vectors", "corpus": str(corpus)}
    raw["embedding_base_url"] = stranger.url
    handle = await client.start_workflow(
        "EndpointProbe",
        {"query": "rent a kayak", "sources": [raw]},
        id=f"endpoints-{uuid.uuid4().hex[:8]}",
        task_queue=endpoint_worker.task_queue,
    )
    try:
        failure = ""
        for _ in range(100):
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    failure = event.workflow_task_failed_event_attributes.failure.cause.message
            if failure:
                break
            await asyncio.sleep(0.1)
        assert "embedding_base_url" in failure and "Extra inputs are not permitted" in failure
    finally:
        await handle.terminate()
    assert stranger.embedding_calls == [] and stranger.calls == []
    assert model.embedding_calls == []


async def test_an_endpoint_the_worker_lacks_is_refused_before_any_request(
    client: Client,
    endpoint_worker: Settings,
    model: ScriptedModel,
    embed_server: ScriptedModel,
    stranger: ScriptedModel,
    corpus: Path,
) -> None:
    unknown = SourceSpec.embedding(str(corpus), source_id="vectors", embedding_endpoint="stranger")
    ledger = await probe(client, endpoint_worker, [unknown])

    (failure,) = ledger.find_all(SourceFailure)
    assert failure.data.error_type == "UnknownEndpoint"
    assert "no endpoint 'stranger' is configured on this worker" in failure.data.message
    assert "it has 'default', 'embed'" in failure.data.message
    assert ledger.find_all(SourceRef) == []
    # Nobody was asked anything: not the stranger, not the configured endpoints.
    for server in (stranger, model, embed_server):
        assert server.embedding_calls == [] and server.calls == []


async def test_each_endpoint_gets_its_own_key_and_no_other(
    client: Client,
    endpoint_worker: Settings,
    model: ScriptedModel,
    embed_server: ScriptedModel,
    stranger: ScriptedModel,
    corpus: Path,
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kayaks.md").write_text("# Kayaks\n\nWe rent kayaks by the hour.\n")
    sources = [
        SourceSpec.embedding(str(corpus), source_id="on-default"),
        SourceSpec.embedding(str(corpus), source_id="on-embed", embedding_endpoint="embed"),
        SourceSpec.files(
            str(docs),
            source_id="files-on-embed",
            embedding_model=LOCAL_EMBEDDING_MODEL,
            embedding_endpoint="EMBED",  # names are not case-sensitive
        ),
    ]
    ledger = await probe(client, endpoint_worker, sources)

    assert ledger.find_all(SourceFailure) == []
    found = {ref.data.source_id for ref in ledger.find_all(SourceRef)}
    assert found == {"on-default", "on-embed", "files-on-embed"}
    # The default endpoint embedded the default source's corpus and query, with its key.
    assert [c.body["input"] for c in model.embedding_calls] == [
        list(CORPUS.values()),
        ["rent a kayak"],
    ]
    assert authorizations(model) == {f"Bearer {DEFAULT_KEY}"}
    # The configured endpoint served both sources that name it, with its own key only.
    assert len(embed_server.embedding_calls) == 3  # corpus, query; query + the file
    assert authorizations(embed_server) == {f"Bearer {EMBED_KEY}"}
    assert stranger.embedding_calls == [] and stranger.calls == []


async def test_a_url_given_to_the_embeddings_client_never_gets_the_environment_key(
    stranger: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_KEY)
    embedder = OpenAIEmbeddings(base_url=stranger.url, model=LOCAL_EMBEDDING_MODEL)
    try:
        await embedder.embed(["kayak"])
    finally:
        await embedder.client.close()
    assert DEFAULT_KEY not in str(authorizations(stranger))
    # The key of OPENAI_BASE_URL goes with OPENAI_BASE_URL, as the openai client does it.
    monkeypatch.setenv("OPENAI_BASE_URL", stranger.url)
    stranger.reset()
    embedder = OpenAIEmbeddings(model=LOCAL_EMBEDDING_MODEL)
    try:
        await embedder.embed(["kayak"])
    finally:
        await embedder.client.close()
    assert authorizations(stranger) == {f"Bearer {DEFAULT_KEY}"}


# --- model requests name endpoints the same way ---------------------------------------


async def test_a_model_request_names_an_endpoint_and_each_gets_its_own_key(
    client: Client,
    endpoint_worker: Settings,
    model: ScriptedModel,
    embed_server: ScriptedModel,
    stranger: ScriptedModel,
) -> None:
    async def ask(question: str, endpoint: str | None) -> str:
        return await client.execute_workflow(
            ModelProbe.run,
            Ask(question=question, endpoint=endpoint),
            id=f"endpoints-{uuid.uuid4().hex[:8]}",
            task_queue=endpoint_worker.task_queue,
        )

    assert await ask("on the default", None) == "done: on the default"
    assert await ask("on embed", "embed") == "done: on embed"
    assert [c.last_user for c in model.calls] == ["on the default"]
    assert authorizations(model) == {f"Bearer {DEFAULT_KEY}"}
    assert [c.last_user for c in embed_server.calls] == ["on embed"]
    assert authorizations(embed_server) == {f"Bearer {EMBED_KEY}"}

    with pytest.raises(WorkflowFailureError) as failed:
        await ask("on a stranger", "stranger")
    cause = failed.value.cause.cause
    assert (cause.type, cause.non_retryable) == ("UnknownEndpoint", True)
    assert "no model endpoint 'stranger' is configured on this worker" in cause.message
    assert "it has 'default', 'embed'" in cause.message
    assert stranger.calls == [] and len(model.calls) == len(embed_server.calls) == 1
    # A URL is not an endpoint's name: such a request cannot even be made.
    with pytest.raises(ValidationError, match="endpoint"):
        LLMRequest(messages=[ChatMessage(role="user", content="hi")], endpoint=stranger.url)


# --- the configuration -----------------------------------------------------------------


def test_endpoints_come_from_the_environment_with_their_own_keys() -> None:
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:8765/v1",
        "OPENAI_API_KEY": DEFAULT_KEY,
        "DURAFACT_ENDPOINT_EMBED": "https://embeddings.example.com/v1",
        "DURAFACT_ENDPOINT_EMBED_KEY": EMBED_KEY,
        "DURAFACT_ENDPOINT_LOCAL_MINILM": "http://127.0.0.1:9000/v1",
    }
    endpoints = configured_endpoints(env)
    assert list(endpoints) == ["default", "embed", "local_minilm"]
    assert endpoints["default"].base_url == env["OPENAI_BASE_URL"]
    assert endpoints["default"].api_key == DEFAULT_KEY
    assert (endpoints["embed"].base_url, endpoints["embed"].api_key) == (
        "https://embeddings.example.com/v1",
        EMBED_KEY,
    )
    assert endpoints["local_minilm"].api_key is None  # no key: none sent, never another's

    settings = Settings.from_env(env)
    assert sorted(settings.all_endpoints()) == ["default", "embed", "local_minilm"]
    assert settings.all_endpoints()["embed"].api_key == EMBED_KEY
    shown = repr(settings) + settings.model_dump_json()  # logs and dumps never hold keys
    assert EMBED_KEY not in shown and DEFAULT_KEY not in shown


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (
            {"DURAFACT_ENDPOINT_EMBED_KEY": EMBED_KEY},
            "DURAFACT_ENDPOINT_EMBED_KEY is set but DURAFACT_ENDPOINT_EMBED (its URL) is not",
        ),
        (
            {"DURAFACT_ENDPOINT_EMBED": "embeddings.example.com"},
            "DURAFACT_ENDPOINT_EMBED='embeddings.example.com': expected an http:// or https://",
        ),
        (
            {"DURAFACT_ENDPOINT_EMBED": "file:///etc/passwd"},
            "expected an http:// or https:// URL with a host",
        ),
        (
            {"DURAFACT_ENDPOINT_DEFAULT": "http://127.0.0.1:1/v1"},
            "the endpoint 'default' is OPENAI_BASE_URL with OPENAI_API_KEY",
        ),
        ({"DURAFACT_ENDPOINT_": "http://127.0.0.1:1/v1"}, "'' is not an endpoint name"),
        ({"OPENAI_BASE_URL": "127.0.0.1:8765"}, "OPENAI_BASE_URL='127.0.0.1:8765'"),
        ({"DURAFACT_ENDPOINT_X": "http://h:port/v1"}, "DURAFACT_ENDPOINT_X='http://h:port/v1'"),
    ],
)
def test_a_configuration_mistake_is_one_line(env: dict[str, str], reason: str) -> None:
    with pytest.raises(EndpointError) as raised:
        configured_endpoints(env)
    assert reason in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(SettingsError, match="^[^\n]+$"):
        Settings.from_env(env)


async def test_the_worker_refuses_a_bad_endpoint_at_start_before_connecting() -> None:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",  # nothing there: never reached
        "OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "DURAFACT_ENDPOINT_EMBED_KEY": EMBED_KEY,
    }
    run = await run_command(*DURAFACT_WORKER, env=env, cwd=ROOT, timeout=60)
    assert run.code == 2
    assert run.err.strip().splitlines() == [
        "worker: DURAFACT_ENDPOINT_EMBED_KEY is set but DURAFACT_ENDPOINT_EMBED (its URL) is "
        "not: a key is only ever sent to the URL configured beside it"
    ]
    assert EMBED_KEY not in run.err
