"""Stable, readable ids derived from what a thing is, never random.

The same ids name ledger artifacts, Temporal activity ids and Web UI labels, so a
retried or replayed workflow can never mint a second copy of anything.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durafact.sources import SourceRef

_KEY_LIMIT = 48


def text_key(text: str, limit: int = _KEY_LIMIT) -> str:
    """A short, stable key for free text (a goal, a topic, a request).

    Short texts stay readable as they are (whitespace folded); long ones are cut
    and suffixed with a hash of the whole text, so two goals that share a prefix
    still get different keys and ids stay well under Temporal's length limits.
    """
    folded = re.sub(r"\s+", " ", text.strip())
    if len(folded) <= limit:
        return folded
    digest = hashlib.sha256(folded.encode()).hexdigest()[:10]
    return f"{folded[: limit - 11].rstrip()}~{digest}"


def steps_prefix(goal: str) -> str:
    return f"step:{text_key(goal)}:"


def step_id(goal: str, index: int) -> str:
    return f"{steps_prefix(goal)}{index}"


def result_id(step: str) -> str:
    return f"result:{step}"


def final_id(goal: str) -> str:
    return f"final:{text_key(goal)}"


def goal_id(goal: str) -> str:
    return f"goal:{text_key(goal)}"


def topic_id(topic: str) -> str:
    return f"topic:{text_key(topic)}"


def draft_id(topic: str) -> str:
    return f"draft:{text_key(topic)}"


def review_id(draft: str, round_: int) -> str:
    return f"review:{draft}:{round_}"


def approval_id(thread: str, n: int) -> str:
    """The `n`th question (from 1) of an approval thread."""
    return f"approval:{text_key(thread)}:{n}"


def request_id(request: str) -> str:
    return f"request:{text_key(request)}"


def task_id(request: str) -> str:
    """The route a request takes (`Router`)."""
    return f"task:{text_key(request)}"


def facts_id(request: str) -> str:
    return f"facts:{text_key(request)}"


def report_id(request: str) -> str:
    return f"report:{text_key(request)}"


def reply_id(thread: str) -> str:
    """The final reply of an approval thread (`ApprovalGate`)."""
    return f"reply:{text_key(thread)}"


# --- sources: fan-out and materialization -------------------------------------------


def source_id_of(source_id: str) -> str:
    return f"source:{source_id}"


def ref_id(ref: SourceRef, owner_id: str) -> str:
    return f"ref:{ref.stable_id()}:{owner_id}"


def resolved_id(ref_artifact_id: str) -> str:
    return f"resolved:{ref_artifact_id}"


def search_failure_id(source_id: str, owner_id: str) -> str:
    return f"failure:search:{source_id}:{owner_id}"


def resolve_failure_id(ref_artifact_id: str) -> str:
    return f"failure:resolve:{ref_artifact_id}"


# --- answer flow: one batch of questions ------------------------------------------


def question_id(item_id: str) -> str:
    return f"question:{item_id}"


def item_answer_id(item_id: str, round_: int) -> str:
    """The answer an item got in round `round_` (0 = generate, then repairs)."""
    return f"answer:{item_id}:{round_}"


def answer_review_id(answer: str) -> str:
    return f"review:{answer}"


def outcome_id(item_id: str) -> str:
    return f"outcome:{item_id}"


# --- research: one turn of a question ----------------------------------------------


def turn_id(turn: str) -> str:
    return f"turn:{turn}"


def research_answer_id(turn: str) -> str:
    return f"answer:{turn}"


def insufficient_id(turn: str) -> str:
    return f"insufficient:{turn}"


def choice_id(turn: str) -> str:
    """The refs the model chose to read."""
    return f"choice:{turn}"


def evidence_id(turn: str, n: int) -> str:
    return f"evidence:{turn}:{n}"


def claim_id(turn: str, n: int) -> str:
    return f"claim:{turn}:{n}"


def calc_id(turn: str, name: str) -> str:
    return f"calc:{turn}:{name}"


def rejected_id(stage: str, turn: str, n: int) -> str:
    """Something a stage refused (a quote not in its document, an unbacked claim)."""
    return f"rejected:{stage}:{turn}:{n}"


# --- react: one tool loop; `run` is text_key(question) ---------------------------------


def react_run(question: str) -> str:
    """The key of a tool loop run: every id below takes it."""
    return text_key(question)


def react_turn_id(run: str, turn: int) -> str:
    """Turn `turn` (from 1); its model activity is `llm:react:{run}:{turn}`."""
    return f"react:{run}:{turn}"


def messages_prefix(run: str) -> str:
    return f"msg:{run}:"


def message_id(run: str, n: int) -> str:
    """The `n`th `ChatTurn` (from 0) of the run's conversation."""
    return f"{messages_prefix(run)}{n}"


def tools_id(run: str) -> str:
    """The run's tool list: the artifact and its `list_tools` activity."""
    return f"tools:{run}"


def tool_call_id(run: str, turn: int, k: int) -> str:
    """Call `k` (from 0) of turn `turn`: the `call_tool` activity id."""
    return f"tool:{run}:{turn}:{k}"


def observation_id(run: str, turn: int, k: int) -> str:
    """The full result of call `k` of turn `turn`."""
    return f"obs:{run}:{turn}:{k}"


def react_answer_id(run: str) -> str:
    return f"answer:{run}"


# --- ids Temporal stores in plain text ----------------------------------------------

# The memo key that makes a run's activity and child-workflow ids opaque: the starter
# sets it when payloads are encrypted, since those ids are stored unencrypted.
OPAQUE_IDS_MEMO = "durafact-opaque-ids"


def reply_lookup_id(seq: int) -> str:
    """The activity that reads back the reply to chat message `seq` from an earlier run."""
    return f"reply:{seq}"


def prompt_id(text: str) -> str:
    """A text that several model calls of a run send (a system prompt): named by its
    hash, so the same text is the same artifact however often it is sent."""
    return f"prompt:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def opaque_id(readable: str) -> str:
    """`readable` with everything after its verb replaced by a hash: `llm:step:Trip:0`
    becomes `llm:` and 20 hex digits, stable across replays and retries alike."""
    verb, _, rest = readable.partition(":")
    if not rest:
        return readable
    return f"{verb}:{hashlib.sha256(rest.encode()).hexdigest()[:20]}"
