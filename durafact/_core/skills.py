"""Skills: procedural instructions added to a prompt when the situation calls for them.

A skill is a markdown file in the format of Claude Skills: YAML frontmatter with
`name` and `description`, then a body of instructions. It is not a source: a
source is searched for facts to answer with, a skill changes how one model call
is made (a rule, a format) when its description fits what is happening.

    skills = load_skills("durafact/data/skills/")  # durafact._activities.skills: once
    situation = "reporting an answer backed by a number computed from a CSV file"
    for skill in match_skills(skills, situation):   # every turn: pure, workflow-safe
        prompt += "\\n\\n" + skill.instruction()

The situation is a short description written by code of what exists now (say, a
computed number backing the answer), not the user's raw question, so a skill
fires because of state, not because of how a question was worded.

Only the instruction half of Claude Skills is here: scripts bundled with a skill
are not run. Wrap such a script as a tool if it is needed. The loaded `Skill`s
are plain pydantic values that travel into a workflow as input; `match_skills`
and `score_skill` are pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from durafact._core.text import keyword_score


class Skill(BaseModel):
    """One skill: when to apply it (`description`) and what to do (`body`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    body: str
    path: str

    def instruction(self) -> str:
        """The line a prompt gets when this skill matches."""
        return f"Instruction ({self.name}): {self.body}"


def score_skill(skill: Skill, situation: str) -> float:
    """How well `skill` fits `situation`: the share of the situation's terms found
    in the skill's name and description, matched by stem (see `durafact._core.text`)."""
    return keyword_score(f"{skill.name} {skill.description}", situation, use_stems=True)


def match_skills(
    skills: Iterable[Skill], situation: str, threshold: float = 0.34, limit: int = 1
) -> list[Skill]:
    """The skills whose name and description fit `situation`, best first.

    A skill matches when `score_skill` is at least `threshold` (and above zero: a
    skill that shares no term with the situation never matches). Ties go by name;
    at most `limit` skills are returned. Stems are used so that "reporting" finds
    "report" and "computed" finds "computing". The defaults make a skill a precise
    trigger, not a fallback that fires on every turn. Pure and deterministic.
    """
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be between 0 and 1, got {threshold!r}")
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit!r}")
    scored = [(score_skill(skill, situation), skill) for skill in skills]
    kept = [(score, skill) for score, skill in scored if score > 0 and score >= threshold]
    kept.sort(key=lambda pair: (-pair[0], pair[1].name))
    return [skill for _, skill in kept[:limit]]
