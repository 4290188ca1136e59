"""A scripted answer model for AnswerFlowWorkflow: questions with sources, and a model
that answers (or fails to ground, or reviews) them on cue. Shared by the answer-flow
tests, the starter tests, the history recorder and the bench."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from durafact._recipes.answer_flow import Question
from durafact.testing import Call

SOURCES = {
    "q1": "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "q2": "Kraków was the capital of Poland until 1596, when the court moved to Warsaw.",
    "q3": "Tea in a wide cup cools faster because more of its surface meets the air.",
    "q4": "The Vistula is the longest river in Poland, about 1,047 kilometres long.",
}
QUESTIONS = {
    "q1": "When was the Eiffel Tower completed?",
    "q2": "Until when was Kraków the capital of Poland?",
    "q3": "Why does tea cool faster in a wide cup?",
    "q4": "How long is the Vistula?",
}
CONTEXT_LINE = re.compile(r"^\[(question|answer|review):(.+?)\] (.*)$", re.MULTILINE)


def questions(*ids: str, **sources: str | None) -> list[Question]:
    """Questions by id; a keyword overrides one's source (None: unavailable)."""
    return [
        Question(id=i, question=QUESTIONS.get(i, f"Question {i}?"), source=SOURCES.get(i))
        for i in ids
    ] + [
        Question(id=i, question=QUESTIONS.get(i, f"Question {i}?"), source=s)
        for i, s in sources.items()
    ]


def context_of(call: Call, kind: str) -> dict[str, dict]:
    """The artifacts of one kind the model was shown as context, by the id after `kind:`."""
    return {m[2]: json.loads(m[3]) for m in CONTEXT_LINE.finditer(call.text) if m[1] == kind}


def round_of(call: Call) -> int:
    return int(call.activity_id.rsplit(":", 1)[-1])


def answerer(
    ungrounded: dict[str, int] | None = None,
    review_fails: dict[str, int] | None = None,
    unreviewed: Iterable[str] = (),
) -> Callable[[Call], dict]:
    """A model that answers each question it is shown with a verbatim quote of its source,
    except item i before round `ungrounded[i]` (a quote the source never says); whose
    review passes every answer except item i before round `review_fails[i]`, and leaves
    out the items in `unreviewed`."""
    ungrounded, review_fails, skip = ungrounded or {}, review_fails or {}, set(unreviewed)

    def reply(call: Call) -> dict:
        r = round_of(call)
        shown = context_of(call, "question")
        if call.schema_name == "BatchAnswers":
            answers = []
            for i, q in shown.items():
                quote = " ".join(q["source"].split()[:6])
                if r < ungrounded.get(i, 0):
                    quote = "as everybody knows from school"
                answers.append({"item_id": i, "answer": f"from {i}: {quote}", "quote": quote})
            return {"answers": answers}
        if call.schema_name == "Verdicts":
            return {
                "verdicts": [
                    {
                        "item_id": i,
                        "status": "failed" if r < review_fails.get(i, 0) else "passed",
                        "reason": f"round {r} verdict on {i}",
                    }
                    for i in shown
                    if i not in skip
                ]
            }
        raise AssertionError(f"unexpected call {call.activity_id}")

    return reply
