"""search_sources: the tool a ReAct run with sources is offered, run in workflow code.

A run with sources (durafact/_recipes/react.py) is offered one more tool, `search_sources`
(arguments `{"query": str}`), that runs in workflow code, not on a worker: a call
is `fan_out_sources(ctx, query, sources, owner_id=tool:{run}:{turn}:{k})` (one
`search_source` activity per source; the best `source_refs` refs stored as
`ref:{stable_id}:{call}`, each `found_by` its `source:{source_id}`), then
`materialize_doc` on only the best `source_docs` of them (`resolve_ref` activities;
`resolved:{ref id}`, `materialized_from` the ref). The observation lists each read
document's id, title and locator with an excerpt of `excerpt_chars`, and the loop
links it `based_on` those documents, so the answer's provenance walks answer ->
observation -> document -> ref -> source. Its spec is built here: the text protocol
lists it with the worker's tools; the native protocol sends it as `tool_specs`
beside the worker's tool names. No refs is an observation that says so; every
source failing, or no ref that can be read, is a failed observation
(`SearchFailed`, `ResolveFailed`), never an exception.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from durafact._core.ids import search_failure_id
from durafact._core.react import Observation
from durafact._core.sources import Doc, SourceSpec, preview
from durafact._core.text import brief
from durafact._core.tools import BoundCall, ToolCall, ToolSpec
from durafact._recipes.recipe import RecipeContext
from durafact._recipes.sources import fan_out_sources, materialize_doc

SEARCH_SOURCES = "search_sources"


class SearchLimits(Protocol):
    """The sizes a call keeps to (`ReActSettings` has them)."""

    source_refs: int
    source_docs: int
    excerpt_chars: int


def search_sources_spec(sources: list[SourceSpec]) -> ToolSpec:
    """The spec of the workflow-side tool over `sources`."""
    names = ", ".join(spec.source_id for spec in sources)
    return ToolSpec(
        name=SEARCH_SOURCES,
        description=f"Search the configured sources ({names}) and read the best matching "
        "documents: each comes back with its id and an excerpt.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for: a few keywords."}
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )


def bind_search_call(call: ToolCall) -> BoundCall:
    """A call's arguments as `search_sources` takes them: a non-empty query, stripped."""
    query = call.arguments.get("query") if isinstance(call.arguments, dict) else None
    if not isinstance(query, str) or not query.strip():
        return BoundCall(
            error_type="InvalidArguments",
            error=f'invalid arguments for {SEARCH_SOURCES}: give {{"query": "..."}}, a '
            f"non-empty string, not {brief(call.arguments)}",
        )
    return BoundCall(arguments={"query": query.strip()})


async def search_sources(
    ctx: RecipeContext,
    call: ToolCall,
    owner: str,
    sources: list[SourceSpec],
    limits: SearchLimits,
) -> tuple[Observation, list[str]]:
    """One call, `owner` its activity id: fan out, read the best few refs, show excerpts.
    Returns the observation and the ids of the documents read (its basis)."""

    def seen(text: str, error_type: str | None = None) -> Observation:
        return Observation(
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            ok=error_type is None,
            error_type=error_type,
            text=text,
        )

    binding = bind_search_call(call)
    if binding.arguments is None:
        return seen(binding.error, binding.error_type), []
    query = binding.arguments["query"]
    names = ", ".join(s.source_id for s in sources)
    refs = await fan_out_sources(
        ctx, query, sources=sources, owner_id=owner, limit=limits.source_refs
    )
    if not refs:
        failed = [
            s.source_id for s in sources if search_failure_id(s.source_id, owner) in ctx.ledger
        ]
        if len(failed) == len(sources):
            return seen(f"searching failed in every source ({names})", "SearchFailed"), []
        return seen(f"no documents match {query!r} in {names}; try other words"), []
    chosen = refs[: limits.source_docs]
    docs = [
        doc.typed(Doc)
        for doc in await asyncio.gather(*(materialize_doc(ctx, ref) for ref in chosen))
        if doc is not None
    ]
    if not docs:
        return seen(
            f"found {len(refs)} references for {query!r}, but none of the best "
            f"{len(chosen)} could be read",
            "ResolveFailed",
        ), []
    lines = [f"{len(docs)} of {len(refs)} references for {query!r} read ({names}); cite by id:"]
    for doc in docs:
        title = doc.data.title or doc.data.uid
        lines.append(
            f"[{doc.id}] {title} ({doc.data.source_id}: {doc.data.uid})\n"
            f"{preview(doc.data.text, limits.excerpt_chars)}"
        )
    return seen("\n\n".join(lines)), [doc.id for doc in docs]
