"""Loading skills from disk: `*.md` files with YAML frontmatter (see `durafact._core.skills`).

Reads files, so it runs in the starter (or an activity), never in workflow code.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from durafact._core.skills import Skill

_FRONTMATTER = re.compile(
    r"\A---[ \t]*\r?\n(?P<yaml>.*?)^---[ \t]*(?:\r?\n|\Z)(?P<body>.*)\Z",
    re.DOTALL | re.MULTILINE,
)


class SkillError(ValueError):
    """A skill file that cannot be loaded; the message names the file."""


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
