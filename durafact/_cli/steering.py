"""`steer`: a person's note for a running agent, said queued as soon as the run accepts it.

The update `steer` of a ReAct run (of a PlanReAct run: of its current step's agent), or
for a chat the update `send` with `steer: true`, answers only once the agent's next
model call takes the note; while the run waits for a person, that can be days. So the
note is sent with `start_update` to the stage ACCEPTED: the validator has run (a note
the run refuses is still one line at once), the note is in history and waits for that
call. With `wait`, the answer is awaited as before. The HTTP API's `steer` route is the
same (`steer_agent`).
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateHandle, WorkflowUpdateStage

from durafact._cli.chat import deliver
from durafact._cli.commands import running
from durafact._cli.follow import QUERY_TIMEOUT
from durafact._cli.output import Failed, indent, say
from durafact._cli.results import failure_text
from durafact._core.steer import NoteQueued, Steered, SteerNote
from durafact._core.text import brief
from durafact._recipes.chat import ChatReply, ChatSend, ChatWorkflow
from durafact._recipes.plan_react import PlanReActWorkflow
from durafact._recipes.recipe import Progress

# How durafact/_recipes/react.py announces a note it took: this kind, and these words before it.
TAKEN_KIND = "steer"
TAKEN = "note from a person: "
TURN = "turn:"


async def steer(client: Any, workflow_id: str, note: str, wait: bool = False) -> int:
    """A person's note for a running agent or chat: said once the run accepted it (with
    the model call it will go before, when known), or with `wait` once it is in the
    conversation. A run that is not running, or takes no note, is one line and exit 1."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle, "there is nothing to steer")
    if description.workflow_type == ChatWorkflow.__name__:
        await steer_chat(handle, note, wait)
        return 0
    agent, steered = await steer_agent(client, description, note, wait)
    whose = "" if agent == workflow_id else f" of its step's agent {agent}"
    if isinstance(steered, Steered):
        said = f"the note went before turn {steered.turn}{whose} ({steered.message})"
    else:
        before = f"turn {steered.turn}" if steered.turn else "its next model call"
        said = f"the note is queued: it goes before {before}{whose} (--wait waits for it)"
    say(f"workflow {workflow_id}: {said}")
    return 0


async def steer_chat(handle: Any, note: str, wait: bool) -> None:
    """A chat's note: a message sent with steer: true, queued or (`wait`) answered."""
    message = ChatSend(text=note, id=uuid.uuid4().hex, steer=True)
    if not wait:
        await send(handle, "send", message, ChatReply, wait, "not sent")
        say(
            f"chat {handle.id}: the note is queued: it joins the turn being answered before its "
            "next model call, or, with none left, is answered as a message of its own"
        )
        return
    reply = await deliver(handle, note, message.id, steer=True)
    if reply.status == "steered":
        say(f"chat {handle.id}: {reply.text}")
    else:  # no model call of a running turn was left: an ordinary message, answered
        say(f"chat {handle.id}: the note went in as a message of its own; its reply:")
        say(indent(reply.text, "  "))


async def steer_agent(
    client: Any, description: Any, note: str, wait: bool = False
) -> tuple[str, Steered | NoteQueued]:
    """The update `steer` for a running run that is not a chat: of the run itself (a
    ReAct run), else of the agent it runs now (a PlanReAct step's child ReActWorkflow).
    Which workflow took the note, and where it went or goes; Failed (one line) when none
    takes it, or the note was not seen."""
    agents = [(description.id, None)] + [
        (child.workflow_id, child.run_id) for child in description.raw_description.pending_children
    ]
    for workflow_id, run_id in agents:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            steered = await send(
                handle, "steer", SteerNote(text=note), Steered, wait, "not steered"
            )
        except NoSuchUpdate:
            continue
        if steered is None:  # queued
            steered = NoteQueued(turn=await next_turn(handle, note))
        return workflow_id, steered
    if description.workflow_type == PlanReActWorkflow.__name__:
        raise Failed(
            f"workflow {description.id} is a PlanReActWorkflow between its steps: no agent "
            "runs now to take a note"
        )
    raise Failed(
        f"workflow {description.id} is a {description.workflow_type}: it takes no note "
        "(ReAct runs and chats do)"
    )


class NoSuchUpdate(Exception):
    """The workflow has no handler for the update."""


async def send(
    handle: Any, update: str, arg: Any, result_type: type, wait: bool, refused: str
) -> Any:
    """The update's result with `wait`; else None once the run accepted it. A refusal
    is Failed (`refused: reason`); a workflow without the update, NoSuchUpdate."""
    stage = WorkflowUpdateStage.COMPLETED if wait else WorkflowUpdateStage.ACCEPTED
    try:
        started = await handle.start_update(
            update, arg, wait_for_stage=stage, result_type=result_type
        )
        return await started.result() if wait or settled(started) else None
    except WorkflowUpdateFailedError as exc:
        if "expected but not found" in str(exc.cause):  # the SDK's words for a missing handler
            raise NoSuchUpdate from None
        raise Failed(f"{refused}: {failure_text(exc)}") from None


def settled(started: WorkflowUpdateHandle[Any]) -> bool:
    """Whether the update ended as the run answered: its validator refused it. The SDK
    shows that only by `result()` raising, and `result()` of an accepted update waits for
    its end; the outcome came with `start_update`'s answer, which the handle keeps."""
    return started._known_outcome is not None


async def next_turn(handle: Any, note: str) -> int | None:
    """The turn the agent's model call that takes (or took) `note` has: the one after
    the last turn it began, unless that one took it already. None when not known: no
    turn began yet in this run, or no worker answers the `progress` query."""
    try:
        progress = await handle.query(
            "progress", 0, result_type=Progress, rpc_timeout=QUERY_TIMEOUT
        )
    except Exception:
        return None
    taken = TAKEN + brief(note)
    turns = [e for e in progress.events if is_turn(e.status)]
    if not turns:
        return None
    last = turns[-1].status
    took = any(e.status == last and e.kind == TAKEN_KIND and e.message == taken for e in turns)
    return int(last.removeprefix(TURN)) + (0 if took else 1)


def is_turn(status: str) -> bool:
    """Whether `status` is a ReAct turn's, `turn:N`."""
    return status.startswith(TURN) and status.removeprefix(TURN).isdigit()
