"""Source fan-out and lazy materialization on Temporal (seed 000, DESIGN.md section 3).

Workflow code holds only `SourceSpec`s, small pydantic descriptions of where to
search (a directory, a CSV file, a search endpoint, a corpus); the activities in
`activities/sources.py` build the real `Source` from a spec and do the I/O.

`fan_out_sources(ctx, query, sources=specs, owner_id=...)` runs one `search_source`
activity per source, all started at once (activity id `search:{source_id}:{owner}`,
summary `search source: {source_id}`). The refs that come back are merged, ranked
by score (best first; equal scores by source id, then locator, so the order never
depends on which search finished first), cut to `limit` and stored as
`ref:{stable_id}:{owner}`, each linked `found_by` -> `source:{source_id}`, the
source's spec. `Ledger.create` is idempotent, so a search that Temporal retries,
or the same search run again by the same owner, never makes a second ref. A source
whose search fails for good (a non-retryable error, or its retries used up) is
announced as a warning and kept as a `SourceFailure` artifact
(`failure:search:{source_id}:{owner}`); the other sources' refs still count.

`materialize_doc(ctx, ref_artifact, doc_factory)` resolves ONE ref, only when
called: one `resolve_ref` activity (`resolve:{ref id}`, summary `resolve doc:
{uid}`) whose result is the document's text, stored once, as that activity's
result, and then in the ledger as `resolved:{ref id}` linked `materialized_from`
(or the given `relation`) -> the ref. Model calls name it by id in `context=[...]`,
so the text never travels in an activity input again. A ref whose source is not
configured, or whose resolve fails (refused location, missing document, retries
used up), gives None and a `SourceFailure` (`failure:resolve:{ref id}`), never an
exception: failure is state.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durafact.ledger import Artifact
from durafact.sources.base import SourceRef
from workflows.recipe import RecipeContext

SourceKind = Literal["files", "csv", "web", "embedding"]
SOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# What each kind's constructor takes besides `source_id`; the rest must stay unset.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "files": ("root", "patterns", "max_bytes", "embedding_model", "embedding_base_url"),
    "csv": ("path", "key", "columns", "delimiter", "decimal_comma"),
    "web": ("search_endpoint", "urls", "allow_private", "allowed_networks", "timeout", "max_bytes"),
    "embedding": ("corpus", "embedding_model", "embedding_base_url", "min_score"),
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
    is an error, not ignored):

    - `files`: `FileSystemSource(root, patterns=..., max_bytes=...)`; with
      `embedding_model`, file vectors from the worker's OpenAI-compatible endpoint
      (or `embedding_base_url`) are mixed into the keyword score.
    - `csv`: `CSVSource(path, key=..., columns=..., delimiter=...)`; `decimal_comma`
      says how the workflow parses its numbers.
    - `web`: `WebSource(search_endpoint=... | urls=[...], allow_private=...,
      allowed_networks=..., timeout=..., max_bytes=...)`.
    - `embedding`: `EmbeddingSource` over `corpus`, a directory of `.md`/`.txt` files
      or a JSON file (a `{uid: text}` object, or a saved `EmbeddedCorpus`), embedded
      with `embedding_model` (default: the local model's).

    Paths are read by the worker, so give them absolute (the starter does).
    """

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
    # web
    search_endpoint: str | None = None
    urls: list[WebPage] | None = None
    allow_private: bool | None = None
    allowed_networks: list[str] | None = None
    timeout: float | None = Field(default=None, gt=0)
    # files and web
    max_bytes: int | None = Field(default=None, gt=0)
    # embedding (and files, optionally)
    corpus: str | None = None
    embedding_model: str | None = None
    embedding_base_url: str | None = None
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


def source_id_of(source_id: str) -> str:
    return f"source:{source_id}"


def ref_id(ref: SourceRef, owner_id: str) -> str:
    return f"ref:{ref.stable_id()}:{owner_id}"


def resolved_id(ref_artifact_id: str) -> str:
    return f"resolved:{ref_artifact_id}"


def search_failure_id(source_id: str, owner_id: str) -> str:
    return f"failure:search:{source_id}:{owner_id}"


