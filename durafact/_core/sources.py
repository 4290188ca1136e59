"""The source contract: `SourceRef`, the `Source` protocol, its errors, and the
`SourceSpec`s and requests that cross the workflow/activity boundary.

This module is pure (pydantic and hashlib only): a workflow stores refs and specs
as artifacts; the sources themselves (`activities/*_source.py`) do I/O and are
called only from activities.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PREVIEW_CHARS = 240  # a ref's payload is a preview for choosing, never the content


class SourceError(Exception):
    """A source could not do what was asked, with a message that says why.

    `retryable` tells the activity layer whether trying again may help (a timeout,
    a 503) or cannot (a refused location, a missing document, a bad request);
    `retry_after` is when the server said to come back (its `retry-after`), if it did.
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after: timedelta | None = None,
    ) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        self.retry_after = retry_after


class RefusedLocation(SourceError):
    """A locator points where the source must not read: outside its root, at a file
    it does not serve, at a non-global address, or with a scheme it does not speak."""


class DocumentNotFound(SourceError):
    """The locator is acceptable but names nothing (no such file, row key or page)."""


class UnsupportedContent(SourceError):
    """The document is of a kind the source does not turn into text (a content type)."""


class ContentTooLarge(SourceError):
    """The document exceeds the source's size cap; reading stopped at the cap."""


class SourceUnavailable(SourceError):
    """A transient failure (timeout, connection error, 5xx, 429): worth retrying."""

    retryable = True


class SourceRef(BaseModel):
    """A ranked reference to one document of one source: what a search returns.

    `uid` is the document's locator inside the source (a path relative to a root,
    a row key, a URL); `payload` is a short preview to choose by, not the content,
    which only `Source.resolve` returns.
    """

    source_id: str
    uid: str
    payload: str = ""
    score: float = 0.0
    query: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def stable_id(self) -> str:
        """A short hash of `source_id` and `uid`: the same document found by any query,
        in any search, gets the same id (artifact ids such as `ref:{stable_id}:{owner}`)."""
        key = json.dumps([self.source_id, self.uid], ensure_ascii=False)
        return hashlib.sha256(key.encode()).hexdigest()[:16]


@runtime_checkable
class Source(Protocol):
    """Where information comes from. Kept small so new kinds are new implementations.

    `search` returns at most `limit` refs, best first, each carrying the query;
    `resolve` returns the content of one ref (text), raising `SourceError` when it
    cannot. Both are async and may do I/O: call them from activities only.
    """

    source_id: str

    async def search(self, query: str, limit: int = 5) -> list[SourceRef]: ...

    async def resolve(self, ref: SourceRef) -> str: ...


def check_limit(limit: int) -> int:
    """`limit` as given, or a `SourceError` when it is not a positive integer."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SourceError(f"limit must be a positive integer, got {limit!r}")
    return limit


def check_ref(source_id: str, ref: SourceRef) -> None:
    """Refuse a ref that another source produced."""
    if ref.source_id != source_id:
        raise SourceError(
            f"ref {ref.uid!r} belongs to source {ref.source_id!r}, not to {source_id!r}"
        )


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` with whitespace folded, cut at a word boundary to at most `limit` chars."""
    folded = " ".join(text.split())
    if len(folded) <= limit:
        return folded
    cut = folded[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def ranked(refs: list[SourceRef], limit: int) -> list[SourceRef]:
    """Best first; equal scores keep their given order (stable sort). At most `limit`."""
    return sorted(refs, key=lambda ref: -ref.score)[:limit]


# --- Specs: what a workflow holds instead of a `Source` ---------------------------------

SourceKind = Literal["files", "csv", "web", "embedding"]
SOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_ENDPOINT = "default"  # the worker's OPENAI_BASE_URL with OPENAI_API_KEY
ENDPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")

# What each kind's constructor takes besides `source_id`; the rest must stay unset.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "files": ("root", "patterns", "max_bytes", "embedding_model", "embedding_endpoint"),
    "csv": ("path", "key", "columns", "delimiter", "decimal_comma", "max_bytes", "max_rows"),
    "web": ("search_endpoint", "urls", "allow_private", "allowed_networks", "timeout", "max_bytes"),
    "embedding": ("corpus", "embedding_model", "embedding_endpoint", "min_score"),
}
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "files": ("root",),
    "csv": ("path", "key"),
    "web": (),  # search_endpoint or urls: checked below
    "embedding": ("corpus",),
}


class WebPage(BaseModel):
    """A URL known in advance for a web source without a search endpoint. A search
    matches its title and description; without a title, the worker uses the words of
    the URL's host and path."""

    url: str
    title: str = ""
    description: str = ""


