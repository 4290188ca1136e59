"""Tool approval policy: which tool calls run, which are refused, which ask a person.

A `ToolPolicy` is ordered rules, each `allow`, `deny` or `ask`, matched by the tool's
name or an fnmatch glob (`notes__*`) and optionally by an argument predicate in a
small grammar (parsed, never evaluated as code):

    amount <= 100
    path startswith "/tmp/" and force == false

A comparison is `NAME OP VALUE`: NAME an argument (`a.b` reaches into an object), OP
one of `== != < <= > >= startswith endswith contains`, VALUE a JSON literal (a
number, a "string", true, false, null); `and` joins comparisons. The first rule that
matches decides; no rule matching is the default: `ask` for a destructive tool,
`allow` otherwise.

Rules judge the call that will run: the arguments after the tool's own model parsed,
bound and validated them (coerced, defaults filled in), as JSON, the values the tool
function receives; never the text the model wrote. `{"amount": "1000"}` for a float
`amount` is judged as 1000.0, and arguments that do not validate run nothing (the
gate: durafact/_recipes/tool_gate.py). A comparison with a value of another type (`<` on a
string and a number) or a missing argument does not hold.

Remembered decisions. A person's answer to a tool question may say `remember`
(`ApprovalAnswer.remember`); the decision is then a `RememberedDecision`, the artifact
`approval-rule:{tool}:{scope}[:{hash}]`, and decides later matching calls without
asking. `call` is bound to the arguments by `arguments_hash` (the sha256 of the
canonical JSON of the validated arguments: `1`, `1.0` and `"1"` for a float are one
call), so it never covers other arguments; `tool` covers any arguments, for
the run it was made in; `chat` covers any arguments in a chat, across continue-as-new.
`call` and `chat` decisions travel (`travelling`): into later PlanReAct children, and
across a chat's continue-as-new. A tool loop that continues as new carries every
decision, `tool` too: its chain of runs is one run of the loop. When decisions
disagree, the most recent that covers the call settles it (`remembered_for`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from durafact._core.approval import RememberScope
from durafact._core.ids import approval_rule_id

PolicyAction = Literal["allow", "deny", "ask"]
DEFAULT_ASK = "default: ask before a destructive tool"
DEFAULT_ALLOW = "default: allow"

# --- argument predicates ----------------------------------------------------------------

_OPERATORS = ("==", "!=", "<=", ">=", "<", ">", "startswith", "endswith", "contains")
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<op>==|!=|<=|>=|<|>)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    )""",
    re.VERBOSE,
)
_LITERAL_WORDS = {"true": True, "false": False, "null": None}
_MISSING = object()


@dataclass(frozen=True)
class Comparison:
    """One `NAME OP VALUE` of a predicate."""

    path: tuple[str, ...]
    op: str
    value: Any

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        found = _lookup(arguments, self.path)
        if found is _MISSING:
            return False
        return _compare(found, self.op, self.value)


