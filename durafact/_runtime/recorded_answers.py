"""The activities of `durafact eval`'s worker: a recorded run's answers, given again to
the same questions.

`RecordedModel.request_model` takes the place of the model activity. It renders the
request as the model activity would send it (its messages with their context, and
its settings: durafact/_activities/llm.py) and looks its canonical JSON up among the
requests the recorded run made (`request_key`): a request byte for byte the same, to
the same model, is answered with the recorded response, and nothing is sent. Any
other request is sent to the configured model endpoint; offline, it is not sent, and
it is answered with the recorded response of the same call (the same activity id)
when there is one, so that the run goes on and every call the change touches is
listed, or else fails (`NotSent`). Each call is logged with why it changed
(durafact/_core/evals.py).

`RecordedModel.recorded_activity` answers every other activity that is not run live
(tool calls, source searches and reads, a recipe's own activities) by its type and
input, from the recording; one not there fails (`NotRecorded`), which a tool loop
sees as a failed tool call. Listing and binding tools always run: they read the
worker's catalog and change nothing.

`Book.answer_to` gives a question the re-run asks a person the recorded answer to the
question of the same id, when it is the same question: it asks what the current code
asks at that point of the recorded run (its history replayed; by its id alone where the
current code does not replay it). A question the recorded run let time out gets none,
and times out again. Any other is `Unasked`: no answer is made up for it.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from durafact._activities.llm import ModelActivities, render_messages
from durafact._core.approval import ApprovalAnswer, ApprovalQuestion
from durafact._core.evals import (
    CallEval,
    Reason,
    RequestView,
    ToolCounts,
    same_model,
    why_changed,
)
from durafact._core.ids import prompt_id
from durafact._core.llm import LLMRequest, LLMResponse, ResolvedContext
from durafact._core.prices import Prices
from durafact._core.text import one_line
from durafact._runtime.handoff import MODEL_ACTIVITY
from durafact._runtime.recording import Recording
from durafact._runtime.replay_capture import Capture

NOT_SENT = "NotSent"
NOT_RECORDED = "NotRecorded"
# Activities that always run: they read the worker's own catalog and change nothing.
ALWAYS_LIVE = ("list_tools", "bind_tool_call", "read_reply")


def canonical(value: Any) -> str:
    """`value` as canonical JSON: keys sorted, no spaces, text as it is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def request_key(request: LLMRequest, context: ResolvedContext) -> str:
    """What the model activity sends for `request` (its messages rendered with
    `context`, and its settings: temperature, max tokens, stop sequences, output type,
    tools), as a hash of its canonical JSON. The model is compared apart
    (`same_model`)."""
    settings = RequestView.of(request, context, "").settings
    sent = {"messages": render_messages(request.messages, context), **settings}
    return hashlib.sha256(canonical(sent).encode()).hexdigest()


class Unasked(Exception):
    """A question of the re-run's that the recorded run did not ask, or asked about
    something else, or got no answer to: which, in a few words."""


@dataclass
class RecordedCall:
    """One model call of the recording, as eval answers from it and compares with it."""

    workflow_id: str
    activity_id: str
    summary: str
    request: LLMRequest
    response: LLMResponse | None
    key: str | None = None
    """Of what it sent; None when its context could not be read again."""
    recorded: RequestView | None = None
    replayed: RequestView | None = None

    @property
    def recorded_model(self) -> str:
        """The model it asked for, or else the one that answered it."""
        return self.request.model or (self.response.model if self.response else "")


