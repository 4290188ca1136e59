"""The grammars the local model decodes under (durafact/_local/json_grammar.py), checked
by llama.cpp itself: a text is admitted when its tokens pass llama.cpp's grammar sampler
one after another and the end of the text may follow. Only the model's vocabulary is
loaded; nothing is generated."""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from llama_cpp import Llama
from llama_cpp import llama_cpp as bindings
from pydantic import BaseModel

from durafact._activities.calculator import EXPRESSION, calculator
from durafact._activities.llm import tool_schema
from durafact._activities.tools import tool
from durafact._core.llm import strict_json_schema
from durafact._local.json_grammar import schema_gbnf
from durafact._local.local_model import bound_schema, find_model_path, tools_schema
from durafact._recipes.plan_execute import Plan
from tests.properties import FAST

CONTROL = [chr(code) for code in range(0x20)]


@pytest.fixture(scope="module")
def vocabulary() -> Iterator[Llama]:
    llama = Llama(model_path=str(find_model_path()), vocab_only=True, verbose=False)
    yield llama
    llama.close()


def writable(llama: Llama, text: str) -> bool:
    """Whether the model has tokens for `text`: its vocabulary lacks a few control bytes
    (0x04, 0x06, 0x13, ...), which it can never write, whatever the grammar."""
    tokens = llama.tokenize(text.encode(), add_bos=False, special=False)
    return llama.detokenize(tokens) == text.encode()


def admits(llama: Llama, gbnf: str, text: str) -> bool:
    """Whether llama.cpp, sampling under `gbnf`, could write exactly `text`."""
    assert writable(llama, text), repr(text)
    sampler = bindings.llama_sampler_init_grammar(llama._model.vocab, gbnf.encode(), b"root")
    assert sampler, f"llama.cpp cannot parse the grammar:\n{gbnf}"
    try:
        tokens = llama.tokenize(text.encode(), add_bos=False, special=False)
        for token in [*tokens, llama.token_eos()]:
            candidate = (bindings.llama_token_data * 1)(bindings.llama_token_data(token, 0.0, 0.0))
            candidates = bindings.llama_token_data_array(candidate, 1, -1, False)
            bindings.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if candidate[0].logit == float("-inf"):
                return False
            if token != llama.token_eos():
                bindings.llama_sampler_accept(sampler, token)
        return True
    finally:
        bindings.llama_sampler_free(sampler)


def plan_grammar() -> str:
    """The grammar of a plan, as the local server makes it for the model activity."""
    return schema_gbnf(bound_schema(strict_json_schema(Plan)))


# --- strings --------------------------------------------------------------------------


def test_strings_admit_control_characters_escaped_and_never_raw(vocabulary: Llama) -> None:
    grammar = plan_grammar()
    for char in filter(lambda char: writable(vocabulary, char), CONTROL):
        assert not admits(vocabulary, grammar, f'{{"steps": ["a{char}b"]}}'), repr(char)
        assert admits(vocabulary, grammar, json.dumps({"steps": [f"a{char}b"]})), repr(char)


@FAST
@given(st.lists(st.text(max_size=40), min_size=1, max_size=3))
def test_a_plan_grammar_admits_exactly_the_strict_json_of_its_strings(
    vocabulary: Llama, steps: list[str]
) -> None:
    grammar = plan_grammar()
    encoded = json.dumps({"steps": steps}, ensure_ascii=False)
    raw = '{"steps": [' + ", ".join(f'"{s}"' for s in steps) + "]}"
    assume(writable(vocabulary, encoded) and writable(vocabulary, raw))
    assert admits(vocabulary, grammar, encoded)
    try:
        json.loads(raw)  # strict: no raw control characters, escapes as JSON has them
    except ValueError:
        assert not admits(vocabulary, grammar, raw)


# --- patterns -------------------------------------------------------------------------

