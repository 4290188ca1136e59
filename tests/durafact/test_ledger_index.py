"""The ledger's indexes answer exactly what a scan of its fields answers, after any
sequence of creates, updates, deletes and links, and after a JSON round trip or a
deep copy; and the JSON is what it was before there were indexes."""

from __future__ import annotations

import copy
import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from durafact._core.ledger import Artifact, Ledger, LedgerError
from durafact._core.llm import ArtifactSpan
from tests.properties import FAST


class Note(BaseModel):
    text: str


class Draft(BaseModel):
    text: str


class SignedNote(Note):
    by: str = "x"


MODELS = (Note, Draft, SignedNote)
IDS = st.sampled_from(["a:1", "a:2", "a:1:x", "b:1", "b:a:1", "a:10", "c", "a:"])
RELATIONS = st.sampled_from(["supports", "revises"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), IDS, st.sampled_from(MODELS), st.text(max_size=3)),
        st.tuples(st.just("update"), IDS, st.sampled_from(MODELS), st.text(max_size=3)),
        st.tuples(st.just("delete"), IDS),
        st.tuples(st.just("link"), IDS, RELATIONS, IDS),
    ),
    max_size=40,
)


def apply(ledger: Ledger, op: tuple[Any, ...]) -> None:
    try:
        if op[0] == "create":
            ledger.create(op[1], op[2](text=op[3]))
        elif op[0] == "update":
            # New data of its class or a subclass (a Note may become a SignedNote), or
            # the same data with a field changed.
            if issubclass(op[2], type(ledger.get(op[1]).data)):
                ledger.update(op[1], op[2](text=op[3]))
            else:
                ledger.update(op[1], text=op[3])
        elif op[0] == "delete":
            ledger.delete(op[1])
        else:
            ledger.link(op[1], op[2], op[3])
    except LedgerError:
        pass  # an unknown id: the ledger is unchanged


def scan_select(ledger: Ledger, prefix: str, count: int) -> list[str] | None:
    matching = [i for i in ledger.artifacts if i.startswith(prefix)]
    return matching[:count] if len(matching) >= count else None


def scan_find_all(ledger: Ledger, model: type[BaseModel]) -> list[str]:
    return [
        a.id
        for a in ledger.artifacts.values()
        if isinstance(a.data, model) or a.type == model.__name__
    ]


def assert_indexes_agree_with_a_scan(ledger: Ledger) -> None:
    for prefix in ("a:", "a:1", "a:1:", "b:", "b:a:", "c", "z:", ""):
        for count in (1, 2, 3):
            expected = scan_select(ledger, prefix, count)
            try:
                got = [a.id for a in ledger.select(ArtifactSpan(prefix=prefix, count=count))]
            except LedgerError:
                got = None
            assert got == expected, (prefix, count)
    for model in MODELS:
        assert [a.id for a in ledger.find_all(model)] == scan_find_all(ledger, model)
        first = ledger.find(model)
        assert (first.id if first else None) == next(iter(scan_find_all(ledger, model)), None)
    for artifact_id, artifact in ledger.artifacts.items():
        assert ledger.id_of(artifact.data) == artifact_id
        expected_links = [link for link in ledger.links if link.source == artifact_id]
        assert ledger.links_from(artifact_id) == expected_links
        for relation in ("supports", "revises"):
            assert ledger.links_from(artifact_id, relation) == [
                link for link in expected_links if link.relation == relation
            ]
    keys = [(link.source, link.relation, link.target) for link in ledger.links]
    assert len(keys) == len(set(keys))
    assert ledger.id_of(Note(text="never stored")) is None


@settings(FAST, max_examples=300)
@given(OPS)
def test_indexes_agree_with_a_scan_after_any_operations(ops: list[tuple[Any, ...]]) -> None:
    ledger = Ledger()
    for op in ops:
        apply(ledger, op)
        assert_indexes_agree_with_a_scan(ledger)


@settings(FAST, max_examples=100)
@given(OPS, OPS)
def test_a_round_trip_or_a_copy_keeps_the_json_and_rebuilds_the_indexes(
    ops: list[tuple[Any, ...]], more: list[tuple[Any, ...]]
) -> None:
    ledger = Ledger()
    for op in ops:
        apply(ledger, op)
    dumped = ledger.model_dump_json()
    back = Ledger.model_validate_json(dumped)
    assert back.model_dump_json() == dumped
    assert back == Ledger.model_validate_json(dumped)  # indexes take no part in equality
    assert set(back.model_dump()) == {"artifacts", "links"}
    copies = (back, copy.deepcopy(ledger), ledger.model_copy(deep=True))
    for copied in (*copies, pickle.loads(pickle.dumps(ledger))):
        assert_indexes_agree_with_a_scan(copied)
        for op in more:  # and keep agreeing as the copy goes on
            apply(copied, op)
        assert_indexes_agree_with_a_scan(copied)


def test_find_all_finds_subclasses_and_round_tripped_data_in_creation_order() -> None:
    ledger = Ledger()
    ledger.create("n:1", Note(text="a"))
    ledger.create("d:1", Draft(text="b"))
    ledger.create("s:1", SignedNote(text="c"))
    ledger.create("n:2", Note(text="d"))
    assert [a.id for a in ledger.find_all(Note)] == ["n:1", "s:1", "n:2"]
    assert [a.id for a in ledger.find_all(SignedNote)] == ["s:1"]
    back = Ledger.model_validate_json(ledger.model_dump_json())  # data are dicts now
    assert [a.id for a in back.find_all(Note)] == ["n:1", "n:2"]
    assert all(isinstance(a, Artifact) and isinstance(a.data, Note) for a in back.find_all(Note))
