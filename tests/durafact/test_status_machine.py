"""StatusMachine: a research-like lifecycle driven by what the ledger holds."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel

from durafact import Ledger
from durafact._core.status_machine import StatusMachine, StatusMachineError, Transition


class ResearchTurn(BaseModel):
    query_id: str
    question: str
    status: str = "researching"


class Evidence(BaseModel):
    query_id: str
    quote: str


class Answer(BaseModel):
    query_id: str
    text: str


class GiveUp(BaseModel):
    query_id: str


class EvaluateTurn(StatusMachine[ResearchTurn]):
    artifact_type = ResearchTurn
    terminal = frozenset({"answered", "insufficient"})

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, str, str]] = []

    def next_status(self, ledger: Ledger, key: str) -> str | None:
        if any(a.data.query_id == key for a in ledger.find_all(Answer)):
            return "answered"
        if any(g.data.query_id == key for g in ledger.find_all(GiveUp)):
            return "insufficient"
        if any(e.data.query_id == key for e in ledger.find_all(Evidence)):
            return "answerable"
        return None

    def on_transition(self, ledger: Ledger, key: str, old: str, new: str) -> None:
        stored = ledger.find_all(ResearchTurn)
        current = next(a for a in stored if a.data.query_id == key)
        # Called before the update: the ledger still holds the old status.
        self.seen.append((key, old, new, current.data.status))


def turn(ledger: Ledger, query_id: str = "q1") -> str:
    artifact_id = f"turn:{query_id}"
    ledger.create(artifact_id, ResearchTurn(query_id=query_id, question="What costs most?"))
    return artifact_id


def test_a_new_turn_without_evidence_stays_researching() -> None:
    ledger = Ledger()
    turn(ledger)
    assert EvaluateTurn().advance(ledger) == []
    assert ledger.get("turn:q1").data.status == "researching"
    assert ledger.get("turn:q1").version == 1


def test_the_lifecycle_follows_the_artifacts_added_to_the_ledger() -> None:
    ledger = Ledger()
    machine = EvaluateTurn()
    turn(ledger)
    machine.advance(ledger)

    ledger.create("evidence:q1:1", Evidence(query_id="q1", quote="milk 1.20"))
    assert machine.advance(ledger) == [
        Transition(artifact_id="turn:q1", key="q1", old="researching", new="answerable")
    ]
    assert ledger.get("turn:q1").data.status == "answerable"
    assert ledger.get("turn:q1").version == 2

    ledger.create("answer:q1", Answer(query_id="q1", text="Milk, 1.20"))
    assert machine.advance(ledger) == [
        Transition(artifact_id="turn:q1", key="q1", old="answerable", new="answered")
    ]
    assert ledger.get("turn:q1").data.status == "answered"
    assert ledger.get("turn:q1").version == 3


def test_on_transition_sees_old_and_new_before_the_update_is_applied() -> None:
    ledger = Ledger()
    machine = EvaluateTurn()
    turn(ledger)
    ledger.create("evidence:q1:1", Evidence(query_id="q1", quote="milk 1.20"))
    machine.advance(ledger)
    ledger.create("answer:q1", Answer(query_id="q1", text="Milk"))
    machine.advance(ledger)
    assert machine.seen == [
        ("q1", "researching", "answerable", "researching"),
        ("q1", "answerable", "answered", "answerable"),
    ]


def test_advance_again_with_nothing_changed_makes_no_transitions() -> None:
    ledger = Ledger()
    machine = EvaluateTurn()
    turn(ledger)
    ledger.create("evidence:q1:1", Evidence(query_id="q1", quote="milk"))
    assert len(machine.advance(ledger)) == 1
    version = ledger.get("turn:q1").version
    assert machine.advance(ledger) == []
    assert machine.advance(ledger) == []
    assert ledger.get("turn:q1").version == version
    assert len(machine.seen) == 1


def test_a_terminal_status_stops_the_lifecycle() -> None:
    ledger = Ledger()
    machine = EvaluateTurn()
    turn(ledger)
    ledger.create("giveup:q1", GiveUp(query_id="q1"))
    assert [t.new for t in machine.advance(ledger)] == ["insufficient"]
    # An answer arriving later does not reopen an ended turn.
    ledger.create("answer:q1", Answer(query_id="q1", text="late"))
    assert machine.advance(ledger) == []
    assert ledger.get("turn:q1").data.status == "insufficient"


def test_each_turn_follows_only_the_artifacts_of_its_own_key() -> None:
    ledger = Ledger()
    machine = EvaluateTurn()
    turn(ledger, "q1")
    turn(ledger, "q2")
    ledger.create("evidence:q2:1", Evidence(query_id="q2", quote="bread 2.00"))
    assert machine.advance(ledger) == [
        Transition(artifact_id="turn:q2", key="q2", old="researching", new="answerable")
    ]
    assert ledger.get("turn:q1").data.status == "researching"


def test_one_advance_settles_a_lifecycle_that_moves_twice() -> None:
    class Stepwise(StatusMachine[ResearchTurn]):
        """Moves one step per decision, reading the turn's own status."""

        artifact_type = ResearchTurn
        terminal = frozenset({"answered"})

        def next_status(self, ledger: Ledger, key: str) -> str | None:
            current = self.lifecycle(ledger, key)
            assert current is not None
            return {"researching": "answerable", "answerable": "answered"}.get(current.data.status)

    ledger = Ledger()
    turn(ledger)
    assert [(t.old, t.new) for t in Stepwise().advance(ledger)] == [
        ("researching", "answerable"),
        ("answerable", "answered"),
    ]
    assert ledger.get("turn:q1").version == 3
    assert Stepwise().advance(ledger) == []


