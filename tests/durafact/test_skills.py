"""Skills: loading markdown with YAML frontmatter, clear errors, matching by situation."""

from __future__ import annotations

from pathlib import Path

import pytest

from durafact._activities.skills import SkillError, load_skills
from durafact._core.skills import Skill, match_skills, score_skill
from tests.helpers import ROOT

SHIPPED = ROOT / "durafact" / "data" / "skills"
CSV_SITUATION = "reporting an answer backed by a number computed from a CSV file"


def write(directory: Path, filename: str, text: str) -> Path:
    path = directory / filename
    path.write_text(text, encoding="utf-8")
    return path


def skill(name: str, description: str) -> Skill:
    return Skill(name=name, description=description, body="Do it.", path=f"{name}.md")


def test_a_good_file_loads_with_name_description_body_and_path(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "citing.md",
        "---\nname: citing\ndescription: 'Quoting: how to cite a document'\n"
        "license: MIT\n---\n\nQuote the exact words.\nName the document.\n",
    )
    [loaded] = load_skills(tmp_path)
    assert loaded == Skill(
        name="citing",
        description="Quoting: how to cite a document",
        body="Quote the exact words.\nName the document.",
        path=str(path),
    )
    assert loaded.instruction() == (
        "Instruction (citing): Quote the exact words.\nName the document."
    )


def test_skills_are_sorted_by_name_not_by_file_name(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "---\nname: zeta\ndescription: last\n---\nBody z.\n")
    write(tmp_path, "b.md", "---\nname: alpha\ndescription: first\n---\nBody a.\n")
    write(tmp_path, "notes.txt", "not a skill")
    assert [s.name for s in load_skills(str(tmp_path))] == ["alpha", "zeta"]


def test_multiline_yaml_description_is_parsed_by_a_real_yaml_parser(tmp_path: Path) -> None:
    write(
        tmp_path,
        "folded.md",
        "---\nname: folded\ndescription: >-\n  one line\n  continued here\n---\nBody.\n",
    )
    assert load_skills(tmp_path)[0].description == "one line continued here"


def test_a_file_without_frontmatter_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "plain.md", "# Just markdown\n\nNo frontmatter here.\n")
    with pytest.raises(SkillError, match="no frontmatter") as error:
        load_skills(tmp_path)
    assert str(path) in str(error.value)


def test_an_unclosed_frontmatter_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "open.md", "---\nname: open\ndescription: never closed\nBody.\n")
    with pytest.raises(SkillError, match="no frontmatter"):
        load_skills(tmp_path)


def test_invalid_yaml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.md", "---\nname: [unclosed\ndescription: x\n---\nBody.\n")
    with pytest.raises(SkillError, match="invalid YAML") as error:
        load_skills(tmp_path)
    assert str(path) in str(error.value)


def test_frontmatter_that_is_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "list.md", "---\n- name\n- description\n---\nBody.\n")
    with pytest.raises(SkillError, match="must be a YAML mapping"):
        load_skills(tmp_path)


def test_a_missing_description_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "nodesc.md", "---\nname: nodesc\n---\nBody.\n")
    with pytest.raises(SkillError, match="'description'") as error:
        load_skills(tmp_path)
    assert str(path) in str(error.value)


def test_a_missing_or_non_string_name_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "noname.md", "---\nname: 42\ndescription: numbers\n---\nBody.\n")
    with pytest.raises(SkillError, match="'name'"):
        load_skills(tmp_path)


def test_a_skill_without_instructions_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "empty.md", "---\nname: empty\ndescription: nothing to do\n---\n\n")
    with pytest.raises(SkillError, match="no instructions"):
        load_skills(tmp_path)


def test_two_files_with_the_same_name_are_an_error_naming_both(tmp_path: Path) -> None:
    first = write(tmp_path, "one.md", "---\nname: same\ndescription: first\n---\nA.\n")
    second = write(tmp_path, "two.md", "---\nname: same\ndescription: second\n---\nB.\n")
    with pytest.raises(SkillError, match="already used") as error:
        load_skills(tmp_path)
    assert str(first) in str(error.value)
    assert str(second) in str(error.value)


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="does not exist"):
        load_skills(tmp_path / "nowhere")


def test_the_shipped_cost_reporting_skill_loads() -> None:
    skills = load_skills(SHIPPED)
    assert "cost-reporting" in [s.name for s in skills]
    cost = next(s for s in skills if s.name == "cost-reporting")
    assert "CSV" in cost.description
    body = cost.body.lower()
    assert "exact computed value" in body
    assert "not estimated" in body
    assert "file" in body and "column" in body


def test_the_shipped_skill_matches_a_computed_number_from_a_csv() -> None:
    skills = load_skills(SHIPPED)
    assert [s.name for s in match_skills(skills, CSV_SITUATION)] == ["cost-reporting"]


def test_the_shipped_skill_does_not_match_an_unrelated_situation() -> None:
    skills = load_skills(SHIPPED)
    assert match_skills(skills, "planning a weekend hiking trip in the mountains") == []
    assert match_skills(skills, "summarising a long chat conversation") == []


def test_matching_uses_name_and_description_with_stems() -> None:
    reporting = skill("cost-reporting", "How to report a number computed from storage.")
    assert score_skill(reporting, "reports of costs") == 1.0
    assert score_skill(reporting, "computing numbers") == 1.0


def test_skills_below_the_threshold_do_not_match() -> None:
    citing = skill("citing", "quoting a document word for word")
    # One of three situation terms ("document") is found: 0.33 < 0.34.
    assert score_skill(citing, "document price total") == pytest.approx(1 / 3)
    assert match_skills([citing], "document price total") == []
    assert match_skills([citing], "document price total", threshold=0.3) == [citing]


def test_a_skill_sharing_no_term_never_matches_even_at_threshold_zero() -> None:
    citing = skill("citing", "quoting a document")
    assert match_skills([citing], "hiking trip", threshold=0.0, limit=5) == []


def test_matches_come_best_first_ties_by_name_and_at_most_limit() -> None:
    best = skill("best", "csv number report")
    tie_b = skill("tie-b", "csv number")
    tie_a = skill("tie-a", "csv number")
    weak = skill("weak", "csv")
    skills = [weak, tie_b, best, tie_a]
    situation = "csv number report"
    assert match_skills(skills, situation) == [best]
    assert match_skills(skills, situation, limit=3) == [best, tie_a, tie_b]
    assert match_skills(skills, situation, limit=10) == [best, tie_a, tie_b]  # weak: 1/3
    assert match_skills(skills, situation, threshold=0.3, limit=10) == [best, tie_a, tie_b, weak]
    assert match_skills(skills, situation, limit=0) == []


def test_match_skills_refuses_a_bad_threshold_or_limit() -> None:
    with pytest.raises(ValueError, match="threshold"):
        match_skills([], "x", threshold=1.5)
    with pytest.raises(ValueError, match="limit"):
        match_skills([], "x", limit=-1)
