"""Properties of the command line's argument and file parsing, over generated input
(hypothesis): whatever string a user types or a file holds, a parsing helper gives a
value or `Failed` with code 2 (or, from the service layer, `Invalid`, which is code 2
too) and a one-line reason, never another exception (which the starter would print as
an exception name with exit code 1); and any id pasted from a suggested command
reaches the shell as the same single word.

Arguments are generated the way the interpreter hands them over: any text, and any
bytes decoded as `sys.argv` decodes them (invalid UTF-8 becomes lone surrogates).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durafact._cli.arguments import duration
from durafact._cli.commands import corrections
from durafact._cli.launch import read_input
from durafact._cli.output import Failed, decide_hint, quoted
from durafact._core.plan_limits import MAX_STEPS
from durafact._core.text import one_line
from durafact._runtime.registry import load_registry
from durafact._service.errors import Invalid
from durafact._service.launch import launch_of_command
from tests.properties import FAST, JSON

# What argv can hold: text, or bytes that are not UTF-8 (decoded with surrogateescape);
# never a NUL, which ends a C string.
ARGS = st.text(st.characters(exclude_characters="\x00"), max_size=30) | st.binary(max_size=30).map(
    lambda raw: os.fsdecode(raw.replace(b"\x00", b""))
)


def value_or_failed(parse: Callable[[], Any]) -> Any:
    """What `parse` returns, or None after checking it failed as the starter expects."""
    try:
        return parse()
    except Failed as exc:
        assert exc.code == 2, str(exc)
        assert one_line(str(exc)), "a failure with no reason"  # printed as one line
        return None
    except Invalid as exc:
        assert one_line(str(exc)), "a failure with no reason"
        return None


# --- durations: --approval-timeout ---------------------------------------------------------

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@FAST
@given(st.integers(1, 36_500), st.sampled_from(sorted(UNITS)))
def test_a_duration_is_a_whole_number_and_one_unit(count: int, unit: str) -> None:
    assert duration(f"{count}{unit}", "--approval-timeout") == timedelta(**{UNITS[unit]: count})


@FAST
@given(ARGS)
def test_any_string_is_a_duration_or_one_line_with_code_2(text: str) -> None:
    value = value_or_failed(lambda: duration(text, "--approval-timeout"))
    assert value is None or value > timedelta(0)


@FAST
@given(st.text("0123456789", min_size=9, max_size=4000), st.sampled_from(sorted(UNITS)))
def test_a_duration_too_long_to_wait_is_one_line_with_code_2(digits: str, unit: str) -> None:
    with pytest.raises(Failed, match="--approval-timeout") as caught:
        duration(f"9{digits}{unit}", "--approval-timeout")  # 285 years and up
    assert caught.value.code == 2


@FAST
@given(st.integers(4_300, 6_000), st.sampled_from(sorted(UNITS)))
def test_a_duration_with_more_digits_than_python_reads_is_one_line_with_code_2(
    digits: int, unit: str
) -> None:
    with pytest.raises(Failed, match="--approval-timeout") as caught:
        duration("9" * digits + unit, "--approval-timeout")
    assert caught.value.code == 2


# --- corrections: approve --reject --set FIELD=VALUE ---------------------------------------

FIELDS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)


@FAST
@given(st.dictionaries(FIELDS, st.text(min_size=1, max_size=20).filter(str.strip), min_size=1))
def test_set_pairs_are_read_back_as_written(changes: dict[str, str]) -> None:
    pairs = [f"{field}={value}" for field, value in changes.items()]
    assert corrections(pairs) == {field: value.strip() for field, value in changes.items()}


@FAST
@given(st.lists(ARGS, max_size=4))
def test_any_set_options_are_corrections_or_one_line_with_code_2(pairs: list[str]) -> None:
    changes = value_or_failed(lambda: corrections(pairs))
    if changes is not None:
        assert len(changes) == len(pairs)
        assert all(value and value == value.strip() for value in changes.values())


@FAST
@given(FIELDS, st.text(max_size=10))
def test_a_set_field_given_twice_is_refused(field: str, value: str) -> None:
    with pytest.raises(Failed, match=f"--set {field}: given twice"):
        corrections([f"{field}=a", f"{field}=b"])
    with pytest.raises(Failed, match="the value is empty"):
        corrections([f"{field}= \t"])


# --- start TYPE --input JSON|@FILE ---------------------------------------------------------


@FAST
@given(JSON)
def test_input_json_is_read_as_written(document: Any) -> None:
    assert read_input(json.dumps(document)) == document


@FAST
@given(ARGS)
def test_any_input_text_is_json_or_one_line_with_code_2(text: str) -> None:
    value_or_failed(lambda: read_input(text))


@FAST
@given(JSON | st.binary(max_size=40))
def test_an_input_file_is_read_or_one_line_with_code_2(
    tmp_path_factory: pytest.TempPathFactory, content: Any
) -> None:
    path = tmp_path_factory.mktemp("input") / "input.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    value = value_or_failed(lambda: read_input(f"@{path}"))
    if not isinstance(content, bytes):
        assert value == content


@FAST
@given(ARGS)
def test_any_input_file_name_is_read_or_one_line_with_code_2(name: str) -> None:
    value_or_failed(lambda: read_input(f"@{name}"))


@FAST
@given(st.integers(1_000, 50_000), st.sampled_from(["[", '{"a": ']))
def test_deeply_nested_input_is_one_line_with_code_2(depth: int, opening: str) -> None:
    with pytest.raises(Failed) as caught:
        read_input(opening * depth + "1")
    assert caught.value.code == 2


@FAST
@given(st.integers(4_301, 20_000))
def test_a_number_too_long_to_read_is_one_line_with_code_2(digits: int) -> None:
    with pytest.raises(Failed) as caught:
        read_input('{"max_steps": ' + "7" * digits + "}")
    assert caught.value.code == 2


def test_an_input_file_that_is_missing_a_directory_or_not_utf8_is_one_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "latin1.json").write_bytes('"café"'.encode("latin-1"))
    for name in ("missing.json", ".", "latin1.json"):
        with pytest.raises(Failed, match="--input: cannot read") as caught:
            read_input(f"@{tmp_path / name}")
        assert caught.value.code == 2


# --- the ready recipes' commands: their values as their workflow inputs ---------------------

# Each ready recipe's own command, as the registry finds it on the recipe (`Recipe.command`).
READY = load_registry([]).commands()


def launched(command: str, values: dict[str, Any]) -> Any:
    """The input a ready command starts its recipe with, on these values."""
    return launch_of_command(READY[command], values).args[0]


@FAST
@given(ARGS, st.integers(-(2**70), 2**70))
def test_plan_arguments_are_a_goal_or_one_line_with_code_2(goal: str, max_steps: int) -> None:
    values = {"text": goal, "max_steps": max_steps}
    value = value_or_failed(lambda: launched("plan", values))
    if value is not None:
        assert value.text == goal.strip() and 1 <= value.max_steps <= MAX_STEPS


@FAST
@given(ARGS, st.floats(), st.integers(-(2**70), 2**70))
def test_reflect_arguments_are_an_input_or_one_line_with_code_2(
    topic: str, accept_at: float, max_rounds: int
) -> None:
    values = {"topic": topic, "accept_at": accept_at, "max_rounds": max_rounds}
    value_or_failed(lambda: launched("reflect", values))


@FAST
@given(
    ARGS, st.none() | st.timedeltas(), st.none() | st.sampled_from(["reject", "escalate"]) | ARGS
)
def test_route_arguments_are_a_request_or_one_line_with_code_2(
    request: str, timeout: timedelta | None, on_timeout: str | None
) -> None:
    values = {"request": request, "approval_timeout": timeout, "on_timeout": on_timeout}
    value_or_failed(lambda: launched("route", values))


@FAST
@given(
    ARGS,
    st.none() | st.lists(ARGS, max_size=3),
    st.none() | st.lists(ARGS, max_size=3),
    st.sampled_from(["text", "native"]) | ARGS,
    st.integers(-(2**70), 2**70),
)
def test_react_arguments_are_an_input_or_one_line_with_code_2(
    question: str, tools: list[str] | None, mcp: list[str] | None, protocol: str, max_turns: int
) -> None:
    values = {
        "question": question,
        "tools": tools,
        "mcp_servers": mcp,
        "protocol": protocol,
        "max_turns": max_turns,
        "context": "keep_all",
    }
    value_or_failed(lambda: launched("react", values))


# --- ids in suggested commands -------------------------------------------------------------


@FAST
@given(ARGS.filter(bool), ARGS.filter(bool))
def test_a_suggested_command_gives_the_shell_back_the_ids_as_they_are(
    workflow_id: str, question_id: str
) -> None:
    assert shlex.split(f"durafact result {quoted(workflow_id)}")[2:] == [workflow_id]
    words = shlex.split(decide_hint(workflow_id, question_id))
    assert words[2:4] == [workflow_id, question_id]
