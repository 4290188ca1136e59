"""The chat's own activity: a reply read back from the run that wrote it.

A chat carries the texts of its recent replies only (durafact/_recipes/chat.py); when a
message id answered long ago is sent again, its reply is read from the closed run
of the chain that answered it, through that run's `transcript` query (a worker
replays the run to answer it). Nothing is sent to the model.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from durafact._core.answered import ReplyLookup, reply_after
from durafact._core.memory import ChatLine, TranscriptPage

PAGE = 200
REPLY_NOT_FOUND = "ReplyNotFound"


class ChatActivities:
    def __init__(self, temporal: Client) -> None:
        self._temporal = temporal

    @activity.defn(name="read_reply")
    async def read_reply(self, lookup: ReplyLookup) -> str:
        """The text of the reply to the message `lookup.seq` of the run `lookup.run_id`."""
        workflow_id = activity.info().workflow_id
        handle = self._temporal.get_workflow_handle(workflow_id, run_id=lookup.run_id)
        lines: list[ChatLine] = []
        offset = lookup.seq
        while True:
            page = await handle.query("transcript", args=[offset, PAGE], result_type=TranscriptPage)
            lines += page.lines
            ended = any(line.role == "user" and line.seq > lookup.seq for line in page.lines)
            if ended or page.next_offset <= offset or not page.lines:
                break
            offset = page.next_offset
        reply = reply_after(lines, lookup.seq)
        if reply is None:
            raise ApplicationError(
                f"run {lookup.run_id} holds no reply to message {lookup.seq}",
                type=REPLY_NOT_FOUND,
                non_retryable=True,
            )
        return reply
