"""`CSVSource`: keyword search over the rows of a table, returning exact rows.

Numbers never pass through a model: a search returns each row exactly as the file
has it (strings, in `ref.metadata["row"]`), and a recipe that needs a sum, an
average or a price times a quantity parses those strings with `parse_number` /
`column_values` (into `Decimal`, so money stays exact) and computes in code. The
model may be shown the computed result; it is never asked to read, copy or do
arithmetic on the figures.
"""

from __future__ import annotations

import asyncio
import csv
import heapq
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from durafact._core.sources import (
    ContentTooLarge,
    DocumentNotFound,
    SourceError,
    SourceRef,
    check_limit,
    check_ref,
    preview,
    ranked,
)
from durafact._core.text import keyword_score

DEFAULT_MAX_BYTES = 10_000_000  # a CSV file larger than this is refused
DEFAULT_MAX_ROWS = 100_000  # so is one with more data rows than this
# Parsed rows of a file up to this size are kept between calls; a larger file is parsed
# again for each call, so a worker keeping many built sources holds a few MB for each.
DEFAULT_KEEP_BYTES = 1_000_000
# The csv module's own cap on one cell (csv.field_size_limit(), 131,072 characters by
# default): a cell past it is an error naming its line, never a giant cell.
MAX_CELL_CHARS = csv.field_size_limit()


Rows = dict[str, tuple[int, tuple[str, ...]]]  # key -> (line, cells)


class _CappedFile:
    """A text file read for the csv module that stops past `max_bytes` (the file may
    grow between the size check and the read)."""

    def __init__(self, handle: Any, max_bytes: int, where: str) -> None:
        self._handle = handle
        self._left = max_bytes
        self._max_bytes = max_bytes
        self._where = where

    def __iter__(self) -> _CappedFile:
        return self

    def __next__(self) -> str:
        line = self._handle.readline(self._left + 1)
        if not line:
            raise StopIteration
        self._left -= len(line.encode("utf-8", "surrogatepass"))
        if self._left < 0:
            raise ContentTooLarge(
                f"{self._where}: more than {self._max_bytes} bytes (max_bytes); stopped reading"
            )
        return line


