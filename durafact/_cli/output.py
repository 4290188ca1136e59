"""What the command line prints: one-line errors, safe text, and the `--json` document.

Every command needs this, `--help` too, so it imports nothing but the core: a run's
result and failure are printed by durafact/_cli/results.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
from decimal import Decimal
from typing import Any, NoReturn, TextIO

from pydantic import BaseModel

from durafact._core.llm import Usage
from durafact._core.text import one_line, shorten

# How to answer a pending question, wherever the command line mentions one.
ANSWER_HINT = "[--reject] [--reason TEXT] [--set FIELD=VALUE ...]"


def quoted(word: str) -> str:
    """`word` as one shell word, so an id with spaces, quotes or newlines in a suggested
    command can be pasted as it is."""
    return shlex.quote(word)


def decide_hint(workflow_id: str, question_id: str) -> str:
    """The command that answers one named question."""
    return (
        f"durafact decide {quoted(workflow_id)} {quoted(question_id)} "
        "--approve|--reject [--reason TEXT]"
    )


class Failed(Exception):
    """A one-line reason to stop, printed as `starter: <reason>`; code 2 for bad input.
    The operations' own reasons are domain errors (durafact/_service/errors.py), which
    durafact/_cli/starter.py prints the same way."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# Control characters but newline and tab, and the bidi embeddings, overrides and isolates.
# Text holding them (a model's, a tool's, an id) would act on the terminal that prints
# it: `\x1b]0;...\x07` retitles it, `\x1b[2J` clears it, U+202E shows the rest of the line
# reversed.
BIDI = r"\u202a-\u202e\u2066-\u2069"
CONTROL = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}]")
# The ones json.dumps leaves as they are (it escapes those below 0x20).
CONTROL_IN_JSON = re.compile(rf"[\x7f-\x9f{BIDI}]")
# What a table's cell may not hold either: another line, another column.
BREAKS = re.compile(r"[\n\t]")


def escaped(match: re.Match[str]) -> str:
    """The character `match` found as text: `\\xNN`, or `\\uNNNN` above 0xff."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with each control character but newline and tab, and each bidi control,
    shown as text (`escaped`)."""
    return CONTROL.sub(escaped, text)


def cell(text: str) -> str:
    """`text` as one cell of a table: `printable`, and newline and tab shown as `\\x0a`
    and `\\x09` too, so that a row stays one line and its columns stay in place."""
    return BREAKS.sub(escaped, printable(text))


def say(line: str, stream: TextIO | None = None, end: str = "\n") -> None:
    """`line` on stdout (or `stream`) as `printable` text: whatever a model, a tool or a
    person wrote reaches the terminal through here, and only here."""
    print(printable(line), file=stream or sys.stdout, end=end, flush=True)


def say_json(value: Any, indent: int | None = None) -> None:
    """`value` as JSON, every control character escaped (`\\u009b`), so that `say`
    prints it unchanged and it reads back as the same value."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    say(CONTROL_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text))


def note(line: str) -> None:
    say(line, sys.stderr)


def fail(message: str) -> None:
    say(f"starter: {one_line(message)}", sys.stderr)


def brief(text: str, limit: int = 100) -> str:
    """A progress line of the tool loop: one line, its label capitalized, cut to `limit`."""
    return shorten(text[:1].upper() + text[1:], limit, one_line=True)


def emit_json(workflow_id: str, run_id: str, state: str, value: Any, url: str) -> None:
    """The `--json` document: the whole of stdout, one object."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    document = {
        "workflow_id": workflow_id,
        "run_id": run_id,
        "status": state,
        "result": data,
        "ui_url": url,
    }
    say_json(document)


def cost_text(cost: Decimal | float) -> str:
    """A cost without trailing zeros (`0.00123`, `12.5`, `0`): as computed, or as the
    search attribute DurafactCost (a float) holds it."""
    exact = Decimal(repr(cost)) if isinstance(cost, float) else cost
    return f"{exact.normalize():f}"


# A run some of whose calls a price table priced, and others not (a model the table
# lacks, a worker without one): its cost has no sum.
PARTLY_PRICED = "unknown (not every call was priced by DURAFACT_PRICES)"


def usage_line(usage: Usage) -> str:
    """`usage: 1,234 tokens (1,000 in, 800 of them cached; 234 out); cost: 0.00123 USD`.
    No cost when no call was priced (no worker had a price table: a currency is set only
    by one), and `unknown` when not every call was."""
    cached = f", {usage.cached_tokens:,} of them cached" if usage.cached_tokens else ""
    tokens = (
        f"usage: {usage.total_tokens:,} tokens ({usage.prompt_tokens:,} in{cached}; "
        f"{usage.completion_tokens:,} out)"
    )
    if usage.cost is None and not usage.currency:
        return tokens
    cost = PARTLY_PRICED if usage.cost is None else f"{cost_text(usage.cost)} {usage.currency}"
    return f"{tokens}; cost: {cost.rstrip()}"


def exit_now(message: str | None, code: int = 1) -> NoReturn:
    """Print `message` (if any) on stderr and end the process without interpreter
    finalization: once a client exists, temporalio's Rust threads can abort it
    ("PyGILState_Release", temporalio/sdk-python#300), even after a clean stop."""
    if message is not None:
        print(message, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
