"""Text in the core: deterministic keyword scoring, shortening, and blank checks.

Shortening (`shorten`) is how every label, summary and message quotes a text that
may be long: cut to a limit, the cut marked with `…`; `brief` quotes any value so,
on one line. `plain_json` shows a value whole, to a person who decides on it.
`indent`, `one_line` and `assignments` lay out what a person reads (a result, a
correction) the same way in every front door. `not_blank` is the check of
an input's required text fields (a goal, a topic, a question): stripped, and
refused when blank.

Scoring is keyword coverage with optional stemming, no model needed: where
embeddings are optional, "how many of the query's words does this text
contain" is a neutral, reproducible ranking signal: `FileSystemSource` and
`CSVSource` rank with it and `match_skills` triggers skills with it.

How text becomes terms, the same way on both sides of a comparison:

1. Unicode NFKC, then case-folded; `ё` is read as `е` (Russian writes both for
   the same letter) and the combining stress accent is dropped.
2. Words are runs of Unicode letters and digits; everything else (punctuation,
   spaces, `_`, `-`, apostrophes) separates words, so "cost-reporting" is two words.
3. Stop words are dropped (`STOPWORDS` by default: `EN_STOPWORDS` plus a small
   `RU_STOPWORDS` of Russian function words), and so is every single Latin or
   Cyrillic letter ("a", "I", "и", "в", "с"): alone they carry no topic. Single
   digits stay, because "5" in a query is a real constraint.
4. With stems, each remaining word is stemmed by the Snowball algorithm of its
   script (the `snowballstemmer` package): a word with Cyrillic letters and no
   Latin ones by the Russian stemmer, a word of Latin letters by the English
   (Porter 2) stemmer, anything else (digits, other scripts, a word that mixes
   scripts) is kept as it is. So "аутентификации" and "аутентификацию" both
   become "аутентификац", and "computed" and "computing" both become "comput".

Everything here is pure and deterministic, safe inside Temporal workflow code. A
stemmer object keeps per-word state, so one is made per word stemmed rather than
shared between threads; a word's stem is a pure function of the word, so stems are
cached by word (the pure-Python Snowball stemmer takes a fraction of a millisecond a
word: a CSV search scores every row). Stems come from the installed
`snowballstemmer` release; upgrading it may move a borderline `keyword_score`.
"""

from __future__ import annotations

__all__ = [
    "EN_STOPWORDS",
    "RU_STOPWORDS",
    "STOPWORDS",
    "assignments",
    "brief",
    "indent",
    "keyword_score",
    "not_blank",
    "one_line",
    "plain_json",
    "shorten",
    "stem_words",
    "terms",
]

import functools
import json
import re
import unicodedata
from collections.abc import Collection, Mapping
from typing import Any

import snowballstemmer
from pydantic import AfterValidator


def shorten(text: str, limit: int, *, one_line: bool = False) -> str:
    """`text` in at most `limit` characters: cut, its last character `…`, when longer.
    With `one_line`, every run of whitespace (newlines too) is one space first."""
    if one_line:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) one space."""
    return " ".join(text.split())


def indent(text: str, first: str) -> str:
    """`text` under a label: `first` before its first line, the others indented as far.
    A blank line inside keeps the indentation, so the block stays one paragraph."""
    lines = text.strip().splitlines() or [""]
    rest = " " * len(first)
    return "\n".join([first + lines[0], *((rest + line).rstrip() or rest for line in lines[1:])])


def counted(n: int, noun: str) -> str:
    """`n` and `noun`, plural unless one: "1 stage", "3 stages"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def assignments(changes: Mapping[str, str]) -> str:
    """Corrected facts as a person wrote them: `budget=5000, deadline=May`."""
    return ", ".join(f"{field}={value}" for field, value in changes.items())


