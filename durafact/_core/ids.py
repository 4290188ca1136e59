"""Stable, readable ids derived from what a thing is, never random.

The same ids name ledger artifacts, Temporal activity ids and Web UI labels, so a
retried or replayed workflow can never mint a second copy of anything. Every id a
workflow uses is built here: artifact ids, the scopes that name a hook's model
calls (`ctx.scoped(...)`; the activity is `llm:{scope}`), activity and child
workflow ids, approval threads and message keys.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durafact._core.sources import SourceRef

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


# --- what every recipe uses -------------------------------------------------------------


def activity_id(verb: str, scope: str, call: int) -> str:
    """The `call`th activity (from 1) a scope starts: `llm:step:goal:0`, then `#2`, `#3`
    when a hook makes several calls: stable across replays and retries."""
    suffix = f"#{call}" if call > 1 else ""
    return f"{verb}:{scope}{suffix}"


def attempt_scope(artifact_id: str, attempt: int) -> str:
    """The activity scope of a stage's `attempt`: the artifact id, plus `:n` after the first."""
    return artifact_id if attempt <= 1 else f"{artifact_id}:{attempt}"


def idempotency_key(workflow_id: str, activity_id: str) -> str:
    """What a side-effecting activity is told: the same for every retry of the call."""
    return f"{workflow_id}:{activity_id}"


# --- the subjects of the recipes, and their steps, drafts and reviews ---------------


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


def plan_scope(goal: str) -> str:
    """The planning call of a goal."""
    return f"plan:{text_key(goal)}"


def topic_id(topic: str) -> str:
    return f"topic:{text_key(topic)}"


def draft_id(topic: str) -> str:
    return f"draft:{text_key(topic)}"


def review_id(draft: str, round_: int) -> str:
    return f"review:{draft}:{round_}"


def rewrite_scope(draft: str, round_: int) -> str:
    """The rewrite that uses round `round_`'s review (and makes version `round_ + 1`)."""
    return f"rewrite:{draft}:{round_}"


def approval_id(thread: str, n: int) -> str:
    """The `n`th question (from 1) of an approval thread, short enough to type at a
    shell prompt: `approval:Renovate-the-kitc+5f2a9c:1`."""
    return f"approval:{typeable_key(thread)}:{n}"


def typeable_key(text: str, limit: int = 24) -> str:
    """`text_key` for ids a person types: letters, digits, `.`, `_` and `-` only (no
    quoting needed), at most `limit` characters; a text that had to be cut or changed
    gets a hash suffix, so two texts never share a key."""
    folded = re.sub(r"\s+", " ", text.strip())
    plain = re.sub(r"[^A-Za-z0-9._-]+", "-", folded).strip("-")
    if plain == folded and len(plain) <= limit:
        return plain
    digest = hashlib.sha256(folded.encode()).hexdigest()[:6]
    return f"{plain[: limit - 7].rstrip('-')}+{digest}"


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


def search_id(source_id: str, owner_id: str) -> str:
    """The `search_source` activity of one source for one owner (a turn, a tool call)."""
    return f"search:{source_id}:{owner_id}"


def resolve_id(ref_artifact_id: str) -> str:
    """The `resolve_ref` activity that reads a ref."""
    return f"resolve:{ref_artifact_id}"


def ref_id(ref: SourceRef, owner_id: str) -> str:
    return f"ref:{ref.stable_id()}:{owner_id}"


def resolved_id(ref_artifact_id: str) -> str:
    return f"resolved:{ref_artifact_id}"


def search_failure_id(source_id: str, owner_id: str) -> str:
    return f"failure:{search_id(source_id, owner_id)}"


def resolve_failure_id(ref_artifact_id: str) -> str:
    return f"failure:{resolve_id(ref_artifact_id)}"


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


# The stage `observe` sees last, and the scope of `finish`'s model calls.
FINAL_STAGE = "final"


def answer_stage(round_: int) -> str:
    """Round `round_` (from 0): `generate:0`, then `repair:{r}`; the scope of its
    generate call and the stage `observe` sees after it."""
    return "generate:0" if round_ == 0 else f"repair:{round_}"


def review_scope(round_: int) -> str:
    """The review call of round `round_`."""
    return f"review:{round_}"


# --- research: one turn of a question ----------------------------------------------


def turn_id(turn: str) -> str:
    return f"turn:{turn}"


