"""Keyword scoring and stemming: the seed's examples, stop words, stems, edge cases;
and the shared helpers `shorten` (every label and message) and `not_blank` (every
required text field)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ValidationError

from durafact._core.text import (
    EN_STOPWORDS,
    RU_STOPWORDS,
    STOPWORDS,
    brief,
    keyword_score,
    not_blank,
    shorten,
    stem_words,
    terms,
)


def test_seed_example_an_english_query_word_found_in_the_text_scores_one() -> None:
    assert keyword_score("How to set up authentication", "authentication") == 1.0


def test_seed_example_an_inflected_russian_word_matches_by_stem() -> None:
    assert keyword_score("Установка аутентификации", "аутентификацию", use_stems=True) == 1.0


def test_seed_example_stem_words_stems_russian_keeps_english_and_drops_the_conjunction() -> None:
    assert stem_words("Ремонт комнаты и kitchen") == {"ремонт", "комнат", "kitchen"}


def test_without_stems_inflected_forms_do_not_match() -> None:
    assert keyword_score("Установка аутентификации", "аутентификацию") == 0.0


def test_stems_match_english_inflections_too() -> None:
    assert keyword_score("computing the numbers", "computed number") == 0.0
    assert keyword_score("computing the numbers", "computed number", use_stems=True) == 1.0


def test_score_is_the_share_of_distinct_query_terms_found() -> None:
    assert keyword_score("price of milk", "milk bread") == 0.5
    assert keyword_score("price of milk", "milk milk bread") == 0.5
    assert keyword_score("price of milk", "milk bread butter eggs") == 0.25
    assert keyword_score("", "milk") == 0.0


def test_english_stop_words_are_dropped_on_both_sides() -> None:
    assert {"the", "to", "how", "up", "and", "of"} <= EN_STOPWORDS
    assert EN_STOPWORDS <= STOPWORDS
    # Only "authentication" counts in the query, so the stop words cannot dilute it.
    assert keyword_score("authentication", "how to set up the authentication") == 0.5
    assert keyword_score("authentication", "how to do the authentication") == 1.0
    # Stop words in the text cannot make a match either.
    assert keyword_score("the and of to", "the cat") == 0.0


def test_russian_function_words_are_stop_words() -> None:
    assert {"и", "в", "на", "для", "что"} <= RU_STOPWORDS
    assert keyword_score("цены молока", "цены на молоко", use_stems=True) == 1.0


def test_lone_letters_are_never_terms_but_lone_digits_are() -> None:
    assert terms("a b и я x 5") == ["5"]
    assert keyword_score("top 5 prices", "top 5") == 1.0
    assert keyword_score("top 3 prices", "top 5") == 0.5


def test_a_query_with_no_terms_scores_zero() -> None:
    assert keyword_score("anything at all", "") == 0.0
    assert keyword_score("anything at all", "   ?!, ...") == 0.0
    assert keyword_score("the of and", "the of and") == 0.0
    assert stem_words("") == set()


def test_punctuation_separates_words_and_is_ignored() -> None:
    assert terms("cost-reporting: (CSV), 'prices'!") == ["cost", "reporting", "csv", "prices"]
    assert keyword_score("Cost-reporting.", "reporting, COST?") == 1.0


def test_case_is_folded_including_non_ascii() -> None:
    assert keyword_score("МОСКВА Straße", "москва strasse") == 1.0


def test_yo_and_ye_are_the_same_letter() -> None:
    assert terms("Ёлка зелёная") == ["елка", "зеленая"]
    assert keyword_score("новая ёлка", "елка") == 1.0
    assert keyword_score("новая елка", "Ёлка", use_stems=True) == 1.0


def test_stress_accent_does_not_split_a_russian_word() -> None:
    assert terms("молоко́") == ["молоко"]


def test_mixed_scripts_each_word_is_stemmed_by_its_own_script() -> None:
    assert stem_words("отчёты reports") == {"отчет", "report"}
    # A word that mixes scripts, and words of other scripts, are kept as they are.
    assert stem_words("pdfфайлы 日本語 2024") == {"pdfфайлы", "日本語", "2024"}
    assert keyword_score("Цены prices", "цена price", use_stems=True) == 1.0


def test_stemming_is_deterministic_across_calls() -> None:
    text = "Установка аутентификации для kitchen reports"
    assert stem_words(text) == stem_words(text)
    assert keyword_score(text, "reporting", use_stems=True) == 1.0


def test_custom_stop_words_replace_the_default_list() -> None:
    assert keyword_score("the cat", "the cat", stopwords=frozenset()) == 1.0
    assert keyword_score("cat", "the cat", stopwords=frozenset()) == 0.5
    assert stem_words("и kitchen", stopwords=frozenset({"kitchen"})) == set()


@pytest.mark.parametrize("use_stems", [False, True])
def test_score_is_always_between_zero_and_one(use_stems: bool) -> None:
    for text, query in [("a b c", "x"), ("milk", "milk"), ("", ""), ("молоко", "молоко хлеб")]:
        assert 0.0 <= keyword_score(text, query, use_stems=use_stems) <= 1.0


# --- shorten and not_blank ----------------------------------------------------------------


def test_shorten_keeps_a_short_text_and_cuts_a_long_one_to_the_limit() -> None:
    assert shorten("a" * 10, 10) == "a" * 10
    assert shorten("a" * 11, 10) == "a" * 9 + "…"
    assert len(shorten("word " * 100, 40)) == 40


def test_shorten_on_one_line_folds_whitespace_before_it_counts() -> None:
    assert shorten("two\n\n  lines", 20, one_line=True) == "two lines"
    assert shorten("two\n\n  lines", 20) == "two\n\n  lines"
    assert shorten("a  b  c  d", 5, one_line=True) == "a b …"


def test_brief_shows_text_as_it_is_and_any_other_value_as_json_on_one_line() -> None:
    assert brief("a thought\nover two lines") == "a thought over two lines"
    assert brief({"expression": "2 + 2", "ünits": None}) == '{"expression": "2 + 2", "ünits": null}'
    assert brief(["x" * 200]) == '["' + "x" * 117 + "…"
    assert brief("a" * 500, 400) == "a" * 399 + "…"


class Brief(BaseModel):
    topic: Annotated[str, not_blank("topic")]


def test_not_blank_strips_the_text_and_refuses_a_blank_one_by_name() -> None:
    assert Brief(topic="  Tea \n").topic == "Tea"
    with pytest.raises(ValidationError, match="the topic is empty"):
        Brief(topic=" \t\n")
