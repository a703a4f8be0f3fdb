"""Helpers of the CLI commands: settings from the environment with overrides, errors, consoles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from pydantic import TypeAdapter, ValidationError

from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus, load_corpus
from newsmon.shared.logs import configure_logging

console = Console()
err = Console(stderr=True)


def settings_from_env(**overrides: Any) -> Settings:
    """The settings from ``NEWSMON_*`` variables, with the given command-line overrides (``section__field=value``;
    None is ignored), logging configured.

    The home (``NEWSMON_HOME``) and the embedded memory's folder must be folders or not exist yet: one under a
    file (``/etc/passwd/sub``) or that cannot be read ends the command the same way (one line, exit status 2).

    Overrides are validated exactly like the environment (the same field constraints: ``--tau 0``, ``--top-k 0``
    and ``--threshold 1.5`` are refused as ``NEWSMON_SCORING__TAU=0`` is). Either way a bad value ends the command
    with one error line naming the option or variable and the reason, exit status 2, no traceback; the value of a
    secret is never shown.
    """
    try:
        s = Settings()
    except ValidationError as exc:
        fail("; ".join(f"{_env_name(e['loc'])}: {e['msg']}" for e in exc.errors()))
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if value is not None:
            section, _, name = key.partition("__")
            by_section.setdefault(section if name else "", {})[name or section] = value
    for section, values in by_section.items():
        _apply_overrides(s, section, values)
    folders = [("NEWSMON_HOME", s.home)] + ([] if s.memory.url else [("NEWSMON_MEMORY__PATH", s.memory_path)])
    for name, path in folders:
        why = folder_problem(Path(path))
        if why is not None:
            fail(f"{name}={path}: {why}")
    configure_logging(s.log_format)
    return s


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a folder that newsmon reads and writes (it, or a folder above it, is a file; the
    nearest one that exists cannot be listed), or None (it is one, or can be made)."""
    for at in (path, *path.parents):
        if not (at.exists() or at.is_symlink()):
            continue
        if not at.is_dir():
            return "it is a file, not a folder" if at == path else f"{at} is a file, not a folder"
        if not os.access(at, os.R_OK | os.X_OK):
            return f"{at} cannot be read (permission denied)"
        return None
    return None


def _apply_overrides(s: Settings, section: str, values: dict[str, Any]) -> None:
    """Validate ``values`` against the settings model (a section, or the top level for ``section == ""``) and
    set them; a refused value ends the command (see :func:`settings_from_env`)."""
    try:
        if section:
            current = getattr(s, section)
            merged = type(current).model_validate({**dict(current), **values})  # raw values, unmasked
            # only what was given explicitly counts as set (a calibration record fills the other fields)
            object.__setattr__(merged, "__pydantic_fields_set__", set(current.model_fields_set) | set(values))
            setattr(s, section, merged)
            return
        for name, value in values.items():
            setattr(s, name, TypeAdapter(Settings.model_fields[name].annotation).validate_python(value))
    except ValidationError as exc:
        reasons = []
        for e in exc.errors():
            name = str(e["loc"][0]) if e["loc"] else next(iter(values))
            reasons.append(f"--{name.replace('_', '-')} {values.get(name, '')}: {e['msg']}")
        fail("; ".join(reasons))


def _env_name(loc: tuple) -> str:
    return "NEWSMON_" + "__".join(str(part).upper() for part in loc)


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print ``error: msg`` to stderr as one line (never wrapped; ``msg`` is not read as markup) and exit with
    ``code``."""
    err.print(Text.assemble(("error:", "red"), " ", msg), soft_wrap=True)
    raise typer.Exit(code)


def corpus_or_fail(s: Settings, limit: int | None = None) -> Corpus:
    """The corpus at ``s.data``; exits with a clear error when there is none. Every skipped (bad) line is
    reported on stderr with its line number and reason (at most 50, then a count), so every command that reads a
    corpus reports them."""
    try:
        corpus = load_corpus(s.data, limit=limit)
    except FileNotFoundError as exc:
        fail(str(exc))
    for msg in corpus.bad_line_report():
        err.print(f"[yellow]skipped {escape(msg)}[/yellow]", highlight=False, soft_wrap=True)
    if corpus.bad_lines:
        err.print(f"[yellow]{corpus.path}: {len(corpus.bad_lines)} bad lines skipped[/yellow]", soft_wrap=True)
    return corpus
