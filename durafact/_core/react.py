"""The pure parts of a ReAct tool loop: the text protocol, observation policies, loops.

The text protocol is the seed's contract. A model reply either asks for one tool

    Thought: I need the product first.
    Action: calculator
    Action Input: {"expression": "17 * 23"}
    PAUSE

and then gets `Observation: ...` as the next message, or ends the run with

    Thought: I now know the answer.
    Final Answer: 391

`parse_reply` reads what real models emit, not only the ideal: labels in any case
and with extra whitespace, in markdown bold (`**Action:**`) or as bullets and
headings, `Action_Input`, the input inside a code fence or backticks, spread over
several lines, followed by `PAUSE` on the same line, and a tool name written as a
call (`Action: calculator(2 + 2)`). The reply is cut at the first `Observation:`
line: anything after it is the model inventing the tool's answer because the stop
sequence was missed, so an Action followed by an invented Observation and a Final
Answer is the Action. A reply that has neither an Action nor a Final Answer, both,
an empty Final Answer, or an Action Input without an Action is a
`FormatViolation` with a correction message for the model. An Action without an
Action Input calls the tool with no arguments (`{}`).

Arguments. A JSON object is the arguments object as it is. Anything else (plain
text, a quoted JSON string, a number, a list) is kept as the raw text; a JSON
string is unquoted first. `bind_arguments` then turns raw text into the arguments
of a tool with exactly one parameter (`calculator` + `2 + 2` ->
`{"expression": "2 + 2"}`); for any other tool, and for text that looks like a
broken object (`{'a': 1}`), the raw text goes to the tool activity, which answers
with an `InvalidArguments` observation the model can correct.

Observations pass through a policy before the model sees them:
`truncate_observation` keeps the first N characters and says so,
"[truncated: N of M characters]". A loop is the same failing call (the same tool
with the same arguments, failing) `limit` times in a row: `is_looping`.

The records a run keeps of its tools and calls (`ToolList`, `Observation`,
`ToolCallRecord`) are here too: the loop (durafact/_recipes/react.py) and what carries it
into the next run (durafact/_recipes/react_long.py) both use them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from durafact._core.tools import SkippedTool, ToolCall, ToolSpec, parse_arguments

# --- the text protocol ------------------------------------------------------------------


class ReActAction(BaseModel):
    """The reply asks for one tool call."""

    kind: Literal["action"] = "action"
    thought: str = ""
    tool: str
    arguments: dict[str, Any] | str = Field(
        default_factory=dict,
        description="A JSON object as it is; otherwise the raw input text (see bind_arguments).",
    )


class ReActFinal(BaseModel):
    """The reply ends the run with an answer."""

    kind: Literal["final"] = "final"
    thought: str = ""
    answer: str


class FormatViolation(BaseModel):
    """The reply breaks the protocol; `correction` is what the model is told next."""

    kind: Literal["violation"] = "violation"
    problem: Literal["no_action_or_answer", "action_and_answer", "empty_answer", "input_only"]
    correction: str


ParsedReply = ReActAction | ReActFinal | FormatViolation

OBSERVATION = "Observation:"
# The stop sequence of the text protocol: the model halts where the tool's answer goes.
STOP = [OBSERVATION]

_LABELS = {
    "thought": r"thoughts?",
    "input": r"action[ \t_-]*input",
    "action": r"action",
    "final": r"final[ \t_-]*answer",
    "observation": r"observation",
}
_LABEL_ALTERNATIVES = "|".join(f"(?P<{k}>{v})" for k, v in _LABELS.items())
# Markdown emphasis around a label, with the colon inside or outside it.
_EMPHASIS = re.compile(
    rf"(\*\*|__|\*|_)\s*((?:{'|'.join(_LABELS.values())}))\s*(:?)\s*\1\s*(:?)",
    re.IGNORECASE,
)
# A label at the start of a line, after optional bullets, heading marks or a number.
_LABEL = re.compile(
    rf"^[ \t]*(?:[-*>#]+[ \t]*|\d+[.)][ \t]*)?(?:{_LABEL_ALTERNATIVES})[ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)
_PAUSE_LINE = re.compile(r"^[ \t]*\**PAUSE\**[ \t]*\.?[ \t]*$", re.MULTILINE | re.IGNORECASE)
# Only in capitals at the end of an input line: "... pause" may be part of a text input.
_TRAILING_PAUSE = re.compile(r"\s*\**PAUSE\**\s*\.?\s*$")
_FENCE = re.compile(r"^```[\w+-]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)
_CALL_FORM = re.compile(r"^([A-Za-z0-9_-]+)\s*[\(\[](.*)[\)\]]$", re.DOTALL)
_NO_ACTION = {"none", "n/a", "na", "no action", "nothing", "null", "-"}

FORMAT_REMINDER = (
    "Reply in exactly one of these two forms.\n"
    "To use a tool:\n"
    "Thought: what you need to find out and why\n"
    "Action: the tool's name{tool_names}\n"
    'Action Input: the arguments as a JSON object, e.g. {{"name": "value"}}\n'
    "PAUSE\n"
    "When you know the answer:\n"
    "Thought: why you can answer now\n"
    "Final Answer: the answer to the question"
)
CORRECTIONS = {
    "no_action_or_answer": "Your reply has neither an Action nor a Final Answer.",
    "action_and_answer": (
        "Your reply has both an Action and a Final Answer. Do one thing per reply: call one "
        "tool and wait for its Observation, or give the Final Answer once you know it."
    ),
    "empty_answer": "Your Final Answer is empty.",
    "input_only": "Your reply has an Action Input but no Action naming the tool.",
}


def correction_message(problem: str, tools: Sequence[str] = ()) -> str:
    """What a model that broke the format is told: the problem and the two valid forms."""
    names = f" (one of: {', '.join(tools)})" if tools else ""
    return f"{CORRECTIONS[problem]}\n{FORMAT_REMINDER.format(tool_names=names)}"


def _normalize(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    # `**Action:**`, `**Action**:`, `*Final Answer*:` -> `Action:`
    return _EMPHASIS.sub(lambda m: f"{m.group(2)}:", text)


def _sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The text before the first label, and (label, content) in reply order, cut at the
    first Observation."""
    matches = list(_LABEL.finditer(text))
    preamble = text[: matches[0].start()] if matches else text
    sections: list[tuple[str, str]] = []
    for i, match in enumerate(matches):
        label = match.lastgroup or ""
        if label == "observation":
            break  # what follows is the model inventing the tool's answer
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        sections.append((label, text[match.end() : end]))
    return preamble, sections


