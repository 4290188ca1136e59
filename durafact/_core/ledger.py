"""Artifacts and the ledger: a recipe's typed, versioned, linked record of work.

The ledger lives in workflow state, so it must stay pure: no I/O, no clock, no
randomness. It is a pydantic model, so a query carries it as it is, and it can
travel through continue-as-new; a workflow result names its artifacts instead
(`ArtifactRef`), so each text is stored in history once.

Cost. Every operation costs the same whatever the size of the ledger (a 3,000-item
answer batch must fit a workflow task, which Temporal fails past 2 s): private
indexes, rebuilt from `artifacts` and `links` whenever a ledger is validated (so the
JSON is unchanged), answer `link`'s "already there?", `links_from`, `select`,
`find`/`find_all`, `refs` and `id_of` without a scan (only `delete` scans the links).
Change a ledger through its methods: `artifacts` and `links` are readable, but
writing them directly bypasses the indexes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, Field, PrivateAttr

from durafact._core.compact import Compact
from durafact._core.llm import ArtifactSpan

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
        """What a model prompt receives: the data's `prompt_text()` if it has one, else
        its `text` field if there is one, else compact JSON."""
        if callable(prompt_text := getattr(self.data, "prompt_text", None)):
            return prompt_text()
        data = self.data.model_dump(mode="json") if isinstance(self.data, BaseModel) else self.data
        if isinstance(data, dict) and isinstance(data.get("text"), str):
            return data["text"]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class ArtifactRef(Compact):
    """One version of one artifact, named instead of carried: what a workflow result
    holds for the artifacts behind its answer, so their texts are stored in history
    once. Read the data from the run's ledger (the `artifacts` query):
    `ledger.resolve(ref, PlanStep)`."""

    id: str
    type: str
    version: int = 1
    omitted_defaults: ClassVar[frozenset[str]] = frozenset({"version"})


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


class _Index:
    """What the ledger looks up without a scan, kept in step with its fields: creation
    number by id; ids in creation order by type name and by each `:`-ended prefix; the
    classes stored under a type name (`find_all(model)` also finds subclasses of
    `model`); artifact id by the identity of its data object; links as keys, and by
    source. A plain object, so that an operation reads the ledger's private state once."""

    __slots__ = ("order", "created", "by_type", "by_prefix", "classes", "by_object", "keys", "out")

    def __init__(self, artifacts: Iterable[Artifact[Any]], links: Iterable[Link]) -> None:
        self.order: dict[str, int] = {}
        self.created = 0
        self.by_type: dict[str, dict[str, None]] = {}
        self.by_prefix: dict[str, dict[str, None]] = {}
        self.classes: dict[str, set[type]] = {}
        self.by_object: dict[int, str] = {}
        self.keys: set[tuple[str, str, str]] = set()
        self.out: dict[str, list[Link]] = {}
        for artifact in artifacts:
            self.add(artifact)
        for link in links:
            self.add_link(link)

    def add(self, artifact: Artifact[Any]) -> None:
        artifact_id = artifact.id
        self.order[artifact_id] = self.created
        self.created += 1
        self.by_type.setdefault(artifact.type, {})[artifact_id] = None
        for prefix in _prefixes(artifact_id):
            self.by_prefix.setdefault(prefix, {})[artifact_id] = None
        self.classes.setdefault(artifact.type, set()).add(type(artifact.data))
        self.by_object[id(artifact.data)] = artifact_id

    def replace(self, old: Artifact[Any], new: Artifact[Any]) -> None:
        self.by_object.pop(id(old.data), None)
        self.by_object[id(new.data)] = new.id
        self.classes.setdefault(new.type, set()).add(type(new.data))

    def remove(self, artifact: Artifact[Any]) -> None:
        del self.order[artifact.id]
        self.by_type[artifact.type].pop(artifact.id)
        for prefix in _prefixes(artifact.id):
            self.by_prefix[prefix].pop(artifact.id)
        self.by_object.pop(id(artifact.data), None)

    def add_link(self, link: Link) -> None:
        self.keys.add((link.source, link.relation, link.target))
        self.out.setdefault(link.source, []).append(link)

    def of_type(self, model: type[BaseModel]) -> Iterable[str]:
        """The ids of the artifacts that may be a `model`, in creation order: stored
        under its name, or under a name whose data was ever of a subclass of it."""
        groups = [
            self.by_type[name]
            for name, classes in self.classes.items()
            if name == model.__name__ or any(issubclass(c, model) for c in classes)
        ]
        return groups[0] if len(groups) == 1 else sorted(set().union(*groups), key=self.order.get)


