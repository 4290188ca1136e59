"""A table cell out of range never sticks a research run: the calculation over it is
refused as a `Rejection` naming the cell, and the run ends with a small result. Before
the range check, `9e999999` in a sum raised `decimal.Overflow` inside workflow code
(the workflow task failed on every retry, Running forever) and `1e3000000` in a max
made a three-million-digit value, a 9 MB result over the payload limit."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durafact._core.sources import SourceSpec
from durafact._recipes.research import ResearchWorkflow
from durafact._recipes.research_models import Insufficient, Rejection, ResearchInput
from durafact._runtime.settings import Settings
from durafact.testing import ScriptedModel
from tests.scripted_research import SAMPLE_DOCS, SAMPLE_PRICES, SUM_QUESTION, sum_script

ROWS = ["city-bike", "child-seat", "helmet"]


def prices_with(tmp_path: Path, cells: dict[str, str]) -> Path:
    """The sample price list with some rows' `price_per_day_eur` replaced."""
    lines = SAMPLE_PRICES.read_text().splitlines()
    changed = []
    for line in lines:
        cells_of_line = line.split(",")
        if cells_of_line[0] in cells:
            cells_of_line[3] = cells[cells_of_line[0]]
        changed.append(",".join(cells_of_line))
    path = tmp_path / "prices.csv"
    path.write_text("\n".join(changed) + "\n")
    return path


@pytest.mark.parametrize(
    ("op", "cells", "refused"),
    [
        ("sum", {"city-bike": "9e999999", "child-seat": "9e999999"}, "'9E+999999' is out of range"),
        ("max", {"city-bike": "1e3000000"}, "'1E+3000000' is out of range"),
        ("sum", {"child-seat": "0." + "0" * 200 + "1"}, "has more than 100 decimal places"),
    ],
)
async def test_a_cell_out_of_range_is_a_refused_calculation_not_a_stuck_run(
    client: Client,
    worker: Settings,
    model: ScriptedModel,
    tmp_path: Path,
    op: str,
    cells: dict[str, str],
    refused: str,
) -> None:
    script = sum_script()
    script.calculations = [("total", op, "price_per_day_eur", ROWS, "EUR")]
    model.reply(script)
    sources = [
        SourceSpec.files(str(SAMPLE_DOCS), source_id="docs"),
        SourceSpec.csv(str(prices_with(tmp_path, cells)), key="item", source_id="prices"),
    ]
    handle = await client.start_workflow(
        ResearchWorkflow.run,
        ResearchInput(question=SUM_QUESTION, sources=sources),
        id=f"research-range-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    # Bounded so that a regression fails here instead of hanging the suite.
    result = await asyncio.wait_for(handle.result(), timeout=120)
    ledger = await handle.query(ResearchWorkflow.artifacts)

    assert result.calculations == []
    (calculation,) = [r.data for r in ledger.find_all(Rejection) if r.data.stage == "calculation"]
    (issue,) = calculation.issues
    assert issue.startswith("column 'price_per_day_eur': ") and refused in issue
    assert len(issue) < 200  # the cell is quoted shortened, however long it is
    assert result.status == "insufficient"
    ending = ledger.find(Insufficient)
    assert ending is not None and ending.data.stage == "claims"
    assert len(result.model_dump_json()) < 100_000 and len(ledger.model_dump_json()) < 100_000