def resolve_failure_id(ref_artifact_id: str) -> str:
    return f"failure:resolve:{ref_artifact_id}"


def failure_of(error: BaseException) -> tuple[str, str]:
    """(type, message) of an activity failure: the ApplicationError under the wrapper."""
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError", cause.message
    if cause is not None and cause is not error:
        return type(cause).__name__, str(getattr(cause, "message", "") or cause)
    return type(error).__name__, str(error)


# --- Timeouts and retries ------------------------------------------------------------

SEARCH_TIMEOUT = timedelta(seconds=60)
RESOLVE_TIMEOUT = timedelta(seconds=60)
# The activities heartbeat while a source works: a dead worker is noticed this soon.
SOURCE_HEARTBEAT = timedelta(seconds=10)
# A transient failure (timeout, 5xx, 429) is tried again; a refusal never is.
SOURCE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=4,
)


# --- Fan-out ---------------------------------------------------------------------------


def invalid_sources(message: str) -> ApplicationError:
    return ApplicationError(message, type="InvalidSources", non_retryable=True)


def register_sources(ctx: RecipeContext, sources: Sequence[SourceSpec]) -> None:
    """Store each spec as `source:{source_id}`, what `materialize_doc` resolves with.

    Two specs with the same source id, or a spec that differs from the one already
    stored under its id, fail the run (non-retryable `InvalidSources`): a ref must
    name one configuration.
    """
    seen: set[str] = set()
    for spec in sources:
        if spec.source_id in seen:
            raise invalid_sources(f"two sources are named {spec.source_id!r}")
        seen.add(spec.source_id)
        stored = ctx.ledger.create(source_id_of(spec.source_id), spec)
        if SourceSpec.model_validate(stored.data) != spec:
            raise invalid_sources(f"source {spec.source_id!r} is already configured differently")


