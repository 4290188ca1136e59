"""The grounding rule: an answer must carry a quote copied verbatim from its source.

After normalising Unicode (NFKC, typographic quotes and dashes), case and
whitespace, and trimming quote marks and punctuation at its two ends, the quote
must have at least `MIN_QUOTE_WORDS` words or `MIN_QUOTE_CHARS` characters and
occur in the source as one substring. A verbatim quote can be checked without a
model, the same way on every replay, and it is how a reader traces an answer to
the passage it rests on; the minimum length keeps a single common word from
counting as evidence. Issue codes: `EMPTY_ANSWER`, `QUOTE_TOO_SHORT`,
`NOT_IN_SOURCE`. Used by AnswerFlow's check and by Research's evidence filter.
"""

from __future__ import annotations

import unicodedata

from durafact._core.answer_flow import AnswerIssue

EMPTY_ANSWER = "EMPTY_ANSWER"
QUOTE_TOO_SHORT = "QUOTE_TOO_SHORT"
NOT_IN_SOURCE = "NOT_IN_SOURCE"
MIN_QUOTE_WORDS = 3
MIN_QUOTE_CHARS = 12

_TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
    }
)
# Trimmed from both ends of a quote: what is left must still occur verbatim.
_QUOTE_EDGES = " \"'`.,;:!?()[]"


def normalize_text(text: str) -> str:
    """NFKC, typographic quotes and dashes made plain, casefolded, whitespace folded."""
    folded = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY).casefold()
    return " ".join(folded.split())


def grounding_issues(answer: str, quote: str, source: str) -> list[AnswerIssue]:
    """The grounding rule as issues; no issues means the answer is grounded."""
    issues: list[AnswerIssue] = []
    if not answer.strip():
        issues.append(AnswerIssue(code=EMPTY_ANSWER, message="the answer is empty"))
    core = normalize_text(quote).strip(_QUOTE_EDGES)
    if len(core.split()) < MIN_QUOTE_WORDS and len(core) < MIN_QUOTE_CHARS:
        issues.append(
            AnswerIssue(
                code=QUOTE_TOO_SHORT,
                message=f"the quote must be a passage of at least {MIN_QUOTE_WORDS} words or "
                f"{MIN_QUOTE_CHARS} characters copied from the source",
            )
        )
    elif core not in normalize_text(source):
        issues.append(
            AnswerIssue(
                code=NOT_IN_SOURCE,
                message="the quote does not occur verbatim in the source (case and spacing aside)",
            )
        )
    return issues
