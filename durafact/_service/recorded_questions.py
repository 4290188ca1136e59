"""The questions a `durafact eval` re-run asks a person, answered as the person answered
them in the recorded run (durafact/_service/evaluation.py).

While a re-run goes on, the runs of the eval's server that wait for a person are read
as `durafact pending` reads them (`waiting`), and each question of the re-run or of its
children gets the recorded answer to the question of the same id (`Book.answer_to`),
by the `decide` update, as `durafact decide` and the HTTP API send it (`decide`). A
question the recorded run did not ask, or asked about something else, or got no
answer to gets no answer made up: the re-run is cancelled, and its report names the
question. So is one whose recorded answer the run refuses now, or that cannot be sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.service import RPCError

from durafact._core.approval import ApprovalAnswer, ApprovalQuestion
from durafact._runtime.recorded_answers import Book, Books, Unasked
from durafact._runtime.registry import Registry
from durafact._service.approvals import decide, waiting
from durafact._service.errors import AlreadyAnswered, NotRunning, ServiceError

# How often the waiting runs are read (seconds): a question waits about this long.
POLL = 0.1


async def answer_questions(env: Any, registry: Registry, books: Books) -> None:
    """Answer the questions of the re-runs of `books` on `env` until the caller cancels
    this; at a question with no recorded answer to give, cancel that re-run."""
    done: set[tuple[str, str]] = set()
    while True:
        try:
            found = await waiting(env)
        except RPCError:  # the server is busy or going: read again
            found = []
        for execution, questions, _ in found:
            book = books.of(execution.id)
            for question in questions:
                if book is None or book.stopped or (execution.run_id, question.id) in done:
                    continue
                done.add((execution.run_id, question.id))
                why = await answered(env, registry, book, execution.id, question)
                if why is not None:
                    book.stopped = (question, why)
                    root = env.get_workflow_handle(book.recording.first.workflow_id)
                    with contextlib.suppress(RPCError):  # it has just ended
                        await root.cancel()  # its children with it
        await asyncio.sleep(POLL)


async def answered(
    env: Any, registry: Registry, book: Book, workflow_id: str, question: ApprovalQuestion
) -> str | None:
    """Give `question` its recorded answer (none to one the recorded run let time out);
    why not, when it has none to give or the run refuses it."""
    try:
        answer: ApprovalAnswer | None = book.answer_to(workflow_id, question)
    except Unasked as exc:
        return str(exc)
    if answer is None:
        return None
    # Counted before it is sent: the run may end before the update's outcome comes back.
    book.answered += 1
    try:
        await decide(env, registry, workflow_id, answer)
    except (ServiceError, RPCError) as exc:
        book.answered -= 1
        if isinstance(exc, NotRunning | AlreadyAnswered):  # the run went on without it
            return None
        if isinstance(exc, RPCError):
            return f"its recorded answer could not be sent: {exc}"
        return f"its recorded answer is refused now: {exc}"
    return None