@dataclass
class Book:
    """A recorded run (its chain and its children) and what its re-run did so far."""

    recording: Recording
    capture: Capture
    calls: list[RecordedCall]
    activities: dict[str, list[Any]]
    """Recorded results of the other activities, by `activity_key`, in order."""
    log: dict[tuple[str, str], CallEval] = field(default_factory=dict)
    tools: ToolCounts = field(default_factory=ToolCounts)
    answered: int = 0
    """The re-run's questions answered from the recording."""
    stopped: tuple[ApprovalQuestion, str] | None = None
    """The question the re-run was stopped at, and why."""
    _by_key: dict[str, list[RecordedCall]] = field(default_factory=lambda: defaultdict(list))
    _by_id: dict[tuple[str, str], list[RecordedCall]] = field(
        default_factory=lambda: defaultdict(list)
    )
    _same: dict[tuple[str, str], RecordedCall | None] = field(default_factory=dict)
    _used: set[int] = field(default_factory=set)
    _counted: set[tuple[str, str]] = field(default_factory=set)
    _answers: dict[tuple[str, str], list[ApprovalAnswer]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def __post_init__(self) -> None:
        for call in self.calls:
            if call.key is not None and call.response is not None:
                self._by_key[call.key].append(call)
            self._by_id[call.workflow_id, call.activity_id].append(call)
        for run in self.recording.runs:
            for question_id, answer in run.answers.items():
                self._answers[run.workflow_id, question_id].append(answer)

    @property
    def workflow_ids(self) -> set[str]:
        return {run.workflow_id for run in self.recording.runs}

    def same_call(self, workflow_id: str, run_id: str, activity_id: str) -> RecordedCall | None:
        """The recorded call with this call's workflow and activity id (the next one not
        yet matched, in a chain of runs that repeats ids), for every attempt of it."""
        if (run_id, activity_id) not in self._same:
            taken = {id(call) for call in self._same.values() if call is not None}
            found = self._by_id.get((workflow_id, activity_id), [])
            self._same[run_id, activity_id] = next((c for c in found if id(c) not in taken), None)
        return self._same[run_id, activity_id]

    def answer(self, key: str, model: str, same: RecordedCall | None) -> RecordedCall | None:
        """A recorded call that sent `key` to `model`: the same call when it did, else
        the first not used yet, else any."""
        found = [c for c in self._by_key.get(key, []) if same_model(model, c.recorded_model)]
        if any(c is same for c in found):
            return same
        fresh = [c for c in found if id(c) not in self._used]
        chosen = (fresh or found or [None])[0]
        if chosen is not None:
            self._used.add(id(chosen))
        return chosen

    def dropped(self) -> list[str]:
        """The recorded calls the re-run neither made again nor was answered with."""
        met = {id(c) for c in self._same.values() if c is not None} | self._used
        return [c.activity_id for c in self.calls if id(c) not in met]

    def changed_before(self, workflow_id: str) -> list[str]:
        """The calls of `workflow_id` logged so far that did not go as recorded."""
        return [
            c.activity_id
            for c in self.log.values()
            if c.workflow_id == workflow_id and c.answered != "recording"
        ]

    def answer_to(self, workflow_id: str, question: ApprovalQuestion) -> ApprovalAnswer | None:
        """The recorded answer to `question`, which the re-run of `workflow_id` asks (the
        next one, in a chain of runs that asks it again); None when the recorded run let
        it time out. Unasked when the recorded run did not ask it, or not this way, or
        got no answer to it."""
        # A replay that failed went on past the recording: its questions are the new code's.
        failed = workflow_id in self.capture.failures
        ledger = None if failed else self.capture.ledgers.get(workflow_id)
        found = ledger.get(question.id) if ledger and question.id in ledger else None
        recorded = found.typed(ApprovalQuestion).data if found else None
        if recorded is not None and asks(recorded) != asks(question):
            raise Unasked("the recorded run asked it about something else")
        answers = self._answers.get((workflow_id, question.id))
        if answers:
            return answers.pop(0)
        if recorded is not None and recorded.status == "timed_out":
            return None
        if recorded is not None:
            raise Unasked("the recorded run got no answer to it")
        if ledger is not None:
            raise Unasked("the recorded run did not ask it")
        raise Unasked("the recording has no answer to it")

    def once(self, run_id: str, activity_id: str) -> bool:
        """True the first time an activity of a run asks (not on its retries)."""
        if (run_id, activity_id) in self._counted:
            return False
        self._counted.add((run_id, activity_id))
        return True


def asks(question: ApprovalQuestion) -> dict[str, Any]:
    """What a question asks: all of it but how it was answered."""
    return question.model_dump(mode="json", exclude={"status", "answer"})


def book_of(recording: Recording, capture: Capture, asked: Callable[[LLMRequest], str]) -> Book:
    """The recording's model calls, each with what it sent (its context as the replay
    read it) and what the current code sent in its place; `asked(request)` is the model
    the evaluation's worker asks for a request."""
    prompts: dict[str, str] = {}
    calls: list[RecordedCall] = []
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for one in recording.activities:
        if one.activity_type != MODEL_ACTIVITY or not one.args:
            continue
        where = (one.workflow_id, one.activity_id)
        seen = capture.seen(*where, counts[where])
        counts[where] += 1
        request = with_prompts(LLMRequest.model_validate(one.args[0]), prompts)
        response = LLMResponse.model_validate(one.result) if one.completed else None
        call = RecordedCall(*where, one.summary, request, response)
        context = seen.recorded if seen else without_context(request)
        if context is not None:
            call.key = request_key(request, context)
            call.recorded = RequestView.of(request, context, call.recorded_model)
        if seen is not None:
            call.replayed = RequestView.of(seen.request, seen.context, asked(seen.request))
        calls.append(call)
    return Book(recording, capture, calls, other_answers(recording))


def without_context(request: LLMRequest) -> ResolvedContext | None:
    """The empty context of a request that names none; None for one that does (its
    texts are only known where the replay read them)."""
    conversation = request.conversation is not None and request.conversation.count > 0
    if conversation or any(message.references() for message in request.messages):
        return None
    return ResolvedContext(texts=tuple(() for _ in request.messages), turns=None)


def other_answers(recording: Recording) -> dict[str, list[Any]]:
    """The recorded results of the activities other than the model's, by
    `activity_key` (type and input), in order."""
    answers: dict[str, list[Any]] = defaultdict(list)
    for one in recording.activities:
        if one.activity_type not in (MODEL_ACTIVITY, *ALWAYS_LIVE) and one.completed:
            answers[activity_key(one.activity_type, one.args)].append(one.result)
    return dict(answers)


def model_requests(recording: Recording) -> dict[str, dict[str, list[LLMRequest]]]:
    """The recorded model requests of each run (by run id, then activity id, in order),
    their long texts written out (`with_prompts`): what `replay_runs` resolves."""
    prompts: dict[str, str] = {}
    found: dict[str, dict[str, list[LLMRequest]]] = {}
    for run in recording.runs:
        for one in run.activities:
            if one.activity_type == MODEL_ACTIVITY and one.args:
                request = with_prompts(LLMRequest.model_validate(one.args[0]), prompts)
                found.setdefault(run.run_id, {}).setdefault(one.activity_id, []).append(request)
    return found


def with_prompts(request: LLMRequest, prompts: dict[str, str]) -> LLMRequest:
    """`request` with each long message text it names (`content_from`, a `prompt:{hash}`
    artifact) written out as an earlier call of the run sent it; and its own long texts
    noted in `prompts` for the calls after it."""
    messages = []
    for message in request.messages:
        if message.content_from and message.content_from in prompts:
            message = message.model_copy(
                update={"content": prompts[message.content_from], "content_from": None}
            )
        elif message.content:
            prompts.setdefault(prompt_id(message.content), message.content)
        messages.append(message)
    return request.model_copy(update={"messages": messages})


def activity_key(activity_type: str, args: Sequence[Any]) -> str:
    return canonical([activity_type, list(args)])


class Books:
    """The books of the runs being evaluated, found by a workflow id of theirs."""

    def __init__(self, books: Iterable[Book]) -> None:
        self.books = list(books)
        self._by_id = {wid: book for book in self.books for wid in book.workflow_ids}

    def of(self, workflow_id: str) -> Book | None:
        """The book of the run (or child) `workflow_id`; a child the recording does not
        have belongs to the run whose id starts its id."""
        found = self._by_id.get(workflow_id)
        if found is not None:
            return found
        roots = [b for b in self.books if workflow_id.startswith(b.recording.first.workflow_id)]
        return max(roots, key=lambda b: len(b.recording.first.workflow_id), default=None)


class RecordedModel:
    """The eval worker's model activity and its recorded answers to the others."""

    def __init__(
        self, models: ModelActivities, books: Books, offline: bool, prices: Prices | None = None
    ) -> None:
        self.models = models
        self.books = books
        self.offline = offline
        # The recorded calls are logged at these prices too: what they would cost now.
        self.prices = prices

    @activity.defn(name=MODEL_ACTIVITY)
    async def request_model(self, request: LLMRequest) -> LLMResponse:
        info = activity.info()
        run_id = info.workflow_run_id or ""
        book = self.books.of(info.workflow_id)
        context = await self.models.resolve(request)
        model = self.models.model_for(request)
        same = book.same_call(info.workflow_id, run_id, info.activity_id) if book else None
        found = book.answer(request_key(request, context), model, same) if book else None
        entry = CallEval(
            workflow_id=info.workflow_id,
            activity_id=info.activity_id,
            summary=same.summary if same else "",
            answered="recording",
        )
        if found is not None and found.response is not None:
            usage = found.response.usage
            if self.prices is not None:
                usage = self.prices.priced(usage, found.response.model, model)
            self._log(book, run_id, entry.model_copy(update={"usage": usage}))
            return found.response
        reasons, because = self._why(same, RequestView.of(request, context, model))
        if book is not None and "upstream" in reasons and not because:
            because = [c for c in book.changed_before(info.workflow_id) if c != info.activity_id]
        entry = entry.model_copy(update={"reasons": reasons, "because": because})
        if self.offline:
            self._log(book, run_id, entry.model_copy(update={"answered": "not sent"}))
            if same is not None and same.response is not None:
                return same.response
            raise ApplicationError(
                f"a changed model request ({', '.join(reasons)}) is not sent offline",
                type=NOT_SENT,
                non_retryable=True,
            )
        self._log(book, run_id, entry.model_copy(update={"answered": "model"}))
        response = await self.models.answer(request, context)
        self._log(
            book, run_id, entry.model_copy(update={"answered": "model", "usage": response.usage})
        )
        return response

    @staticmethod
    def _why(same: RecordedCall | None, new: RequestView) -> tuple[list[Reason], list[str]]:
        """Why `new` got no recorded answer (see `why_changed`): `unrecorded` when the
        same call's context could not be read again, or it has no answer."""
        if same is not None and same.recorded is None:
            return ["unrecorded"], []
        reasons, because = why_changed(
            same.recorded if same else None, same.replayed if same else None, new
        )
        return reasons or ["unrecorded"], because

    def _log(self, book: Book | None, run_id: str, entry: CallEval) -> None:
        if book is not None:
            book.log[run_id, entry.activity_id] = entry

    @activity.defn(dynamic=True)
    async def recorded_activity(self, args: Sequence[RawValue]) -> Any:
        """Any other activity, answered by its type and input from the recording."""
        info = activity.info()
        book = self.books.of(info.workflow_id)
        converter = activity.payload_converter()
        values = [converter.from_payload(arg.payload) for arg in args]
        found = book.activities.get(activity_key(info.activity_type, values)) if book else None
        first = book.once(info.workflow_run_id or "", info.activity_id) if book else False
        if found:
            if first and book is not None:
                book.tools.replayed += 1
            return found[0] if len(found) == 1 else found.pop(0)
        if first and book is not None:
            book.tools.missing += 1
        raise ApplicationError(
            f"{info.activity_type} with this input is not in the recording "
            f"({one_line(canonical(values))[:120]}); --live-tools runs it",
            type=NOT_RECORDED,
            non_retryable=True,
        )