class SourceSpec(BaseModel):
    """Where one source searches: what a workflow holds instead of a `Source`.

    `kind` picks the implementation and which fields apply (a field of another kind
    is an error, not ignored, and so is a field it does not declare):

    - `files`: `FileSystemSource(root, patterns=..., max_bytes=...)`; with
      `embedding_model`, file vectors from the worker's OpenAI-compatible endpoint
      (`embedding_endpoint`) are mixed into the keyword score.
    - `csv`: `CSVSource(path, key=..., columns=..., delimiter=..., max_bytes=...,
      max_rows=...)`; `decimal_comma`
      says how the workflow parses its numbers.
    - `web`: `WebSource(search_endpoint=... | urls=[...], allow_private=...,
      allowed_networks=..., timeout=..., max_bytes=...)`.
    - `embedding`: `EmbeddingSource` over `corpus`, a directory of `.md`/`.txt` files
      or a JSON file (a `{uid: text}` object, or a saved `EmbeddedCorpus`), embedded
      with `embedding_model` (default: the local model's).

    `embedding_endpoint` names an endpoint configured on the worker, never a URL:
    the worker alone knows where it is and which key it gets (durafact/_runtime/endpoints.py).

    Paths are read by the worker, so give them absolute (the starter does).
    """

    # Refused, not dropped: nobody believes a field they gave (a URL, say) is in use.
    model_config = ConfigDict(extra="forbid")

    kind: SourceKind
    source_id: str = Field(description="Names the source in ids: letters, digits, _ . -")
    # files
    root: str | None = None
    patterns: list[str] | None = None
    # csv
    path: str | None = None
    key: str | None = None
    columns: list[str] | None = None
    delimiter: str | None = None
    decimal_comma: bool | None = None
    max_rows: int | None = Field(
        default=None, gt=0, description="csv: data rows at most (None: 100,000)."
    )
    # web
    search_endpoint: str | None = None
    urls: list[WebPage] | None = None
    allow_private: bool | None = None
    allowed_networks: list[str] | None = None
    timeout: float | None = Field(default=None, gt=0)
    # files, csv and web (None: each source's default; csv: 10 MB)
    max_bytes: int | None = Field(default=None, gt=0)
    # embedding (and files, optionally)
    corpus: str | None = None
    embedding_model: str | None = None
    embedding_endpoint: str | None = Field(
        default=None,
        description="The name of an endpoint configured on the worker (None: `default`, "
        "the worker's OPENAI_BASE_URL with OPENAI_API_KEY); a name, never a URL.",
    )
    min_score: float | None = None

    @field_validator("urls", mode="before")
    @classmethod
    def _url_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"url": item} if isinstance(item, str) else item for item in value]
        return value

    @model_validator(mode="after")
    def _fits_kind(self) -> SourceSpec:
        if not SOURCE_ID.fullmatch(self.source_id):
            raise ValueError(
                f"source id {self.source_id!r}: 1-64 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit"
            )
        allowed = KIND_FIELDS[self.kind]
        foreign = [
            name
            for name in self.model_fields_set
            if name not in ("kind", "source_id", *allowed) and getattr(self, name) is not None
        ]
        if foreign:
            raise ValueError(
                f"source {self.source_id!r} ({self.kind}): {', '.join(sorted(foreign))} "
                f"{'does' if len(foreign) == 1 else 'do'} not apply; it takes "
                f"{', '.join(allowed)}"
            )
        for name in REQUIRED_FIELDS[self.kind]:
            value = getattr(self, name)
            if value is None or (isinstance(value, str) and not value.strip()):
                raise ValueError(f"source {self.source_id!r} ({self.kind}) needs {name}")
        if self.kind == "web" and not self.search_endpoint and not self.urls:
            raise ValueError(f"source {self.source_id!r} (web) needs search_endpoint or urls")
        if self.embedding_endpoint is not None:
            if not ENDPOINT_NAME.fullmatch(self.embedding_endpoint):
                raise ValueError(
                    f"source {self.source_id!r}: embedding_endpoint {self.embedding_endpoint!r} "
                    "is not an endpoint name (letters, digits, '_'): name an endpoint "
                    "configured on the worker, never a URL"
                )
            if self.kind == "files" and self.embedding_model is None:
                raise ValueError(
                    f"source {self.source_id!r} (files): embedding_endpoint applies only "
                    "with embedding_model"
                )
        if self.columns is not None and not self.columns:
            raise ValueError(f"source {self.source_id!r}: columns, when given, must not be empty")
        return self

    def settings(self) -> dict[str, Any]:
        """The fields of this spec's kind that are set (the constructor's parameters)."""
        return {
            name: getattr(self, name)
            for name in KIND_FIELDS[self.kind]
            if getattr(self, name) is not None
        }

    @classmethod
    def files(cls, root: str, source_id: str = "docs", **settings: Any) -> SourceSpec:
        return cls(kind="files", source_id=source_id, root=root, **settings)

    @classmethod
    def csv(cls, path: str, key: str, source_id: str = "prices", **settings: Any) -> SourceSpec:
        return cls(kind="csv", source_id=source_id, path=path, key=key, **settings)

    @classmethod
    def web(cls, source_id: str = "web", **settings: Any) -> SourceSpec:
        return cls(kind="web", source_id=source_id, **settings)

    @classmethod
    def embedding(cls, corpus: str, source_id: str = "vectors", **settings: Any) -> SourceSpec:
        return cls(kind="embedding", source_id=source_id, corpus=corpus, **settings)


# --- What crosses the workflow/activity boundary -----------------------------------


class SearchRequest(BaseModel):
    spec: SourceSpec
    query: str
    limit: int = Field(default=5, ge=1)


class ResolveRequest(BaseModel):
    spec: SourceSpec
    ref: SourceRef
    max_chars: int = Field(
        default=50_000, ge=1, description="Longer texts are cut here (`truncated`)."
    )


class ResolvedDoc(BaseModel):
    """One resolved document: its readable text, and a table row's exact cells."""

    source_id: str
    uid: str
    title: str = ""
    text: str
    fields: dict[str, str] | None = Field(
        default=None, description="A CSV row's cells, exactly as the file has them."
    )
    chars: int = Field(description="Length of the whole text, before any cut.")
    truncated: bool = False


# --- What the ledger holds ---------------------------------------------------------


class Doc(BaseModel):
    """A materialized document, stored as `resolved:{ref id}` (`materialize_doc`'s default)."""

    ref_id: str
    source_id: str
    uid: str
    title: str = ""
    text: str
    fields: dict[str, str] | None = None
    truncated: bool = False


class SourceFailure(BaseModel):
    """A search or resolve that failed for good: `failure:{stage}:...`."""

    stage: Literal["search", "resolve"]
    source_id: str
    owner_id: str | None = None
    ref_id: str | None = None
    uid: str | None = None
    error_type: str
    message: str
