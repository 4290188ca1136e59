"""Steering: a person's note for a running agent, taken as soon as the run accepts it.

A recipe that declares itself `steerable` takes the update `steer`; one that declares
`step_agents` passes a note to the agent its current step runs; a `chat` takes a note
as a message sent with `steer: true` (the update `send`). Such an update answers only
once the agent's next model call takes the note, and while the run waits for a person
that can be days. So the note is sent with `start_update` to the stage ACCEPTED: the
validator has run (a note the run refuses is `Refused` at once), the note is in
history and waits for that call. With `wait`, the answer is awaited.
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateHandle, WorkflowUpdateStage

from durafact._core.steer import NoteQueued, Steered, SteerNote
from durafact._core.text import brief
from durafact._runtime.registry import Registry
from durafact._service.chats import ChatReply, ChatSend, send_message
from durafact._service.errors import MessageRefused, Refused, TurnFailed, failure_text
from durafact._service.runs import progress_page

# How durafact/_recipes/react.py announces a note it took: this kind, and these words before it.
TAKEN_KIND = "steer"
TAKEN = "note from a person: "
TURN = "turn:"


class NoSuchUpdate(Exception):
    """The workflow has no handler for the update."""


async def steer_agent(
    client: Any, registry: Registry, description: Any, note: str, wait: bool = False
) -> tuple[str, Steered | NoteQueued]:
    """The update `steer` for a running run that is not a chat: of the run itself, else
    of the agent it runs now (a step's child). Which workflow took the note, and where it
    went or goes; Refused when none takes it, or the note was not seen."""
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
    recipe = registry.get(description.workflow_type)
    if recipe is not None and recipe.step_agents:
        raise Refused(
            f"workflow {description.id} is a {description.workflow_type} between its steps: "
            "no agent runs now to take a note"
        )
    raise Refused(
        f"workflow {description.id} is a {description.workflow_type}: it takes no note "
        "(ReAct runs and chats do)"
    )


async def steer_chat(handle: Any, note: str, wait: bool) -> ChatReply | None:
    """A chat's note, a message sent with `steer: true`: None once queued, or (`wait`)
    the reply: `steered`, or an ordinary message's when no model call of a running turn
    was left."""
    message = ChatSend(text=note, id=uuid.uuid4().hex, steer=True)
    if not wait:
        await send(handle, "send", message, ChatReply, wait, "not sent")
        return None
    try:
        return await send_message(handle, message)
    except (MessageRefused, TurnFailed) as exc:
        raise type(exc)(f"not sent: {exc}") from None


async def send(
    handle: Any, update: str, arg: Any, result_type: type, wait: bool, refused: str
) -> Any:
    """The update's result with `wait`; else None once the run accepted it. A refusal
    is Refused (`refused: reason`); a workflow without the update, NoSuchUpdate."""
    stage = WorkflowUpdateStage.COMPLETED if wait else WorkflowUpdateStage.ACCEPTED
    try:
        started = await handle.start_update(
            update, arg, wait_for_stage=stage, result_type=result_type
        )
        return await started.result() if wait or settled(started) else None
    except WorkflowUpdateFailedError as exc:
        if "expected but not found" in str(exc.cause):  # the SDK's words for a missing handler
            raise NoSuchUpdate from None
        raise Refused(f"{refused}: {failure_text(exc)}") from None


def settled(started: WorkflowUpdateHandle[Any]) -> bool:
    """Whether the update ended as the run answered: its validator refused it. The SDK
    shows that only by `result()` raising, and `result()` of an accepted update waits for
    its end; the outcome came with `start_update`'s answer, which the handle keeps."""
    return started._known_outcome is not None


async def next_turn(handle: Any, note: str) -> int | None:
    """The turn the agent's model call that takes (or took) `note` has: the one after
    the last turn it began, unless that one took it already. None when not known: no
    turn began yet in this run, or no worker answers the `progress` query."""
    progress = await progress_page(handle, 0)
    if progress is None:
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
