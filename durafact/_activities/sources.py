"""The source activities: search a source, resolve one ref. The I/O of `fan_out_sources`
and `materialize_doc` (durafact/_recipes/sources.py).

A workflow holds `SourceSpec`s only; `build_source` turns a spec into the real
`Source` here, on the worker, and the built sources are kept (by spec) so a
directory's scan, a CSV file's rows and a corpus's vectors are reused between
calls. Failures are classified for Temporal: a `SourceError` whose `retryable` is
False (a refused location, a missing document, an unsupported content type, a bad
configuration) becomes a non-retryable `ApplicationError` whose type is the error's
class name (`RefusedLocation`, `DocumentNotFound`, `ContentTooLarge`, ...); a
transient one (`SourceUnavailable`: a timeout, a 5xx, a 429) is retryable, so
the workflow's retry policy tries it again, after the server's `retry-after` when a
web page or search endpoint sent one. An embeddings endpoint's errors are
classified like the model's (`durafact._activities.llm.classify_error`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durafact._activities.csv_source import CSVSource
from durafact._activities.embedding_source import (
    LOCAL_EMBEDDING_MODEL,
    EmbeddedCorpus,
    EmbeddingSource,
    OpenAIEmbeddings,
)
from durafact._activities.files_source import FileSystemSource
from durafact._activities.heartbeat import heartbeating
from durafact._activities.llm import classify_error
from durafact._activities.web_source import RegisteredPage, WebSource
from durafact._core.sources import (
    DEFAULT_ENDPOINT,
    ResolvedDoc,
    ResolveRequest,
    SearchRequest,
    Source,
    SourceError,
    SourceRef,
    SourceSpec,
    WebPage,
)

CORPUS_PATTERNS = ("*.md", "*.txt")
_URL_NOISE = {"www", "http", "https", "html", "htm", "php", "aspx", "index"}


class InvalidSourceSpec(SourceError):
    """A spec the worker cannot build a source from (an unreadable corpus file, ...)."""


class UnknownEndpoint(SourceError):
    """A spec names an embedding endpoint this worker has not configured. Nothing is
    sent anywhere: endpoints and their keys are the worker's configuration."""


def endpoint_client(
    spec: SourceSpec, endpoints: Mapping[str, openai.AsyncOpenAI] | None
) -> openai.AsyncOpenAI | None:
    """The client for the endpoint `spec.embedding_endpoint` names (None: `default`).

    `endpoints` are the worker's clients by name; None means none were given, and
    then only `default` exists, made from the environment (returned as None)."""
    name = (spec.embedding_endpoint or DEFAULT_ENDPOINT).lower()
    configured = dict(endpoints) if endpoints is not None else {DEFAULT_ENDPOINT: None}
    if name not in configured:
        raise UnknownEndpoint(
            f"source {spec.source_id!r}: no endpoint {name!r} is configured on this worker; "
            f"it has {', '.join(repr(n) for n in sorted(configured))} "
            "(more with DURAFACT_ENDPOINT_<NAME>=URL and DURAFACT_ENDPOINT_<NAME>_KEY=KEY)"
        )
    return configured[name]


def source_failure(exc: SourceError) -> ApplicationError:
    """The ApplicationError Temporal acts on: retryable only when the source says so, and
    then after the server's `retry-after` when it gave one."""
    return ApplicationError(
        str(exc),
        type=type(exc).__name__,
        non_retryable=not exc.retryable,
        next_retry_delay=exc.retry_after if exc.retryable else None,
    )


def page_title(page: WebPage) -> str:
    """A registered page's title, else the words of its URL's host and path."""
    if page.title.strip():
        return page.title
    parts = urlsplit(page.url)
    words = re.split(r"[^0-9A-Za-z]+", f"{parts.hostname or ''} {parts.path}")
    return " ".join(w for w in words if w and w.lower() not in _URL_NOISE)


def load_corpus(location: str) -> dict[str, str] | EmbeddedCorpus:
    """A corpus from a directory (each `.md`/`.txt` file under it, by relative path) or a
    JSON file: a saved `EmbeddedCorpus`, a `{uid: text}` object or `[uid, text]` pairs."""
    path = Path(location).expanduser()
    if path.is_dir():
        texts = {}
        for pattern in CORPUS_PATTERNS:
            for file in sorted(path.rglob(pattern)):
                relative = file.relative_to(path)
                if file.is_file() and not any(p.startswith(".") for p in relative.parts):
                    texts[relative.as_posix()] = file.read_text(encoding="utf-8", errors="replace")
        return dict(sorted(texts.items()))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidSourceSpec(f"corpus {location}: no such file or directory") from None
    except (OSError, ValueError) as exc:
        raise InvalidSourceSpec(f"corpus {location}: not a readable JSON file: {exc}") from None
    except RecursionError:  # nested past the parser's depth: bad data, not a retryable crash
        raise InvalidSourceSpec(f"corpus {location}: JSON nested too deeply") from None
    try:
        if isinstance(data, dict) and "entries" in data:
            return EmbeddedCorpus.model_validate(data)
        if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
            return data
        if isinstance(data, list):
            return {str(uid): str(text) for uid, text in data}
    except (ValidationError, ValueError, TypeError) as exc:
        raise InvalidSourceSpec(f"corpus {location}: {exc}") from None
    raise InvalidSourceSpec(
        f"corpus {location}: expected a saved EmbeddedCorpus, a {{uid: text}} object "
        "or a list of [uid, text] pairs"
    )


