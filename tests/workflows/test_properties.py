"""Properties of the answer batch file the starter reads (`load_answer_batch`,
`check_answer_batch`), over generated documents (hypothesis): a valid batch loads as
written, each broken rule is an `AnswerBatchError` naming it, and no document, however
malformed, raises anything else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durafact._core.answer_flow import AnswerBatchError
from durafact._recipes.answer_flow import (
    MAX_REPAIRS,
    AnswerBatchInput,
    check_answer_batch,
    load_answer_batch,
)
from tests.properties import FAST, JSON

QUESTION_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", fullmatch=True)


@st.composite
def questions(draw: st.DrawFn, min_size: int = 1, max_size: int = 6) -> list[dict[str, Any]]:
    ids = draw(st.lists(QUESTION_IDS, min_size=min_size, max_size=max_size, unique=True))
    written = []
    for question_id in ids:
        question = {"id": question_id, "question": draw(st.text(min_size=1).filter(str.strip))}
        source = draw(st.none() | st.text(max_size=20) | st.just("absent"))
        if source != "absent":
            question["source"] = source
        written.append(question)
    return written


@st.composite
def documents(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    """A valid batch, as a list of questions or an object with options."""
    written = draw(questions())
    if draw(st.booleans()):
        return written, written
    document: dict[str, Any] = {"questions": written}
    options = {
        "max_repairs": st.integers(0, MAX_REPAIRS),
        "review_policy": st.sampled_from(["off", "optional", "required"]),
        "budget_tokens": st.none() | st.integers(1, 10**9),
        "max_items": st.integers(len(written), len(written) + 10),
    }
    for name, values in options.items():
        if draw(st.booleans()):
            document[name] = draw(values)
    return document, written


def as_written(document: Any, form: str) -> Any:
    text = json.dumps(document, ensure_ascii=form == "ascii")
    return {"value": document, "ascii": text, "text": text, "bytes": text.encode()}[form]


FORMS = st.sampled_from(["value", "ascii", "text", "bytes"])


@FAST
@given(documents(), FORMS)
def test_a_valid_batch_loads_as_written(document: Any, form: str) -> None:
    raw, written = document
    batch = load_answer_batch(as_written(raw, form))
    assert [q.model_dump(exclude_unset=True) for q in batch.questions] == written
    items = check_answer_batch(batch)
    assert [item.id for item in items] == [q["id"] for q in written]
    assert [item.source_status for item in items] == [
        "ready" if (q.get("source") or "").strip() else "none" for q in written
    ]


@FAST
@given(questions(min_size=2), st.data())
def test_two_questions_with_one_id_are_rejected(written: Any, data: st.DataObject) -> None:
    first, second = data.draw(
        st.lists(st.integers(0, len(written) - 1), min_size=2, max_size=2, unique=True)
    )
    written[second]["id"] = written[first]["id"]
    with pytest.raises(AnswerBatchError, match="appears more than once"):
        load_answer_batch(written)


@FAST
@given(questions(min_size=2), st.data())
def test_more_questions_than_max_items_are_rejected(written: Any, data: st.DataObject) -> None:
    max_items = data.draw(st.integers(1, len(written) - 1))
    with pytest.raises(AnswerBatchError, match=f"more than max_items={max_items}"):
        load_answer_batch({"questions": written, "max_items": max_items})
    with pytest.raises(AnswerBatchError, match=f"more than max_items={max_items}"):
        load_answer_batch(written, max_items=max_items)


@FAST
@given(
    questions(),
    st.data(),
    st.text(max_size=70).filter(lambda s: not s[:1].isascii() or not s[:1].isalnum())
    | st.text(min_size=65, max_size=80),
)
def test_a_bad_or_empty_question_is_rejected_naming_it(
    written: Any, data: st.DataObject, bad_id: str
) -> None:
    index = data.draw(st.integers(0, len(written) - 1))
    with pytest.raises(AnswerBatchError, match="the batch has no questions"):
        load_answer_batch({"questions": []})
    blank = [dict(q) for q in written]
    blank[index]["question"] = data.draw(st.sampled_from(["", " ", "\n\t"]))
    with pytest.raises(AnswerBatchError, match=rf"question {blank[index]['id']!r} is empty"):
        load_answer_batch(blank)
    written[index]["id"] = bad_id
    with pytest.raises(AnswerBatchError, match=f"question {index + 1} has the id"):
        load_answer_batch(written)


@FAST
@given(documents(), st.text(min_size=1, max_size=10), st.booleans())
def test_an_unknown_field_is_rejected_naming_it(document: Any, field: str, inner: bool) -> None:
    raw, written = document
    if inner:
        if field in ("id", "question", "source"):
            return
        written[0][field] = 1
        match = "question 1 has unknown field"
        raw = written
    else:
        if field in AnswerBatchInput.model_fields:
            return
        raw = {"questions": written, field: 1}
        match = "unknown field"
    with pytest.raises(AnswerBatchError, match=match):
        load_answer_batch(raw)


def loaded_or_refused(document: Any) -> None:
    try:
        batch = load_answer_batch(document)
    except AnswerBatchError as exc:
        assert str(exc)
    else:
        assert isinstance(batch, AnswerBatchInput)


@FAST
@given(JSON, FORMS)
def test_any_json_document_loads_or_is_an_answer_batch_error(document: Any, form: str) -> None:
    loaded_or_refused(as_written(document, form))
    loaded_or_refused(as_written({"questions": document}, form))
    loaded_or_refused(as_written({"questions": [document]}, form))


@FAST
@given(st.binary(max_size=40) | st.text(max_size=40))
def test_any_bytes_or_text_load_or_are_an_answer_batch_error(document: bytes | str) -> None:
    loaded_or_refused(document)


@FAST
@given(st.integers(1_000, 100_000), st.sampled_from(["[", '{"questions": ', '[{"id": ']))
def test_a_deeply_nested_document_is_an_answer_batch_error(depth: int, opening: str) -> None:
    document = opening * depth
    with pytest.raises(AnswerBatchError):
        load_answer_batch(document)
    with pytest.raises(AnswerBatchError):
        load_answer_batch(document.encode())


@FAST
@given(st.integers(4_301, 20_000))
def test_a_number_too_long_to_read_is_an_answer_batch_error(digits: int) -> None:
    with pytest.raises(AnswerBatchError):
        load_answer_batch('{"questions": [], "max_items": ' + "7" * digits + "}")
