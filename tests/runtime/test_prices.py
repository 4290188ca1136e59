"""`DURAFACT_PRICES`: a TOML file or one line of JSON, read as decimals; a table that
cannot be used is one line naming what is wrong, and the worker does not start."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.prices import PricesError, prices_from_env
from durafact.testing import ScriptedModel
from tests.helpers import DURAFACT_WORKER, ROOT, clean_env, run_command

TOML = """\
currency = "EUR"

[models."gpt-4o-mini"]
input = 0.15
cached_input = 0.075
output = 0.60

[models.local]
input = 0
output = 0
"""


def test_a_toml_file_is_read_as_decimals(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(TOML)
    prices = prices_from_env({"DURAFACT_PRICES": str(path)})
    assert prices is not None and prices.currency == "EUR"
    mini = prices.models["gpt-4o-mini"]
    assert (mini.input, mini.cached_input, mini.output) == (
        Decimal("0.15"),
        Decimal("0.075"),
        Decimal("0.60"),
    )
    assert prices.models["local"].cached_input is None  # the input price applies


def test_one_line_of_json_is_the_same_table() -> None:
    value = '{"currency": "USD", "models": {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}}'
    prices = prices_from_env({"DURAFACT_PRICES": value})
    assert prices is not None
    assert prices.models["gpt-4o-mini"].input == Decimal("0.15")  # not 0.1499999...
    assert prices_from_env({"DURAFACT_PRICES": " "}) is None
    assert prices_from_env({}) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no such file or directory"),  # no text: a path that does not exist
        ('currency = "EUR"\n[models.m]\ninput = 1\n', "models.m.output: Field required"),
        ('currency = "EUR"\n[models.m]\ninput = -1\noutput = 1\n', "models.m.input: Input should"),
        (
            'currency = "EUR"\n[models.m]\ninput = 1\nouput = 1\n',
            "models.m.output: Field required; models.m.ouput: unknown key",
        ),
        ('currency = "EUR"\n[models.m]\ninput = 1\noutput = 1\nextra = 2\n', "unknown key"),
        ('currency = "eur"\n[models.m]\ninput = 1\noutput = 1\n', "currency: String should match"),
        ("[models.m]\ninput = 1\noutput = 1\n", "currency: Field required"),
        ('currency = "EUR"\nmodels = {}\n', "models: Dictionary should have at least 1 item"),
        ('currency = "EUR"\n[models.m]\ninput = "cheap"\noutput = 1\n', "models.m.input"),
        ("currency = EUR\n", "not TOML"),
    ],
)
def test_a_table_that_cannot_be_used_is_one_line_naming_the_field(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "prices.toml"
    if text:
        path.write_text(text)
    with pytest.raises(PricesError) as raised:
        prices_from_env({"DURAFACT_PRICES": str(path)})
    message = str(raised.value)
    assert message.startswith(f"DURAFACT_PRICES={path}: ")
    assert reason.lower() in message.lower()
    assert "\n" not in message


def test_json_that_does_not_parse_says_so() -> None:
    with pytest.raises(PricesError) as raised:
        prices_from_env({"DURAFACT_PRICES": '{"currency": "USD",'})
    assert str(raised.value).startswith("DURAFACT_PRICES (inline JSON): not JSON: ")


def test_the_plugin_reads_the_table_from_the_environment_and_refuses_a_bad_one() -> None:
    good = '{"currency": "USD", "models": {"scripted": {"input": 1, "output": 2}}}'
    plugin = DurafactPlugin(env={"DURAFACT_PRICES": good, "OPENAI_BASE_URL": "http://x/v1"})
    assert plugin.prices is not None and plugin.prices.models["scripted"].output == 2
    bad = '{"currency": "USD", "models": {"scripted": {"input": 1}}}'
    with pytest.raises(PricesError, match="models.scripted.output: Field required"):
        DurafactPlugin(env={"DURAFACT_PRICES": bad, "OPENAI_BASE_URL": "http://x/v1"})


async def test_the_worker_does_not_start_with_a_bad_table_and_says_why_in_one_line(
    tmp_path: Path, model: ScriptedModel
) -> None:
    path = tmp_path / "prices.toml"
    path.write_text('currency = "USD"\n[models.scripted]\ninput = 2.5\noutput = -10\n')
    env = clean_env(
        OPENAI_BASE_URL=model.url,
        TEMPORAL_ADDRESS="127.0.0.1:1",  # never reached: the table is checked first
        DURAFACT_PRICES=str(path),
    )

    run = await run_command(*DURAFACT_WORKER, env=env, cwd=ROOT, timeout=30)

    assert run.code == 1
    assert run.err_lines == [
        f"worker: DURAFACT_PRICES={path}: models.scripted.output: "
        "Input should be greater than or equal to 0"
    ]
