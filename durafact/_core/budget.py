"""Budgets: how much a run's model calls may use, and the arithmetic that keeps them to it.

A `Budget` is a recipe setting (`RecipeSettings.budget`), so every recipe takes one the
same way. It limits tokens, cost (in the worker's currency, `DURAFACT_PRICES`), or both.
Before each model call the run asks `exhausted(spent, committed)`, the call's own
`max_tokens` counted as committed; what happens then is `on_exhausted`: `fail` ends the
run `over_budget`, `ask` asks a person whether to go on (`question`), and an approval
extends the limits (`extended`). A child run gets what is left (`remaining`).

Pure: no I/O, no clock. The workflow side is `durafact/_recipes/spending.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from durafact._core.llm import Usage

# What an approval of a budget question may set (`approve --set tokens=80000`).
LIMITS = ("tokens", "cost")
TOKENS = re.compile(r"[0-9]{1,15}")


class Budget(BaseModel):
    """What a run's model calls may use in all, its children's included."""

    tokens: int | None = Field(
        default=None, ge=1, description="Tokens (prompt and completion) the run may use."
    )
    cost: Decimal | None = Field(
        default=None,
        gt=0,
        description="What the run may cost, in the worker's currency (DURAFACT_PRICES); every "
        "model the run uses needs a price there.",
    )
    on_exhausted: Literal["fail", "ask"] = Field(
        default="fail",
        description="`fail`: the run ends `over_budget`; `ask`: a person is asked whether to "
        "extend it (approve: by this budget again, or to the limits the approval sets).",
    )
    ask_timeout: timedelta | None = Field(
        default=None,
        description="`ask`: how long the question waits; then the run ends `over_budget` "
        "(None: as long as it takes).",
    )

    # JSON has no Decimal and no duration: a number or a string reads as one even where
    # the input is read strictly (a batch file), where pydantic would refuse it.
    @field_validator("cost", mode="before")
    @classmethod
    def _cost_from_json(cls, value: Any) -> Any:
        return _from_json(value, _DECIMAL, "cost must be a finite number, e.g. 2.50")

    @field_validator("ask_timeout", mode="before")
    @classmethod
    def _timeout_from_json(cls, value: Any) -> Any:
        return _from_json(value, _DURATION, "ask_timeout must be seconds or a duration like PT2H")

    @model_validator(mode="after")
    def _limits_something(self) -> Budget:
        if self.tokens is None and self.cost is None:
            raise ValueError("a budget needs tokens, cost or both")
        if self.ask_timeout is not None and self.ask_timeout <= timedelta(0):
            raise ValueError("ask_timeout must be positive (None waits for ever)")
        return self

    # --- the arithmetic -------------------------------------------------------------

    def exhausted(self, spent: Usage, committed: int = 0) -> bool:
        """Whether a call that may write `committed` tokens (its `max_tokens`) must not
        start: the tokens spent and committed would pass the limit, or nothing is left (a
        call without `max_tokens` needs one token); or the cost limit is reached."""
        if self.tokens is not None and spent.total_tokens + max(committed, 1) > self.tokens:
            return True
        return self.cost is not None and spent.cost is not None and spent.cost >= self.cost

    def remaining(self, spent: Usage) -> Budget:
        """What is left after `spent`, for a child run (call it while not `exhausted`)."""
        update: dict[str, Any] = {}
        if self.tokens is not None:
            update["tokens"] = self.tokens - spent.total_tokens
        if self.cost is not None and spent.cost is not None:
            update["cost"] = self.cost - spent.cost
        return self.model_copy(update=update)

    def extended(
        self, by: Budget, changes: Mapping[str, str], spent: Usage, committed: int = 0
    ) -> Budget:
        """The budget after a person approved going on: the limits `changes` set (as typed:
        `{"tokens": "80000"}`), else each limit raised by `by`'s (the run's first budget).
        ValueError, naming the field, for a change that is not a limit of this budget, is
        not a number, or would not let the next call start."""
        unknown = sorted(set(changes) - set(self.limited()))
        if unknown:
            raise ValueError(
                f"{unknown[0]}: not a limit of this budget (it limits {', '.join(self.limited())})"
            )
        if not changes:
            update: dict[str, Any] = {}
            if self.tokens is not None and by.tokens is not None:
                update["tokens"] = self.tokens + by.tokens
            if self.cost is not None and by.cost is not None:
                update["cost"] = self.cost + by.cost
            return self.model_copy(update=update)
        update = {}
        if "tokens" in changes:
            update["tokens"] = parse_tokens(changes["tokens"], "tokens")
            needed = spent.total_tokens + max(committed, 1)
            if update["tokens"] < needed:
                raise ValueError(
                    f"tokens={update['tokens']} leaves nothing for the next call: "
                    f"{spent.total_tokens:,} are spent"
                    + (f" and {committed:,} more may be written" if committed else "")
                )
        if "cost" in changes:
            update["cost"] = parse_cost(changes["cost"], "cost")
            if spent.cost is not None and update["cost"] <= spent.cost:
                raise ValueError(
                    f"cost={changes['cost']} is not above what is spent, {money(spent.cost)}"
                )
        return self.model_copy(update=update)

    def limited(self) -> list[str]:
        """The names of the limits this budget sets: what an approval may change."""
        return [name for name in LIMITS if getattr(self, name) is not None]

    # --- what people read -----------------------------------------------------------

    def spent_text(self, spent: Usage, committed: int = 0) -> str:
        """`spent 41,200 of 40,000 tokens (cost 0.83)`: spent against each limit."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{spent.total_tokens:,} of {self.tokens:,} tokens")
        if self.cost is not None:
            parts.append(f"cost {money(spent.cost)} of {money(self.cost)}")
        text = "spent " + " and ".join(parts)
        if self.tokens is None:
            text += f" ({spent.total_tokens:,} tokens)"
        elif self.cost is None and spent.cost:
            text += f" (cost {money(spent.cost)})"
        if committed > 1 and self.tokens is not None:
            text += f"; the next call may write {committed:,} more"
        return text

    def question(self, spent: Usage, by: Budget, committed: int = 0) -> str:
        """What a person is asked when the budget is spent, in `ask` mode."""
        more = []
        if self.tokens is not None and by.tokens is not None:
            more.append(f"{by.tokens:,} tokens")
        if self.cost is not None and by.cost is not None:
            more.append(f"cost {money(by.cost)}")
        return f"{self.spent_text(spent, committed)}; extend by {' and '.join(more)}?"

    def describe(self) -> str:
        """`40,000 tokens, cost 1.00, ask`: the limits in one line."""
        parts = [f"{self.tokens:,} tokens"] if self.tokens is not None else []
        if self.cost is not None:
            parts.append(f"cost {money(self.cost)}")
        parts.append(self.on_exhausted)
        return ", ".join(parts)