async def fan_out_sources(
    ctx: RecipeContext,
    query: str,
    *,
    sources: Sequence[SourceSpec],
    owner_id: str,
    limit: int = 5,
    on_start: Callable[[str], None] | None = None,
    on_count: Callable[[str, int], None] | None = None,
    timeout: timedelta = SEARCH_TIMEOUT,
    retry_policy: RetryPolicy = SOURCE_RETRY,
) -> list[Artifact[SourceRef]]:
    """Search every source in parallel; store and return the best `limit` refs, best first.

    Each source is asked for `limit` refs. `on_start(source_id)` is called as each
    search starts, `on_count(source_id, n)` when it is back (in the order of
    `sources`); a failed source gets no `on_count`, it is announced instead. The
    stored refs carry `metadata["owner_id"]`.
    """
    if limit < 1:
        raise invalid_sources(f"limit must be a positive integer, got {limit!r}")
    register_sources(ctx, sources)

    async def search(spec: SourceSpec) -> list[SourceRef] | BaseException:
        if on_start:
            on_start(spec.source_id)
        try:
            return await workflow.execute_activity(
                "search_source",
                SearchRequest(spec=spec, query=query, limit=limit),
                result_type=list[SourceRef],
                activity_id=f"search:{spec.source_id}:{owner_id}",
                summary=f"search source: {spec.source_id}",
                start_to_close_timeout=timeout,
                heartbeat_timeout=SOURCE_HEARTBEAT,
                retry_policy=retry_policy,
            )
        except ActivityError as exc:
            return exc

    outcomes = await asyncio.gather(*(search(spec) for spec in sources))
    found: dict[str, SourceRef] = {}
    for spec, outcome in zip(sources, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            error_type, message = failure_of(outcome)
            fid = search_failure_id(spec.source_id, owner_id)
            ctx.ledger.create(
                fid,
                SourceFailure(
                    stage="search",
                    source_id=spec.source_id,
                    owner_id=owner_id,
                    error_type=error_type,
                    message=message,
                ),
            )
            ctx.announce(
                f"search source {spec.source_id} failed ({error_type}): {message}", kind="warning"
            )
            continue
        if on_count:
            on_count(spec.source_id, len(outcome))
        for ref in outcome:
            if ref.source_id != spec.source_id:  # a source answers only for itself
                continue
            found.setdefault(ref.stable_id(), ref)
    ranked = sorted(found.values(), key=lambda r: (-r.score, r.source_id, r.uid))[:limit]
    stored: list[Artifact[SourceRef]] = []
    for ref in ranked:
        rid = ref_id(ref, owner_id)
        scoped = ref.model_copy(update={"metadata": {**ref.metadata, "owner_id": owner_id}})
        ctx.ledger.create(rid, scoped)
        ctx.ledger.link(rid, "found_by", source_id_of(ref.source_id))
        stored.append(ctx.ledger.get(rid).typed(SourceRef))
    return stored


# --- Materialization ----------------------------------------------------------------

DocFactory = Callable[
    [RecipeContext, Artifact[SourceRef], ResolvedDoc], BaseModel | Awaitable[BaseModel]
]


def default_doc(ctx: RecipeContext, ref: Artifact[SourceRef], resolved: ResolvedDoc) -> Doc:
    """A `Doc` with the resolved text (and a table row's cells)."""
    return Doc(
        ref_id=ref.id,
        source_id=resolved.source_id,
        uid=resolved.uid,
        title=resolved.title,
        text=resolved.text,
        fields=resolved.fields,
        truncated=resolved.truncated,
    )


def source_spec(ctx: RecipeContext, source_id: str) -> SourceSpec | None:
    """The spec registered as `source:{source_id}`, or None."""
    artifact_id = source_id_of(source_id)
    if artifact_id not in ctx.ledger:
        return None
    return ctx.ledger.get(artifact_id).typed(SourceSpec).data


async def materialize_doc(
    ctx: RecipeContext,
    ref_artifact: Artifact[Any],
    doc_factory: DocFactory | None = None,
    relation: str = "materialized_from",
    *,
    max_chars: int = 50_000,
    timeout: timedelta = RESOLVE_TIMEOUT,
    retry_policy: RetryPolicy = SOURCE_RETRY,
) -> Artifact[Any] | None:
    """Resolve one ref now and store the document as `resolved:{ref id}`, linked
    `relation` -> the ref; None (and a recorded `SourceFailure`) when it cannot be.

    `doc_factory(ctx, ref_artifact, resolved)` builds the stored document (sync or
    async; default `default_doc`). The ref's source must have been registered
    (`fan_out_sources` does it). Called again for the same ref, it returns the
    stored document without resolving it again.
    """
    ref = ref_artifact.typed(SourceRef)
    did = resolved_id(ref.id)
    if did in ctx.ledger:
        return ctx.ledger.get(did)
    spec = source_spec(ctx, ref.data.source_id)
    if spec is None:
        return _resolve_failed(
            ctx, ref, "SourceMissing", f"no source {ref.data.source_id!r} is configured"
        )
    try:
        resolved: ResolvedDoc = await workflow.execute_activity(
            "resolve_ref",
            ResolveRequest(spec=spec, ref=ref.data, max_chars=max_chars),
            result_type=ResolvedDoc,
            activity_id=f"resolve:{ref.id}",
            summary=f"resolve doc: {ref.data.uid}",
            start_to_close_timeout=timeout,
            heartbeat_timeout=SOURCE_HEARTBEAT,
            retry_policy=retry_policy,
        )
    except ActivityError as exc:
        return _resolve_failed(ctx, ref, *failure_of(exc))
    doc = (doc_factory or default_doc)(ctx, ref, resolved)
    if inspect.isawaitable(doc):
        doc = await doc
    ctx.ledger.create(did, doc)
    ctx.ledger.link(did, relation, ref.id)
    return ctx.ledger.get(did)


def _resolve_failed(
    ctx: RecipeContext, ref: Artifact[SourceRef], error_type: str, message: str
) -> None:
    ctx.ledger.create(
        resolve_failure_id(ref.id),
        SourceFailure(
            stage="resolve",
            source_id=ref.data.source_id,
            owner_id=ref.data.metadata.get("owner_id"),
            ref_id=ref.id,
            uid=ref.data.uid,
            error_type=error_type,
            message=message,
        ),
    )
    ctx.ledger.link(resolve_failure_id(ref.id), "failed_to_resolve", ref.id)
    ctx.announce(f"resolve doc {ref.data.uid} failed ({error_type}): {message}", kind="warning")
    return None
