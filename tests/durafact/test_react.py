"""The text protocol as real models write it, the observation policy and the loop guard."""

from __future__ import annotations

import pytest

from durafact._core.react import (
    FormatViolation,
    Observation,
    ReActAction,
    ReActFinal,
    bind_arguments,
    failing_streak,
    is_looping,
    parse_reply,
    render_tools,
    reply_before_observation,
    truncate_observation,
)
from durafact._core.tools import ToolSpec

CALCULATOR = ToolSpec(
    name="calculator",
    description="Evaluates arithmetic.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. 2 * (3 + 4)"}},
        "required": ["expression"],
    },
)
WEATHER = ToolSpec(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)


def action(reply: str) -> ReActAction:
    parsed = parse_reply(reply)
    assert isinstance(parsed, ReActAction), parsed
    return parsed


def violation(reply: str) -> FormatViolation:
    parsed = parse_reply(reply, tools=["calculator"])
    assert isinstance(parsed, FormatViolation), parsed
    return parsed


# --- actions ------------------------------------------------------------------------------


def test_the_seed_format_with_a_json_object_input() -> None:
    parsed = action(
        "Thought: I need to multiply first.\n"
        "Action: calculator\n"
        'Action Input: {"expression": "17 * 23"}\n'
        "PAUSE"
    )
    assert parsed.tool == "calculator"
    assert parsed.arguments == {"expression": "17 * 23"}
    assert parsed.thought == "I need to multiply first."


def test_labels_in_any_case_with_extra_whitespace() -> None:
    parsed = action(
        "  THOUGHT :   multiply\n\n   action:   calculator   \n"
        'ACTION INPUT :   {"expression":"2*3"}   \n   pause  \n'
    )
    assert (parsed.tool, parsed.arguments) == ("calculator", {"expression": "2*3"})


def test_markdown_bold_labels_bullets_and_headings() -> None:
    parsed = action(
        "**Thought:** I should look it up.\n"
        "**Action**: get_weather\n"
        '- **Action Input:** {"city": "Kraków"}\n'
        "**PAUSE**"
    )
    assert (parsed.tool, parsed.arguments) == ("get_weather", {"city": "Kraków"})
    assert parsed.thought == "I should look it up."
    heading = action('### Action: calculator\n### Action Input: {"expression": "1+1"}')
    assert heading.arguments == {"expression": "1+1"}


def test_input_in_a_json_code_fence_over_several_lines() -> None:
    parsed = action(
        "Thought: weather\nAction: get_weather\nAction Input:\n"
        '```json\n{\n  "city": "Gdańsk",\n  "unit": "C"\n}\n```\nPAUSE\n'
    )
    assert parsed.arguments == {"city": "Gdańsk", "unit": "C"}


def test_input_in_backticks_and_tool_name_in_backticks() -> None:
    parsed = action('Action: `calculator`\nAction Input: `{"expression": "9/3"}`')
    assert (parsed.tool, parsed.arguments) == ("calculator", {"expression": "9/3"})


def test_plain_text_input_is_kept_as_text() -> None:
    assert action("Action: calculator\nAction Input: 2 + 2 * 10").arguments == "2 + 2 * 10"
    assert action('Action: calculator\nAction Input: "2 + 2"').arguments == "2 + 2"
    assert action("Action: calculator\nAction Input: 42").arguments == "42"


def test_pause_on_the_input_line_is_not_part_of_the_input() -> None:
    parsed = action('Action: calculator\nAction Input: {"expression": "5-1"} PAUSE')
    assert parsed.arguments == {"expression": "5-1"}


def test_an_action_without_input_calls_with_no_arguments() -> None:
    parsed = action("Thought: what time is it?\nAction: current_time\nPAUSE")
    assert (parsed.tool, parsed.arguments) == ("current_time", {})


def test_a_tool_written_as_a_call_carries_its_input() -> None:
    assert action("Action: calculator(3 ** 2)").arguments == "3 ** 2"
    assert action('Action: get_weather[{"city": "Oslo"}]').arguments == {"city": "Oslo"}


def test_an_invented_observation_the_stop_sequence_missed_is_cut_off() -> None:
    parsed = parse_reply(
        "Thought: compute\nAction: calculator\n"
        'Action Input: {"expression": "6*7"}\n'
        "Observation: 42\nThought: I now know the answer\nFinal Answer: 42"
    )
    assert isinstance(parsed, ReActAction)
    assert parsed.arguments == {"expression": "6*7"}


def test_the_conversation_keeps_the_reply_without_the_invented_observation() -> None:
    reply = "Action: calculator\nAction Input: 6*7\n**Observation:** 42\nFinal Answer: 42"
    assert reply_before_observation(reply) == "Action: calculator\nAction Input: 6*7"
    assert reply_before_observation("Final Answer: 7") == "Final Answer: 7"


def test_single_quoted_python_dict_goes_to_the_tool_as_text() -> None:
    # The seed's example: not JSON, so the tool answers with an error the model can fix.
    parsed = action("Action: get_planet_mass\nAction Input: {'planet': 'Earth'}")
    assert parsed.arguments == "{'planet': 'Earth'}"