def brief(value: Any, limit: int = 120) -> str:
    """A value as a progress line shows it: text as it is, anything else as JSON, on
    one line and cut to `limit`."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return shorten(text, limit, one_line=True)


def plain_json(value: Any) -> str:
    """`value` as JSON shown whole: letters of any script as they are, but every control
    or format character (a newline, a right-to-left override, a zero-width space)
    escaped, so what a person reads cannot hide or reorder any of what it holds."""
    return "".join(
        json.dumps(c)[1:-1] if unicodedata.category(c) in _INVISIBLE else c
        for c in json.dumps(value, ensure_ascii=False)
    )


_INVISIBLE = ("Cc", "Cf", "Zl", "Zp")


def without_json_objects(text: str, keys: Collection[str]) -> str:
    """`text` without the JSON objects in it that hold any of `keys`: a weak model
    shown a structured value (a review's score and feedback) copies it into prose."""
    decoder = json.JSONDecoder()
    kept: list[str] = []
    start = 0
    while (brace := text.find("{", start)) != -1:
        try:
            value, end = decoder.raw_decode(text, brace)
        except ValueError:
            kept.append(text[start : brace + 1])
            start = brace + 1
            continue
        dropped = isinstance(value, dict) and any(key in value for key in keys)
        kept.append(text[start:brace] if dropped else text[start:end])
        start = end
    kept.append(text[start:])
    return re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip()


def not_blank(what: str) -> AfterValidator:
    """The validator of a required text field: `Annotated[str, not_blank("goal")]`
    keeps the text stripped and refuses a blank one with "the goal is empty"."""

    def check(value: str) -> str:
        if not value.strip():
            raise ValueError(f"the {what} is empty")
        return value.strip()

    return AfterValidator(check)


# English function words: articles, pronouns, auxiliaries, prepositions, conjunctions,
# and what is left of a contraction once the apostrophe splits it ("don't" -> "don").
EN_STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during
    each few for from further had has have having he her here hers herself him
    himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same
    she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your yours yourself
    yourselves
    aren couldn didn doesn don hadn hasn haven isn ll re shouldn ve wasn weren wouldn
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

# Russian function words (written with е for ё, as the tokenizer reads them).
RU_STOPWORDS: frozenset[str] = frozenset(
    """
    без бы был была были было быть в вам вас весь во вот все всего всех вы где да
    для до его ее если есть еще же за и из или им их к как ко когда кто ли либо
    мне мы на над не нее нет ни них но о об около он она они оно от по под при про
    с со так также там тем то того тоже только том ты у уж уже чем что чтобы эта
    эти это этот я
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

STOPWORDS: frozenset[str] = EN_STOPWORDS | RU_STOPWORDS

_COMBINING_STRESS = "\u0301"


def _is_cyrillic(char: str) -> bool:
    return "\u0400" <= char <= "\u04ff"


def _is_latin(char: str) -> bool:
    return "a" <= char <= "z" or ("\u00c0" <= char <= "\u024f" and char.isalpha())


def _words(text: str) -> list[str]:
    """Normalised Unicode words of `text`, in order (steps 1 and 2 of the module doc)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = folded.replace("ё", "е").replace(_COMBINING_STRESS, "")
    words: list[str] = []
    current: list[str] = []
    for char in folded:
        if char.isalnum() or (current and unicodedata.category(char).startswith("M")):
            current.append(char)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words


def _is_lone_letter(word: str) -> bool:
    return len(word) == 1 and (_is_cyrillic(word) or _is_latin(word))


def terms(text: str, stopwords: Collection[str] = STOPWORDS) -> list[str]:
    """The words of `text` that count for scoring, unstemmed, in order (repeats kept)."""
    return [w for w in _words(text) if w not in stopwords and not _is_lone_letter(w)]


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    cyrillic = any(_is_cyrillic(c) for c in word)
    latin = any(_is_latin(c) for c in word)
    if cyrillic and not latin:
        return snowballstemmer.stemmer("russian").stemWord(word) or word
    if latin and not cyrillic:
        return snowballstemmer.stemmer("english").stemWord(word) or word
    return word


def stem_words(text: str, stopwords: Collection[str] = STOPWORDS) -> set[str]:
    """The stems of the terms of `text`: Russian words by the Russian Snowball stemmer,
    Latin-script words by the English one, stop words and lone letters dropped.

    `stem_words("Ремонт комнаты и kitchen") == {"ремонт", "комнат", "kitchen"}`.
    """
    # Each distinct word once: a 5 MB document has a million words, a few thousand distinct.
    return {_stem(word) for word in set(terms(text, stopwords))}


def keyword_score(
    text: str,
    query: str,
    use_stems: bool = False,
    *,
    stopwords: Collection[str] = STOPWORDS,
) -> float:
    """The share of the query's distinct terms that occur in `text`, in [0, 1].

    Stop words are dropped on both sides. Without stems terms match as whole,
    case-folded words; with `use_stems=True` they match by stem, so inflected forms
    of one word ("аутентификации" / "аутентификацию") count as the same term. A
    query with no terms at all (empty, punctuation only, or only stop words) scores
    0.0: it asks for nothing, so nothing can be said to match it.
    """
    if use_stems:
        wanted = stem_words(query, stopwords)
        found = stem_words(text, stopwords) if wanted else set()
    else:
        wanted = set(terms(query, stopwords))
        found = set(terms(text, stopwords)) if wanted else set()
    if not wanted:
        return 0.0
    return len(wanted & found) / len(wanted)
