"""The memory policies with seed 000's examples: WindowSummarizer(window=8, every=4),
WindowPruner(keep=8) and RollingDigestSummarizer(window=8, trigger=12)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from durafact._core.llm import ChatTurn
from durafact._core.memory import (
    DIGEST_ID,
    FALLBACK_CHARS,
    Memory,
    MemoryPolicy,
    RollingDigestSummarizer,
    WindowPruner,
    WindowSummarizer,
)
from durafact._core.tools import ToolCall


def chat(messages: int) -> Memory:
    """A conversation of `messages` messages, user and assistant in turn."""
    memory = Memory()
    for n in range(messages):
        memory.add(ChatTurn(role="user" if n % 2 == 0 else "assistant", content=f"message {n}"))
    return memory


def grow(memory: Memory, messages: int) -> Memory:
    for _ in range(messages):
        n = memory.next_seq
        memory.add(ChatTurn(role="user" if n % 2 == 0 else "assistant", content=f"message {n}"))
    return memory


def test_window_summarizer_folds_the_oldest_into_numbered_summaries() -> None:
    policy = WindowSummarizer(window=8, every=4)
    assert policy.plan(chat(8)) is None
    memory = chat(10)
    fold = policy.plan(memory)
    assert fold is not None and fold.artifact_id == "summary:1"
    assert [line.seq for line in fold.lines] == [0, 1, 2, 3]
    assert policy.plan(memory) == fold  # the same messages name the same summary
    memory = policy.apply(memory, fold, "they said hello")
    assert [line.seq for line in memory.window] == [4, 5, 6, 7, 8, 9]
    assert [(s.round, s.first, s.last, s.text) for s in memory.summaries] == [
        (1, 0, 3, "they said hello")
    ]
    memory = grow(memory, 4)
    fold = policy.plan(memory)
    assert fold is not None and fold.artifact_id == "summary:2"
    memory = policy.apply(memory, fold, None)  # no text: the fallback, never a failure
    assert memory.summaries[1].text == "\n".join(
        f"{'user' if n % 2 == 0 else 'assistant'}: message {n}" for n in range(4, 8)
    )
    assert memory.folded == 8 and len(memory.window) == 6


def test_window_pruner_keeps_the_last_n_without_a_model() -> None:
    policy = WindowPruner(keep=8)
    assert policy.plan(chat(8)) is None
    memory = chat(11)
    fold = policy.plan(memory)
    assert fold is not None and fold.artifact_id is None and fold.lines == []
    memory = policy.apply(memory, fold, None)
    # Cut before a user's message: 3 would leave an assistant's reply without its question.
    assert [line.seq for line in memory.window] == [4, 5, 6, 7, 8, 9, 10]
    assert memory.summaries == [] and memory.digest is None


def test_rolling_digest_folds_everything_older_than_the_window_into_one_digest() -> None:
    policy = RollingDigestSummarizer(window=8, trigger=12)
    assert policy.plan(chat(12)) is None
    memory = chat(14)
    fold = policy.plan(memory)
    assert fold is not None and fold.artifact_id == DIGEST_ID and fold.previous is None
    assert [line.seq for line in fold.lines] == list(range(6))
    memory = policy.apply(memory, fold, "the user greeted")
    assert memory.digest is not None
    assert (memory.digest.text, memory.digest.version) == ("the user greeted", 1)
    assert len(memory.window) == 8
    memory = grow(memory, 6)
    fold = policy.plan(memory)
    assert fold is not None and fold.previous == "the user greeted"
    memory = policy.apply(memory, fold, None)
    # The fallback adds to the digest; it never throws the earlier memory away.
    assert memory.digest.version == 2
    assert memory.digest.text.startswith("the user greeted\nuser: message 6")
    assert memory.digest.last == 11 and len(memory.window) == 8


def test_a_fold_never_separates_tool_calls_from_their_results() -> None:
    memory = Memory()
    memory.add(ChatTurn(role="user", content="what is 2+2"))
    memory.add(ChatTurn(role="assistant", tool_calls=[ToolCall(id="c1", name="calc")]))
    memory.add(ChatTurn(role="tool", content="4", tool_call_id="c1", name="calc"))
    memory.add(ChatTurn(role="assistant", content="4"))
    memory.add(ChatTurn(role="user", content="thanks"))
    memory.add(ChatTurn(role="assistant", content="welcome"))
    fold = WindowPruner(keep=4).plan(memory)
    assert fold is not None and fold.count == 4
    assert WindowPruner(keep=4).apply(memory, fold, None).window[0].content == "thanks"


def test_the_fallback_cuts_long_messages() -> None:
    memory = Memory()
    memory.add(ChatTurn(role="user", content="x" * 1000))
    memory.add(ChatTurn(role="assistant", content="ok"))
    memory = grow(memory, 1)
    policy = WindowSummarizer(window=2, every=2)
    fold = policy.plan(memory)
    assert fold is not None
    text = policy.apply(memory, fold, "   ").summaries[0].text
    assert text == f"user: {'x' * FALLBACK_CHARS}\nassistant: ok"


def test_policies_travel_as_json_by_kind_and_refuse_impossible_settings() -> None:
    adapter = TypeAdapter(MemoryPolicy)
    for policy in (WindowSummarizer(), WindowPruner(keep=3), RollingDigestSummarizer()):
        assert adapter.validate_json(adapter.dump_json(policy)) == policy
    with pytest.raises(ValidationError, match="every must not exceed window"):
        WindowSummarizer(window=4, every=5)
    with pytest.raises(ValidationError, match="trigger must be above window"):
        RollingDigestSummarizer(window=8, trigger=8)