def test_text_before_any_label_counts_as_the_thought() -> None:
    parsed = action("I will use the calculator.\nAction: calculator\nAction Input: 1+1")
    assert parsed.thought == "I will use the calculator."


# --- final answers ----------------------------------------------------------------------


def test_a_final_answer_over_several_lines() -> None:
    parsed = parse_reply("Thought: I now know the answer\nFinal Answer: 391\nIt is 17 * 23.")
    assert isinstance(parsed, ReActFinal)
    assert parsed.answer == "391\nIt is 17 * 23."
    assert parsed.thought == "I now know the answer"


def test_bold_final_answer_and_an_action_of_none() -> None:
    parsed = parse_reply("**Thought**: done\n**Action**: None\n**Final Answer**: Paris")
    assert isinstance(parsed, ReActFinal) and parsed.answer == "Paris"


def test_final_answer_label_variants() -> None:
    for label in ("final answer:", "FINAL ANSWER:", "Final_Answer:", "  Final   Answer :"):
        parsed = parse_reply(f"{label} 7")
        assert isinstance(parsed, ReActFinal) and parsed.answer == "7", label


# --- violations -------------------------------------------------------------------------


def test_plain_prose_is_a_violation_with_the_format_and_tool_names() -> None:
    broken = violation("The answer is probably 391, but let me think more.")
    assert broken.problem == "no_action_or_answer"
    assert "Final Answer:" in broken.correction and "Action Input:" in broken.correction
    assert "calculator" in broken.correction


def test_an_action_and_a_final_answer_together_is_a_violation() -> None:
    broken = violation("Action: calculator\nAction Input: 1+1\nFinal Answer: 2")
    assert broken.problem == "action_and_answer"
    assert "both" in broken.correction


def test_an_empty_final_answer_is_a_violation() -> None:
    assert violation("Thought: hm\nFinal Answer:   \n").problem == "empty_answer"


def test_an_input_without_an_action_is_a_violation() -> None:
    assert violation('Thought: x\nAction Input: {"a": 1}').problem == "input_only"


def test_labels_mentioned_inside_a_sentence_do_not_count() -> None:
    assert violation("I would write Action: calculator, but no.").problem == ("no_action_or_answer")


# --- arguments --------------------------------------------------------------------------


def test_raw_text_binds_to_the_one_parameter_of_a_tool() -> None:
    assert bind_arguments("2 + 2", CALCULATOR) == {"expression": "2 + 2"}
    assert bind_arguments({"expression": "1"}, CALCULATOR) == {"expression": "1"}


def test_raw_text_stays_text_for_a_tool_with_several_parameters_or_a_broken_object() -> None:
    assert bind_arguments("Oslo", WEATHER) == "Oslo"
    assert bind_arguments("{'expression': '1'}", CALCULATOR) == "{'expression': '1'}"
    assert bind_arguments("anything", None) == "anything"


def test_rendered_tools_name_arguments_and_the_approval_gate() -> None:
    delete = ToolSpec(name="delete_file", description="Deletes a file.", destructive=True)
    text = render_tools([CALCULATOR, WEATHER, delete])
    assert '- calculator: Evaluates arithmetic.\n  Action Input: {"expression": string' in text
    assert '"unit": string (optional)' in text
    assert "delete_file: Deletes a file. Needs a person's approval" in text


# --- observation policy and loops -------------------------------------------------------


def test_a_long_observation_is_cut_with_a_note_saying_how_much() -> None:
    text = "x" * 5000
    shown = truncate_observation(text, 1000)
    assert shown.startswith("x" * 1000)
    assert shown.endswith("[truncated: 1000 of 5000 characters]")
    assert truncate_observation("short", 1000) == "short"
    assert truncate_observation("y" * 1000, 1000) == "y" * 1000


def obs(tool: str, arguments: dict | str, ok: bool) -> Observation:
    return Observation(call_id="c", tool=tool, arguments=arguments, ok=ok, text="")


@pytest.mark.parametrize(
    ("calls", "streak"),
    [
        ([], 0),
        ([obs("w", {"c": 1}, True)], 0),
        ([obs("w", {"c": 1}, False)] * 3, 3),
        # Key order does not make a different call.
        ([obs("w", {"a": 1, "b": 2}, False), obs("w", {"b": 2, "a": 1}, False)], 2),
        # A different argument, a success, or another tool breaks the streak.
        ([obs("w", {"c": 1}, False), obs("w", {"c": 2}, False)], 1),
        ([obs("w", {"c": 1}, False), obs("w", {"c": 1}, True), obs("w", {"c": 1}, False)], 1),
        ([obs("w", "x", False), obs("v", "x", False)], 1),
    ],
)
def test_failing_streak_counts_the_same_failing_call_in_a_row(
    calls: list[Observation], streak: int
) -> None:
    assert failing_streak(calls) == streak


def test_looping_is_the_streak_reaching_the_limit() -> None:
    calls = [obs("get_weather", {"city": "Atlantis"}, False)] * 3
    assert is_looping(calls, 3)
    assert not is_looping(calls[:2], 3)
    assert not is_looping(calls, 0)  # 0 turns the guard off
