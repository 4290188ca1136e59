"""The worker's price table, `DURAFACT_PRICES` (the table itself: durafact/_core/prices.py).

    DURAFACT_PRICES=prices.toml          # the path of a TOML file, or the table as JSON:
    DURAFACT_PRICES='{"currency": "USD", "models": {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}}'

    currency = "USD"                     # one currency for the whole table
    [models."gpt-4o-mini"]               # prices per million tokens
    input = 0.15
    cached_input = 0.075                 # read from the prompt cache (default: input)
    output = 0.60

A value that starts with `{` is JSON (one line, for an environment variable or a
compose file); anything else is a path. Numbers are read as decimals. A table that
cannot be used is a `PricesError` of one line, raised when the worker starts.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from durafact._core.prices import Prices
from durafact._runtime.settings import SettingsError

PRICES_ENV = "DURAFACT_PRICES"


class PricesError(SettingsError):
    """A one-line reason the configured price table cannot be used."""


def prices_from_env(env: Mapping[str, str]) -> Prices | None:
    """The table `DURAFACT_PRICES` configures, or None when it is not set."""
    value = (env.get(PRICES_ENV) or "").strip()
    if not value:
        return None
    if value.startswith("{"):
        where = f"{PRICES_ENV} (inline JSON)"
        try:
            data = json.loads(value, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            raise PricesError(f"{where}: not JSON: {exc}") from None
    else:
        where = f"{PRICES_ENV}={value}"
        data = _toml(Path(value).expanduser(), where)
    return parse_prices(data, where)


def _toml(path: Path, where: str) -> Any:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
    except OSError as exc:
        raise PricesError(
            f"{where}: {exc.strerror} (the path of a TOML file, or the table as JSON "
            "starting with '{')"
        ) from None
    except UnicodeDecodeError:
        raise PricesError(f"{where}: not a text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise PricesError(f"{where}: not TOML: {exc}") from None


def parse_prices(data: Any, where: str, shown: int = 3) -> Prices:
    """`data` as a price table, or a PricesError naming the wrong fields (a misspelt key
    is both a missing and an unknown one)."""
    try:
        return Prices.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'the table'}: "
            + ("unknown key" if error["type"] == "extra_forbidden" else error["msg"])
            for error in errors[:shown]
        ]
        more = f" (and {len(errors) - shown} more)" if len(errors) > shown else ""
        raise PricesError(f"{where}: {'; '.join(problems)}{more}") from None