def parse_predicate(text: str) -> list[Comparison]:
    """The comparisons of `text` (all must hold), or a ValueError that says where it is wrong."""
    tokens = _tokens(text)
    if not tokens:
        raise ValueError("the predicate is empty")
    comparisons: list[Comparison] = []
    i = 0
    while True:
        if i + 3 > len(tokens):
            raise ValueError(f"{text!r}: expected NAME OP VALUE, e.g. amount <= 100")
        (kind, name), (op_kind, op), (value_kind, raw) = tokens[i : i + 3]
        if kind != "word" or name in _LITERAL_WORDS or name in _OPERATORS or name == "and":
            raise ValueError(f"{text!r}: expected an argument name, not {name!r}")
        if op not in _OPERATORS or op_kind not in ("op", "word"):
            raise ValueError(f"{text!r}: {op!r} is not an operator ({', '.join(_OPERATORS)})")
        comparisons.append(Comparison(tuple(name.split(".")), op, _literal(text, value_kind, raw)))
        i += 3
        if i == len(tokens):
            return comparisons
        if tokens[i] != ("word", "and"):
            raise ValueError(f"{text!r}: expected `and` or the end, not {tokens[i][1]!r}")
        i += 1


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while text[at:].strip():
        match = _TOKEN.match(text, at)
        if match is None:
            raise ValueError(f"{text!r}: cannot read {text[at:].strip()[:20]!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        at = match.end()
    return tokens


def _literal(text: str, kind: str, raw: str) -> Any:
    if kind in ("string", "number"):
        return json.loads(raw)
    if kind == "word" and raw in _LITERAL_WORDS:
        return _LITERAL_WORDS[raw]
    raise ValueError(
        f'{text!r}: {raw!r} is not a value (a number, a "quoted string", true, false, null)'
    )


def _lookup(arguments: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(arguments, dict) or key not in arguments:
            return _MISSING
        arguments = arguments[key]
    return arguments


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(found: Any, op: str, value: Any) -> bool:
    if op == "==":
        return found == value and _number(found) == _number(value)
    if op == "!=":
        return not _compare(found, "==", value)
    if op in ("<", "<=", ">", ">="):
        same = (_number(found) and _number(value)) or (
            isinstance(found, str) and isinstance(value, str)
        )
        if not same:
            return False
        return {"<": found < value, "<=": found <= value, ">": found > value, ">=": found >= value}[
            op
        ]
    if op == "contains":
        if isinstance(found, list):
            return value in found
        return isinstance(found, str) and isinstance(value, str) and value in found
    if not (isinstance(found, str) and isinstance(value, str)):
        return False
    return found.startswith(value) if op == "startswith" else found.endswith(value)


# --- rules ------------------------------------------------------------------------------


class PolicyRule(BaseModel):
    """One rule: what to do with a call of `tool` (a name or a glob) when `when` holds."""

    action: PolicyAction
    tool: str = Field(min_length=1, description="A tool name or an fnmatch glob: `notes__*`.")
    when: str | None = Field(
        default=None,
        description='An argument predicate: `amount <= 100`, `path startswith "/tmp/"`.',
    )

    @field_validator("tool")
    @classmethod
    def _tool(cls, tool: str) -> str:
        if not tool.strip() or tool != tool.strip():
            raise ValueError(f"a rule's tool is a name or a glob without spaces, not {tool!r}")
        return tool

    @field_validator("when")
    @classmethod
    def _when(cls, when: str | None) -> str | None:
        if when is not None:
            parse_predicate(when)
        return when

    def names(self, tool: str) -> bool:
        return fnmatch.fnmatchcase(tool, self.tool)

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        if not self.names(tool):
            return False
        return self.when is None or all(c.holds(arguments) for c in parse_predicate(self.when))

    @property
    def text(self) -> str:
        """The rule as people read it: `deny notes__* when path startswith "/etc/"`."""
        return f"{self.action} {self.tool}" + (f" when {self.when}" if self.when else "")


class PolicyDecision(BaseModel):
    """What the policy says of one call, and which rule said it."""

    action: PolicyAction
    rule: str


class RememberedDecision(BaseModel):
    """A person's answer that decides later calls: the artifact `approval-rule:...`."""

    scope: RememberScope
    tool: str
    arguments_hash: str | None = Field(
        default=None, description="For `call`: the hash of the arguments it covers."
    )
    approved: bool
    reason: str = ""
    by: str = Field(default="", description="Who answered.")
    at: datetime = Field(description="When the answer was taken (workflow time).")
    question_id: str = Field(description="The question it answered.")

    @model_validator(mode="after")
    def _bound(self) -> RememberedDecision:
        if (self.scope == "call") != (self.arguments_hash is not None):
            raise ValueError("a `call` decision has an arguments_hash, and only it")
        return self

    @property
    def id(self) -> str:
        return approval_rule_id(self.tool, self.scope, self.arguments_hash)

    @property
    def why(self) -> str:
        """The reason its answer gave; a rejection without one names its question."""
        return self.reason or ("" if self.approved else f"rejected in {self.question_id}")

    def covers(self, tool: str, arguments_hash: str) -> bool:
        if tool != self.tool:
            return False
        return self.scope != "call" or self.arguments_hash == arguments_hash


class ToolPolicy(BaseModel):
    """A run's rules for tool calls, and the decisions it starts with."""

    rules: list[PolicyRule] = Field(
        default_factory=list,
        description="In order; the first that matches decides. None matching: ask before a "
        "destructive tool, allow the others.",
    )
    remembered: list[RememberedDecision] = Field(
        default_factory=list,
        description="Decisions a person made earlier (a PlanReAct parent passes its own to "
        "each step's agent).",
    )

    def decide(
        self, tool: str, arguments: Mapping[str, Any] | None, destructive: bool
    ) -> PolicyDecision | None:
        """What the first matching rule says of a call, judged on `arguments` as the tool
        receives them (bound and validated: see durafact/_recipes/tool_gate.py). With
        `arguments=None`, None when the decision depends on them: a rule with a
        predicate names the tool before any rule without one does."""
        for n, rule in enumerate(self.rules, start=1):
            if arguments is None and rule.when is not None and rule.names(tool):
                return None
            if rule.matches(tool, arguments or {}):
                return PolicyDecision(action=rule.action, rule=f"rule {n}: {rule.text}")
        if destructive:
            return PolicyDecision(action="ask", rule=DEFAULT_ASK)
        return PolicyDecision(action="allow", rule=DEFAULT_ALLOW)


def canonical_json(value: Any) -> str:
    """One text per JSON value: sorted keys, no spaces, so equal arguments are equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def arguments_hash(arguments: Any) -> str:
    """What binds a `call` decision to its arguments: 16 hex digits of sha256."""
    return hashlib.sha256(canonical_json(arguments).encode()).hexdigest()[:16]


def remembered_for(
    decisions: Sequence[RememberedDecision], tool: str, arguments: Mapping[str, Any] | str
) -> RememberedDecision | None:
    """The decision that settles this call: of those that cover it, the most recent
    (the latest `at`; of two made at once, the one held last), whatever its scope. A
    person's latest word on a call stands: `pay` rejected for the whole run after
    `pay(5)` was approved rejects `pay(5)` too, and the other way round."""
    digest = arguments_hash(arguments)
    latest = None
    for decision in decisions:
        if decision.covers(tool, digest) and (latest is None or decision.at >= latest.at):
            latest = decision
    return latest


def travelling(decisions: Sequence[RememberedDecision]) -> list[RememberedDecision]:
    """The decisions that outlive the run they were made in (`tool` ones do not)."""
    return [d for d in decisions if d.scope != "tool"]


def denied_message(rule: str) -> str:
    return f"denied by policy: {rule}"
