"""Source fan-out and lazy materialization on Temporal (seed 000, DESIGN.md section 3).

Workflow code holds only `SourceSpec`s, small pydantic descriptions of where to
search (a directory, a CSV file, a search endpoint, a corpus); the activities in
`durafact/_activities/sources.py` build the real `Source` from a spec and do the I/O.

`fan_out_sources(ctx, query, sources=specs, owner_id=...)` runs one `search_source`
activity per source, all started at once (activity id `search:{source_id}:{owner}`,
summary `search source: {source_id}`). The refs that come back are merged, ranked
by score (best first; equal scores by source id, then locator, so the order never
depends on which search finished first), cut to `limit` and stored as
`ref:{stable_id}:{owner}`, each linked `found_by` -> `source:{source_id}`, the
source's spec. `Ledger.create` is idempotent, so a search that Temporal retries,
or the same search run again by the same owner, never makes a second ref. A source
whose search fails for good (a non-retryable error, or its deadline passed) is
announced as a warning and kept as a `SourceFailure` artifact
(`failure:search:{source_id}:{owner}`); the other sources' refs still count.

`materialize_doc(ctx, ref_artifact, doc_factory)` resolves ONE ref, only when
called: one `resolve_ref` activity (`resolve:{ref id}`, summary `resolve doc:
{uid}`) whose result is the document's text, stored once, as that activity's
result, and then in the ledger as `resolved:{ref id}` linked `materialized_from`
(or the given `relation`) -> the ref. Model calls name it by id in `context=[...]`,
so the text never travels in an activity input again. A ref whose source is not
configured, or whose resolve fails (refused location, missing document, deadline
passed), gives None and a `SourceFailure` (`failure:resolve:{ref id}`), never an
exception: failure is state.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durafact._core.ids import (
    ref_id,
    resolve_failure_id,
    resolve_id,
    resolved_id,
    search_failure_id,
    search_id,
    source_id_of,
)
from durafact._core.ledger import Artifact
from durafact._core.sources import (
    Doc,
    ResolvedDoc,
    ResolveRequest,
    SearchRequest,
    SourceFailure,
    SourceRef,
    SourceSpec,
)
from durafact._recipes.recipe import RecipeContext, reraise_cancellation


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
# A transient failure (timeout, 5xx, 429) is tried again, after `retry-after` when the
# server gave one, until the deadline (`source_deadline`); a refusal never is.
SOURCE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=0,
)


def source_deadline(ctx: RecipeContext, spec: SourceSpec, stage: str) -> timedelta:
    """How long a search or resolve of `spec` may retry: the run's model deadline for a
    search that embeds (it talks to a model endpoint), else the shorter source deadline."""
    embeds = spec.kind == "embedding" or spec.embedding_model is not None
    return ctx.model_deadline if stage == "search" and embeds else ctx.source_deadline


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
                activity_id=ctx.temporal_id(search_id(spec.source_id, owner_id)),
                summary=f"search source: {spec.source_id}",
                start_to_close_timeout=timeout,
                schedule_to_close_timeout=source_deadline(ctx, spec, "search"),
                heartbeat_timeout=SOURCE_HEARTBEAT,
                retry_policy=retry_policy,
            )
        except ActivityError as exc:
            reraise_cancellation(exc)
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
            activity_id=ctx.temporal_id(resolve_id(ref.id)),
            summary=f"resolve doc: {ref.data.uid}",
            start_to_close_timeout=timeout,
            schedule_to_close_timeout=source_deadline(ctx, spec, "resolve"),
            heartbeat_timeout=SOURCE_HEARTBEAT,
            retry_policy=retry_policy,
        )
    except ActivityError as exc:
        reraise_cancellation(exc)
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
