"""The settings reference: every setting's environment variable, default and meaning as a Markdown table, read
from the settings models (:mod:`newsmon.shared.config`), for ``newsmon settings --markdown`` and the docs' settings
reference (``docs/reference/settings.md``, filled in by ``docs/hooks.py`` when the site is built)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from newsmon.schemas.scoring import registered
from newsmon.shared.config import Settings

__all__ = ["settings_reference"]


def _default_text(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, Path):
        value = str(value).replace(str(Path.home()), "~")
    if isinstance(value, (dict, list)) and not value:
        return "empty"
    if isinstance(value, list) and all(isinstance(v, BaseModel) for v in value):
        value = json.dumps([v.model_dump(mode="json", exclude_defaults=True) for v in value], ensure_ascii=False)
    return f"`{value}`"


def settings_reference() -> str:
    """The settings table (Markdown): environment variable, default and meaning of every setting, a pipe in a
    meaning escaped as ``\\|``. The registered rules and components are loaded first, so a default rule shows its
    options whatever this process imported before."""
    registered("rule")
    rows = ["| variable | default | meaning |", "|---|---|---|"]

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name.upper()}__")
                continue
            desc = (field.description or "").replace("|", "\\|")
            rows.append(f"| `{prefix}{name.upper()}` | {_default_text(field)} | {desc} |")

    walk(Settings, "NEWSMON_")
    return "\n".join(rows)
