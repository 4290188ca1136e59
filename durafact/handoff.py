"""Context handed from a workflow to its model activity inside one worker process.

A model request names its context by reference (artifact ids, a conversation span),
so that a text is stored in history once. The activity reads the texts with a query
to its own workflow: a round trip through the server, about 10 ms on a dev server,
on every model call. Usually the activity runs in the worker process whose workflow
scheduled it; then the workflow has already put the resolved context here, keyed by
run id and activity id, and the activity takes it from memory. On a miss (the
activity landed on another worker, the process restarted, a retry, an entry pushed
out) the activity asks the query as before: this only saves time, and the model
sees the same text either way.

The workflow puts while it is not replaying. A put is not a command and changes
nothing the workflow does, so replay and determinism are untouched. The workflow
sandbox passes `durafact` through, so the workflow and its activities share this
module's store. Workflow threads put and the activities' event loop takes, each
with one dict operation, which the interpreter lock makes atomic. Entries are taken
once; past `MAX_ENTRIES` the oldest go first, so a worker whose activities run
elsewhere does not grow; a context over `MAX_CHARS` is not handed over at all.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from durafact.llm import ChatTurn, ContextText

MAX_ENTRIES = 512
MAX_CHARS = 256_000


@dataclass(frozen=True)
class Context:
    """A request's context, resolved: the texts of each message's references (in
    message order) and the conversation's turns (None without a conversation)."""

    texts: tuple[tuple[ContextText, ...], ...]
    turns: tuple[ChatTurn, ...] | None

    def chars(self) -> int:
        size = sum(len(t.text) for texts in self.texts for t in texts)
        return size + sum(len(turn.content) for turn in self.turns or ())


_entries: OrderedDict[tuple[str, str], Context] = OrderedDict()


def put(run_id: str, activity_id: str, context: Context) -> None:
    if context.chars() > MAX_CHARS:
        return
    _entries[run_id, activity_id] = context
    while len(_entries) > MAX_ENTRIES:
        try:
            _entries.popitem(last=False)
        except KeyError:  # another thread took the rest meanwhile
            break


def take(run_id: str, activity_id: str) -> Context | None:
    return _entries.pop((run_id, activity_id), None)
