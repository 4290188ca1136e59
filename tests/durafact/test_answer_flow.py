"""The AnswerFlow engine's semantics (DESIGN.md section 3), with deterministic in-test
hooks and no LLM.

Values are `"{item id}#{attempt}"`, so a check can decide from the value alone in
which generate attempt an item becomes right, and every test can tell which round
produced what.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from durafact._core.answer_flow import (
    BUDGET,
    CHECK_ERROR,
    FALLBACK_ERROR,
    MISSING_VALUE,
    REVIEW_UNRESOLVED,
    SOURCE_UNAVAILABLE,
    AnswerBatchError,
    AnswerCheck,
    AnswerFlowDefinitionError,
    AnswerFlowEngine,
    AnswerIssue,
    AnswerItem,
    AnswerResult,
    RecoveryResult,
    define_answer_flow,
    validate_answer_batch,
)

PASSED = AnswerCheck(status="passed")


def wrong(value: str) -> AnswerIssue:
    return AnswerIssue(code="WRONG", message=f"{value} is wrong")


def items(*ids: str, unavailable: tuple[str, ...] = ()) -> list[AnswerItem]:
    """One item per id, answering the input `q-{id}`."""
    return [
        AnswerItem(
            id=i,
            input_ids=[f"q-{i}"],
            source_status="unavailable" if i in unavailable else "ready",
            data={"source": f"source of {i}"},
        )
        for i in ids
    ]


def inputs(*ids: str) -> list[str]:
    return [f"q-{i}" for i in ids]


class Generator:
    """generate that answers `{id}#{attempt}`, records every call, and can leave values out."""

    def __init__(self, omit: set[tuple[str, int]] | None = None, log: list[str] | None = None):
        self.calls: list[dict[str, Any]] = []
        self.attempts: Counter[str] = Counter()
        self.omit = omit or set()
        self.log = log

    async def __call__(self, ctx, batch, *, repairs, previous):
        if self.log is not None:
            self.log.append("generate")
        self.calls.append(
            {"ids": [i.id for i in batch], "repairs": repairs, "previous": previous, "ctx": ctx}
        )
        values = {}
        for item in batch:
            attempt = self.attempts[item.id]
            self.attempts[item.id] += 1
            if (item.id, attempt) not in self.omit:
                values[item.id] = f"{item.id}#{attempt}"
        return values


def attempt_of(value: str) -> int:
    return int(value.split("#")[1])


def passes_from(**first_good: int):
    """check: an item passes from its `first_good` attempt on (default 0: at once)."""

    def check(item: AnswerItem, value: str) -> AnswerCheck:
        if attempt_of(value) >= first_good.get(item.id, 0):
            return PASSED
        return AnswerCheck(status="failed", issues=[wrong(value)])

    return check


NEVER = 10**6


def not_handled(item, issues):
    return RecoveryResult(handled=False)


def define(**overrides: Any) -> AnswerFlowEngine:
    hooks: dict[str, Any] = {
        "max_items": 10,
        "max_repairs": 1,
        "review_policy": "off",
        "can_invoke": lambda ctx: True,
        "generate": Generator(),
        "check": passes_from(),
        "fallback": not_handled,
    }
    hooks.update(overrides)
    return define_answer_flow(**hooks)


async def run(
    flow: AnswerFlowEngine, *ids: str, unavailable: tuple[str, ...] = (), ctx: Any = None
):
    return await flow.run(inputs(*ids), items(*ids, unavailable=unavailable), ctx)


def by_id(results: list[AnswerResult]) -> dict[str, AnswerResult]:
    return {r.item_id: r for r in results}


def codes(result: AnswerResult) -> list[str]:
    return [issue.code for issue in result.issues]


class Budget:
    """can_invoke that says yes `allowed` times, then no; logs each question."""

    def __init__(self, allowed: int, log: list[str] | None = None):
        self.allowed = allowed
        self.calls = 0
        self.log = log

    def __call__(self, ctx) -> bool:
        self.calls += 1
        if self.log is not None:
            self.log.append("can_invoke")
        return self.calls <= self.allowed


def reviewer(verdicts: dict[str, AnswerCheck] | None = None, calls: list | None = None, log=None):
    """review that passes everything except the given verdicts, recording each batch."""

    async def review(ctx, pairs):
        if log is not None:
            log.append("review")
        if calls is not None:
            calls.append([(item.id, value) for item, value in pairs])
        return {item.id: (verdicts or {}).get(item.id, PASSED) for item, _ in pairs}

    return review


# --- rounds ---------------------------------------------------------------------------


async def test_everything_passing_takes_one_round_and_is_accepted_with_its_value():
    generate = Generator()
    results = await run(define(generate=generate, max_repairs=2), "a", "b")
    assert [(r.item_id, r.status, r.value, r.rounds) for r in results] == [
        ("a", "accepted", "a#0", 1),
        ("b", "accepted", "b#0", 1),
    ]
    assert all(r.issues == [] and r.checks == [PASSED] for r in results)
    assert len(generate.calls) == 1


@pytest.mark.parametrize("max_repairs", [0, 1, 2])
async def test_never_fixed_item_gets_max_repairs_plus_one_rounds(max_repairs: int):
    generate = Generator()
    flow = define(generate=generate, max_repairs=max_repairs, check=passes_from(a=NEVER))
    [result] = await run(flow, "a")
    assert result.rounds == max_repairs + 1
    assert len(generate.calls) == max_repairs + 1
    assert result.status == "blocked"
    assert result.issues == [wrong(f"a#{max_repairs}")]
    assert len(result.checks) == max_repairs + 1


async def test_max_repairs_0_sends_a_failure_straight_to_fallback():
    seen = []

    def fallback(item, issues):
        seen.append((item.id, issues))
        return RecoveryResult(handled=True, value="sorry")

    flow = define(max_repairs=0, check=passes_from(a=1), fallback=fallback)
    [result] = await run(flow, "a")
    assert (result.status, result.value, result.rounds) == ("fallback", "sorry", 1)
    assert seen == [("a", [wrong("a#0")])]


async def test_item_fixed_in_round_1_has_two_rounds_and_is_accepted():
    flow = define(max_repairs=2, check=passes_from(b=1))
    results = by_id(await run(flow, "a", "b"))
    assert (results["a"].rounds, results["a"].value) == (1, "a#0")
    assert (results["b"].status, results["b"].rounds, results["b"].value) == ("accepted", 2, "b#1")
    assert [c.status for c in results["b"].checks] == ["failed", "passed"]
    assert results["b"].issues == []


async def test_rounds_stop_as_soon_as_nothing_fails():
    generate = Generator()
    await run(define(generate=generate, max_repairs=5, check=passes_from(a=1)), "a")
    assert len(generate.calls) == 2


async def test_passing_items_are_never_regenerated():
    generate = Generator()
    flow = define(generate=generate, max_repairs=3, check=passes_from(b=1, c=2))
    results = by_id(await run(flow, "a", "b", "c"))
    assert [call["ids"] for call in generate.calls] == [["a", "b", "c"], ["b", "c"], ["c"]]
    assert {i: r.rounds for i, r in results.items()} == {"a": 1, "b": 2, "c": 3}
    assert {i: r.value for i, r in results.items()} == {"a": "a#0", "b": "b#1", "c": "c#2"}


async def test_round_0_gets_no_repairs_and_no_previous():
    generate = Generator()
    await run(define(generate=generate, check=passes_from(a=1)), "a")
    assert (generate.calls[0]["repairs"], generate.calls[0]["previous"]) == (None, None)


async def test_repairs_and_previous_carry_exactly_the_failing_items_issues_and_values():
    generate = Generator(omit={("c", 0)})
    flow = define(generate=generate, max_repairs=2, check=passes_from(b=2))
    await run(flow, "a", "b", "c")
    first_repair = generate.calls[1]
    assert first_repair["ids"] == ["b", "c"]
    assert first_repair["repairs"] == {
        "b": [wrong("b#0")],
        "c": [
            AnswerIssue(code=MISSING_VALUE, message="generate returned no value for 'c'"),
        ],
    }
    assert first_repair["previous"] == {"b": "b#0"}  # c had no value to reject
    second_repair = generate.calls[2]
    assert second_repair["repairs"] == {"b": [wrong("b#1")]}
    assert second_repair["previous"] == {"b": "b#1"}


async def test_generate_receives_the_run_context():
    generate = Generator()
    ctx = object()
    await run(define(generate=generate), "a", ctx=ctx)
    assert generate.calls[0]["ctx"] is ctx


async def test_a_sync_generate_and_review_are_accepted():
    def generate(ctx, batch, *, repairs, previous):
        return {item.id: "fine" for item in batch}

    def review(ctx, pairs):
        return {item.id: PASSED for item, _ in pairs}

    flow = define(
        generate=generate, check=lambda item, value: PASSED, review=review, review_policy="optional"
    )
    [result] = await run(flow, "a")
    assert (result.status, result.value, len(result.checks)) == ("accepted", "fine", 2)


# --- missing values and check errors ---------------------------------------------------


async def test_missing_value_fails_with_MISSING_VALUE():
    flow = define(generate=Generator(omit={("a", 0)}), max_repairs=0)
    [result] = await run(flow, "a")
    assert result.status == "blocked"
    assert codes(result) == [MISSING_VALUE]
    assert result.checks == [
        AnswerCheck(status="failed", issues=result.issues),
    ]


async def test_missing_value_is_repaired_in_the_next_round():
    flow = define(generate=Generator(omit={("a", 0)}), max_repairs=1)
    [result] = await run(flow, "a")
    assert (result.status, result.value, result.rounds) == ("accepted", "a#1", 2)


async def test_extra_values_from_generate_are_ignored():
    async def generate(ctx, batch, *, repairs, previous):
        return {"a": "a#0", "stranger": "x#0"}

    [result] = await run(define(generate=generate), "a")
    assert (result.status, result.value) == ("accepted", "a#0")


async def test_check_that_raises_fails_with_CHECK_ERROR_naming_the_exception():
    def check(item, value):
        raise RuntimeError("grader exploded")

    [result] = await run(define(check=check, max_repairs=0), "a")
    assert result.status == "blocked"
    assert codes(result) == [CHECK_ERROR]
    assert "RuntimeError" in result.issues[0].message
    assert "grader exploded" in result.issues[0].message


async def test_check_error_is_repaired_like_any_failure():
    def check(item, value):
        if attempt_of(value) == 0:
            raise KeyError("first")
        return PASSED

    generate = Generator()
    [result] = await run(define(check=check, generate=generate), "a")
    assert (result.status, result.rounds) == ("accepted", 2)
    assert [i.code for i in generate.calls[1]["repairs"]["a"]] == [CHECK_ERROR]


async def test_check_runs_only_on_values_that_are_present():
    checked = []

    def check(item, value):
        checked.append((item.id, value))
        return PASSED

    await run(define(check=check, generate=Generator(omit={("b", 0)}), max_repairs=0), "a", "b")
    assert checked == [("a", "a#0")]


async def test_async_check_is_a_CHECK_ERROR():
    async def check(item, value):
        return PASSED

    [result] = await run(define(check=check, max_repairs=0), "a")
    assert codes(result) == [CHECK_ERROR]
    assert "synchronous" in result.issues[0].message


async def test_check_returning_an_invalid_verdict_is_a_CHECK_ERROR():
    [result] = await run(define(check=lambda item, value: {"status": "maybe"}, max_repairs=0), "a")
    assert codes(result) == [CHECK_ERROR]


async def test_check_returning_a_dict_is_read_as_an_AnswerCheck():
    [result] = await run(define(check=lambda item, value: {"status": "passed"}), "a")
    assert result.status == "accepted"
    assert result.checks == [PASSED]


async def test_generate_returning_no_mapping_is_a_type_error():
    async def generate(ctx, batch, *, repairs, previous):
        return None

    with pytest.raises(TypeError, match="generate must return a mapping"):
        await run(define(generate=generate), "a")


async def test_generate_that_raises_propagates():
    async def generate(ctx, batch, *, repairs, previous):
        raise ConnectionError("model down")

    with pytest.raises(ConnectionError, match="model down"):
        await run(define(generate=generate), "a")


# --- review policies ---------------------------------------------------------------


async def test_off_policy_never_reviews_even_when_a_review_is_given():
    calls: list = []
    flow = define(review_policy="off", review=reviewer({"a": AnswerCheck(status="failed")}, calls))
    [result] = await run(flow, "a")
    assert calls == []
    assert (result.status, result.checks) == ("accepted", [PASSED])


async def test_optional_policy_is_the_default_and_without_review_accepts_the_local_verdict():
    flow = define_answer_flow(
        max_items=3,
        max_repairs=0,
        can_invoke=lambda ctx: True,
        generate=Generator(),
        check=passes_from(),
        fallback=not_handled,
    )
    assert flow.review_policy == "optional"
    [result] = await run(flow, "a")
    assert (result.status, result.checks) == ("accepted", [PASSED])


async def test_optional_review_sees_only_items_that_passed_the_local_check():
    calls: list = []
    flow = define(review_policy="optional", review=reviewer(calls=calls), check=passes_from(b=1))
    results = by_id(await run(flow, "a", "b"))
    assert calls == [[("a", "a#0")], [("b", "b#1")]]
    assert [c.status for c in results["b"].checks] == ["failed", "passed", "passed"]
    assert all(r.status == "accepted" for r in results.values())


async def test_optional_review_failure_sends_the_item_to_repair_with_the_reviews_issues():
    complaint = AnswerIssue(code="UNSUPPORTED", message="claim not in source")
    calls: list = []

    async def review(ctx, pairs):
        calls.append([item.id for item, _ in pairs])
        return {
            item.id: AnswerCheck(status="failed", issues=[complaint]) if value == "a#0" else PASSED
            for item, value in pairs
        }

    generate = Generator()
    flow = define(review_policy="optional", review=review, generate=generate)
    results = by_id(await run(flow, "a", "b"))
    assert generate.calls[1]["ids"] == ["a"]
    assert generate.calls[1]["repairs"] == {"a": [complaint]}
    assert generate.calls[1]["previous"] == {"a": "a#0"}
    assert calls == [["a", "b"], ["a"]]
    a = results["a"]
    assert (a.status, a.value, a.rounds) == ("accepted", "a#1", 2)
    assert [c.status for c in a.checks] == ["passed", "failed", "passed", "passed"]
    assert a.checks[1].issues == [complaint]


async def test_optional_review_that_raises_leaves_the_local_verdict_standing():
    async def review(ctx, pairs):
        raise TimeoutError("judge timed out")

    generate = Generator()
    flow = define(review_policy="optional", review=review, generate=generate, max_repairs=0)
    results = by_id(await run(flow, "a", "b"))
    assert len(generate.calls) == 1
    for result in results.values():
        assert (result.status, result.checks) == ("accepted", [PASSED])
        assert codes(result) == [REVIEW_UNRESOLVED]
        assert "judge timed out" in result.issues[0].message


async def test_optional_review_that_leaves_an_item_out_keeps_its_local_verdict():
    async def review(ctx, pairs):
        return {"a": AnswerCheck(status="passed")}

    flow = define(review_policy="optional", review=review)
    results = by_id(await run(flow, "a", "b"))
    assert (results["a"].status, results["a"].issues, len(results["a"].checks)) == (
        "accepted",
        [],
        2,
    )
    assert (results["b"].status, results["b"].value) == ("accepted", "b#0")
    assert codes(results["b"]) == [REVIEW_UNRESOLVED]
    assert results["b"].checks == [PASSED]


async def test_optional_review_does_not_rescue_a_local_failure():
    calls: list = []
    flow = define(
        review_policy="optional", review=reviewer(calls=calls), check=passes_from(a=NEVER)
    )
    [result] = await run(flow, "a")
    assert calls == []
    assert result.status == "blocked"


async def test_review_is_not_called_when_no_item_passed_locally():
    budget = Budget(allowed=100)
    calls: list = []
    flow = define(
        review_policy="required",
        review=reviewer(calls=calls),
        check=passes_from(a=NEVER),
        can_invoke=budget,
    )
    await run(flow, "a")
    assert calls == []
    assert budget.calls == 2  # the two generate calls only


async def test_required_review_failure_sends_the_item_to_repair():
    generate = Generator()
    flow = define(
        review_policy="required",
        review=reviewer({"a": AnswerCheck(status="failed", issues=[wrong("a#0")])}),
        generate=generate,
    )
    results = by_id(await run(flow, "a", "b"))
    assert generate.calls[1]["ids"] == ["a"]
    # the scripted reviewer keeps failing "a" on every attempt, so it ends in fallback
    assert (results["a"].status, results["a"].rounds) == ("blocked", 2)
    assert results["a"].issues == [wrong("a#0")]
    assert (results["b"].status, results["b"].rounds) == ("accepted", 1)


async def test_required_review_failure_that_gets_fixed_is_accepted():
    async def review(ctx, pairs):
        return {
            item.id: PASSED if attempt_of(value) >= 1 else AnswerCheck(status="failed")
            for item, value in pairs
        }

    flow = define(review_policy="required", review=review)
    [result] = await run(flow, "a")
    assert (result.status, result.value, result.rounds) == ("accepted", "a#1", 2)


async def test_required_review_that_raises_blocks_without_fallback_or_repair():
    fallbacks = []

    def fallback(item, issues):
        fallbacks.append(item.id)
        return RecoveryResult(handled=True, value="rescued")

    async def review(ctx, pairs):
        raise RuntimeError("judge unavailable")

    generate = Generator()
    flow = define(
        review_policy="required", review=review, fallback=fallback, generate=generate, max_repairs=2
    )
    results = by_id(await run(flow, "a", "b"))
    assert len(generate.calls) == 1
    assert fallbacks == []
    for result in results.values():
        assert (result.status, result.value, result.rounds) == ("blocked", None, 1)
        assert codes(result) == [REVIEW_UNRESOLVED]
        assert "judge unavailable" in result.issues[0].message
        assert result.checks == [PASSED]


async def test_required_review_that_leaves_an_item_out_blocks_only_that_item():
    async def review(ctx, pairs):
        return {"a": PASSED}

    generate = Generator()
    flow = define(review_policy="required", review=review, generate=generate, max_repairs=2)
    results = by_id(await run(flow, "a", "b"))
    assert len(generate.calls) == 1
    assert (results["a"].status, results["a"].issues) == ("accepted", [])
    assert (results["b"].status, results["b"].value) == ("blocked", None)
    assert codes(results["b"]) == [REVIEW_UNRESOLVED]
    assert "did not cover" in results["b"].issues[0].message


async def test_required_review_returning_an_invalid_verdict_blocks_the_item():
    async def review(ctx, pairs):
        return {"a": {"status": "unsure"}}

    [result] = await run(define(review_policy="required", review=review), "a")
    assert (result.status, codes(result)) == ("blocked", [REVIEW_UNRESOLVED])


async def test_review_verdicts_as_dicts_are_read_as_AnswerChecks():
    async def review(ctx, pairs):
        return {item.id: {"status": "passed", "issues": []} for item, _ in pairs}

    [result] = await run(define(review_policy="required", review=review), "a")
    assert (result.status, result.checks) == ("accepted", [PASSED, PASSED])


async def test_review_receives_the_run_context():
    seen = []

    async def review(ctx, pairs):
        seen.append(ctx)
        return {item.id: PASSED for item, _ in pairs}

    await run(define(review_policy="required", review=review), "a", ctx="the-ctx")
    assert seen == ["the-ctx"]


# --- budget ------------------------------------------------------------------------


async def test_budget_refused_before_round_0_generates_nothing_and_falls_back():
    generate = Generator()
    seen = []

    def fallback(item, issues):
        seen.append((item.id, [i.code for i in issues]))
        return RecoveryResult(handled=True, value=f"no budget for {item.id}")

    flow = define(can_invoke=lambda ctx: False, generate=generate, fallback=fallback)
    results = by_id(await run(flow, "a", "b", "c", unavailable=("c",)))
    assert generate.calls == []
    assert seen == [("c", [SOURCE_UNAVAILABLE]), ("a", [BUDGET]), ("b", [BUDGET])]
    assert (results["a"].status, results["a"].value, results["a"].rounds) == (
        "fallback",
        "no budget for a",
        0,
    )
    assert codes(results["c"]) == [SOURCE_UNAVAILABLE]


async def test_budget_refused_before_a_repair_round_stops_generation():
    generate = Generator()
    flow = define(
        can_invoke=Budget(allowed=1), generate=generate, max_repairs=3, check=passes_from(b=1)
    )
    results = by_id(await run(flow, "a", "b"))
    assert len(generate.calls) == 1
    assert (results["a"].status, results["a"].issues) == ("accepted", [])
    assert results["b"].status == "blocked"
    assert codes(results["b"]) == ["WRONG", BUDGET]
    assert results["b"].rounds == 1


async def test_budget_refused_before_review_under_required_falls_back():
    calls: list = []
    generate = Generator()
    flow = define(
        review_policy="required",
        review=reviewer(calls=calls),
        can_invoke=Budget(allowed=1),
        generate=generate,
        check=passes_from(b=1),
        fallback=lambda item, issues: RecoveryResult(handled=True, value="later"),
    )
    results = by_id(await run(flow, "a", "b"))
    assert calls == []
    assert len(generate.calls) == 1
    assert (results["a"].status, results["a"].value) == ("fallback", "later")
    assert codes(results["a"]) == [BUDGET]
    assert codes(results["b"]) == ["WRONG", BUDGET]  # would have been repaired


async def test_budget_refused_before_review_under_optional_keeps_local_verdict_with_a_note():
    calls: list = []
    generate = Generator()
    flow = define(
        review_policy="optional",
        review=reviewer(calls=calls),
        can_invoke=Budget(allowed=1),
        generate=generate,
        check=passes_from(b=1),
    )
    results = by_id(await run(flow, "a", "b"))
    assert calls == []
    assert len(generate.calls) == 1  # the budget stop is final: b is not repaired
    assert (results["a"].status, results["a"].value) == ("accepted", "a#0")
    assert codes(results["a"]) == [BUDGET]
    assert (results["b"].status, codes(results["b"])) == ("blocked", ["WRONG", BUDGET])


async def test_budget_refused_before_the_last_rounds_review_leaves_failures_simply_exhausted():
    flow = define(
        review_policy="optional",
        review=reviewer(),
        can_invoke=Budget(allowed=1),
        max_repairs=0,
        check=passes_from(b=1),
    )
    results = by_id(await run(flow, "a", "b"))
    assert codes(results["b"]) == ["WRONG"]


async def test_can_invoke_is_asked_before_every_generate_and_review_call():
    log: list[str] = []
    budget = Budget(allowed=100, log=log)
    flow = define(
        review_policy="required",
        review=reviewer({"a": AnswerCheck(status="failed")}, log=log),
        can_invoke=budget,
        generate=Generator(log=log),
        max_repairs=2,
    )
    await run(flow, "a", "b")
    assert log == ["can_invoke", "generate", "can_invoke", "review"] * 3
    assert budget.calls == 6


async def test_can_invoke_receives_the_run_context():
    seen = []

    def can_invoke(ctx):
        seen.append(ctx)
        return True

    await run(define(can_invoke=can_invoke), "a", ctx={"budget": 5})
    assert seen == [{"budget": 5}]


async def test_can_invoke_must_answer_a_bool():
    with pytest.raises(TypeError, match="can_invoke must return a bool"):
        await run(define(can_invoke=lambda ctx: 1), "a")


async def test_an_async_can_invoke_is_refused():
    async def can_invoke(ctx):
        return True

    with pytest.raises(TypeError, match="can_invoke must return a bool synchronously"):
        await run(define(can_invoke=can_invoke), "a")


# --- unavailable sources and fallback ----------------------------------------------


async def test_unavailable_items_are_never_generated_and_go_to_fallback():
    generate = Generator()
    seen = []

    def fallback(item, issues):
        seen.append((item.id, issues))
        return RecoveryResult(handled=True, value="not enough information")

    flow = define(generate=generate, fallback=fallback)
    results = by_id(await run(flow, "a", "b", unavailable=("b",)))
    assert [call["ids"] for call in generate.calls] == [["a"]]
    assert [(item_id, [i.code for i in issues]) for item_id, issues in seen] == [
        ("b", [SOURCE_UNAVAILABLE])
    ]
    b = results["b"]
    assert (b.status, b.value, b.rounds, b.checks) == ("fallback", "not enough information", 0, [])
    assert codes(b) == [SOURCE_UNAVAILABLE]


async def test_all_unavailable_calls_neither_can_invoke_nor_generate():
    budget = Budget(allowed=100)
    generate = Generator()
    results = await run(define(can_invoke=budget, generate=generate), "a", unavailable=("a",))
    assert (budget.calls, generate.calls) == (0, [])
    assert results[0].status == "blocked"


async def test_fallback_receives_the_last_issues_of_an_exhausted_item():
    seen = []

    def fallback(item, issues):
        seen.append(issues)
        return RecoveryResult(handled=False)

    await run(define(max_repairs=2, check=passes_from(a=NEVER), fallback=fallback), "a")
    assert seen == [[wrong("a#2")]]


async def test_handled_fallback_gives_status_fallback_and_its_value():
    flow = define(
        max_repairs=0,
        check=passes_from(a=NEVER),
        fallback=lambda item, issues: RecoveryResult(handled=True, value="safe answer"),
    )
    [result] = await run(flow, "a")
    assert (result.status, result.value, result.issues) == (
        "fallback",
        "safe answer",
        [wrong("a#0")],
    )


async def test_fallback_not_handled_blocks_the_item_without_a_value():
    [result] = await run(define(max_repairs=0, check=passes_from(a=NEVER)), "a")
    assert (result.status, result.value, result.issues) == ("blocked", None, [wrong("a#0")])


async def test_fallback_that_raises_blocks_with_FALLBACK_ERROR():
    def fallback(item, issues):
        raise ValueError("no template")

    [result] = await run(define(max_repairs=0, check=passes_from(a=NEVER), fallback=fallback), "a")
    assert (result.status, result.value) == ("blocked", None)
    assert codes(result) == ["WRONG", FALLBACK_ERROR]
    assert "no template" in result.issues[-1].message


async def test_fallback_handled_without_a_value_blocks_with_FALLBACK_ERROR():
    flow = define(
        max_repairs=0,
        check=passes_from(a=NEVER),
        fallback=lambda item, issues: RecoveryResult(handled=True),
    )
    [result] = await run(flow, "a")
    assert (result.status, codes(result)) == ("blocked", ["WRONG", FALLBACK_ERROR])


async def test_async_fallback_blocks_with_FALLBACK_ERROR():
    async def fallback(item, issues):
        return RecoveryResult(handled=True, value="x")

    [result] = await run(define(max_repairs=0, check=passes_from(a=NEVER), fallback=fallback), "a")
    assert (result.status, codes(result)) == ("blocked", ["WRONG", FALLBACK_ERROR])


async def test_fallback_returning_a_dict_is_read_as_a_RecoveryResult():
    flow = define(
        max_repairs=0,
        check=passes_from(a=NEVER),
        fallback=lambda item, issues: {"handled": True, "value": "ok"},
    )
    [result] = await run(flow, "a")
    assert (result.status, result.value) == ("fallback", "ok")


async def test_passing_items_never_reach_fallback():
    seen = []

    def fallback(item, issues):
        seen.append(item.id)
        return RecoveryResult(handled=False)

    await run(define(fallback=fallback, check=passes_from(b=NEVER)), "a", "b")
    assert seen == ["b"]


# --- results -----------------------------------------------------------------------


async def test_results_follow_item_order_with_exactly_one_result_per_item():
    flow = define(
        max_repairs=1,
        check=passes_from(b=1, d=NEVER),
        fallback=lambda item, issues: RecoveryResult(handled=item.id == "c", value="fb"),
    )
    results = await run(flow, "d", "c", "b", "a", unavailable=("c",))
    assert [(r.item_id, r.status) for r in results] == [
        ("d", "blocked"),
        ("c", "fallback"),
        ("b", "accepted"),
        ("a", "accepted"),
    ]
    assert [r.input_ids for r in results] == [["q-d"], ["q-c"], ["q-b"], ["q-a"]]


async def test_an_item_answering_several_inputs_keeps_them_in_its_result():
    batch = [AnswerItem(id="both", input_ids=["q1", "q2"])]
    [result] = await define().run(["q1", "q2"], batch)
    assert (result.item_id, result.input_ids, result.status) == ("both", ["q1", "q2"], "accepted")


async def test_run_accepts_items_as_plain_dicts():
    [result] = await define().run(["q"], [{"id": "a", "input_ids": ["q"]}])
    assert (result.item_id, result.status, result.value) == ("a", "accepted", "a#0")


async def test_an_invalid_batch_is_refused_before_any_hook_runs():
    budget = Budget(allowed=100)
    generate = Generator()
    with pytest.raises(AnswerBatchError, match="covered by no item"):
        await define(can_invoke=budget, generate=generate).run(["q-a", "q-b"], items("a"))
    assert (budget.calls, generate.calls) == (0, [])


async def test_run_refuses_a_batch_larger_than_the_flows_max_items():
    with pytest.raises(AnswerBatchError, match="more than max_items=2"):
        await run(define(max_items=2), "a", "b", "c")


# --- observe -----------------------------------------------------------------------


async def test_observe_sees_each_stage_in_order_with_a_snapshot_of_every_item():
    stages: list[tuple[str, list[tuple[str, str, Any, int]]]] = []

    def observe(ctx, stage_id, results):
        stages.append((stage_id, [(r.item_id, r.status, r.value, r.rounds) for r in results]))

    flow = define(max_repairs=2, check=passes_from(b=1), observe=observe)
    await run(flow, "a", "b", "c", unavailable=("c",))
    a, c = ("a", "accepted", "a#0", 1), ("c", "blocked", None, 0)  # settled from the start
    assert stages == [
        ("generate:0", [a, ("b", "blocked", None, 1), c]),  # b in flight: provisional
        ("repair:1", [a, ("b", "accepted", "b#1", 2), c]),
        ("final", [a, ("b", "accepted", "b#1", 2), c]),
    ]


async def test_observe_sees_in_flight_items_with_their_current_issues():
    snapshots: dict[str, AnswerResult] = {}

    def observe(ctx, stage_id, results):
        snapshots[stage_id] = results[0]

    flow = define(max_repairs=1, check=passes_from(a=NEVER), observe=observe)
    await run(flow, "a")
    assert list(snapshots) == ["generate:0", "repair:1", "final"]
    assert snapshots["generate:0"].issues == [wrong("a#0")]
    assert snapshots["repair:1"].issues == [wrong("a#1")]
    assert len(snapshots["repair:1"].checks) == 2


async def test_observe_sees_only_final_when_nothing_was_generated():
    stages = []
    flow = define(
        can_invoke=lambda ctx: False, observe=lambda ctx, stage, results: stages.append(stage)
    )
    await run(flow, "a")
    assert stages == ["final"]


async def test_observe_sees_no_stage_for_a_round_the_budget_refused():
    stages = []
    flow = define(
        can_invoke=Budget(allowed=1),
        check=passes_from(a=NEVER),
        max_repairs=3,
        observe=lambda ctx, stage, results: stages.append(stage),
    )
    await run(flow, "a")
    assert stages == ["generate:0", "final"]


async def test_observe_that_raises_does_not_change_the_result_and_is_logged(caplog):
    def observe(ctx, stage_id, results):
        raise RuntimeError("dashboard down")

    expected = await run(define(check=passes_from(b=1)), "a", "b")
    with caplog.at_level(logging.WARNING, logger="durafact._core.answer_flow"):
        results = await run(define(check=passes_from(b=1), observe=observe), "a", "b")
    assert results == expected
    failures = [r for r in caplog.records if r.name == "durafact._core.answer_flow"]
    assert [r.args for r in failures] == [("generate:0",), ("repair:1",), ("final",)]
    assert "dashboard down" in caplog.text


async def test_async_observe_that_raises_does_not_change_the_result():
    stages = []

    async def observe(ctx, stage_id, results):
        stages.append(stage_id)
        raise RuntimeError("async dashboard down")

    expected = await run(define(check=passes_from(b=1)), "a", "b")
    results = await run(define(check=passes_from(b=1), observe=observe), "a", "b")
    assert results == expected
    assert stages == ["generate:0", "repair:1", "final"]


async def test_observe_that_mutates_its_snapshot_does_not_change_the_result():
    def observe(ctx, stage_id, results):
        for result in results:
            result.status = "blocked"
            result.value = "tampered"
            result.checks.clear()

    expected = await run(define(check=passes_from(b=1)), "a", "b")
    assert await run(define(check=passes_from(b=1), observe=observe), "a", "b") == expected


# --- validate_answer_batch ---------------------------------------------------------


def test_an_unavailable_item_is_how_an_input_without_a_source_is_covered():
    answered = AnswerItem(id="define", input_ids=["q1"])
    unavailable = AnswerItem(id="run", input_ids=["q2"], source_status="unavailable")
    validate_answer_batch(["q1", "q2"], [answered, unavailable], 4)
    with pytest.raises(AnswerBatchError, match="input id 'q2' is covered by no item"):
        validate_answer_batch(["q1", "q2"], [answered], 4)


async def test_an_input_may_be_split_across_several_items():
    batch = [AnswerItem(id="x", input_ids=["q1"]), AnswerItem(id="y", input_ids=["q1", "q2"])]
    validate_answer_batch(["q1", "q2"], batch, 2)
    results = await define(max_items=2).run(["q1", "q2"], batch)
    assert [(r.item_id, r.input_ids, r.status) for r in results] == [
        ("x", ["q1"], "accepted"),
        ("y", ["q1", "q2"], "accepted"),
    ]


async def test_items_from_a_json_file_validate_and_reach_generate_with_their_data():
    seen = []

    async def generate(ctx, batch, *, repairs, previous):
        seen.extend((item.id, item.data) for item in batch)
        return {item.id: f"{item.id}#0" for item in batch}

    loaded = [{"id": "a", "input_ids": ["q1"], "data": {"source": "text"}}]
    validate_answer_batch(["q1"], loaded, 1)
    [result] = await define(generate=generate).run(["q1"], loaded)
    assert seen == [("a", {"source": "text"})]
    assert (result.item_id, result.status) == ("a", "accepted")


ONE = [AnswerItem(id="a", input_ids=["q1"])]


@pytest.mark.parametrize(
    ("input_ids", "batch", "max_items", "match"),
    [
        (["q1"], ONE, 0, r"max_items must be a positive integer, got 0"),
        (["q1"], ONE, -3, r"max_items must be a positive integer, got -3"),
        (["q1"], ONE, 1.0, r"max_items must be a positive integer, got 1\.0"),
        (["q1"], ONE, True, r"max_items must be a positive integer, got True"),
        (["q1"], ONE, "4", r"max_items must be a positive integer, got '4'"),
        ([], ONE, 4, r"the request has no input ids"),
        ("q1", ONE, 4, r"input_ids must be a list of strings, got str"),
        (["q1", 2], ONE, 4, r"input id 2 is not a string"),
        (["q1", "q1"], ONE, 4, r"input id 'q1' appears more than once in the request"),
        (["q1"], [], 4, r"the request has no items"),
        (["q1"], None, 4, r"items must be a list of AnswerItem, got NoneType"),
        (
            ["q1"],
            [AnswerItem(id=f"i{n}", input_ids=["q1"]) for n in range(3)],
            2,
            r"the request has 3 items, more than max_items=2",
        ),
        (["q1"], [{"id": "a"}], 4, r"item 0 is not a valid AnswerItem"),
        (
            ["q1", "q2"],
            [AnswerItem(id="a", input_ids=["q1"]), AnswerItem(id="a", input_ids=["q2"])],
            4,
            r"two items share the id 'a'",
        ),
        (
            ["q1"],
            [AnswerItem(id="a", input_ids=["q1"]), AnswerItem(id="empty", input_ids=[])],
            4,
            r"item 'empty' has no input ids",
        ),
        (
            ["q1"],
            [AnswerItem(id="a", input_ids=["q1", "q9"])],
            4,
            r"item 'a' names input id 'q9', which is not in the request",
        ),
        (
            ["q1"],
            [AnswerItem(id="a", input_ids=["q1", "q1"])],
            4,
            r"item 'a' names input id 'q1' twice",
        ),
        (
            ["q1", "q2", "q3"],
            [AnswerItem(id="a", input_ids=["q1"])],
            4,
            r"input id 'q2', 'q3' is covered by no item: every input needs an explicit item",
        ),
    ],
)
def test_validate_answer_batch_refuses_with_a_specific_message(input_ids, batch, max_items, match):
    with pytest.raises(AnswerBatchError, match=match):
        validate_answer_batch(input_ids, batch, max_items)


def test_a_bad_batch_can_be_caught_as_a_value_error_naming_the_problem():
    with pytest.raises(ValueError, match="two items share the id 'a'"):
        validate_answer_batch(["q1"], [ONE[0], ONE[0]], 4)


# --- definition --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"max_items": 0}, r"max_items must be a positive integer, got 0"),
        ({"max_items": -1}, r"max_items must be a positive integer, got -1"),
        ({"max_items": 2.5}, r"max_items must be a positive integer, got 2\.5"),
        ({"max_items": True}, r"max_items must be a positive integer, got True"),
        ({"max_repairs": -1}, r"max_repairs must be a non-negative integer, got -1"),
        ({"max_repairs": 1.0}, r"max_repairs must be a non-negative integer, got 1\.0"),
        ({"max_repairs": False}, r"max_repairs must be a non-negative integer, got False"),
        (
            {"review_policy": "always"},
            r"review_policy must be one of 'off', 'optional', 'required', got 'always'",
        ),
        ({"review_policy": "required"}, r"review_policy='required' needs a review hook"),
        ({"can_invoke": None}, r"can_invoke must be a callable, got None"),
        ({"generate": None}, r"generate must be a callable, got None"),
        ({"check": "check"}, r"check must be a callable, got 'check'"),
        ({"fallback": None}, r"fallback must be a callable, got None"),
        ({"review": 3}, r"review must be a callable or None, got 3"),
        ({"observe": "log"}, r"observe must be a callable or None, got 'log'"),
    ],
)
def test_define_answer_flow_refuses_an_invalid_definition(overrides, match):
    with pytest.raises(AnswerFlowDefinitionError, match=match):
        define(**overrides)


def test_a_bad_definition_can_be_caught_as_a_value_error_naming_the_problem():
    with pytest.raises(ValueError, match="max_repairs must be a non-negative integer"):
        define(max_repairs=-1)


async def test_a_defined_flow_answers_batch_after_batch():
    calls: list = []
    flow = define(review_policy="required", review=reviewer(calls=calls), max_items=2)
    first = await run(flow, "a", "b")
    second = await run(flow, "c")
    assert [(r.item_id, r.status, r.value) for r in first + second] == [
        ("a", "accepted", "a#0"),
        ("b", "accepted", "b#0"),
        ("c", "accepted", "c#0"),
    ]
    assert calls == [[("a", "a#0"), ("b", "b#0")], [("c", "c#0")]]  # each batch reviewed
