"""The ready commands' `prepare` that read files (durafact/_core/ready_commands.py names
them by import path: workflow code may not import what they do):

- `answer FILE`: the batch file, with `--max-repairs` and `--review` over its own;
- `research QUESTION`: the sources the options name (the sample shop shipped in
  durafact/data without any), their paths made absolute for the worker and each
  checked here, and the shipped skills.

Each raises ValueError with a one-line reason that names the option.
"""

from __future__ import annotations

import csv
import ipaddress
from pathlib import Path
from typing import Any

from durafact._activities.skills import load_skills
from durafact._core.answer_flow import AnswerBatchError
from durafact._core.sources import SourceSpec
from durafact._recipes.answer_flow import AnswerBatchInput, load_answer_batch

# Shipped with the package (durafact/data/): the skills matched into prompts, and what
# `research` reads when no source is given, the sample shop.
DATA = Path(__file__).resolve().parent.parent / "data"
SKILLS = DATA / "skills"
SAMPLE_DOCS = DATA / "research" / "docs"
SAMPLE_CSV = DATA / "research" / "prices.csv"


def answer_input(values: dict[str, Any]) -> AnswerBatchInput:
    """The batch the file holds, checked, with the options' overrides."""
    name = values["file"]
    try:
        document = Path(name).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror}") from None
    try:
        return load_answer_batch(
            document, max_repairs=values["max_repairs"], review_policy=values["review"]
        )
    except AnswerBatchError as exc:
        raise ValueError(f"{name}: {exc}") from None


def research_input(values: dict[str, Any]) -> dict[str, Any]:
    """The question, its sources and limits, and the shipped skills."""
    return {
        "question": values["question"],
        "sources": research_sources(values),
        "limit": values["limit"],
        "max_docs": values["max_docs"],
        "skills": load_skills(SKILLS) if SKILLS.is_dir() else [],
    }


def research_sources(values: dict[str, Any]) -> list[SourceSpec]:
    """The `SourceSpec`s the options name, paths made absolute for the worker."""
    urls = values["url"] or []
    web = bool(urls or values["search_endpoint"])
    if values["allow_private"] and not web:
        raise ValueError("--allow-private applies to --url and --search-endpoint")
    if values["allow_network"] and not web:
        raise ValueError("--allow-network applies to --url and --search-endpoint")
    networks = [network(value) for value in values["allow_network"] or []]
    docs, table, key = values["docs"], values["csv"], values["csv_key"]
    if key and not table:
        raise ValueError("--csv-key needs --csv")
    if not (docs or table or web):
        return [
            SourceSpec.files(str(SAMPLE_DOCS), source_id="docs"),
            SourceSpec.csv(str(SAMPLE_CSV), key="item", source_id="prices"),
        ]
    sources = []
    if docs:
        root = Path(docs).expanduser().resolve()
        if not root.is_dir():
            raise ValueError(f"--docs: {docs} is not a directory")
        sources.append(SourceSpec.files(str(root), source_id="docs"))
    if table:
        sources.append(csv_source(table, key))
    if web:
        for url in [*urls, *filter(None, [values["search_endpoint"]])]:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"not an http(s) URL: {url}")
        sources.append(
            SourceSpec.web(
                search_endpoint=values["search_endpoint"],
                urls=urls or None,
                allow_private=values["allow_private"] or None,
                allowed_networks=networks or None,
            )
        )
    return sources


def csv_source(name: str, key: str | None) -> SourceSpec:
    """`--csv FILE [--csv-key COLUMN]`: the file's rows, named by `key` (default: the
    first column of its header row)."""
    path = Path(name).expanduser().resolve()
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            header = [column.strip() for column in next(csv.reader(handle), [])]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise ValueError(f"--csv: cannot read {name}: {reason}") from None
    if not header:
        raise ValueError(f"--csv: {name} has no header row")
    key = key or header[0]
    if key not in header:
        raise ValueError(f"--csv-key: {name} has no column {key!r} ({', '.join(header)})")
    return SourceSpec.csv(str(path), key=key, source_id="prices")


def network(value: str) -> str:
    """`--allow-network`: one network in CIDR notation (an address alone is its /32 or
    /128), or a one-line reason."""
    try:
        return str(ipaddress.ip_network(value.strip()))
    except ValueError as exc:
        raise ValueError(
            f"--allow-network: {value!r} is not a network ({exc}); give one like 10.1.2.0/24"
        ) from None
