"""JSON schemas as GBNF, the grammars llama.cpp constrains decoding with.

llama-cpp-python's converter (`llama_cpp.llama_grammar.SchemaConverter`, a copy of
llama.cpp's json_schema_to_grammar.py) does the work, with three corrections:

- Its string character is anything but `"` and `\\`, so raw control characters
  (U+0000-U+001F) get into strings, which JSON admits only escaped: strict parsers
  (json.loads, pydantic) refused such replies. Here they come escaped or not at all.
- It copies a `pattern` into the grammar as it is: regex escapes GBNF lacks (`\\.`,
  `\\d`) make a grammar llama.cpp cannot parse, and a `"` or `\\` in the pattern ends
  or breaks the JSON string. Here `_PatternReader` writes the JSON text of the strings
  a pattern matches, for a subset of regular expressions: characters and escaped
  punctuation, `.`, `\\d \\w \\s`, classes with ranges (`[-+*/%0-9]`, `[^"]`), groups
  (also `(?:`), `|`, and `* + ? {n} {n,} {n,m}`; a leading `^` and trailing `$`
  (without them the grammar still matches whole strings, a subset of what the pattern
  matches anywhere). A pattern outside the subset constrains nothing: the string is
  a plain one, for whoever receives the JSON to validate.
- It ignores `minimum` and `maximum`: an integer between bounds at most
  `MAX_ENUMERATED` values apart is written as the list of its values here. Wider
  integer ranges and bounds on other numbers are left to validation.

Unicode beyond ASCII for `\\w \\d` and control characters that a negated class or `.`
would match are left out: the grammar admits a subset of what a pattern matches, so
what it yields is always valid, never more.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from typing import Any

from llama_cpp.llama_grammar import BuiltinRule, SchemaConverter

MAX_ENUMERATED = 256

# JSON's string character: control characters only as escapes.
JSON_CHAR = BuiltinRule(
    r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])',
    [],
)
Ranges = list[tuple[int, int]]  # inclusive code point ranges
# What JSON writes escaped: control characters, the quote and the backslash.
ESCAPED: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
CLASS_ESCAPES: dict[str, Ranges] = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
LINE_BREAKS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]  # what `.` skips
QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")


class UnsupportedPattern(ValueError):
    """A regular expression outside the subset `_PatternReader` translates."""


def schema_gbnf(schema: dict[str, Any], max_repeats: int | None = None) -> str:
    """The GBNF grammar (root rule `root`) of the JSON texts valid under `schema`.

    With `max_repeats`, what a pattern repeats without end (`*`, `+`, `{n,}`) repeats at
    most that many times more than its least: a subset of the pattern's strings, for a
    decoder that must finish within a token budget. The converter's failures on a schema
    it cannot express (an unresolvable `$ref`, an unknown type) come as AssertionError,
    KeyError or ValueError."""
    converter = _Converter(max_repeats)
    converter.visit(converter.resolve_refs(copy.deepcopy(schema), "stdin"), "")
    return converter.format_grammar()


class _Converter(SchemaConverter):
    def __init__(self, max_repeats: int | None) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self.max_repeats = max_repeats

    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        return super()._add_primitive(name, JSON_CHAR if name == "char" else rule)

    def visit(self, schema: dict[str, Any], name: str) -> str:
        values = _integer_values(schema)
        if values is not None:
            schema = {**schema, "enum": values}
        try:
            return super().visit(schema, name)
        except UnsupportedPattern:  # this schema's own (a nested schema catches its own)
            return super().visit({k: v for k, v in schema.items() if k != "pattern"}, name)

    def _visit_pattern(self, pattern: str, name: str) -> str:
        def add_rule(body: str) -> str:
            return self._add_rule(f"{name}-group", body)

        gbnf = _PatternReader(pattern, self.max_repeats, add_rule).gbnf()
        return self._add_rule(name, rf'"\"" {gbnf} "\"" space')


def _integer_values(schema: dict[str, Any]) -> list[int] | None:
    """The values of an integer schema whose bounds are near enough to list, or None."""
    if schema.get("type") != "integer" or {"enum", "const"} & schema.keys():
        return None
    lows = [math.ceil(v) for v in _numbers(schema, "minimum")]
    lows += [math.floor(v) + 1 for v in _numbers(schema, "exclusiveMinimum")]
    highs = [math.floor(v) for v in _numbers(schema, "maximum")]
    highs += [math.ceil(v) - 1 for v in _numbers(schema, "exclusiveMaximum")]
    if not lows or not highs or not 0 <= min(highs) - max(lows) < MAX_ENUMERATED:
        return None
    return list(range(max(lows), min(highs) + 1))


def _numbers(schema: dict[str, Any], key: str) -> list[float]:
    value = schema.get(key)
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


class _PatternReader:
    """Reads a regular expression once, writing GBNF for the JSON text (inside the
    quotes) of the strings it matches as a whole, or raises `UnsupportedPattern`."""

    def __init__(
        self, pattern: str, max_repeats: int | None, add_rule: Callable[[str], str]
    ) -> None:
        self.max_repeats, self.add_rule = max_repeats, add_rule
        self.text = pattern.removeprefix("^")
        before = self.text[:-1]
        if self.text.endswith("$") and (len(before) - len(before.rstrip("\\"))) % 2 == 0:
            self.text = before  # an anchor, not an escaped "$"
        self.at = 0

    def gbnf(self) -> str:
        expression = self.alternatives()
        if self.at < len(self.text):
            raise UnsupportedPattern(f"{self.text[self.at]!r} at {self.at} of {self.text!r}")
        return expression

    def peek(self) -> str:
        return self.text[self.at : self.at + 1]

    def take(self, expected: str) -> bool:
        if self.peek() != expected:
            return False
        self.at += 1
        return True

    def next(self) -> str:
        char = self.peek()
        if not char:
            raise UnsupportedPattern(f"{self.text!r} ends too early")
        self.at += 1
        return char

    def alternatives(self) -> str:
        branches = [self.sequence()]
        while self.take("|"):
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else f"({' | '.join(branches)})"

    def sequence(self) -> str:
        items = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.repeated(self.atom()))
        return " ".join(items) or '""'

    def repeated(self, atom: str) -> str:
        quantifier = self.peek() if self.peek() in ("*", "+", "?") else ""
        bounds = QUANTIFIER.match(self.text, self.at)
        if bounds:
            quantifier = bounds.group()
        self.at += len(quantifier)
        if quantifier:
            self.take("?")  # lazy: the same strings
        quantifier = self.capped(quantifier)
        if quantifier.startswith("{") and atom.startswith("("):
            # llama.cpp copies what it repeats n times, so nested counts multiply (and
            # it refuses the grammar): a rule is one symbol to copy.
            atom = self.add_rule(atom)
        return atom + quantifier

    def capped(self, quantifier: str) -> str:
        least = {"*": "0", "+": "1"}.get(quantifier)
        if quantifier.endswith(",}"):
            least = quantifier[1:-2]
        if least is None or self.max_repeats is None:
            return quantifier
        return f"{{{least},{int(least) + self.max_repeats}}}"

    def atom(self) -> str:
        char = self.next()
        if char == "(":
            if self.take("?") and not self.take(":"):
                raise UnsupportedPattern(f"lookaround or named group in {self.text!r}")
            inner = self.alternatives()
            if not self.take(")"):
                raise UnsupportedPattern(f"unbalanced '(' in {self.text!r}")
            return f"({inner})"
        if char == "[":
            return self.char_class()
        if char == ".":
            return _json_chars(LINE_BREAKS, negated=True)
        if char == "\\":
            return _json_chars(self.escape())
        if char in "*+?{^$":
            raise UnsupportedPattern(f"{char!r} at {self.at - 1} of {self.text!r}")
        return _json_chars(_point(char))

    def escape(self) -> Ranges:
        char = self.next()
        if char in CLASS_ESCAPES:
            return CLASS_ESCAPES[char]
        char = CHAR_ESCAPES.get(char, char)
        if char.isalnum():  # \b, \D, \1, \x41 ...: outside the subset
            raise UnsupportedPattern(f"'\\{char}' in {self.text!r}")
        return _point(char)

    def char_class(self) -> str:
        negated = self.take("^")
        ranges: Ranges = []
        while not self.take("]"):
            first = self.escape() if self.take("\\") else _point(self.next())
            if self.peek() != "-" or self.text[self.at + 1 : self.at + 2] in ("]", ""):
                ranges += first
                continue
            self.at += 1
            last = self.escape() if self.take("\\") else _point(self.next())
            if len(first) != 1 or len(last) != 1 or not first[0][1] <= last[0][0]:
                raise UnsupportedPattern(f"a range of classes or backwards in {self.text!r}")
            ranges.append((first[0][0], last[0][1]))
        return _json_chars(ranges, negated)


def _json_chars(ranges: Ranges, negated: bool = False) -> str:
    """GBNF for one character of `ranges` (or of all but them) as JSON writes it: plain,
    or the escape of a quote, backslash or control character."""
    if not negated and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _literal(json.dumps(chr(ranges[0][0]), ensure_ascii=False)[1:-1])
    if negated:
        plain = "[^" + _class_items([*ranges, *ESCAPED]) + "]"
        escaped = [c for c in (0x22, 0x5C) if not _within(c, ranges)]
    else:
        kept = _without(ranges, ESCAPED)
        plain = "[" + _class_items(kept) + "]" if kept else ""
        escaped = [c for low, high in ESCAPED for c in range(low, high + 1) if _within(c, ranges)]
    options = [plain] if plain else []
    options += [_literal(json.dumps(chr(c))[1:-1]) for c in escaped]
    if not options:
        raise UnsupportedPattern("an empty character class")
    return options[0] if len(options) == 1 else f"({' | '.join(options)})"


def _point(char: str) -> Ranges:
    return [(ord(char), ord(char))]


def _within(code: int, ranges: Ranges) -> bool:
    return any(low <= code <= high for low, high in ranges)


def _without(ranges: Ranges, holes: Ranges) -> Ranges:
    kept = []
    for low, high in ranges:
        for hole_low, hole_high in holes:  # sorted, apart
            if hole_high < low or hole_low > high:
                continue
            if hole_low > low:
                kept.append((low, hole_low - 1))
            low = hole_high + 1
        if low <= high:
            kept.append((low, high))
    return kept


def _class_items(ranges: Ranges) -> str:
    return "".join(
        _class_char(low) if low == high else f"{_class_char(low)}-{_class_char(high)}"
        for low, high in ranges
    )


def _class_char(code: int) -> str:
    if chr(code).isascii() and chr(code).isalnum():
        return chr(code)
    return f"\\x{code:02X}" if code < 0x100 else f"\\U{code:08X}"


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
