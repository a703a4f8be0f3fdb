"""Bulk import of an archive embedded elsewhere (:mod:`.archive`, one Parquet file) into the knowledge memory,
without the encoder: ``newsmon memory import``, and the scale benchmarks.

Each point is what ``memory build`` stores for the same article and vector (same payload fields,
:func:`~newsmon.shared.memory.common.article_payload`; the same cleaned text and so the same lexical vector,
made by the adapter's upsert), plus ``published_at`` when the file has it. The file is read in record batches,
never whole; each batch is checked (:func:`~.archive.check_rows`), upserted per language and flushed. The
writer of such a file (:func:`write_parquet`, :class:`ArchiveWriter`) is :mod:`.archive_writer`.

Idempotent by id: a point id is ``uuid5`` of the article id, so importing a row again overwrites its point. A
re-run resumes: after each flushed batch the number of rows done is written to a progress file under
``<memory path>/imports/`` (one per file, destination, model version and language filter, see
:func:`progress_file`), and the next run starts after them (``restart=True`` starts from the first row).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from newsmon.schemas.base import check_language_code
from newsmon.shared.memory.archive import (
    ArchiveError,
    ArchiveInfo,
    BadRow,
    CheckedRows,
    batches,
    check_identity,
    check_rows,
    open_archive,
)
from newsmon.shared.memory.archive_writer import ArchiveWriter, write_parquet
from newsmon.shared.memory.router import MemoryRouter

#: Rows per record batch read from the file, checked, upserted and recorded as done.
DEFAULT_BATCH = 2048
#: Bad rows kept with their id and reason in the report (all are counted).
BAD_ROWS_KEPT = 20


class BadRowError(ValueError):
    """A bad row in a strict import (``strict=True``): ``bad`` says which and why. The rows before its batch
    are imported and recorded as done."""

    def __init__(self, bad: BadRow) -> None:
        super().__init__(f"row {bad.row} (id {bad.id!r}): {bad.reason}")
        self.bad = bad


@dataclass
class ImportReport:
    """What an import did in this run.

    Attributes:
        rows: rows in the file; imported: rows upserted now; skipped_done: rows done by an earlier run, not read
        again; other_language: rows of a language not asked for; bad: rows left out (the first
        :data:`BAD_ROWS_KEPT` in ``bad_rows``); seconds: wall time of this run; per_language: rows upserted per
        language; collections: the collection of each of those languages; progress_file: where the rows done
        are recorded.
    """

    path: str
    rows: int
    imported: int = 0
    skipped_done: int = 0
    other_language: int = 0
    bad: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)
    seconds: float = 0.0
    per_language: dict[str, int] = field(default_factory=dict)
    collections: dict[str, str] = field(default_factory=dict)
    progress_file: str = ""

    @property
    def rows_per_s(self) -> float:
        """Rows read per second of this run (imported, bad and of another language alike)."""
        read = self.imported + self.bad + self.other_language
        return read / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict:
        """The report as JSON-compatible values (bad rows as ``{row, id, reason}``)."""
        out = asdict(self)
        out["seconds"] = round(self.seconds, 2)
        out["rows_per_s"] = round(self.rows_per_s, 1)
        return out


def progress_file(router: MemoryRouter, info: ArchiveInfo, languages: frozenset[str] | None) -> Path:
    """The progress file of importing ``info``'s file into ``router``'s memory:
    ``<memory path>/imports/<sha256[:24]>.json`` of the file (resolved path, size, modification time), the
    destination (server URL or memory path, collection prefix, model version) and the language filter; so a
    changed file, another memory or another filter starts from the first row."""
    st = info.path.stat()
    s = router.settings
    key = json.dumps([str(info.path.resolve()), st.st_size, st.st_mtime_ns,
                      router.engine.location(s), s.memory.collection_prefix,
                      router.model_version, sorted(languages) if languages is not None else None])
    return Path(s.memory_path) / "imports" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _read_done(path: Path, rows: int) -> int:
    """Rows done according to the progress file (0 without one or when unreadable), at most ``rows``."""
    try:
        done = int(json.loads(path.read_text(encoding="utf-8"))["rows_done"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return max(0, min(done, rows))


def _write_done(path: Path, info: ArchiveInfo, done: int) -> None:
    """Record ``done`` rows (written to a temporary file and renamed: never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"file": str(info.path.resolve()), "rows": info.rows, "rows_done": done,
                               "complete": done >= info.rows, "updated_at": datetime.now(UTC).isoformat()}),
                   encoding="utf-8")
    os.replace(tmp, path)


