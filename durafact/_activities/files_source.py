"""`FileSystemSource`: keyword (and optionally vector) search over local text files."""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from durafact._activities.embedding_source import cosine
from durafact._core.sources import (
    ContentTooLarge,
    DocumentNotFound,
    RefusedLocation,
    SourceError,
    SourceRef,
    check_limit,
    check_ref,
    preview,
    ranked,
)
from durafact._core.text import keyword_score

if TYPE_CHECKING:
    from collections.abc import Iterable

    from durafact._activities.embedding_source import EmbeddingProvider

# Larger documents than Temporal's 2 MB payload limit are fine: they are stored outside
# the history (durafact/_runtime/payloads.py).
DEFAULT_MAX_BYTES = 10_000_000
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n\s*\n")
_EMBED_CHARS = 2000  # what a document's vector is computed from (MiniLM reads ~256 tokens)


@dataclass(frozen=True)
class _Document:
    uid: str
    version: tuple[int, int]  # (mtime_ns, size): a changed file is read and embedded again
    title: str
    body: str
    passages: tuple[str, ...]


def _split(text: str, stem: str) -> tuple[str, str, tuple[str, ...]]:
    """(title, body, passages) of a text file; YAML front matter is not body text."""
    body = text.replace("\r\n", "\n")
    if body.startswith("---\n"):
        end = body.find("\n---", 4)
        if end != -1:
            body = body[end + 4 :].lstrip("-").lstrip("\n")
    heading = _HEADING.search(body)
    first_line = next((line.strip() for line in body.splitlines() if line.strip()), "")
    if heading:
        title = heading.group(1).strip()
    elif first_line and len(first_line) <= 100:
        title = first_line
    else:
        title = stem.replace("_", " ").replace("-", " ")
    passages = tuple(p.strip() for p in _BLANK_LINES.split(body) if p.strip())
    return title, body, passages


