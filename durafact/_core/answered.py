"""Which message ids a chat has answered, all of them, in little space.

A chat returns the first reply to a message id sent again, however long ago it was
sent, across continue-as-new, without a second turn (durafact/_recipes/chat.py). Carrying
every reply's text would make the carry grow with the conversation; this index
carries, for each answered id, 8 bytes of its hash (BLAKE2b) and the number (seq) of
its message: 12 bytes, 16 characters of base64. The reply's text is read back from
the run that wrote it when it is needed. Two ids of one conversation share a hash
with a chance of about n² / 2⁶⁵ (10⁻¹¹ at 10,000 messages).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Sequence

from pydantic import BaseModel, PrivateAttr, field_serializer

from durafact._core.memory import ChatLine

_ENTRY = struct.Struct(">8sI")  # hash, seq


def id_hash(message_id: str) -> bytes:
    return hashlib.blake2b(message_id.encode(), digest_size=8).digest()


class Answered(BaseModel):
    """Answered message ids and their message's seq; `packed` is what travels."""

    packed: str = ""
    _seqs: dict[bytes, int] | None = PrivateAttr(default=None)

    def _index(self) -> dict[bytes, int]:
        if self._seqs is None:
            raw = base64.b64decode(self.packed)
            self._seqs = dict(_ENTRY.iter_unpack(raw))
        return self._seqs

    def seq_of(self, message_id: str) -> int | None:
        """The seq of the message `message_id` named, if it was answered."""
        return self._index().get(id_hash(message_id))

    def add(self, message_id: str, seq: int) -> None:
        self._index()[id_hash(message_id)] = seq

    def __len__(self) -> int:
        return len(self._index())

    @field_serializer("packed")
    def _pack(self, packed: str) -> str:
        if self._seqs is None:  # never unpacked: unchanged
            return packed
        entries = b"".join(_ENTRY.pack(h, seq) for h, seq in self._seqs.items())
        return base64.b64encode(entries).decode()


class ReplyLookup(BaseModel):
    """What the activity `read_reply` gets: the run of the chat that answered the
    message `seq` (the workflow id is the activity's own)."""

    run_id: str
    seq: int


def reply_after(lines: Sequence[ChatLine], seq: int) -> str | None:
    """The reply to the user's message `seq` in `lines` (a transcript): the last
    assistant message without tool calls before the next user message; None when
    `lines` do not hold it."""
    if not any(line.seq == seq and line.role == "user" for line in lines):
        return None
    reply = None
    for line in lines:
        if line.seq <= seq:
            continue
        if line.role == "user":
            break
        if line.role == "assistant" and not line.tool_calls:
            reply = line.content.strip()
    return reply
