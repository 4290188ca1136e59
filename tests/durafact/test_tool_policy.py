"""The tool approval policy, pure: rule order, globs, argument predicates, the argument
hash that binds a remembered answer, and the answers a tool question takes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from durafact._core.approval import ApprovalAnswer, ApprovalQuestion, validate_answer
from durafact._core.tool_policy import (
    DEFAULT_ALLOW,
    DEFAULT_ASK,
    PolicyRule,
    RememberedDecision,
    ToolPolicy,
    arguments_hash,
    parse_predicate,
    remembered_for,
    travelling,
)
from durafact._recipes.react import ReActInput


def policy(*rules: tuple[str, str, str | None]) -> ToolPolicy:
    return ToolPolicy(rules=[PolicyRule(action=a, tool=t, when=w) for a, t, w in rules])


def test_the_first_matching_rule_decides_and_says_which_it_was() -> None:
    rules = policy(
        ("deny", "notes__delete_note", 'name == "groceries"'),
        ("allow", "notes__*", None),
        ("ask", "notes__delete_note", None),
    )
    assert rules.decide("notes__delete_note", {"name": "groceries"}, True).model_dump() == {
        "action": "deny",
        "rule": 'rule 1: deny notes__delete_note when name == "groceries"',
    }
    # Rule 3 would ask, but rule 2 comes first.
    assert rules.decide("notes__delete_note", {"name": "todo"}, True).rule == (
        "rule 2: allow notes__*"
    )


def test_no_rule_matching_asks_before_a_destructive_tool_only() -> None:
    rules = policy(("deny", "notes__*", None))
    assert rules.decide("delete_file", {}, True).model_dump() == {
        "action": "ask",
        "rule": DEFAULT_ASK,
    }
    assert rules.decide("calculator", {}, False).model_dump() == {
        "action": "allow",
        "rule": DEFAULT_ALLOW,
    }


def test_a_glob_matches_by_pattern_and_case() -> None:
    rules = policy(("ask", "notes__*", None), ("deny", "?rop_*", None))
    assert rules.decide("notes__list", {}, False).action == "ask"
    assert rules.decide("Notes__list", {}, False).action == "allow"
    assert rules.decide("drop_table", {}, False).action == "deny"
    assert rules.decide("xdrop_table", {}, False).action == "allow"


@pytest.mark.parametrize(
    ("when", "arguments", "matches"),
    [
        ("amount <= 100", {"amount": 100}, True),
        ("amount <= 100", {"amount": 100.5}, False),
        ("amount < 100", {"amount": -3}, True),
        ("amount > 1e3", {"amount": 1001}, True),
        ("amount >= 100", {"amount": "500"}, False),  # a string is not a number
        ("amount == 1", {"amount": True}, False),  # nor is a boolean
        ('path startswith "/tmp/"', {"path": "/tmp/x"}, True),
        ('path startswith "/tmp/"', {"path": "/etc/tmp/x"}, False),
        ('path endswith ".log"', {"path": "/var/a.log"}, True),
        ('name contains "grocer"', {"name": "my groceries"}, True),
        ('tags contains "urgent"', {"tags": ["a", "urgent"]}, True),
        ('tags contains "urgent"', {"tags": ["a"]}, False),
        ('name != "groceries"', {"name": "todo"}, True),
        ('name != "groceries"', {}, False),  # a missing argument never matches
        ("amount <= 100", {}, False),
        ("amount <= 100", "raw text arguments", False),
        ("force == true", {"force": True}, True),
        ("owner == null", {"owner": None}, True),
        ('target.host == "db1"', {"target": {"host": "db1"}}, True),
        ('target.host == "db1"', {"target": "db1"}, False),
        ('amount <= 100 and currency == "EUR"', {"amount": 5, "currency": "EUR"}, True),
        ('amount <= 100 and currency == "EUR"', {"amount": 5, "currency": "USD"}, False),
        ('note == "say \\"hi\\""', {"note": 'say "hi"'}, True),
    ],
)
def test_argument_predicates(when: str, arguments: dict | str, matches: bool) -> None:
    assert PolicyRule(action="deny", tool="*", when=when).matches("t", arguments) is matches


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        ("amount <=", "expected NAME OP VALUE"),
        ("amount is 100", "'is' is not an operator"),
        ("amount <= hundred", "'hundred' is not a value"),
        ("100 <= amount", "expected an argument name, not '100'"),
        ("__import__('os').system('x')", "cannot read"),
        ("amount <= 1 or x == 2", "expected `and` or the end, not 'or'"),
        ("   ", "the predicate is empty"),
    ],
)
def test_a_bad_predicate_is_refused_when_the_input_is_read(when: str, problem: str) -> None:
    with pytest.raises(ValidationError, match="tool_policy") as refused:
        ReActInput(
            question="q",
            tool_policy={"rules": [{"action": "deny", "tool": "delete_file", "when": when}]},
        )
    assert problem in str(refused.value)


def test_a_bad_action_or_tool_is_refused_when_the_input_is_read() -> None:
    with pytest.raises(ValidationError, match="'allow', 'deny' or 'ask'"):
        ToolPolicy.model_validate({"rules": [{"action": "maybe", "tool": "x"}]})
    with pytest.raises(ValidationError, match="a name or a glob without spaces"):
        ToolPolicy.model_validate({"rules": [{"action": "deny", "tool": " x"}]})


def test_the_predicate_grammar_reads_literals_as_json() -> None:
    (comparison,) = parse_predicate('path startswith "/tmp/"')
    assert (comparison.path, comparison.op, comparison.value) == (("path",), "startswith", "/tmp/")


def test_the_argument_hash_ignores_key_order_and_sees_every_value() -> None:
    one = arguments_hash({"path": "/tmp/a", "force": True, "opts": {"x": 1, "y": [1, 2]}})
    same = arguments_hash({"opts": {"y": [1, 2], "x": 1}, "force": True, "path": "/tmp/a"})
    assert one == same and len(one) == 16
    assert arguments_hash({"path": "/tmp/b", "force": True, "opts": {"x": 1, "y": [1, 2]}}) != one
    assert arguments_hash({"path": "/tmp/a", "force": True, "opts": {"x": 1, "y": [2, 1]}}) != one
    assert arguments_hash({"path": "/tmp/a"}) != arguments_hash({"path": "/tmp/a", "force": 1})


def decision(
    scope: str, tool: str = "delete_file", approved: bool = True, day: int = 1, **arguments: object
) -> RememberedDecision:
    return RememberedDecision(
        scope=scope,
        tool=tool,
        arguments_hash=arguments_hash(arguments) if scope == "call" else None,
        approved=approved,
        by="ops",
        at=datetime(2026, 12, day, tzinfo=UTC),
        question_id="approval:tool-q:1",
    )


def test_a_decision_bound_to_arguments_never_covers_other_arguments() -> None:
    groceries = decision("call", name="groceries")
    assert groceries.id == f"approval-rule:delete_file:call:{arguments_hash({'name': 'groceries'})}"
    assert remembered_for([groceries], "delete_file", {"name": "groceries"}) == groceries
    assert remembered_for([groceries], "delete_file", {"name": "*"}) is None
    assert remembered_for([groceries], "delete_note", {"name": "groceries"}) is None
    whole = decision("tool")
    assert whole.id == "approval-rule:delete_file:tool"
    assert remembered_for([groceries, whole], "delete_file", {"name": "*"}) == whole
    assert travelling([groceries, whole, decision("chat")]) == [groceries, decision("chat")]


@pytest.mark.parametrize("approved", [True, False])
def test_of_the_decisions_that_cover_a_call_the_most_recent_settles_it(approved: bool) -> None:
    """A person's latest word stands, whatever its scope: a call approved on the 1st
    and the whole tool rejected on the 2nd rejects that call; the other way round too."""
    call = decision("call", approved=approved, day=1, name="groceries")
    tool = decision("tool", approved=not approved, day=2)
    for held in ([call, tool], [tool, call]):
        assert remembered_for(held, "delete_file", {"name": "groceries"}) == tool
    later_call = decision("call", approved=approved, day=3, name="groceries")
    assert remembered_for([tool, later_call], "delete_file", {"name": "groceries"}) == later_call
    # Made at the same moment (one workflow task): the one held last.
    same_time = decision("tool", approved=not approved, day=1)
    assert remembered_for([call, same_time], "delete_file", {"name": "groceries"}) == same_time
    assert remembered_for([same_time, call], "delete_file", {"name": "groceries"}) == call


def test_without_arguments_a_policy_says_when_its_decision_would_depend_on_them() -> None:
    """The gate binds a call's arguments only when something judges them: a predicate
    rule that names the tool before any rule without one, or a question."""
    rules = policy(
        ("allow", "read_*", None),
        ("deny", "pay", "amount > 100"),
        ("ask", "pay", None),
        ("deny", "drop_*", None),
    )
    assert rules.decide("pay", None, False) is None
    assert rules.decide("read_file", None, False).action == "allow"
    assert rules.decide("drop_table", None, False).action == "deny"
    assert rules.decide("delete_file", None, True).action == "ask"
    assert rules.decide("pay", {"amount": 5.0}, False).rule == "rule 3: ask pay"


def test_a_call_decision_needs_its_hash_and_only_it_has_one() -> None:
    with pytest.raises(ValidationError, match="arguments_hash"):
        RememberedDecision.model_validate({**decision("tool").model_dump(), "scope": "call"})
    with pytest.raises(ValidationError, match="arguments_hash"):
        RememberedDecision.model_validate({**decision("call").model_dump(), "scope": "tool"})


def tool_question(**fields: object) -> ApprovalQuestion:
    return ApprovalQuestion(id="approval:tool-q:1", thread="tool:q", n=1, text="Run?", **fields)


def test_remember_is_taken_on_tool_questions_only_and_in_their_scopes() -> None:
    asked = tool_question(rule=DEFAULT_ASK, remember=["call", "tool"])
    answer = ApprovalAnswer(question_id=asked.id, approved=True, remember="call")
    assert validate_answer([asked], answer) == asked
    with pytest.raises(ValueError, match="remembers call or tool, not chat"):
        validate_answer([asked], answer.model_copy(update={"remember": "chat"}))
    budget = ApprovalQuestion(id="approval:budget:1", thread="budget", n=1, text="More?")
    with pytest.raises(ValueError, match="not a tool approval: remember is taken on tool"):
        validate_answer([budget], answer.model_copy(update={"question_id": budget.id}))
