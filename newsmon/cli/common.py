"""Helpers of the CLI commands: settings from the environment with overrides, errors, consoles."""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus, load_corpus
from newsmon.shared.logs import configure_logging

console = Console()
err = Console(stderr=True)


def settings_from_env(**overrides: Any) -> Settings:
    """The settings from ``NEWSMON_*`` variables, with the given overrides (``section__field=value``; None is
    ignored), logging configured."""
    s = Settings()
    for key, value in overrides.items():
        if value is None:
            continue
        section, _, name = key.partition("__")
        if name:
            setattr(getattr(s, section), name, value)
        else:
            setattr(s, section, value)
    configure_logging(s.log_format)
    return s


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
