"""``newsmon memory import``: an archive embedded elsewhere (one Parquet file) into the knowledge memory, without
the encoder (:mod:`newsmon.shared.memory.bulk`).

Imports are deferred into the command (pyarrow and the memory engine load in seconds; ``newsmon --help`` need not).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from newsmon.cli.common import err, fail, settings_from_env

#: Bad rows printed on stderr (all are counted).
BAD_ROWS_SHOWN = 10


def memory_import(
    path: Annotated[Path, typer.Argument(help="The Parquet archive: columns id, language, vector, labels, text, "
                                              "published_at; metadata newsmon.model_version and newsmon.dim.")],
    batch: Annotated[int, typer.Option(min=1, help="Rows per batch: read, checked, upserted, flushed and recorded "
                                                   "as done.")] = 2048,
    language: Annotated[list[str] | None, typer.Option(
        "--language", help="Import only the rows of this ISO 639-1 code (repeat for several; default: all).")] = None,
    model_version: Annotated[str | None, typer.Option(
        help="The model version of the file's vectors when its metadata has no newsmon.model_version (it must "
             "still be the memory's).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first bad row (exit status 2) instead of "
                                         "reporting it and going on.")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Start from the first row, ignoring the rows an "
                                          "earlier run recorded as done.")] = False,
) -> None:
    """Import labelled articles embedded elsewhere (a Parquet archive) into the knowledge memory, without the
    encoder: each point as `memory build` stores it (payload, labels, lexical vector), plus published_at.

    The file's model version and dimension must be the memory's (the configured encoder's). Idempotent by id; a
    re-run resumes after the rows done (--restart: from the first row). A bad row (id, language, labels, text,
    vector) is reported and left out. Prints a JSON summary: rows imported, skipped (done before), bad, seconds,
    rows/s."""
    from newsmon.shared.classifier import model_identity  # deferred: see the module docstring
    from newsmon.shared.memory import MemoryRouter
    from newsmon.shared.memory.base import KnowledgeMemoryError
    from newsmon.shared.memory.bulk import ArchiveError, BadRowError, import_parquet

    if not path.is_file():
        fail(f"no file at {path}")
    s = settings_from_env()
    version, dim = model_identity(s)
    router = MemoryRouter(s, version, dim)
    try:
        report = import_parquet(path, router, batch=batch, languages=language, model_version=model_version,
                                strict=strict, restart=restart, progress=True)
        counts = {lang: router.memory(lang).count() for lang in report.per_language}
    except ArchiveError as exc:
        fail(str(exc))
    except BadRowError as exc:
        fail(f"--strict: {exc}; the batches before it are imported, a re-run resumes at its batch")
    except (KnowledgeMemoryError, ValueError) as exc:
        fail(str(exc))
    finally:
        router.close()
    for bad in report.bad_rows[:BAD_ROWS_SHOWN]:
        err.print(f"[yellow]bad row {bad.row} (id {escape(repr(bad.id))}): {escape(bad.reason)}[/yellow]",
                  highlight=False, soft_wrap=True)
    if report.bad > BAD_ROWS_SHOWN:
        err.print(f"[yellow]... and {report.bad - BAD_ROWS_SHOWN} more bad rows[/yellow]", soft_wrap=True)
    err.print(f"imported {report.imported} rows, skipped {report.skipped_done} (done before), {report.bad} bad, "
                  f"{report.other_language} of other languages, in {report.seconds:.1f} s "
                  f"({report.rows_per_s:.0f} rows/s)", soft_wrap=True, markup=False, highlight=False)
    summary = report.summary()
    summary["bad_rows"] = summary["bad_rows"][:BAD_ROWS_SHOWN]
    print(json.dumps({**summary, "memory_counts": counts, "model_version": version, "dim": dim}))