def build_source(
    spec: SourceSpec, endpoints: Mapping[str, openai.AsyncOpenAI] | None = None
) -> Source:
    """The `Source` a spec describes. Reads files (a CSV, a corpus): call it off the
    event loop. `endpoints` are the worker's embedding clients by name (`default`:
    its model client); a spec naming another one raises `UnknownEndpoint` before
    anything is sent. None: only `default`, from OPENAI_BASE_URL/OPENAI_API_KEY."""
    settings = spec.settings()

    def embedder() -> OpenAIEmbeddings:
        model = spec.embedding_model or LOCAL_EMBEDDING_MODEL
        client = endpoint_client(spec, endpoints)
        if client is None:
            return OpenAIEmbeddings(model=model)  # the environment's endpoint and key
        return OpenAIEmbeddings(client, model=model)

    if spec.kind == "files":
        return FileSystemSource(
            settings["root"],
            source_id=spec.source_id,
            patterns=tuple(spec.patterns or ("*.md", "*.txt")),
            embedder=embedder() if spec.embedding_model else None,
            **({"max_bytes": spec.max_bytes} if spec.max_bytes else {}),
        )
    if spec.kind == "csv":
        assert spec.path is not None and spec.key is not None
        return CSVSource(
            spec.path,
            key=spec.key,
            columns=spec.columns,
            source_id=spec.source_id,
            **{
                name: settings[name]
                for name in ("delimiter", "max_bytes", "max_rows")
                if settings.get(name)
            },
        )
    if spec.kind == "web":
        pages = [
            RegisteredPage(url=page.url, title=page_title(page), description=page.description)
            for page in spec.urls or []
        ]
        extra: dict[str, Any] = {
            name: settings[name] for name in ("timeout", "max_bytes") if name in settings
        }
        return WebSource(
            source_id=spec.source_id,
            search_endpoint=spec.search_endpoint,
            urls=pages,
            allow_private=bool(spec.allow_private),
            allowed_networks=spec.allowed_networks or (),
            **extra,
        )
    assert spec.corpus is not None
    return EmbeddingSource(
        load_corpus(spec.corpus), embedder(), source_id=spec.source_id, min_score=spec.min_score
    )


def _row_text(fields: dict[str, str]) -> str:
    return "\n".join(f"{name}: {value}" for name, value in fields.items())


class SourceActivities:
    """`search_source` and `resolve_ref`; one instance per worker, sources kept by spec.

    `endpoints` are the embedding clients a spec may name (`embedding_endpoint`), by
    name; the worker passes one per configured endpoint, `default` being its model
    client. Their owner closes them."""

    def __init__(
        self, endpoints: Mapping[str, openai.AsyncOpenAI] | None = None, keep: int = 32
    ) -> None:
        self._endpoints = endpoints
        self._keep = keep
        self._sources: OrderedDict[str, Source] = OrderedDict()

    async def source(self, spec: SourceSpec) -> Source:
        """The built source for `spec` (built on first use, off the event loop)."""
        key = spec.model_dump_json()
        source = self._sources.get(key)
        if source is None:
            try:
                source = await asyncio.to_thread(build_source, spec, self._endpoints)
            except SourceError:
                raise
            except (OSError, ValueError) as exc:
                raise InvalidSourceSpec(f"source {spec.source_id!r}: {exc}") from exc
            self._sources[key] = source
            while len(self._sources) > self._keep:
                self._sources.popitem(last=False)
        self._sources.move_to_end(key)
        return source

    @activity.defn(name="search_source")
    async def search_source(self, request: SearchRequest) -> list[SourceRef]:
        try:
            source = await self.source(request.spec)
            refs = await heartbeating(source.search(request.query, request.limit))
        except SourceError as exc:
            raise source_failure(exc) from exc
        except openai.OpenAIError as exc:
            raise classify_error(exc) from None  # see classify_error
        return list(refs)

    @activity.defn(name="resolve_ref")
    async def resolve_ref(self, request: ResolveRequest) -> ResolvedDoc:
        spec, ref = request.spec, request.ref
        if ref.source_id != spec.source_id:
            raise ApplicationError(
                f"ref {ref.uid!r} belongs to source {ref.source_id!r}, not {spec.source_id!r}",
                type="SourceMismatch",
                non_retryable=True,
            )
        try:
            source = await self.source(spec)
            text = await heartbeating(source.resolve(ref))
        except SourceError as exc:
            raise source_failure(exc) from exc
        except openai.OpenAIError as exc:
            raise classify_error(exc) from None  # see classify_error
        fields = None
        title = str(ref.metadata.get("title") or "")
        if spec.kind == "csv":
            # CSVSource resolves a row as JSON; the model reads `column: value` lines
            # and the workflow computes from the exact cells.
            fields = {str(k): str(v) for k, v in json.loads(text).items()}
            text = _row_text(fields)
            title = title or f"{spec.key} {ref.uid}"
        chars = len(text)
        truncated = chars > request.max_chars
        return ResolvedDoc(
            source_id=ref.source_id,
            uid=ref.uid,
            title=title,
            text=text[: request.max_chars] if truncated else text,
            fields=fields,
            chars=chars,
            truncated=truncated,
        )