def research_answer_id(turn: str) -> str:
    return f"answer:{turn}"


def select_scope(turn: str) -> str:
    """The calls of the hook that chooses what to read (`choose`)."""
    return f"select:{turn}"


def evidence_scope(turn: str) -> str:
    """The calls of the hook that quotes the documents (`extract`)."""
    return f"evidence:{turn}"


def claims_scope(turn: str) -> str:
    """The calls of the hook that states the claims (`state_claims`)."""
    return f"claims:{turn}"


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


def tool_binding_id(run: str, turn: int, k: int) -> str:
    """The `bind_tool_call` activity of call `k` of turn `turn`: its arguments as the
    tool will receive them, before a policy or a person judges them."""
    return f"bind:{run}:{turn}:{k}"


def observation_id(run: str, turn: int, k: int) -> str:
    """The full result of call `k` of turn `turn`."""
    return f"obs:{run}:{turn}:{k}"


def react_answer_id(run: str) -> str:
    return f"answer:{run}"


def summary_scope(observation: str) -> str:
    """The call that summarizes an observation (`obs:...`) too long to show."""
    return f"summary:{observation}"


def tool_approval_thread(run: str) -> str:
    """The approval thread of the run's destructive tool calls."""
    return f"tool:{run}"


def approval_rule_id(tool: str, scope: str, arguments_hash: str | None = None) -> str:
    """A remembered answer to a tool question: `approval-rule:delete_file:call:9f2c...`
    covers those arguments only, `approval-rule:delete_file:tool` any."""
    bound = f":{arguments_hash}" if arguments_hash else ""
    return f"approval-rule:{tool}:{scope}{bound}"


def loop_digest_id(run: str, version: int) -> str:
    """The digest of the turns a `compact` context policy folded, version `version`;
    its model call is `llm:{this id}`."""
    return f"digest:{run}:{version}"


def earlier_run_id(run_id: str) -> str:
    """What a tool loop that continued as new knows of its earlier run `run_id` (a
    Temporal run id of the same workflow): the observations that run holds."""
    return f"run:{run_id}"


# --- plan with a ReAct child per step -------------------------------------------------


def child_workflow_id(parent_id: str, step: str) -> str:
    """The child workflow that carries out step `step` of the parent run `parent_id`."""
    return f"{parent_id}/{step}"


def child_artifact_id(step: str, child_id: str) -> str:
    """The parent's copy of the child artifact `child_id` made for step `step`."""
    return f"child:{step}:{child_id}"


# --- chat: one conversation across runs -----------------------------------------------

# The chat's conversation as context: the memory's window, counted from its start.
CHAT_MESSAGES_PREFIX = "msg:"
# The one digest of a rolling-digest memory; its version counts the folds.
DIGEST_ID = "digest"
# Why a run was cancelled: the reason given with Temporal's cancellation.
CANCELLATION_ID = "cancellation"


def summary_id(round_: int) -> str:
    """The summary a window summarizer folds in round `round_`."""
    return f"summary:{round_}"


def digest_scope(version: int) -> str:
    """The call that writes version `version` of the digest."""
    return f"{DIGEST_ID}:{version}"


def chat_scope(turn: int, call: int) -> str:
    """Model call `call` (from 1) of the chat's turn `turn`."""
    return f"chat:{turn}" + (f":{call}" if call > 1 else "")


def chat_call_id(model_call: int, k: int) -> str:
    """Tool call `k` (from 0) of the chat's `model_call`th model call, when the model gave
    it no id."""
    return f"call_{model_call}_{k}"


def signal_message_key(run: int, n: int) -> str:
    """The `n`th message signalled without an id in run `run` of the chat."""
    return f"signal:{run}:{n}"


# --- ids Temporal stores in plain text ----------------------------------------------

# The memo key that makes a run's activity and child-workflow ids opaque: the starter
# sets it when payloads are encrypted, since those ids are stored unencrypted.
OPAQUE_IDS_MEMO = "durafact-opaque-ids"


def reply_lookup_id(seq: int) -> str:
    """The activity that reads back the reply to chat message `seq` from an earlier run."""
    return f"read-reply:{seq}"


def fallback_id(call: str) -> str:
    """The record that model call `call` (its readable activity id) was answered by a
    fallback endpoint."""
    return f"fallback:{call}"


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
