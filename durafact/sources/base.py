"""The `Source` protocol, `SourceRef` and the errors every source raises.

This module is pure (pydantic and hashlib only), so a workflow may import
`SourceRef` to store refs as artifacts; the sources themselves do I/O and are
called only from activities.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

PREVIEW_CHARS = 240  # a ref's payload is a preview for choosing, never the content


class SourceError(Exception):
    """A source could not do what was asked, with a message that says why.

    `retryable` tells the activity layer whether trying again may help (a timeout,
    a 503) or cannot (a refused location, a missing document, a bad request).
    """

    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


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
