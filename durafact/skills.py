"""Skills: procedural instructions added to a prompt when the situation calls for them.

A skill is a markdown file in the format of Claude Skills: YAML frontmatter with
`name` and `description`, then a body of instructions. It is not a source: a
source is searched for facts to answer with, a skill changes how one model call
is made (a rule, a format) when its description fits what is happening.

    skills = load_skills("skills/")          # once: in an activity or the starter
    situation = "reporting an answer backed by a number computed from a CSV file"
    for skill in match_skills(skills, situation):   # every turn: pure, workflow-safe
        prompt += "\\n\\n" + skill.instruction()

The situation is a short description written by code of what exists now (say, a
computed number backing the answer), not the user's raw question, so a skill
fires because of state, not because of how a question was worded.

Only the instruction half of Claude Skills is here: scripts bundled with a skill
are not run. Wrap such a script as a tool if it is needed.

`load_skills` reads files and belongs in an activity or the starter; the loaded
`Skill`s are plain pydantic values that travel into a workflow as input.
`match_skills` and `score_skill` are pure and deterministic.
"""

from __future__ import annotations

__all__ = [
    "Skill",
    "SkillError",
    "load_skills",
    "match_skills",
    "score_skill",
]

import re
from collections.abc import Iterable
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from durafact.text import keyword_score

_FRONTMATTER = re.compile(
    r"\A---[ \t]*\r?\n(?P<yaml>.*?)^---[ \t]*(?:\r?\n|\Z)(?P<body>.*)\Z",
    re.DOTALL | re.MULTILINE,
)


class SkillError(ValueError):
    """A skill file that cannot be loaded; the message names the file."""


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


def _field(meta: dict[object, object], key: str, path: Path) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SkillError(f"skill file {path}: frontmatter needs a non-empty string {key!r}")
    return value.strip()


def _parse(path: Path) -> Skill:
    try:
        text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise SkillError(f"skill file {path}: not UTF-8 text ({error})") from None
    match = _FRONTMATTER.match(text)
    if match is None:
        raise SkillError(
            f"skill file {path}: no frontmatter; the file must start with a '---' line, "
            "then YAML with name and description, then a closing '---' line"
        )
    try:
        meta = yaml.safe_load(match["yaml"])
    except yaml.YAMLError as error:
        raise SkillError(f"skill file {path}: invalid YAML in the frontmatter: {error}") from None
    if not isinstance(meta, dict):
        raise SkillError(f"skill file {path}: the frontmatter must be a YAML mapping")
    body = match["body"].strip()
    if not body:
        raise SkillError(f"skill file {path}: no instructions after the frontmatter")
    return Skill(
        name=_field(meta, "name", path),
        description=_field(meta, "description", path),
        body=body,
        path=str(path),
    )


def load_skills(directory: str | Path) -> list[Skill]:
    """Every `*.md` file directly in `directory` as a `Skill`, sorted by name.

    Raises `SkillError` naming the file for a file without frontmatter, with
    invalid YAML, without a `name` or `description`, or with no body, and for two
    files that declare the same name. Reads files: call it from an activity or
    the starter, never from workflow code.
    """
    root = Path(directory)
    if not root.is_dir():
        raise SkillError(f"skills directory {root} does not exist or is not a directory")
    by_name: dict[str, Skill] = {}
    for path in sorted(root.glob("*.md")):
        if not path.is_file():
            continue
        skill = _parse(path)
        if skill.name in by_name:
            raise SkillError(
                f"skill file {path}: name {skill.name!r} is already used by "
                f"{by_name[skill.name].path}"
            )
        by_name[skill.name] = skill
    return [by_name[name] for name in sorted(by_name)]


def score_skill(skill: Skill, situation: str) -> float:
    """How well `skill` fits `situation`: the share of the situation's terms found
    in the skill's name and description, matched by stem (see `durafact.text`)."""
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
