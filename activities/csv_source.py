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
import json
import os
from collections.abc import Iterable
from pathlib import Path

from durafact.sources import (
    DocumentNotFound,
    SourceError,
    SourceRef,
    check_limit,
    check_ref,
    preview,
    ranked,
)
from durafact.text import keyword_score


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
    ) -> None:
        self.path = Path(path).expanduser()
        self.key = key
        self.source_id = source_id
        self.delimiter = delimiter
        self.encoding = encoding
        self.use_stems = use_stems
        self._wanted_columns = None if columns is None else tuple(columns)
        if self._wanted_columns == ():
            raise SourceError(f"source {source_id!r}: columns, when given, must not be empty")
        self._version: tuple[int, int] | None = None
        self.header: tuple[str, ...] = ()
        self.columns: tuple[str, ...] = ()
        self._rows: dict[str, tuple[int, dict[str, str]]] = {}
        self._load()

    def __repr__(self) -> str:
        return f"CSVSource({str(self.path)!r}, key={self.key!r}, source_id={self.source_id!r})"

    def _load(self) -> None:
        where = f"source {self.source_id!r}: {self.path}"
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            raise SourceError(f"{where}: CSV file not found") from None
        except OSError as exc:
            raise SourceError(f"{where}: cannot read: {exc.strerror or exc}") from exc
        version = (stat.st_mtime_ns, stat.st_size)
        if version == self._version:
            return
        try:
            with self.path.open(newline="", encoding=self.encoding) as handle:
                reader = csv.reader(handle, delimiter=self.delimiter)
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
                rows: dict[str, tuple[int, dict[str, str]]] = {}
                for values in reader:
                    line = reader.line_num
                    if not any(value.strip() for value in values):
                        continue  # a blank line
                    if len(values) > len(header):
                        raise SourceError(f"{where}: line {line} has more fields than the header")
                    padded = values + [""] * (len(header) - len(values))
                    row = dict(zip(header, padded, strict=True))
                    key_value = row[self.key]
                    if not key_value.strip():
                        raise SourceError(f"{where}: line {line} has an empty key {self.key!r}")
                    if key_value in rows:
                        first = rows[key_value][0]
                        raise SourceError(
                            f"{where}: key {self.key!r} is not unique: {key_value!r} is on"
                            f" lines {first} and {line}"
                        )
                    rows[key_value] = (line, row)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise SourceError(f"{where}: cannot read as CSV: {exc}") from exc
        self.header = tuple(header)
        self.columns = self._wanted_columns or self.header
        self._rows = rows
        self._version = version

    # -- the Source protocol -------------------------------------------------------

    async def search(self, query: str, limit: int = 5) -> list[SourceRef]:
        check_limit(limit)
        await asyncio.to_thread(self._load)
        refs = []
        for key_value, (line, row) in self._rows.items():
            text = " ".join(row[column] for column in self.columns)
            score = keyword_score(text, query, self.use_stems)
            if score <= 0:
                continue
            refs.append(
                SourceRef(
                    source_id=self.source_id,
                    uid=key_value,
                    payload=preview("; ".join(f"{name}: {row[name]}" for name in self.header)),
                    score=score,
                    query=query,
                    metadata={"row": dict(row), "line": line, "key": self.key},
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
        self._load()
        found = self._rows.get(key_value)
        if found is None:
            raise DocumentNotFound(
                f"source {self.source_id!r}: no row with {self.key} = {key_value!r}"
            )
        return dict(found[1])

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, str]]:
        """Every row in file order, or the rows with the given keys in the given order."""
        self._load()
        if keys is None:
            return [dict(row) for _, row in self._rows.values()]
        return [self.row(key_value) for key_value in keys]
