"""What a model call costs: the price table a worker is configured with
(`DURAFACT_PRICES`, read by durafact/_runtime/prices.py) and the arithmetic.

Prices are per million tokens and decimals, never binary floats, so costs add up to
the cent. A call's cached input tokens (read from the endpoint's prompt cache) cost the
cached price, the rest of its input the input price, its output the output price. A
model the table does not list costs None (unknown), never 0.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from durafact._core.llm import Usage

PER = Decimal(1_000_000)  # prices are per million tokens

Price = Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]


class ModelPrice(BaseModel):
    """What one model costs, per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: Price
    cached_input: Price | None = Field(
        default=None, description="Input tokens read from the prompt cache; None: `input`."
    )
    output: Price

    def cost(self, usage: Usage) -> Decimal:
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        spent = (
            cached * cached_rate
            + (usage.prompt_tokens - cached) * self.input
            + usage.completion_tokens * self.output
        )
        return spent / PER


class Prices(BaseModel):
    """A price table: one currency, prices by model name."""

    model_config = ConfigDict(extra="forbid")

    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] = Field(
        description="An ISO 4217 code: USD, EUR, ..."
    )
    models: dict[Annotated[str, StringConstraints(min_length=1)], ModelPrice] = Field(min_length=1)

    def priced(self, usage: Usage, answered: str, asked: str) -> Usage:
        """`usage` with its cost: at the price of the model that answered (the response's
        name, often dated: `gpt-4o-mini-2024-07-18`), else of the model asked for; None
        when the table lists neither."""
        price = self.models.get(answered) or self.models.get(asked)
        cost = price.cost(usage) if price else None
        return usage.model_copy(update={"cost": cost, "currency": self.currency})