def import_parquet(path: str | Path, router: MemoryRouter, *, batch: int = DEFAULT_BATCH,
                   languages: Sequence[str] | None = None, model_version: str | None = None, strict: bool = False,
                   restart: bool = False, progress: bool = False,
                   on_batch: Callable[[int], None] | None = None) -> ImportReport:
    """Import an archive (:mod:`.archive`) into ``router``'s memory (its model version and dimension ``d``).

    Args:
        path: the Parquet file.
        router: the memory: one collection per language of ``router.model_version`` (created when missing).
        batch: rows per record batch (each is checked, upserted, flushed and recorded as done), ``>= 1``.
        languages: import only the rows of these ISO 639-1 codes (None: every language).
        model_version: the model version of the file's vectors, when its metadata has none (else it must agree).
        strict: stop at the first bad row (:class:`BadRowError`) instead of counting it and going on.
        restart: ignore the progress file and start from the first row.
        progress: show a tqdm bar (rows, rows/s) on stderr.
        on_batch: called with the number of rows done after each batch is recorded (tests interrupt here).

    Returns:
        the :class:`ImportReport` of this run.

    Raises:
        ArchiveError: the file as a whole does not fit the memory (columns, model version, dimension).
        BadRowError: with ``strict``, a bad row.
        ValueError: ``batch < 1`` or a bad code in ``languages``.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    langs = _language_filter(languages)
    pf, info = open_archive(path)
    try:
        check_identity(info, router.model_version, router.dim, model_version)
        return _import(pf, info, router, batch, langs, strict, restart, progress, on_batch)
    finally:
        pf.close()


def _import(pf: Any, info: ArchiveInfo, router: MemoryRouter, batch: int, langs: frozenset[str] | None,
            strict: bool, restart: bool, progress: bool, on_batch: Callable[[int], None] | None) -> ImportReport:
    """The batches of :func:`import_parquet` from the first row not done."""
    ledger = progress_file(router, info, langs)
    done = 0 if restart else _read_done(ledger, info.rows)
    report = ImportReport(str(info.path), info.rows, skipped_done=done, progress_file=str(ledger))
    t0 = time.perf_counter()
    bar = tqdm(total=info.rows, initial=done, desc="memory import", unit="row", disable=not progress,
               dynamic_ncols=True)
    try:
        for first, rb in batches(pf, info, batch, done):
            rows = check_rows(rb, first, router.dim, langs)
            _count_bad(report, rows, strict)
            _upsert(router, rows, report)
            done = first + rb.num_rows
            _write_done(ledger, info, done)
            bar.update(rb.num_rows)
            if on_batch is not None:
                on_batch(done)
        if done >= info.rows:
            _write_done(ledger, info, info.rows)  # also for an empty file, or one done before
    finally:
        bar.close()
        report.seconds = time.perf_counter() - t0
    return report


def _language_filter(languages: Sequence[str] | None) -> frozenset[str] | None:
    if languages is None:
        return None
    if isinstance(languages, str):
        languages = [languages]
    return frozenset(check_language_code(lang) for lang in languages)


def _count_bad(report: ImportReport, rows: CheckedRows, strict: bool) -> None:
    """Count the batch's bad rows and rows of another language; with ``strict`` the first bad row raises."""
    if rows.bad and strict:
        raise BadRowError(rows.bad[0])
    report.bad += len(rows.bad)
    report.bad_rows += rows.bad[: max(0, BAD_ROWS_KEPT - len(report.bad_rows))]
    report.other_language += rows.other_language


def _upsert(router: MemoryRouter, rows: CheckedRows, report: ImportReport) -> None:
    """Upsert the checked rows per language, under the router's write lock, then flush each memory written."""
    with router.write_lock:
        for lang in sorted(set(rows.langs)):
            idx = [i for i, lg in enumerate(rows.langs) if lg == lang]
            mem = router.memory(lang)
            mem.upsert([rows.ids[i] for i in idx], rows.vectors[idx], [rows.labels[i] for i in idx],
                       [rows.payloads[i] for i in idx])
            _flush(mem)
            report.imported += len(idx)
            report.per_language[lang] = report.per_language.get(lang, 0) + len(idx)
            report.collections[lang] = router.collection(lang)


def _flush(memory: Any) -> None:
    """Force an embedded memory's writes to disk (a server's upsert has returned once it is applied)."""
    flush = getattr(memory, "flush", None)
    if callable(flush):
        flush()


__all__ = ["DEFAULT_BATCH", "ArchiveError", "ArchiveWriter", "BadRowError", "ImportReport", "import_parquet",
           "progress_file", "write_parquet"]