class Spent(BaseModel):
    """What a run that ended without a result had spent: the details of its failure, so
    that a parent charges a failed child's calls too (`durafact/_recipes/spending.py`)."""

    usage: Usage
    budget: Budget | None = None

    @classmethod
    def among(cls, details: Any) -> Spent | None:
        """The `Spent` among a failure's details (as decoded: models or plain JSON)."""
        for detail in reversed(list(details or ())):
            if isinstance(detail, Spent):
                return detail
            if isinstance(detail, Mapping) and set(detail) >= {"usage"}:
                try:
                    return cls.model_validate(detail)
                except ValueError:
                    continue
        return None


_DECIMAL = TypeAdapter(Decimal)
_DURATION = TypeAdapter(timedelta)


def _from_json(value: Any, adapter: TypeAdapter[Any], problem: str) -> Any:
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            return adapter.validate_python(value)
        except ValidationError:
            raise ValueError(problem) from None
    return value


def parse_tokens(text: str, name: str = "tokens") -> int:
    """A token limit as typed (`80000`): a whole number above 0, or ValueError."""
    if not TOKENS.fullmatch(text.strip()) or int(text) < 1:
        raise ValueError(f"{name}: {text!r} is not a whole number of tokens above 0")
    return int(text)


def parse_cost(text: str, name: str = "cost") -> Decimal:
    """A cost limit as typed (`2.50`): a finite decimal above 0, or ValueError."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value <= 0 or len(text.strip()) > 30:
        raise ValueError(f"{name}: {text!r} is not an amount above 0 (e.g. 2.50)")
    return value


def money(value: Decimal | None) -> str:
    """A cost as people read it: two decimals, more only for amounts under a cent;
    `unknown` when a model had no price."""
    if value is None:
        return "unknown"
    if value == 0 or abs(value) >= Decimal("0.01"):
        return f"{value:,.2f}"
    return f"{value:.2g}"
