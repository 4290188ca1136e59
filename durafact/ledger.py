"""Artifacts and the ledger: a recipe's typed, versioned, linked record of work.

The ledger lives in workflow state, so it must stay pure: no I/O, no clock, no
randomness. It is a pydantic model, so a query carries it as it is, and it can
travel through continue-as-new; a workflow result names its artifacts instead
(`ArtifactRef`), so each text is stored in history once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from durafact.llm import ArtifactSpan

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class LedgerError(ValueError):
    """A ledger operation named an artifact that is not there."""


class Artifact(BaseModel, Generic[T]):
    """One typed piece of work with a stable id; `version` counts its updates."""

    id: str
    type: str
    version: int = 1
    data: T

    def typed(self, model: type[M]) -> Artifact[M]:
        """This artifact with `data` as `model`: after a round trip `data` is a dict."""
        data = self.data if isinstance(self.data, model) else model.model_validate(self.data)
        return Artifact[model](id=self.id, type=self.type, version=self.version, data=data)

    def text(self) -> str:
        """What a model prompt receives: the `text` field if there is one, else compact JSON."""
        data = self.data.model_dump(mode="json") if isinstance(self.data, BaseModel) else self.data
        if isinstance(data, dict) and isinstance(data.get("text"), str):
            return data["text"]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class ArtifactRef(BaseModel):
    """One version of one artifact, named instead of carried: what a workflow result
    holds for the artifacts behind its answer, so their texts are stored in history
    once. Read the data from the run's ledger (the `artifacts` query):
    `ledger.resolve(ref, PlanStep)`."""

    id: str
    type: str
    version: int = 1


class Link(BaseModel):
    """`source` --relation--> `target`, e.g. final --supported_by--> result."""

    source: str
    relation: str
    target: str


class ProvenanceNode(BaseModel):
    """One artifact in a provenance walk, with the artifacts it links to."""

    id: str
    type: str
    relation: str | None = None
    children: list[ProvenanceNode] = Field(default_factory=list)

    def walk(self) -> Iterator[ProvenanceNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    def render(self, indent: str = "") -> str:
        label = f"{self.relation} -> " if self.relation else ""
        lines = [f"{indent}{label}{self.id} ({self.type})"]
        lines += [child.render(indent + "  ") for child in self.children]
        return "\n".join(lines)


def _matches(artifact: Artifact[Any], model: type[BaseModel]) -> bool:
    return isinstance(artifact.data, model) or artifact.type == model.__name__


def find(items: Iterable[Artifact[Any]], model: type[M]) -> Artifact[M] | None:
    """The first artifact whose data is a `model`, typed, or None."""
    return next((a.typed(model) for a in items if _matches(a, model)), None)


def find_all(items: Iterable[Artifact[Any]], model: type[M]) -> list[Artifact[M]]:
    """Every artifact whose data is a `model`, typed, in ledger order."""
    return [a.typed(model) for a in items if _matches(a, model)]


class Ledger(BaseModel):
    """The artifact store of one recipe run."""

    artifacts: dict[str, Artifact[Any]] = Field(default_factory=dict)
    links: list[Link] = Field(default_factory=list)

    def __contains__(self, artifact_id: object) -> bool:
        return artifact_id in self.artifacts

    def __len__(self) -> int:
        return len(self.artifacts)

    def all(self) -> list[Artifact[Any]]:
        """Every artifact, in the order they were created."""
        return list(self.artifacts.values())

    def get(self, artifact_id: str) -> Artifact[Any]:
        try:
            return self.artifacts[artifact_id]
        except KeyError:
            raise LedgerError(f"no artifact {artifact_id!r} in the ledger") from None

    def create(self, artifact_id: str, data: BaseModel) -> Artifact[Any]:
        """Store `data` under `artifact_id`; the same id again returns the first one."""
        existing = self.artifacts.get(artifact_id)
        if existing is not None:
            return existing
        artifact = Artifact[Any](id=artifact_id, type=type(data).__name__, data=data)
        self.artifacts[artifact_id] = artifact
        return artifact

    def update(
        self, artifact_id: str, data: BaseModel | None = None, **changes: Any
    ) -> Artifact[Any]:
        """Replace the data (or change some fields of it) and bump the version."""
        current = self.get(artifact_id)
        if data is None:
            base = current.data
            if isinstance(base, BaseModel):
                data = base.model_copy(update=changes)
            else:
                data = {**base, **changes}
        updated = current.model_copy(update={"data": data, "version": current.version + 1})
        self.artifacts[artifact_id] = updated
        return updated

    def delete(self, artifact_id: str) -> None:
        """Remove an artifact and every link that touches it."""
        self.get(artifact_id)
        del self.artifacts[artifact_id]
        self.links = [link for link in self.links if artifact_id not in (link.source, link.target)]

    def link(self, source: str, relation: str, target: str) -> Link:
        """Record `source --relation--> target` once; both ends must exist."""
        self.get(source)
        self.get(target)
        link = Link(source=source, relation=relation, target=target)
        if link not in self.links:
            self.links.append(link)
        return link

    def links_from(self, artifact_id: str, relation: str | None = None) -> list[Link]:
        return [
            link
            for link in self.links
            if link.source == artifact_id and (relation is None or link.relation == relation)
        ]

    def select(self, ref: str | ArtifactSpan) -> list[Artifact[Any]]:
        """The artifact an id names, or the artifacts a span names, in creation order."""
        if isinstance(ref, str):
            return [self.get(ref)]
        matching = [a for a in self.artifacts.values() if a.id.startswith(ref.prefix)]
        if len(matching) < ref.count:
            raise LedgerError(
                f"span {ref.prefix!r} names {ref.count} artifacts; the ledger has {len(matching)}"
            )
        return matching[: ref.count]

    def find(self, model: type[M]) -> Artifact[M] | None:
        return find(self.artifacts.values(), model)

    def find_all(self, model: type[M]) -> list[Artifact[M]]:
        return find_all(self.artifacts.values(), model)

    def provenance(self, artifact_id: str) -> ProvenanceNode:
        """Follow links out of `artifact_id` down to the sources it rests on."""

        def visit(node_id: str, relation: str | None, path: frozenset[str]) -> ProvenanceNode:
            artifact = self.get(node_id)
            children = [
                visit(link.target, link.relation, path | {node_id})
                for link in self.links_from(node_id)
                if link.target not in path and link.target in self.artifacts
            ]
            return ProvenanceNode(
                id=node_id, type=artifact.type, relation=relation, children=children
            )

        return visit(artifact_id, None, frozenset())

    def ref(self, artifact_id: str) -> ArtifactRef:
        """A reference to the artifact's current version."""
        artifact = self.get(artifact_id)
        return ArtifactRef(id=artifact.id, type=artifact.type, version=artifact.version)

    def refs(self, model: type[BaseModel]) -> list[ArtifactRef]:
        """A reference to every artifact whose data is a `model`, in ledger order."""
        return [self.ref(a.id) for a in self.all() if _matches(a, model)]

    def resolve(self, ref: ArtifactRef, model: type[M]) -> M:
        """The data of the version `ref` names, as `model`; a LedgerError when the
        artifact is missing or the ledger holds another version of it."""
        artifact = self.get(ref.id)
        if artifact.version != ref.version:
            raise LedgerError(
                f"{ref.id!r} is at version {artifact.version}; the reference names {ref.version}"
            )
        return artifact.typed(model).data
