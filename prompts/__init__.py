"""Prompt templates live as files next to this module so they can be read and diffed as text.

Templates use ``$name`` placeholders (string.Template): prompts embed schema text and JSON,
where ``{}`` would collide with str.format.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template

from graphs.errors import ConfigError


@cache
def load_prompt(name: str) -> str:
    """The raw text of ``prompts/<name>`` (e.g. ``planner_system.md``)."""
    try:
        return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"prompt template {name!r} not found in package 'prompts'; reinstall the package") from exc


def render_prompt(name: str, **values: object) -> str:
    """The template with every ``$placeholder`` filled; a missing value is an error, not a blank."""
    try:
        return Template(load_prompt(name)).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise ConfigError(f"prompt template {name!r} needs a value for {exc.args[0]!r}") from exc
