"""`steer ID NOTE [--wait]`: a person's note for a running agent or chat, said queued as
soon as the run accepts it, or with `--wait` once it is in the conversation
(durafact/_service/steering.py). The HTTP API's `steer` route is the same operation.
"""

from __future__ import annotations

from typing import Any

from durafact._cli.output import say
from durafact._core.steer import Steered
from durafact._core.text import indent
from durafact._runtime.registry import Registry
from durafact._service.runs import running
from durafact._service.steering import steer_agent, steer_chat


async def steer(client: Any, registry: Registry, workflow_id: str, note: str, wait: bool) -> int:
    """A person's note for a running agent or chat: said once the run accepted it (with
    the model call it will go before, when known), or with `wait` once it is in the
    conversation. A run that is not running, or takes no note, is one line and exit 1."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle, "there is nothing to steer")
    recipe = registry.get(description.workflow_type)
    if recipe is not None and recipe.chat:
        reply = await steer_chat(handle, note, wait)
        if reply is None:
            say(
                f"chat {workflow_id}: the note is queued: it joins the turn being answered "
                "before its next model call, or, with none left, is answered as a message of "
                "its own"
            )
        elif reply.status == "steered":
            say(f"chat {workflow_id}: {reply.text}")
        else:  # no model call of a running turn was left: an ordinary message, answered
            say(f"chat {workflow_id}: the note went in as a message of its own; its reply:")
            say(indent(reply.text, "  "))
        return 0
    agent, steered = await steer_agent(client, registry, description, note, wait)
    whose = "" if agent == workflow_id else f" of its step's agent {agent}"
    if isinstance(steered, Steered):
        said = f"the note went before turn {steered.turn}{whose} ({steered.message})"
    else:
        before = f"turn {steered.turn}" if steered.turn else "its next model call"
        said = f"the note is queued: it goes before {before}{whose} (--wait waits for it)"
    say(f"workflow {workflow_id}: {said}")
    return 0
