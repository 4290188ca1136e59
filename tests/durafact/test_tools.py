"""`parse_arguments`: a tool call's arguments from the text a model wrote, as the text
protocol, the native tool calls and the tool activity read them."""

from __future__ import annotations

import pytest

from durafact._core.tools import parse_arguments


@pytest.mark.parametrize(
    ("text", "unquote", "arguments"),
    [
        ('{"city": "Oslo"}', False, {"city": "Oslo"}),
        (None, False, {}),
        ("  ", False, {}),
        ("[1, 2]", False, "[1, 2]"),
        ("2 + 2", False, "2 + 2"),
        ('"2 + 2"', False, '"2 + 2"'),
        ('"2 + 2"', True, "2 + 2"),
        ("[" * 100_000, True, "[" * 100_000),
    ],
)
def test_parse_arguments_gives_an_object_or_the_text(
    text: str | None, unquote: bool, arguments: dict | str
) -> None:
    assert parse_arguments(text, unquote=unquote) == arguments
