"""A recipe's own command, declared on the recipe class (`Recipe.command`): the words
`durafact NAME ARGUMENT [--OPTION VALUE ...]` takes, and the input fields they fill.

    @workflow.defn
    class TripPlanner(PlanExecute[Trip, Day, DayPlan, Itinerary]):
        command = Command(
            "trip", "plan a trip day by day", argument="text",
            options=[Option("--days", type=int, help="how many days")],
        )

`durafact trip "Baltic coast" --days 2` then starts what `durafact start TripPlanner
--input '{"text": "Baltic coast", "days": 2}'` starts, with the options every launch
takes (`--id`, `--no-wait`, `--json`, the budget's, the endpoints'). The values are
checked against the run method's input model before anything starts; a value that
does not fit is one line naming its option.

Why pure data, in the core: reading the arguments must not import Temporal or any
workflow, so that `--help` and a usage mistake answer at once
(tests/cli/test_imports.py). The ready recipes' commands are declared in
durafact/_core/ready_commands.py, which the ready workflows point to and the command
line reads without importing them; a recipe of yours is found through the registry,
which imports its module, only when the command word is none of the built-in ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durafact._core.text import shorten

FLAG = re.compile(r"--[a-z][a-z0-9-]*")
NAME = re.compile(r"[a-z][a-z0-9_-]*")


@dataclass(frozen=True)
class Option:
    """One option of a recipe's command, `--max-steps N`: it fills the input field of
    its name (`max_steps`), or `field`."""

    flag: str
    """`--name`: lowercase letters, digits and '-'."""
    help: str = ""
    type: Callable[[str], Any] = str
    """How the text given becomes the value: a type (`int`, `float`), or a function that
    raises ValueError with a one-line reason."""
    default: Any = None
    """The value when the option is not given; None leaves the input's own default."""
    choices: Sequence[str] | None = None
    metavar: str | None = None
    field: str | None = None
    """The input field it fills, when not the flag's name."""
    many: bool = False
    """Repeatable: the values given, in order, as a list."""
    switch: bool = False
    """Takes no value: True when given."""

    def __post_init__(self) -> None:
        if not FLAG.fullmatch(self.flag):
            raise ValueError(f"option {self.flag!r}: a flag is --name (lowercase, digits, '-')")

    @property
    def name(self) -> str:
        """The input field it fills."""
        return self.field or self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class Command:
    """A recipe's own command: `durafact NAME ARGUMENT [OPTIONS]` starts the recipe
    with the input its argument and options fill."""

    name: str
    """The command word: lowercase letters, digits, '_' and '-'."""
    help: str
    """One line for `durafact --help`."""
    argument: str
    """The input field the one positional argument fills (`text`)."""
    options: Sequence[Option] = ()
    argument_help: str = ""
    metavar: str | None = None
    """The argument's name in the usage line (default: `argument`)."""
    prepare: Callable[[dict[str, Any]], Any] | str | None = None
    """Turns the values given (by field; None for an option not given) into the input's
    data, raising ValueError with a one-line reason. Without it, the values not given
    are left out, so the input's defaults apply. A function that reads files is named by
    import path (`"my_app.inputs:trip"`): workflow code may not import what it does."""
    subject: Callable[[Any], str] | None = None
    """What names a run in the Web UI's summary (`NAME: subject`), from its checked
    input; default: the argument's field."""
    details: Callable[[Any], str] | None = None
    """The Web UI's details of a run, from its checked input; default: the input as JSON."""
    asks_approval: bool = False
    """Its runs ask a person: `--no-wait` says how to answer."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))  # a list given is kept whole
        if not NAME.fullmatch(self.name):
            raise ValueError(f"command {self.name!r}: lowercase letters, digits, '_' and '-'")
        names = [self.argument, *(option.name for option in self.options)]
        if len(set(names)) < len(names):
            raise ValueError(f"command {self.name!r}: two of its values fill one field")

    def flags(self) -> dict[str, str]:
        """Each option's flag, by the field it fills."""
        return {option.name: option.flag for option in self.options}


DURATION = re.compile(r"([1-9][0-9]*)([smhd])")
LONGEST = timedelta(days=36_500)  # a wait of more than 100 years is a typo
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str) -> timedelta:
    """`30s`, `15m`, `2h`, `3d`: a positive whole number and one unit, nothing else."""
    match = DURATION.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration (a whole number above 0 and s, m, h or d: "
            "30s, 15m, 2h, 3d)"
        )
    too_long = ValueError(f"{shorten(text, 24)!r} is longer than 100 years (36500d)")
    if len(match[1]) > 12:  # more than 100 years in any unit; int() refuses 4300 digits
        raise too_long
    try:
        value = timedelta(**{UNITS[match[2]]: int(match[1])})
    except OverflowError:  # more days than timedelta holds
        raise too_long from None
    if value > LONGEST:
        raise too_long
    return value


def duration_text(value: timedelta) -> str:
    """A duration as `duration` reads it: in its largest whole unit (`2h`, `90m`)."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def names(given: Sequence[str]) -> list[str]:
    """Names from repeatable, comma-separated options: `--tools a,b --tools c`."""
    return [name.strip() for option in given for name in option.split(",") if name.strip()]
