"""The ledger: idempotent create, versions, links, typed lookup, provenance."""

from __future__ import annotations

import shlex

import pytest
from pydantic import BaseModel

from durafact._core.ids import approval_id, text_key
from durafact._core.ledger import ArtifactRef, Ledger, LedgerError, find, find_all
from durafact._core.llm import ArtifactSpan


class Doc(BaseModel):
    text: str


class Missing(BaseModel):
    pass


class Claim(BaseModel):
    text: str
    confidence: float = 0.5


def test_create_twice_with_the_same_id_keeps_one_artifact() -> None:
    ledger = Ledger()
    first = ledger.create("doc:1", Doc(text="a"))
    again = ledger.create("doc:1", Doc(text="b"))
    assert len(ledger) == 1
    assert again == first
    assert ledger.get("doc:1").data == Doc(text="a")


def test_update_bumps_the_version_and_changes_only_named_fields() -> None:
    ledger = Ledger()
    ledger.create("claim:1", Claim(text="x"))
    ledger.update("claim:1", confidence=0.9)
    updated = ledger.update("claim:1", Claim(text="y", confidence=0.1))
    assert updated.version == 3
    assert updated.data == Claim(text="y", confidence=0.1)
    ledger.update("claim:1", text="z")
    assert ledger.get("claim:1").data == Claim(text="z", confidence=0.1)


def test_update_and_link_refuse_unknown_ids() -> None:
    ledger = Ledger()
    ledger.create("doc:1", Doc(text="a"))
    with pytest.raises(LedgerError, match="no artifact 'doc:2'"):
        ledger.update("doc:2", text="b")
    with pytest.raises(LedgerError, match="no artifact 'doc:2'"):
        ledger.link("doc:1", "supported_by", "doc:2")


def test_delete_removes_the_artifact_and_its_links() -> None:
    ledger = Ledger()
    ledger.create("claim:1", Claim(text="x"))
    ledger.create("doc:1", Doc(text="a"))
    ledger.link("claim:1", "supported_by", "doc:1")
    ledger.delete("doc:1")
    assert "doc:1" not in ledger
    assert ledger.links == []


def test_links_are_recorded_once() -> None:
    ledger = Ledger()
    ledger.create("claim:1", Claim(text="x"))
    ledger.create("doc:1", Doc(text="a"))
    ledger.link("claim:1", "supported_by", "doc:1")
    ledger.link("claim:1", "supported_by", "doc:1")
    assert len(ledger.links_from("claim:1")) == 1


def test_find_and_find_all_are_typed_and_survive_a_round_trip() -> None:
    ledger = Ledger()
    ledger.create("doc:1", Doc(text="a"))
    ledger.create("claim:1", Claim(text="x"))
    ledger.create("doc:2", Doc(text="b"))
    restored = Ledger.model_validate_json(ledger.model_dump_json())
    for store in (ledger, restored):
        assert store.find(Claim).data == Claim(text="x")
        assert [a.data.text for a in store.find_all(Doc)] == ["a", "b"]
    assert find(restored.all(), Doc).data == Doc(text="a")
    assert find_all([], Doc) == []
    assert find(ledger.all(), Missing) is None


def test_provenance_walk_follows_links_to_the_sources() -> None:
    ledger = Ledger()
    for artifact_id, data in [
        ("answer", Claim(text="final")),
        ("claim:1", Claim(text="c1")),
        ("claim:2", Claim(text="c2")),
        ("evidence:1", Doc(text="quote")),
        ("doc:1", Doc(text="page")),
        ("ref:1", Doc(text="hit")),
    ]:
        ledger.create(artifact_id, data)
    ledger.link("answer", "supported_by", "claim:1")
    ledger.link("answer", "supported_by", "claim:2")
    ledger.link("claim:1", "based_on", "evidence:1")
    ledger.link("evidence:1", "quotes", "doc:1")
    ledger.link("doc:1", "resolved_from", "ref:1")
    ledger.link("ref:1", "loops_to", "answer")  # a cycle must not loop forever

    tree = ledger.provenance("answer")
    assert [(n.id, n.relation) for n in tree.walk()] == [
        ("answer", None),
        ("claim:1", "supported_by"),
        ("evidence:1", "based_on"),
        ("doc:1", "quotes"),
        ("ref:1", "resolved_from"),
        ("claim:2", "supported_by"),
    ]
    assert "resolved_from -> ref:1 (Doc)" in tree.render()


def test_text_keys_are_stable_and_bounded() -> None:
    assert text_key("  Plan   a trip ") == "Plan a trip"
    long_a = "x" * 60 + "a"
    long_b = "x" * 60 + "b"
    assert text_key(long_a) == text_key(long_a)
    assert text_key(long_a) != text_key(long_b)
    assert len(text_key(long_a)) <= 48


def test_approval_ids_are_typed_at_a_shell_prompt_without_quotes() -> None:
    assert approval_id("release-3", 1) == "approval:release-3:1"
    ids = {
        approval_id(thread, 2)
        for thread in (
            "Renovate the kitchen for 3000 EUR by March",
            "Renovate the kitchen",
            "Renovate-the-kitchen",
            "tool:Delete 'old' files?",
            "Ремонт кухни",
        )
    }
    assert len(ids) == 5
    assert all(shlex.quote(i) == i and len(i) <= 35 for i in ids), ids


def test_a_span_names_the_first_artifacts_with_a_prefix_in_creation_order() -> None:
    ledger = Ledger()
    for i in (0, 1, 2, 10):
        ledger.create(f"result:step:g:{i}", Doc(text=str(i)))
    ledger.create("result:step:other:0", Doc(text="x"))
    span = ArtifactSpan(prefix="result:step:g:", count=3)
    assert [a.id for a in ledger.select(span)] == [f"result:step:g:{i}" for i in (0, 1, 2)]
    assert [a.id for a in ledger.select("result:step:other:0")] == ["result:step:other:0"]
    with pytest.raises(LedgerError, match="names 5 artifacts; the ledger has 4"):
        ledger.select(ArtifactSpan(prefix="result:step:g:", count=5))


def test_a_ref_names_one_version_and_resolves_only_to_it() -> None:
    ledger = Ledger()
    ledger.create("claim:1", Claim(text="x"))
    ledger.create("doc:1", Doc(text="a"))
    ledger.create("claim:2", Claim(text="y"))
    ref = ledger.ref("claim:1")
    assert ref == ArtifactRef(id="claim:1", type="Claim", version=1)
    assert ledger.refs(Claim) == [ref, ArtifactRef(id="claim:2", type="Claim", version=1)]
    assert ledger.refs(Missing) == []

    # A round trip (a query, a workflow result) keeps the ref and the data apart.
    copy = Ledger.model_validate_json(ledger.model_dump_json())
    assert copy.resolve(ArtifactRef.model_validate_json(ref.model_dump_json()), Claim) == Claim(
        text="x"
    )
    ledger.update("claim:1", text="z")
    assert ledger.resolve(ledger.ref("claim:1"), Claim).text == "z"
    with pytest.raises(LedgerError, match="'claim:1' is at version 2; the reference names 1"):
        ledger.resolve(ref, Claim)
    with pytest.raises(LedgerError, match="no artifact 'claim:9'"):
        ledger.resolve(ArtifactRef(id="claim:9", type="Claim"), Claim)
