"""StatusMachine: an artifact that moves through statuses, decided by a pure function.

Some artifacts have a lifecycle, such as a research turn going
`researching -> answerable -> answered | insufficient`. Rather than a hand-written
transition graph, a `StatusMachine` asks one pure question, `next_status(ledger,
key)`: given everything in the ledger now, what status does this lifecycle deserve?
`advance` applies the answer:

    class EvaluateTurn(StatusMachine[ResearchTurn]):
        artifact_type = ResearchTurn
        terminal = frozenset({"answered", "insufficient"})

        def next_status(self, ledger, key):
            if any(a.data.query_id == key for a in ledger.find_all(Answer)):
                return "answered"
            if any(e.data.query_id == key for e in ledger.find_all(Evidence)):
                return "answerable"
            return None

A recipe calls `machine.advance(ledger)` after every change it makes to the
ledger (an artifact created, updated or deleted). A transition is itself an
update of the lifecycle artifact's status, so `advance` goes on until nothing
moves: one call leaves every lifecycle where the ledger says it belongs, and a
second call with nothing changed makes no transitions. Keep checks that react to
a status in their own step, so the machine and the checker stay apart and can be
tested apart.

Pure and deterministic, for workflow code: the ledger is the only state read or
written, and artifacts are visited in ledger (creation) order.
"""

from __future__ import annotations

__all__ = [
    "StatusMachine",
    "StatusMachineError",
    "Transition",
]

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from durafact._core.ledger import Artifact, Ledger

M = TypeVar("M", bound=BaseModel)

# A lifecycle that keeps moving after this many rounds in one `advance` is a bug.
_MAX_ROUNDS = 64


class StatusMachineError(RuntimeError):
    """A status machine that is misdefined or that never settles."""


class Transition(BaseModel):
    """One status change made by `advance`."""

    model_config = ConfigDict(frozen=True)

    artifact_id: str
    key: str
    old: str
    new: str


class StatusMachine(Generic[M]):
    """Base for a lifecycle driven by the ledger.

    Subclasses set `artifact_type` (the pydantic model of the lifecycle artifact)
    and `terminal` (statuses that stop it), and implement `next_status`.
    `key_field` names the data field that ties a lifecycle to the artifacts about
    it (falling back to the artifact id), `status_field` the field holding its
    status.
    """

    artifact_type: type[M]
    terminal: frozenset[str] = frozenset()
    key_field: str = "query_id"
    status_field: str = "status"

    def __init__(self) -> None:
        artifact_type = getattr(type(self), "artifact_type", None)
        if not (isinstance(artifact_type, type) and issubclass(artifact_type, BaseModel)):
            raise StatusMachineError(
                f"{type(self).__name__}.artifact_type must be a pydantic model class"
            )
        if self.status_field not in artifact_type.model_fields:
            raise StatusMachineError(
                f"{type(self).__name__}: {artifact_type.__name__} has no field "
                f"{self.status_field!r} to hold the status"
            )
        if not isinstance(self.terminal, frozenset):
            raise StatusMachineError(f"{type(self).__name__}.terminal must be a frozenset")

    def next_status(self, ledger: Ledger, key: str) -> str | None:
        """The status the lifecycle `key` deserves now; None means no change. Pure."""
        raise NotImplementedError

    def on_transition(self, ledger: Ledger, key: str, old: str, new: str) -> None:
        """Called right before `old -> new` is applied (announce progress here)."""

    def key_of(self, artifact: Artifact[M]) -> str:
        """The lifecycle key: the data's `key_field`, or the artifact id without one."""
        value = getattr(artifact.data, self.key_field, None)
        return artifact.id if value is None or value == "" else str(value)

    def status_of(self, artifact: Artifact[M]) -> str:
        return str(getattr(artifact.data, self.status_field))

    def lifecycle(self, ledger: Ledger, key: str) -> Artifact[M] | None:
        """The first lifecycle artifact for `key`, typed, or None."""
        return next((a for a in ledger.find_all(self.artifact_type) if self.key_of(a) == key), None)

    def _check_allowed(self, artifact: Artifact[M], new: str) -> None:
        """Refuse a status the artifact's model would not accept (e.g. outside a Literal)."""
        values: dict[str, Any] = {**artifact.data.model_dump(), self.status_field: new}
        try:
            self.artifact_type.model_validate(values)
        except ValidationError as error:
            raise StatusMachineError(
                f"{type(self).__name__}: next_status gave {new!r} for {artifact.id}, which "
                f"{self.artifact_type.__name__}.{self.status_field} does not accept: {error}"
            ) from None

    def advance(self, ledger: Ledger) -> list[Transition]:
        """Move every non-terminal lifecycle artifact to the status `next_status` gives,
        until nothing moves; return the transitions made, in order.

        For each artifact: skip it when its status is terminal, ask `next_status`
        for its key, and when the answer differs from the current status call
        `on_transition`, then `ledger.update(artifact_id, **{status_field: new})` (the
        version goes up by one per transition). Raises `StatusMachineError` when a
        lifecycle comes back to a status it already left in this call (a cycle).
        """
        made: list[Transition] = []
        for _ in range(_MAX_ROUNDS):
            moved = False
            for artifact in ledger.find_all(self.artifact_type):
                transition = self._move(ledger, artifact, made)
                if transition is not None:
                    made.append(transition)
                    moved = True
            if not moved:
                return made
        raise StatusMachineError(
            f"{type(self).__name__}: still moving after {_MAX_ROUNDS} rounds of advance"
        )

    def _move(
        self, ledger: Ledger, artifact: Artifact[M], made: list[Transition]
    ) -> Transition | None:
        old = self.status_of(artifact)
        if old in self.terminal:
            return None
        key = self.key_of(artifact)
        new = self.next_status(ledger, key)
        if new is None or new == old:
            return None
        if not isinstance(new, str):
            raise StatusMachineError(
                f"{type(self).__name__}.next_status returned {new!r}, not a status string"
            )
        if any(t.artifact_id == artifact.id and t.old == new for t in made):
            raise StatusMachineError(
                f"{type(self).__name__}: {artifact.id} would go back to {new!r} within one "
                "advance; next_status must settle"
            )
        self._check_allowed(artifact, new)
        self.on_transition(ledger, key, old, new)
        ledger.update(artifact.id, **{self.status_field: new})
        return Transition(artifact_id=artifact.id, key=key, old=old, new=new)