def test_the_key_falls_back_to_the_artifact_id() -> None:
    class Job(BaseModel):
        status: str = "queued"

    class Done(BaseModel):
        job: str

    class JobMachine(StatusMachine[Job]):
        artifact_type = Job
        terminal = frozenset({"done"})

        def next_status(self, ledger: Ledger, key: str) -> str | None:
            return "done" if any(d.data.job == key for d in ledger.find_all(Done)) else None

    ledger = Ledger()
    ledger.create("job:1", Job())
    ledger.create("done:1", Done(job="job:1"))
    assert JobMachine().advance(ledger) == [
        Transition(artifact_id="job:1", key="job:1", old="queued", new="done")
    ]


def test_custom_key_and_status_fields() -> None:
    class Ticket(BaseModel):
        thread: str
        state: str = "open"

    class TicketMachine(StatusMachine[Ticket]):
        artifact_type = Ticket
        terminal = frozenset({"closed"})
        key_field = "thread"
        status_field = "state"

        def next_status(self, ledger: Ledger, key: str) -> str | None:
            return "closed" if key == "t1" else None

    ledger = Ledger()
    ledger.create("ticket:1", Ticket(thread="t1"))
    ledger.create("ticket:2", Ticket(thread="t2"))
    assert [t.artifact_id for t in TicketMachine().advance(ledger)] == ["ticket:1"]
    assert ledger.get("ticket:1").data.state == "closed"


def test_the_machine_works_on_a_ledger_that_went_through_json() -> None:
    ledger = Ledger()
    turn(ledger)
    ledger.create("evidence:q1:1", Evidence(query_id="q1", quote="milk"))
    restored = Ledger.model_validate_json(ledger.model_dump_json())
    assert [t.new for t in EvaluateTurn().advance(restored)] == ["answerable"]
    assert restored.get("turn:q1").data["status"] == "answerable"


def test_a_status_the_model_does_not_allow_is_refused_before_anything_changes() -> None:
    class Strict(BaseModel):
        query_id: str
        status: Literal["open", "closed"] = "open"

    class Broken(StatusMachine[Strict]):
        artifact_type = Strict

        def next_status(self, ledger: Ledger, key: str) -> str | None:
            return "finished"

    ledger = Ledger()
    ledger.create("strict:1", Strict(query_id="s"))
    with pytest.raises(StatusMachineError, match="'finished' for strict:1"):
        Broken().advance(ledger)
    assert ledger.get("strict:1").version == 1


def test_a_lifecycle_that_never_settles_is_an_error() -> None:
    class Flapping(StatusMachine[ResearchTurn]):
        artifact_type = ResearchTurn

        def next_status(self, ledger: Ledger, key: str) -> str | None:
            current = self.lifecycle(ledger, key)
            assert current is not None
            return "b" if current.data.status != "b" else "researching"

    ledger = Ledger()
    turn(ledger)
    with pytest.raises(StatusMachineError, match="must settle"):
        Flapping().advance(ledger)


def test_a_machine_without_a_model_or_status_field_is_refused() -> None:
    class NoType(StatusMachine[ResearchTurn]):
        def next_status(self, ledger: Ledger, key: str) -> str | None:
            return None

    class NoStatus(StatusMachine[Evidence]):
        artifact_type = Evidence

    with pytest.raises(StatusMachineError, match="artifact_type"):
        NoType()
    with pytest.raises(StatusMachineError, match="no field 'status'"):
        NoStatus()