class CSVSource:
    """Rows of one CSV file, searched by keywords over `columns`, identified by `key`.

    The file must have a header row. `key` names the column whose value identifies a
    row (it must be present and unique in every row): it is a ref's `uid`. `columns`
    are the columns a search looks at (default: all). A ref's `metadata["row"]` is the
    whole row as the file has it, every value a string; `metadata["line"]` is its line
    in the file. `resolve` returns the row as JSON text. Scores are
    `keyword_score(searched cells, query)`; equal scores keep file order.

    The file is read when the source is made (a missing file, key or column is an
    error at once) and read again whenever its modification time or size changes.
    It is bounded: a file of more than `max_bytes` bytes (default 10 MB) or more than
    `max_rows` data rows (default 100,000) is refused with `ContentTooLarge`, and a
    quote that is never closed, or a cell of more than 131,072 characters, is an error
    naming the line where the cell starts, not a cell that swallows the rest of the
    file. The parsed rows of a file up to `keep_bytes` (default 1 MB) are kept between
    calls, as tuples of cells (about 7 times the file); a larger file is parsed again
    for each call, so a built source holds little however large its file is.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: str,
        columns: Iterable[str] | None = None,
        source_id: str = "prices",
        *,
        delimiter: str = ",",
        encoding: str = "utf-8-sig",
        use_stems: bool = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_rows: int = DEFAULT_MAX_ROWS,
        keep_bytes: int = DEFAULT_KEEP_BYTES,
    ) -> None:
        self.path = Path(path).expanduser()
        self.key = key
        self.source_id = source_id
        self.delimiter = delimiter
        self.encoding = encoding
        self.use_stems = use_stems
        if max_bytes < 1 or max_rows < 1:
            raise SourceError(f"source {source_id!r}: max_bytes and max_rows must be positive")
        self.max_bytes = max_bytes
        self.max_rows = max_rows
        self.keep_bytes = keep_bytes
        self._wanted_columns = None if columns is None else tuple(columns)
        if self._wanted_columns == ():
            raise SourceError(f"source {source_id!r}: columns, when given, must not be empty")
        self._version: tuple[int, int] | None = None
        self.header: tuple[str, ...] = ()
        self.columns: tuple[str, ...] = ()
        self._rows: Rows | None = None
        self._load()

    def __repr__(self) -> str:
        return f"CSVSource({str(self.path)!r}, key={self.key!r}, source_id={self.source_id!r})"

    def _load(self) -> Rows:
        """The rows by key: the kept ones while the file is unchanged, else read now."""
        where = f"source {self.source_id!r}: {self.path}"
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            raise SourceError(f"{where}: CSV file not found") from None
        except OSError as exc:
            raise SourceError(f"{where}: cannot read: {exc.strerror or exc}") from exc
        version = (stat.st_mtime_ns, stat.st_size)
        if version == self._version and self._rows is not None:
            return self._rows
        if stat.st_size > self.max_bytes:
            raise ContentTooLarge(
                f"{where}: {stat.st_size} bytes; the cap is {self.max_bytes} (max_bytes)"
            )
        started = 1  # the line the record being read starts on
        try:
            with self.path.open(newline="", encoding=self.encoding) as handle:
                lines = _CappedFile(handle, self.max_bytes, where)
                reader = csv.reader(lines, delimiter=self.delimiter, strict=True)
                header = next(reader, None)
                if not header:
                    raise SourceError(f"{where}: no header row")
                header = [name.strip() for name in header]
                duplicated = sorted({name for name in header if header.count(name) > 1})
                if duplicated:
                    raise SourceError(f"{where}: duplicate column names {duplicated}")
                if self.key not in header:
                    raise SourceError(f"{where}: no key column {self.key!r}; columns are {header}")
                missing = [c for c in self._wanted_columns or () if c not in header]
                if missing:
                    raise SourceError(f"{where}: no column(s) {missing}; columns are {header}")
                key_index = header.index(self.key)
                width = len(header)
                rows: Rows = {}
                while True:
                    started = reader.line_num + 1
                    values = next(reader, None)
                    if values is None:
                        break
                    line = started
                    if not any(value.strip() for value in values):
                        continue  # a blank line
                    if len(values) > width:
                        raise SourceError(f"{where}: line {line} has more fields than the header")
                    if len(rows) >= self.max_rows:
                        raise ContentTooLarge(
                            f"{where}: more than {self.max_rows} rows (max_rows); stopped reading"
                        )
                    cells = tuple(values) + ("",) * (width - len(values))
                    key_value = cells[key_index]
                    if not key_value.strip():
                        raise SourceError(f"{where}: line {line} has an empty key {self.key!r}")
                    if key_value in rows:
                        first = rows[key_value][0]
                        raise SourceError(
                            f"{where}: key {self.key!r} is not unique: {key_value!r} is on"
                            f" lines {first} and {line}"
                        )
                    rows[key_value] = (line, cells)
        except csv.Error as exc:
            raise SourceError(f"{where}: line {started}: {_csv_reason(exc)}") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{where}: cannot read as CSV: {exc}") from exc
        self.header = tuple(header)
        self.columns = self._wanted_columns or self.header
        self._rows = rows if stat.st_size <= self.keep_bytes else None
        self._version = version
        return rows

    def _row(self, cells: tuple[str, ...]) -> dict[str, str]:
        return dict(zip(self.header, cells, strict=True))

    # -- the Source protocol -------------------------------------------------------

    async def search(self, query: str, limit: int = 5) -> list[SourceRef]:
        check_limit(limit)
        rows = await asyncio.to_thread(self._load)
        searched = [self.header.index(column) for column in self.columns]
        scored = []
        for order, (key_value, (line, cells)) in enumerate(rows.items()):
            score = keyword_score(" ".join(cells[i] for i in searched), query, self.use_stems)
            if score > 0:
                scored.append((-score, order, key_value, line, cells))
        refs = []
        # Refs for the best `limit` only (equal scores in file order), not for every match.
        for negated, _, key_value, line, cells in heapq.nsmallest(limit, scored):
            row = self._row(cells)
            refs.append(
                SourceRef(
                    source_id=self.source_id,
                    uid=key_value,
                    payload=preview("; ".join(f"{name}: {row[name]}" for name in self.header)),
                    score=-negated,
                    query=query,
                    metadata={"row": row, "line": line, "key": self.key},
                )
            )
        return ranked(refs, limit)

    async def resolve(self, ref: SourceRef) -> str:
        check_ref(self.source_id, ref)
        row = await asyncio.to_thread(self.row, ref.uid)
        return json.dumps(row, ensure_ascii=False)

    # -- exact rows for code -------------------------------------------------------

    def row(self, key_value: str) -> dict[str, str]:
        """The row whose key is `key_value`, exactly as in the file."""
        return self._found(self._load(), key_value)

    def _found(self, rows: Rows, key_value: str) -> dict[str, str]:
        found = rows.get(key_value)
        if found is None:
            raise DocumentNotFound(
                f"source {self.source_id!r}: no row with {self.key} = {key_value!r}"
            )
        return self._row(found[1])

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, str]]:
        """Every row in file order, or the rows with the given keys in the given order."""
        rows = self._load()
        if keys is None:
            return [self._row(cells) for _, cells in rows.values()]
        return [self._found(rows, key_value) for key_value in keys]


def _csv_reason(exc: csv.Error) -> str:
    """What the csv module's error means for the person who wrote the file."""
    message = str(exc)
    if "unexpected end of data" in message or "EOF" in message:
        return "a quoted cell is never closed (an unbalanced quote runs to the end of the file)"
    if "field larger than field limit" in message:
        return f"a cell of more than {MAX_CELL_CHARS} characters (an unbalanced quote?)"
    if "expected after" in message:
        return f"a quote inside a cell that is not doubled or not closed ({message})"
    return message