PATTERNS = [
    EXPRESSION,
    r"^[A-Z]{2,3}-\d{4}$",
    r"^(?:ab|c)+x?$",
    r'^[^"\\]*$',
    r"^a.b$",
    r"^[ -~]{0,6}$",
    r'^\w+\s"\.\\$',
    r"^(ab|)c$",
    r"^$",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_grammar_admits_what_the_pattern_matches_and_nothing_else(
    vocabulary: Llama, pattern: str
) -> None:
    grammar = schema_gbnf({"type": "string", "pattern": pattern})
    compiled = re.compile(pattern, re.ASCII)
    printable = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
    texts = st.from_regex(compiled, fullmatch=True, alphabet=printable) | st.text(printable)

    @FAST
    @given(texts)
    def agree(text: str) -> None:
        matches = compiled.fullmatch(text) is not None
        assert admits(vocabulary, grammar, json.dumps(text)) == matches, text

    agree()


OUTSIDE = [  # lookarounds, named groups, \b, unbalanced, anchors inside, backwards
    r"^(?=a)\w+$",
    r"^\bx$",
    r"^(?<n>x)$",
    r"^(x$",
    r"^x{2$",
    r"^[a$",
    r"^a$|^b$",
    r"^[z-a]$",
]


@pytest.mark.parametrize("pattern", OUTSIDE)
def test_a_pattern_outside_the_subset_leaves_a_bounded_plain_string(
    vocabulary: Llama, pattern: str
) -> None:
    grammar = schema_gbnf({"type": "string", "pattern": pattern, "maxLength": 4})
    assert admits(vocabulary, grammar, '"zz !"')
    assert not admits(vocabulary, grammar, '"zz !!"')


def test_open_repetitions_are_capped_when_asked_and_stay_a_pattern_subset(
    vocabulary: Llama,
) -> None:
    # Nested counted repetitions: llama.cpp refuses a grammar whose copies multiply.
    schema = {"type": "string", "pattern": r"^(a+ )*(b|c){2,}$"}
    grammar = schema_gbnf(schema, max_repeats=3)
    assert admits(vocabulary, grammar, '"aaaa aaaa aaaa bcbcb"')
    assert not admits(vocabulary, grammar, '"aaaaa bc"')
    assert not admits(vocabulary, grammar, '"a a a a bc"')
    assert not admits(vocabulary, grammar, '"bcbcbc"')
    assert admits(vocabulary, schema_gbnf(schema), '"aaaaa a a a bcbcbc"')


# --- numbers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "admitted", "refused"),
    [
        ({"type": "integer", "minimum": 1, "maximum": 14}, ["1", "7", "14"], ["0", "15", "-1"]),
        ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}, ["1", "2"], ["0", "3"]),
        ({"type": "integer", "minimum": 0, "maximum": 10**6}, ["0", "123456"], ["1.5"]),
    ],
)
def test_an_integer_between_near_bounds_is_one_of_its_values(
    vocabulary: Llama, schema: dict[str, Any], admitted: list[str], refused: list[str]
) -> None:
    grammar = schema_gbnf(schema)
    assert all(admits(vocabulary, grammar, text) for text in admitted)
    assert not any(admits(vocabulary, grammar, text) for text in refused)


# --- tools ----------------------------------------------------------------------------


def calculator_grammar(may_answer: bool = True) -> str:
    """The grammar of a reply offered the calculator, as the local server makes it."""
    return schema_gbnf(tools_schema([tool_schema(calculator.spec)["function"]], may_answer))


def call(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool": name, "arguments": arguments})


@pytest.mark.parametrize(
    "expression",
    ["17 * 23", "17*23", "(12.5 + 7) * 3 / 2 ** 4", "-2 ** -2", "+-+3", "  3 ", "7 // 2.5 % (1)"],
)
def test_a_calculator_call_admits_an_arithmetic_expression(
    vocabulary: Llama, expression: str
) -> None:
    assert admits(vocabulary, calculator_grammar(), call("calculator", {"expression": expression}))


@pytest.mark.parametrize(
    "expression",
    ["17 times 23", "17 * 23 }, ", "", "2 +", "abs(-1)", "2(3)", "x + 1", "1,000", "1e3", ".5"],
)
def test_a_calculator_call_refuses_what_is_not_arithmetic(
    vocabulary: Llama, expression: str
) -> None:
    assert not admits(
        vocabulary, calculator_grammar(), call("calculator", {"expression": expression})
    )


def test_a_required_call_leaves_out_the_answer(vocabulary: Llama) -> None:
    answer = json.dumps({"answer": "391"})
    assert admits(vocabulary, calculator_grammar(may_answer=True), answer)
    assert not admits(vocabulary, calculator_grammar(may_answer=False), answer)


class Where(BaseModel):
    city: str


@tool
def weather(where: Where, days: int = 1) -> str:
    """The forecast."""
    return where.city


def test_a_tool_whose_schema_has_definitions_gets_a_grammar_of_its_calls(
    vocabulary: Llama,
) -> None:
    grammar = schema_gbnf(
        tools_schema([tool_schema(s)["function"] for s in (weather.spec, calculator.spec)])
    )
    assert admits(vocabulary, grammar, call("weather", {"where": {"city": "Paris"}, "days": 2}))
    assert not admits(vocabulary, grammar, call("weather", {"where": "Paris"}))
