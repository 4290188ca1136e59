"""Sources: where a recipe's information comes from (seed 001, DESIGN.md section 3).

A `Source` answers `search(query, limit)` with ranked `SourceRef`s (references with
a short preview, not content) and `resolve(ref)` with the content. Four kinds ship:

- `FileSystemSource`: keyword (optionally also vector) search over local text files;
- `CSVSource`: keyword search over table rows, exact rows for computing in code;
- `EmbeddingSource`: vector search over a prepared corpus, with an
  `EmbeddingProvider` such as `OpenAIEmbeddings` (any OpenAI-compatible endpoint);
- `WebSource`: a SearxNG-style search endpoint or registered URLs, pages fetched
  lazily on `resolve`, non-public addresses refused.

Sources do I/O and are called only from activities. Importing this package is
cheap and has no side effects: each implementation module is imported on first
use of its name, so a workflow can import `SourceRef` without pulling in httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from durafact.sources.base import (
    ContentTooLarge,
    DocumentNotFound,
    RefusedLocation,
    Source,
    SourceError,
    SourceRef,
    SourceUnavailable,
    UnsupportedContent,
)

if TYPE_CHECKING:
    from durafact.sources.csv import CSVSource, column_values, parse_number
    from durafact.sources.embedding import (
        LOCAL_EMBEDDING_MODEL,
        EmbeddedCorpus,
        EmbeddingProvider,
        EmbeddingSource,
        OpenAIEmbeddings,
        cosine,
    )
    from durafact.sources.files import FileSystemSource
    from durafact.sources.web import RegisteredPage, WebSource, address_refusal, html_to_text

_LAZY = {
    "CSVSource": "csv",
    "column_values": "csv",
    "parse_number": "csv",
    "LOCAL_EMBEDDING_MODEL": "embedding",
    "EmbeddedCorpus": "embedding",
    "EmbeddingProvider": "embedding",
    "EmbeddingSource": "embedding",
    "OpenAIEmbeddings": "embedding",
    "cosine": "embedding",
    "FileSystemSource": "files",
    "RegisteredPage": "web",
    "WebSource": "web",
    "address_refusal": "web",
    "html_to_text": "web",
}

__all__ = [
    "LOCAL_EMBEDDING_MODEL",
    "CSVSource",
    "ContentTooLarge",
    "DocumentNotFound",
    "EmbeddedCorpus",
    "EmbeddingProvider",
    "EmbeddingSource",
    "FileSystemSource",
    "OpenAIEmbeddings",
    "RefusedLocation",
    "RegisteredPage",
    "Source",
    "SourceError",
    "SourceRef",
    "SourceUnavailable",
    "UnsupportedContent",
    "WebSource",
    "address_refusal",
    "column_values",
    "cosine",
    "html_to_text",
    "parse_number",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'durafact.sources' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"durafact.sources.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
