"""Embeddings: the `EmbeddingProvider` protocol, `OpenAIEmbeddings` over any
OpenAI-compatible `/v1/embeddings` endpoint, and `EmbeddingSource`, vector search
over a prepared corpus.

The local model server (`durafact/_local/local_model.py`) serves all-MiniLM-L6-v2 at
`/v1/embeddings` under the model name `LOCAL_EMBEDDING_MODEL`, so

    OpenAIEmbeddings(base_url="http://127.0.0.1:8765/v1", model=LOCAL_EMBEDDING_MODEL)

works with no API key and nothing downloaded.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, model_validator

from durafact._core.redaction import redact_url
from durafact._core.sources import (
    DocumentNotFound,
    SourceError,
    SourceRef,
    check_limit,
    check_ref,
    preview,
    ranked,
)

if TYPE_CHECKING:
    import openai

LOCAL_EMBEDDING_MODEL = "all-minilm-l6-v2"


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into vectors, one per text, in order."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class OpenAIEmbeddings:
    """An `EmbeddingProvider` over the `openai` embeddings API (any compatible endpoint).

    Give a ready `openai.AsyncOpenAI` client, or a `base_url` and its `api_key` (none:
    a placeholder that keyless local servers accept; `OPENAI_API_KEY` is the key of
    `OPENAI_BASE_URL` and goes nowhere else), or neither: the environment's endpoint,
    `OPENAI_BASE_URL` with `OPENAI_API_KEY`. A client
    made here has `max_retries=0`: inside an activity Temporal owns retries, and the
    `openai` errors are raised as they are, for the activity layer to classify.
    Inputs are sent in batches of `batch_size`; vectors come back as floats.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 256,
        dimensions: int | None = None,
        timeout: float = 60.0,
    ) -> None:
        if client is None:
            import openai

            client = openai.AsyncOpenAI(
                base_url=base_url,
                api_key=api_key
                or (os.environ.get("OPENAI_API_KEY") if base_url is None else None)
                or "local",
                max_retries=0,
                timeout=timeout,
            )
        elif base_url is not None or api_key is not None:
            raise SourceError("give either an openai client or base_url/api_key, not both")
        if batch_size < 1:
            raise SourceError("batch_size must be a positive integer")
        self.client = client
        self.model = model
        self.batch_size = batch_size
        self.dimensions = dimensions

    def __repr__(self) -> str:
        base_url = redact_url(str(self.client.base_url))
        return f"OpenAIEmbeddings(model={self.model!r}, base_url={base_url!r})"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise SourceError("embed() takes a list of texts, not one string")
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            extra = {} if self.dimensions is None else {"dimensions": self.dimensions}
            response = await self.client.embeddings.create(
                model=self.model, input=batch, encoding_format="float", **extra
            )
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(batch):
                raise SourceError(
                    f"embeddings endpoint returned {len(data)} vectors for {len(batch)} inputs"
                )
            vectors.extend([float(x) for x in item.embedding] for item in data)
        return vectors


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors of the same length (0.0 if either is zero)."""
    if len(a) != len(b):
        raise SourceError(f"vectors of different dimensions: {len(a)} and {len(b)}")
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norm if norm else 0.0


class CorpusEntry(BaseModel):
    uid: str
    text: str
    vector: list[float]


class EmbeddedCorpus(BaseModel):
    """A corpus with its vectors: build it once (`await EmbeddedCorpus.build(...)`), keep
    it (`model_dump_json()` / `model_validate_json()`), and hand it to `EmbeddingSource`
    so a worker does not embed the corpus again at every start."""

    model: str | None = None
    entries: list[CorpusEntry]

    @model_validator(mode="after")
    def _consistent(self) -> EmbeddedCorpus:
        seen: set[str] = set()
        for entry in self.entries:
            if entry.uid in seen:
                raise ValueError(f"duplicate uid in corpus: {entry.uid!r}")
            seen.add(entry.uid)
        if len({len(entry.vector) for entry in self.entries}) > 1:
            raise ValueError("corpus vectors have different dimensions")
        return self

    @classmethod
    async def build(
        cls,
        items: Iterable[tuple[str, str]] | Mapping[str, str],
        embedder: EmbeddingProvider,
        model: str | None = None,
    ) -> EmbeddedCorpus:
        pairs = _pairs(items)
        vectors = await embedder.embed([text for _, text in pairs]) if pairs else []
        if len(vectors) != len(pairs):
            raise SourceError(f"embedder returned {len(vectors)} vectors for {len(pairs)} texts")
        entries = [
            CorpusEntry(uid=uid, text=text, vector=vector)
            for (uid, text), vector in zip(pairs, vectors, strict=True)
        ]
        return cls(model=model or getattr(embedder, "model", None), entries=entries)


def _pairs(items: Iterable[tuple[str, str]] | Mapping[str, str]) -> list[tuple[str, str]]:
    pairs = list(items.items()) if isinstance(items, Mapping) else [tuple(i) for i in items]
    seen: set[str] = set()
    for pair in pairs:
        if len(pair) != 2 or not all(isinstance(part, str) for part in pair):
            raise SourceError(f"a corpus item must be a (uid, text) pair of strings: {pair!r}")
        if pair[0] in seen:
            raise SourceError(f"duplicate uid in corpus: {pair[0]!r}")
        seen.add(pair[0])
    return pairs  # type: ignore[return-value]


class EmbeddingSource:
    """Vector search over a corpus: the refs whose text is most similar to the query.

    `corpus` is a list of `(uid, text)` pairs (or a `{uid: text}` mapping), embedded
    once, on the first search, and cached; or an `EmbeddedCorpus` whose vectors are
    used as they are (the `embedder` then embeds queries only, and must be the same
    model). `score` is the cosine similarity of query and text, in [-1, 1]; with a
    `min_score`, refs at or below it are left out. `resolve` returns the text of the entry.
    """

    def __init__(
        self,
        corpus: Iterable[tuple[str, str]] | Mapping[str, str] | EmbeddedCorpus,
        embedder: EmbeddingProvider,
        source_id: str = "vectors",
        *,
        min_score: float | None = None,
    ) -> None:
        self.source_id = source_id
        self.embedder = embedder
        self.min_score = min_score
        if isinstance(corpus, EmbeddedCorpus):
            self._corpus: EmbeddedCorpus | None = corpus
            self._texts = {entry.uid: entry.text for entry in corpus.entries}
            self._pending: list[tuple[str, str]] = []
        else:
            self._corpus = None
            self._pending = _pairs(corpus)
            self._texts = dict(self._pending)
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"EmbeddingSource({len(self._texts)} texts, source_id={self.source_id!r})"

    async def corpus(self) -> EmbeddedCorpus:
        """The corpus with its vectors, embedding it on the first call only."""
        if self._corpus is None:
            async with self._lock:
                if self._corpus is None:
                    self._corpus = await EmbeddedCorpus.build(self._pending, self.embedder)
        return self._corpus

    async def search(self, query: str, limit: int = 5) -> list[SourceRef]:
        check_limit(limit)
        corpus = await self.corpus()
        if not corpus.entries:
            return []
        (query_vector,) = await self.embedder.embed([query])
        refs = []
        for entry in corpus.entries:
            score = cosine(query_vector, entry.vector)
            if self.min_score is not None and score <= self.min_score:
                continue
            refs.append(
                SourceRef(
                    source_id=self.source_id,
                    uid=entry.uid,
                    payload=preview(entry.text),
                    score=score,
                    query=query,
                )
            )
        return ranked(refs, limit)

    async def resolve(self, ref: SourceRef) -> str:
        check_ref(self.source_id, ref)
        try:
            return self._texts[ref.uid]
        except KeyError:
            raise DocumentNotFound(
                f"source {self.source_id!r}: no corpus entry {ref.uid!r}"
            ) from None