def _clean(content: str) -> str:
    content = _PAUSE_LINE.sub("", content).strip()
    return _TRAILING_PAUSE.sub("", content).strip()


def _unwrap(text: str) -> str:
    """The input without a code fence or backticks around it."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        return fenced.group(1).strip()
    if len(text) >= 2 and text[0] == text[-1] == "`":
        return text.strip("`").strip()
    return text


def _tool_name(content: str) -> tuple[str, str | None]:
    """The tool's name, and the input when it was written as a call (`calc(2 + 2)`)."""
    first = content.strip().splitlines()[0].strip() if content.strip() else ""
    first = first.strip("`*'\" \t.")
    call = _CALL_FORM.match(first)
    if call:
        return call.group(1), call.group(2)
    return first, None


def parse_reply(text: str, tools: Sequence[str] = ()) -> ParsedReply:
    """Read one model reply of the text protocol; `tools` only names them in corrections."""
    preamble, sections = _sections(_normalize(text))
    found: dict[str, list[str]] = {}
    for label, content in sections:
        found.setdefault(label, []).append(_clean(content))
    thought = "\n".join(found.get("thought", [])).strip() or _clean(preamble)

    action, inline_input = None, None
    for content in found.get("action", []):
        name, inline = _tool_name(content)
        if name and name.lower() not in _NO_ACTION:
            action, inline_input = name, inline
            break
    answers = found.get("final", [])

    def violation(problem: str) -> FormatViolation:
        return FormatViolation(problem=problem, correction=correction_message(problem, tools))  # type: ignore[arg-type]

    if action and answers:
        return violation("action_and_answer")
    if answers:
        answer = answers[0].strip()
        return ReActFinal(thought=thought, answer=answer) if answer else violation("empty_answer")
    if action:
        raw = found["input"][0] if found.get("input") else (inline_input or "")
        arguments = parse_arguments(_unwrap(raw), unquote=True)
        return ReActAction(thought=thought, tool=action, arguments=arguments)
    if found.get("input"):
        return violation("input_only")
    return violation("no_action_or_answer")


def bind_arguments(arguments: dict[str, Any] | str, spec: ToolSpec | None) -> dict[str, Any] | str:
    """Raw input text as the arguments of a tool with exactly one parameter; anything
    else unchanged (the tool activity judges it)."""
    if isinstance(arguments, dict) or spec is None:
        return arguments
    properties = spec.parameters.get("properties") or {}
    if len(properties) == 1 and not arguments.lstrip().startswith(("{", "[")):
        return {next(iter(properties)): arguments}
    return arguments


