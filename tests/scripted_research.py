"""A scripted research model for ResearchWorkflow, keyed on `Call.schema_name`, and the
shipped sample sources. Shared by the research tests, the starter tests and the
history recorder.

The model reads what it was shown as context (`[id] text` blocks) and answers from
a `Script`: which refs to choose (by locator), which passages to quote, which
claims to state over those quotes and which calculations to name over which rows.
It never does arithmetic: a calculation names rows, a column and an operation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durafact._activities.skills import load_skills
from durafact._core.grounding import normalize_text
from durafact._core.skills import Skill
from durafact._core.sources import SourceSpec
from durafact.testing import Call

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "durafact" / "data" / "research"
SAMPLE_DOCS = SAMPLE / "docs"
SAMPLE_PRICES = SAMPLE / "prices.csv"

BLOCK = re.compile(r"^\[((?:ref|resolved|evidence|claim):[^\]\n]*)\] ", re.MULTILINE)

SUM_QUESTION = "How much does a city bike with a child seat and a helmet cost per day?"
MEAN_QUESTION = "What is the average daily price of the electric bikes?"
LATE_QUESTION = "What happens if I return a bike late?"
KAYAK_QUESTION = "Do you rent kayaks?"


def shipped_skills() -> list[Skill]:
    return load_skills(ROOT / "durafact" / "data" / "skills")


def sample_sources(*, docs: Path = SAMPLE_DOCS, prices: Path = SAMPLE_PRICES) -> list[SourceSpec]:
    return [
        SourceSpec.files(str(docs), source_id="docs"),
        SourceSpec.csv(str(prices), key="item", source_id="prices"),
    ]


def blocks(call: Call) -> dict[str, str]:
    """The context the model was shown: text by artifact id."""
    text = "\n\n".join(
        m.get("content") or ""
        for m in call.body.get("messages", [])
        if (m.get("content") or "").startswith("Context:")
    )
    found = list(BLOCK.finditer(text))
    shown = {}
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        shown[match[1]] = text[match.end() : end].strip()
    return shown


def system_prompt(call: Call) -> str:
    return "\n".join(
        m.get("content") or "" for m in call.body.get("messages", []) if m.get("role") == "system"
    )


@dataclass
class Script:
    """What the scripted model does for one research question.

    `pick`: locators (file path, row key or URL) to choose. `quotes`: passages to
    quote, each attributed to the first shown document that contains it (or to the
    first document when none does: a quote that fails the grounding rule).
    `claims`: `(text, [quotes it rests on], calculation name or None)`.
    `calculations`: `(name, op, column, [row keys], unit)`. `answer`: the answer text.
    """

    pick: list[str] = field(default_factory=list)
    quotes: list[str] = field(default_factory=list)
    claims: list[tuple[str, list[str], str | None]] = field(default_factory=list)
    calculations: list[tuple[str, str, str, list[str], str]] = field(default_factory=list)
    answer: str = ""
    key_column: str = "item"

    def __call__(self, call: Call) -> dict[str, Any]:
        shown = blocks(call)
        if call.schema_name == "RefChoice":
            uids = {json.loads(text)["uid"]: rid for rid, text in shown.items()}
            return {"ref_ids": [uids[u] for u in self.pick if u in uids], "reason": "scripted"}
        if call.schema_name == "EvidenceSet":
            evidence = []
            for quote in self.quotes:
                home = next(
                    (d for d, t in shown.items() if normalize_text(quote) in normalize_text(t)),
                    next(iter(shown), "resolved:nowhere"),
                )
                evidence.append({"doc_id": home, "quote": quote, "point": f"says: {quote}"})
            return {"evidence": evidence}
        if call.schema_name == "ClaimSet":
            quotes = {
                json.loads(t)["quote"]: i for i, t in shown.items() if i.startswith("evidence:")
            }
            rows = {}
            for rid, text in shown.items():
                for line in text.splitlines():
                    if rid.startswith("resolved:") and line.startswith(f"{self.key_column}: "):
                        rows[line.split(": ", 1)[1]] = rid
            return {
                "claims": [
                    {
                        "text": text,
                        "evidence_ids": [quotes[q] for q in cited if q in quotes],
                        "calculation": calc,
                    }
                    for text, cited, calc in self.claims
                ],
                "calculations": [
                    {
                        "name": name,
                        "op": op,
                        "column": column,
                        "row_ids": [rows.get(key, f"resolved:{key}") for key in keys],
                        "unit": unit,
                    }
                    for name, op, column, keys, unit in self.calculations
                ],
            }
        if call.schema_name == "AnswerDraft":
            return {"text": self.answer}
        raise AssertionError(f"unexpected model call {call.activity_id} ({call.schema_name})")


PRICE_LINES = {
    "city-bike": "price_per_day_eur: 14.00",
    "child-seat": "price_per_day_eur: 4.50",
    "helmet": "price_per_day_eur: 2.00",
}


def sum_script() -> Script:
    """A city bike, a child seat and a helmet for a day: a total computed from three rows."""
    rows = list(PRICE_LINES)
    return Script(
        pick=rows,
        quotes=list(PRICE_LINES.values()),
        claims=[
            (
                "A city bike, a child seat and a helmet together cost {{total}} per day.",
                list(PRICE_LINES.values()),
                "total",
            )
        ],
        calculations=[("total", "sum", "price_per_day_eur", rows, "EUR")],
        answer="Renting a city bike with a child seat and a helmet costs {{total}} per day, "
        "computed from the price_per_day_eur column of the price list.",
    )


def mean_script() -> Script:
    """The mean day price of the two electric bikes."""
    rows = ["e-bike", "cargo-e-bike"]
    return Script(
        pick=rows,
        quotes=["category: e-bike\nprice_per_day_eur: 32.00", "price_per_day_eur: 39.00"],
        claims=[
            (
                "The electric bikes cost {{avg}} per day on average.",
                ["category: e-bike\nprice_per_day_eur: 32.00", "price_per_day_eur: 39.00"],
                "avg",
            )
        ],
        calculations=[("avg", "mean", "price_per_day_eur", rows, "EUR")],
        answer="On average an electric bike costs {{avg}} per day.",
    )


def kayak_script() -> Script:
    """Nothing in the sources is about kayaks: the model's quotes are not in the documents."""
    return Script(
        pick=["rental-terms.md"],
        quotes=["We rent kayaks by the hour from the river pier."],
        claims=[("Kayaks are rented by the hour.", ["We rent kayaks by the hour"], None)],
        answer="Yes, by the hour.",
    )