_AnyArtifact = Artifact[Any]  # subscripting a generic model costs a cache lookup per call


class Ledger(BaseModel):
    """The artifact store of one recipe run."""

    artifacts: dict[str, Artifact[Any]] = Field(default_factory=dict)
    links: list[Link] = Field(default_factory=list)

    _index: _Index = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._reindex()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Ledger:
        copied = super().__deepcopy__(memo)
        copied._reindex()  # its data are new objects: `id_of` must name those
        return copied

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._reindex()  # unpickled: the same for `id_of`

    def __eq__(self, other: object) -> bool:
        # The index follows from the fields; only the fields say what a ledger holds.
        if not isinstance(other, Ledger):
            return NotImplemented
        return self.artifacts == other.artifacts and self.links == other.links

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

    def id_of(self, data: object) -> str | None:
        """The id of the artifact whose data is this very object (not an equal one)."""
        return self._index.by_object.get(id(data))

    def create(self, artifact_id: str, data: BaseModel, *, version: int = 1) -> Artifact[Any]:
        """Store `data` under `artifact_id`; the same id again returns the first one.
        `version`: what the artifact is at, when it is copied from another run (a fork)."""
        existing = self.artifacts.get(artifact_id)
        if existing is not None:
            return existing
        artifact = _AnyArtifact(
            id=artifact_id, type=type(data).__name__, version=version, data=data
        )
        self.artifacts[artifact_id] = artifact
        self._index.add(artifact)
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
        self._index.replace(current, updated)
        return updated

    def delete(self, artifact_id: str) -> None:
        """Remove an artifact and every link that touches it (this one scans the links)."""
        artifact = self.get(artifact_id)
        del self.artifacts[artifact_id]
        self._index.remove(artifact)
        kept = [link for link in self.links if artifact_id not in (link.source, link.target)]
        if len(kept) < len(self.links):
            self.links = kept
            self._reindex()

    def link(self, source: str, relation: str, target: str) -> Link:
        """Record `source --relation--> target` once; both ends must exist."""
        self.get(source)
        self.get(target)
        link = Link(source=source, relation=relation, target=target)
        index = self._index
        if (source, relation, target) not in index.keys:
            self.links.append(link)
            index.add_link(link)
        return link

    def links_from(self, artifact_id: str, relation: str | None = None) -> list[Link]:
        return [
            link
            for link in self._index.out.get(artifact_id, ())
            if relation is None or link.relation == relation
        ]

    def select(self, ref: str | ArtifactSpan) -> list[Artifact[Any]]:
        """The artifact an id names, or the artifacts a span names, in creation order."""
        if isinstance(ref, str):
            return [self.get(ref)]
        if ref.prefix.endswith(":"):
            ids: Iterable[str] = self._index.by_prefix.get(ref.prefix, {})
        else:  # a prefix no index keeps
            ids = (i for i in self.artifacts if i.startswith(ref.prefix))
        matching = []
        for artifact_id in ids:
            if len(matching) == ref.count:
                break
            matching.append(self.artifacts[artifact_id])
        if len(matching) < ref.count:
            raise LedgerError(
                f"span {ref.prefix!r} names {ref.count} artifacts; the ledger has {len(matching)}"
            )
        return matching

    def find(self, model: type[M]) -> Artifact[M] | None:
        return find((self.artifacts[i] for i in self._index.of_type(model)), model)

    def find_all(self, model: type[M]) -> list[Artifact[M]]:
        return find_all((self.artifacts[i] for i in self._index.of_type(model)), model)

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
        return [
            self.ref(i) for i in self._index.of_type(model) if _matches(self.artifacts[i], model)
        ]

    def resolve(self, ref: ArtifactRef, model: type[M]) -> M:
        """The data of the version `ref` names, as `model`; a LedgerError when the
        artifact is missing or the ledger holds another version of it."""
        artifact = self.get(ref.id)
        if artifact.version != ref.version:
            raise LedgerError(
                f"{ref.id!r} is at version {artifact.version}; the reference names {ref.version}"
            )
        return artifact.typed(model).data

    def _reindex(self) -> None:
        self._index = _Index(self.artifacts.values(), self.links)


def _prefixes(artifact_id: str) -> Iterator[str]:
    """Every prefix of the id that ends with `:` ("a:b:c" -> "a:", "a:b:")."""
    at = artifact_id.find(":")
    while at != -1:
        yield artifact_id[: at + 1]
        at = artifact_id.find(":", at + 1)
