"""Steering a running agent: a person's note, added to the conversation before the
model's next call (the update `steer` on every ReAct run and chat, and a chat
message sent with `steer: true`), and what the person gets back."""

from __future__ import annotations

from pydantic import BaseModel, Field

# The error type of a steer or stop that cannot be taken (validators) or was not seen.
NOT_STEERED = "NotSteered"
NOTE_PREFIX = "Note from a person: "
MAX_NOTE_CHARS = 8000


class SteerNote(BaseModel):
    """What the update `steer` takes."""

    text: str = Field(description="The note: shown to the model as a person's note.")


class Steered(BaseModel):
    """What the update `steer` returns once the note is in the conversation."""

    turn: int = Field(description="The model call the note went before (ReAct: its turn).")
    message: str = Field(description="The note's artifact id, `msg:{run}:{n}`.")


class NoteQueued(BaseModel):
    """A note the run accepted (its checks passed, it is in history) that waits for the
    agent's next model call: what `durafact steer` and the API say at once."""

    turn: int | None = Field(
        default=None, description="The model call it goes before (ReAct: its turn), when known."
    )


def steer_text(note: str) -> str:
    """The note as the model sees it: a user message that says who wrote it."""
    return f"{NOTE_PREFIX}{note.strip()}"


def note_problem(note: str) -> str | None:
    """Why a note cannot be taken, before anything is written to history."""
    if not note.strip():
        return "the note is empty"
    if len(note) > MAX_NOTE_CHARS:
        return f"the note has {len(note)} characters; at most {MAX_NOTE_CHARS} are taken"
    return None