class FileSystemSource:
    """Keyword search over the text files under `root`, optionally mixed with vectors.

    Files: those under `root` whose relative path matches one of `patterns`
    (`PurePosixPath.match`, so `"*.md"` matches at any depth and `"guides/*.md"`
    only there), no larger than `max_bytes`, skipping hidden files and directories
    (a name starting with a dot). Directory symlinks are not followed; a file symlink
    counts only when it points to a file inside `root`. A ref's `uid` is the path
    relative to `root` with `/` separators; its `payload` is the best-matching passage
    (blank-line separated paragraph), shortened; `metadata` has the `title` (the first
    Markdown heading, else a short first line, else the file name) and the scores.

    Score: `keyword = (keyword_score(title + text, query) + keyword_score(best passage,
    query)) / 2`, so a file that has every query word in one paragraph outranks one
    that scatters them. With an `embedder`, `score = (1 - embedding_weight) * keyword +
    embedding_weight * max(cosine, 0)`, where cosine compares the query's vector with
    the vector of the file's title and first 2,000 characters; file vectors are
    computed once per file version (mtime and size) and cached. Without an embedder a
    file must share at least one query term to be found; with one, any file with a
    positive similarity may be.

    `resolve` reads only inside `root`: a locator that is absolute, contains `..`,
    or resolves (through a symlink) outside `root` raises `RefusedLocation`, and so
    does one naming a file this source would not list (hidden, or matching no
    pattern); a file over `max_bytes` raises `ContentTooLarge`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        source_id: str = "docs",
        patterns: Iterable[str] = ("*.md", "*.txt"),
        embedder: EmbeddingProvider | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        use_stems: bool = True,
        embedding_weight: float = 0.5,
        encoding: str = "utf-8",
    ) -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise SourceError(f"source {source_id!r}: root is not a directory: {path}")
        self.patterns = tuple(patterns)
        if not self.patterns:
            raise SourceError(f"source {source_id!r}: no file patterns given")
        if not 0.0 <= embedding_weight <= 1.0:
            raise SourceError("embedding_weight must be between 0 and 1")
        self.root = path.resolve()
        self.source_id = source_id
        self.embedder = embedder
        self.max_bytes = max_bytes
        self.use_stems = use_stems
        self.embedding_weight = embedding_weight
        self.encoding = encoding
        self._documents: dict[str, _Document] = {}
        self._vectors: dict[tuple[str, tuple[int, int]], list[float]] = {}

    def __repr__(self) -> str:
        return f"FileSystemSource({str(self.root)!r}, source_id={self.source_id!r})"

    # -- search --------------------------------------------------------------------

    async def search(self, query: str, limit: int = 5) -> list[SourceRef]:
        check_limit(limit)
        documents = await asyncio.to_thread(self._scan)
        similarities = await self._similarities(query, documents) if self.embedder else {}
        refs = []
        for doc in documents:
            whole = keyword_score(f"{doc.title}\n{doc.body}", query, self.use_stems)
            best_passage, best = (doc.passages[0] if doc.passages else doc.title), 0.0
            if whole > 0:
                for passage in doc.passages:
                    value = keyword_score(passage, query, self.use_stems)
                    if value > best:
                        best_passage, best = passage, value
            keyword = (whole + best) / 2
            metadata: dict[str, Any] = {"title": doc.title, "keyword_score": keyword}
            score = keyword
            if self.embedder:
                similarity = similarities[doc.uid]
                metadata["similarity"] = similarity
                weight = self.embedding_weight
                score = (1 - weight) * keyword + weight * max(similarity, 0.0)
            if score <= 0:
                continue
            refs.append(
                SourceRef(
                    source_id=self.source_id,
                    uid=doc.uid,
                    payload=preview(best_passage),
                    score=score,
                    query=query,
                    metadata=metadata,
                )
            )
        refs.sort(key=lambda ref: ref.uid)  # equal scores: a stable, path-ordered tie-break
        return ranked(refs, limit)

    async def _similarities(self, query: str, documents: list[_Document]) -> dict[str, float]:
        assert self.embedder is not None
        missing = [doc for doc in documents if (doc.uid, doc.version) not in self._vectors]
        texts = [query] + [f"{doc.title}\n{doc.body[:_EMBED_CHARS]}" for doc in missing]
        vectors = await self.embedder.embed(texts)
        if len(vectors) != len(texts):
            raise SourceError(f"embedder returned {len(vectors)} vectors for {len(texts)} texts")
        current = {(doc.uid, doc.version) for doc in documents}
        self._vectors = {key: v for key, v in self._vectors.items() if key in current}
        for doc, vector in zip(missing, vectors[1:], strict=True):
            self._vectors[(doc.uid, doc.version)] = vector
        query_vector = vectors[0]
        return {
            doc.uid: cosine(query_vector, self._vectors[(doc.uid, doc.version)])
            for doc in documents
        }

    def _scan(self) -> list[_Document]:
        """Every servable file under root, read again only when its mtime or size changed."""
        documents: dict[str, _Document] = {}
        for directory, dirnames, filenames in os.walk(self.root):  # symlinked dirs not followed
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                path = Path(directory, name)
                uid = path.relative_to(self.root).as_posix()
                if not self._listed(uid):
                    continue
                try:
                    real = path.resolve(strict=True)
                    stat = real.stat()
                except (OSError, RuntimeError):
                    continue  # a dangling or looping symlink, or a file gone meanwhile
                if not real.is_relative_to(self.root) or not real.is_file():
                    continue
                if stat.st_size > self.max_bytes:
                    continue
                version = (stat.st_mtime_ns, stat.st_size)
                cached = self._documents.get(uid)
                if cached is not None and cached.version == version:
                    documents[uid] = cached
                    continue
                try:
                    text = real.read_bytes()[: self.max_bytes].decode(self.encoding, "replace")
                except OSError:
                    continue
                title, body, passages = _split(text, path.stem)
                documents[uid] = _Document(uid, version, title, body, passages)
        self._documents = documents
        return list(documents.values())

    def _listed(self, uid: str) -> bool:
        pure = PurePosixPath(uid)
        if any(part.startswith(".") for part in pure.parts):
            return False
        return any(pure.match(pattern) for pattern in self.patterns)

    # -- resolve -------------------------------------------------------------------

    async def resolve(self, ref: SourceRef) -> str:
        check_ref(self.source_id, ref)
        return await asyncio.to_thread(self._read, ref.uid)

    def locate(self, uid: str) -> Path:
        """The real path of the file `uid` names, or `RefusedLocation`/`DocumentNotFound`."""
        where = f"source {self.source_id!r}"
        if not uid or "\x00" in uid or "\\" in uid:
            raise RefusedLocation(f"{where}: refused locator {uid!r}: not a relative file path")
        pure = PurePosixPath(uid)
        if pure.is_absolute() or re.match(r"^[A-Za-z]:", uid):
            raise RefusedLocation(f"{where}: refused locator {uid!r}: absolute paths are refused")
        if ".." in pure.parts:
            raise RefusedLocation(f"{where}: refused locator {uid!r}: '..' escapes the root")
        try:
            real = (self.root / pure).resolve(strict=True)
        except FileNotFoundError:
            raise DocumentNotFound(f"{where}: no file {uid!r} under {self.root}") from None
        except (OSError, RuntimeError) as exc:
            raise SourceError(f"{where}: cannot open {uid!r}: {exc}") from exc
        if not real.is_relative_to(self.root):
            raise RefusedLocation(
                f"{where}: refused locator {uid!r}: it resolves outside the root {self.root}"
                " (through a symlink)"
            )
        if not self._listed(pure.as_posix()):
            raise RefusedLocation(
                f"{where}: refused locator {uid!r}: hidden or not matching {list(self.patterns)}"
            )
        if not real.is_file():
            raise DocumentNotFound(f"{where}: {uid!r} is not a file")
        return real

    def _read(self, uid: str) -> str:
        real = self.locate(uid)
        with real.open("rb") as handle:
            data = handle.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise ContentTooLarge(
                f"source {self.source_id!r}: {uid!r} is larger than {self.max_bytes} bytes"
            )
        return data.decode(self.encoding, "replace")