def render_tools(specs: Sequence[ToolSpec]) -> str:
    """The tool list of a text-protocol prompt: name, description, arguments."""
    lines = []
    for spec in specs:
        properties = spec.parameters.get("properties") or {}
        required = set(spec.parameters.get("required") or [])
        args = ", ".join(
            f'"{name}": {_type_name(schema)}{"" if name in required else " (optional)"}'
            for name, schema in properties.items()
        )
        gate = " Needs a person's approval before it runs." if spec.destructive else ""
        description = spec.description.strip() or "(no description)"
        lines.append(f"- {spec.name}: {description}{gate}\n  Action Input: {{{args}}}")
    return "\n".join(lines) if lines else "(no tools)"


def _type_name(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = " | ".join(map(str, kind))
    if kind is None and "anyOf" in schema:
        kind = " | ".join(_type_name(s) for s in schema["anyOf"])
    described = f" ({schema['description']})" if schema.get("description") else ""
    return f"{kind or 'any'}{described}"


TEXT_PROTOCOL = (
    "You answer the question by thinking step by step and using tools. Work in a loop of "
    "Thought, Action, PAUSE and Observation: write a Thought, then an Action naming one tool "
    "and its Action Input, then PAUSE and stop. You will get the tool's Observation in the "
    "next message. Repeat until you know the answer, then write the Final Answer.\n\n"
    "Never write an Observation yourself, and never write an Action and a Final Answer in "
    "the same reply.\n\n" + FORMAT_REMINDER.format(tool_names="") + "\n\n"
    "The tools you can use are listed below."
)


_INVENTED = re.compile(
    r"^[ \t]*(?:[-*>#]+[ \t]*)?(?:\*\*|__|\*)?[ \t]*observation[ \t]*(?:\*\*|__|\*)?[ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)


def reply_before_observation(text: str) -> str:
    """The reply up to an Observation the model wrote itself: what the conversation keeps,
    so the model is never shown its invented tool answer as if it were real."""
    invented = _INVENTED.search(text)
    return text[: invented.start()].rstrip() if invented else text


def observation_message(text: str) -> str:
    """An observation as the text protocol's next user message."""
    return f"{OBSERVATION} {text}"


# --- observation policy -----------------------------------------------------------------


def truncation_note(shown: int, total: int) -> str:
    return f"[truncated: {shown} of {total} characters]"


def truncate_observation(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and a note that says so."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n{truncation_note(limit, len(text))}"


def summary_note(total: int) -> str:
    return f"[summarized from {total} characters]"


# --- observations and loops --------------------------------------------------------------


class Observation(BaseModel):
    """The full result of one tool call (`obs:{run}:{turn}:{k}`): what the model is
    shown passes through the observation policy, this keeps every character."""

    call_id: str
    tool: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    ok: bool
    error_type: str | None = None
    text: str


def failed_observation(call: ToolCall, error_type: str, text: str) -> Observation:
    """The observation of `call` when it failed, or did not run: why, for the model."""
    return Observation(
        call_id=call.id,
        tool=call.name,
        arguments=call.arguments,
        ok=False,
        error_type=error_type,
        text=text,
    )


class ToolCallRecord(BaseModel):
    """One tool call of the run, without its content (that is `obs:...`)."""

    id: str = Field(description="The activity id, `tool:{run}:{turn}:{k}`.")
    tool: str
    ok: bool
    error_type: str | None = None


class ToolList(BaseModel):
    """The artifact `tools:{run}`: the specs, their text-protocol listing, and the
    tools the worker skipped."""

    specs: list[ToolSpec]
    text: str
    skipped: list[SkippedTool] = Field(default_factory=list)


def call_key(tool: str, arguments: dict[str, Any] | str) -> str:
    """One string per distinct call: the same tool with equal arguments, in any key order."""
    return json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), default=str)


def failing_streak(calls: Sequence[Observation]) -> int:
    """How many times the last call failed in a row with the same tool and arguments."""
    if not calls or calls[-1].ok:
        return 0
    key = call_key(calls[-1].tool, calls[-1].arguments)
    streak = 0
    for call in reversed(calls):
        if call.ok or call_key(call.tool, call.arguments) != key:
            break
        streak += 1
    return streak


def is_looping(calls: Sequence[Observation], limit: int) -> bool:
    """The same failing call `limit` times in a row (the seed's hallucination spiral)."""
    return limit > 0 and failing_streak(calls) >= limit


def unknown_tool_message(name: str, tools: Sequence[str]) -> str:
    return f"{name!r} is not a valid tool, try one of [{', '.join(tools)}]"


def not_approved_message(reason: str) -> str:
    return f"not approved: {reason or 'no reason given'}"
