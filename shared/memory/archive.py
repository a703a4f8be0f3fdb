"""An archive of labelled articles embedded elsewhere (a GPU batch job), as one Parquet file: its schema and
metadata, and the rows of a record batch checked and turned into what ``memory build`` stores (the writer:
:mod:`.archive_writer`).

Columns (one row per article):

* ``id`` (string): the article id, checked with the id policy (:func:`~newsmon.schemas.base.check_article_id`);
* ``language`` (string): ISO 639-1 code (:func:`~newsmon.schemas.base.check_language_code`);
* ``vector`` (fixed-size list or list of float32; float16/float64 are read as float32): the ``passage``
  embedding of ``text``, ``d`` values, any scale (the memory stores it unit-normalised);
* ``labels`` (list of string): the label set, each label read in its canonical form
  (:func:`~newsmon.schemas.base.check_label`); blank labels dropped, at least one left;
* ``text`` (string): the text that was embedded (title + body, as a corpus line's ``text``), cleaned
  (:func:`~newsmon.shared.text.clean_text`) before it is stored and made the lexical vector;
* ``published_at`` (optional; timestamp with a time zone, or an ISO 8601 string with a UTC offset; null
  allowed): stored as the payload's ``published_at``, ISO 8601 in UTC, as the stream stores it;
* ``title``, ``source`` (optional strings): the payload's ``title`` (cleaned) and ``source``, None without them.

Key-value metadata of the file: ``newsmon.model_version`` (the model version of the vectors, as the memory's
collection names carry it) and ``newsmon.dim`` (``d``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from newsmon.schemas.base import check_article_id, check_label, check_language_code
from newsmon.shared.memory.common import article_payload
from newsmon.shared.text import clean_text

META_MODEL_VERSION = "newsmon.model_version"
META_DIM = "newsmon.dim"
REQUIRED_COLUMNS = ("id", "language", "vector", "labels", "text")
OPTIONAL_COLUMNS = ("published_at", "title", "source")


class ArchiveError(ValueError):
    """The file cannot be imported as a whole: not Parquet, a missing or mistyped column, or a model version or
    dimension other than the memory's. The message names the file's value and the memory's."""


@dataclass(frozen=True)
class BadRow:
    """A row left out: ``row`` (0-based, in file order), its ``id`` (None when unreadable) and the ``reason``."""

    row: int
    id: str | None
    reason: str


@dataclass(frozen=True)
class ArchiveInfo:
    """What the file says about itself: ``rows``, ``row_groups`` (rows per group), ``columns`` present,
    ``model_version`` and ``dim`` from the metadata (None when missing), ``vector_size`` (the fixed size of the
    vector column; for a variable-length list the most common length among the first non-null vectors; None
    when there is none)."""

    path: Path
    rows: int
    row_groups: tuple[int, ...]
    columns: tuple[str, ...]
    model_version: str | None
    dim: int | None
    vector_size: int | None


@dataclass
class CheckedRows:
    """The rows of one record batch ready for the memory, grouped by nothing yet: ids, languages, ``(n, d)``
    float32 vectors, label sets and payloads (parallel lists); the rows left out (``bad``) and the rows of
    another language than those asked for (``other_language``)."""

    ids: list[str] = field(default_factory=list)
    langs: list[str] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    labels: list[list[str]] = field(default_factory=list)
    payloads: list[dict] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)
    other_language: int = 0


# -- reading ---------------------------------------------------------------------------------------------


def open_archive(path: str | Path) -> tuple[pq.ParquetFile, ArchiveInfo]:
    """The Parquet file (opened for reading in record batches, column chunks read in 1 MiB pieces) and its
    :class:`ArchiveInfo`.

    Raises:
        ArchiveError: not a Parquet file; a required column missing; a column of the wrong type; a
            ``published_at`` timestamp without a time zone; ``newsmon.dim`` not an integer.
    """
    p = Path(path)
    try:
        pf = pq.ParquetFile(p, buffer_size=1 << 20, pre_buffer=False)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{p}: not a readable Parquet file: {exc}") from exc
    try:
        schema = pf.schema_arrow
        missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
        if missing:
            raise ArchiveError(f"{p}: missing column(s) {missing}; an archive has {list(REQUIRED_COLUMNS)} "
                               f"(and optionally {list(OPTIONAL_COLUMNS)})")
        vector_size = _check_types(p, schema)
        if vector_size is None:
            vector_size = _sampled_length(pf)
        meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (schema.metadata or {}).items()}
        raw_dim = meta.get(META_DIM)
        try:
            dim = int(raw_dim) if raw_dim is not None else None
        except ValueError:
            raise ArchiveError(f"{p}: metadata {META_DIM}={raw_dim!r} is not an integer") from None
        md = pf.metadata
        groups = tuple(md.row_group(i).num_rows for i in range(md.num_row_groups))
        columns = tuple(c for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in schema.names)
    except BaseException:
        pf.close()
        raise
    return pf, ArchiveInfo(p, md.num_rows, groups, columns, meta.get(META_MODEL_VERSION) or None, dim, vector_size)


def _check_types(path: Path, schema: pa.Schema) -> int | None:
    """Raise :class:`ArchiveError` for a column of the wrong type; the vector column's fixed size, or None."""
    def wrong(name: str, want: str) -> ArchiveError:
        return ArchiveError(f"{path}: column {name!r} is {schema.field(name).type}, expected {want}")

    for name in ("id", "language", "text", "title", "source"):
        if name in schema.names and not _is_string(schema.field(name).type):
            raise wrong(name, "string")
    vec = schema.field("vector").type
    if not (pa.types.is_list(vec) or pa.types.is_large_list(vec) or pa.types.is_fixed_size_list(vec)) \
            or not pa.types.is_floating(vec.value_type):
        raise wrong("vector", "a list or fixed-size list of float32")
    labels = schema.field("labels").type
    if not (pa.types.is_list(labels) or pa.types.is_large_list(labels)) or not _is_string(labels.value_type):
        raise wrong("labels", "a list of string")
    if "published_at" in schema.names:
        ts = schema.field("published_at").type
        if pa.types.is_timestamp(ts) and ts.tz is None:
            raise ArchiveError(f"{path}: column 'published_at' is {ts}, a timestamp without a time zone; write it "
                               "with one (e.g. pa.timestamp('us', tz='UTC')), as the wire refuses naive times")
        if not (pa.types.is_timestamp(ts) or _is_string(ts) or pa.types.is_null(ts)):
            raise wrong("published_at", "a timestamp with a time zone or an ISO 8601 string")
    return int(vec.list_size) if pa.types.is_fixed_size_list(vec) else None


def _sampled_length(pf: pq.ParquetFile, rows: int = 1024) -> int | None:
    """The most common length of the first batch's non-null vectors (of a variable-length vector column) that
    has any; None when no row has a vector."""
    for rb in pf.iter_batches(batch_size=rows, columns=["vector"]):
        lengths = pc.list_value_length(rb.column(0)).drop_null().to_numpy(zero_copy_only=False)
        if len(lengths):
            values, counts = np.unique(lengths, return_counts=True)
            return int(values[np.argmax(counts)])
    return None


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def check_identity(info: ArchiveInfo, model_version: str, dim: int, declared: str | None = None) -> None:
    """Refuse a file whose vectors are not of the memory's model version and dimension.

    Args:
        info: the file's :class:`ArchiveInfo`.
        model_version, dim: the memory's (the encoder's model version and dimension ``d``).
        declared: the model version the caller vouches for (``--model-version``); required when the file's
            metadata has none, and must agree with it when it has one.

    Raises:
        ArchiveError: naming both values, when the file's (or the declared) model version differs from the
            memory's, when neither says one, or when ``newsmon.dim`` or the vectors' length (the column's fixed
            size, else the most common length of the first vectors) is not ``dim``.
    """
    where = info.path
    if info.model_version is not None and declared is not None and declared != info.model_version:
        raise ArchiveError(f"{where}: the file's {META_MODEL_VERSION} is {info.model_version!r} but "
                           f"--model-version says {declared!r}")
    version = info.model_version or declared
    if version is None:
        raise ArchiveError(f"{where}: no {META_MODEL_VERSION} in the file's metadata; give the model version of "
                           f"its vectors with --model-version (the memory's is {model_version!r})")
    if version != model_version:
        raise ArchiveError(f"{where}: model version {version!r} of the file's vectors is not the memory's "
                           f"{model_version!r}; re-embed the archive with the memory's model, or import it "
                           "with that model configured (NEWSMON_ENCODER__MODEL)")
    for what, value in ((META_DIM, info.dim), ("the vectors' length", info.vector_size)):
        if value is not None and value != dim:
            raise ArchiveError(f"{where}: {what} is {value}, the memory's dimension is {dim}")


def batches(pf: pq.ParquetFile, info: ArchiveInfo, batch: int, start: int = 0
            ) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first row, record batch)`` of the file in order, at most ``batch`` rows each, from row ``start`` on: the
    row groups wholly before ``start`` are not read."""
    columns = list(info.columns)
    first = 0
    groups: list[int] = []
    for i, n in enumerate(info.row_groups):
        if first + n > start or groups:
            groups.append(i)
        else:
            first += n
    if not groups:
        return
    for rb in pf.iter_batches(batch_size=batch, row_groups=groups, columns=columns):
        if first + rb.num_rows <= start:
            first += rb.num_rows
            continue
        if first < start:
            rb, first = rb.slice(start - first), start
        yield first, rb
        first += rb.num_rows


# -- checking rows ---------------------------------------------------------------------------------------


def check_rows(rb: pa.RecordBatch, first: int, dim: int, languages: frozenset[str] | None = None) -> CheckedRows:
    """The rows of one record batch (its first row is row ``first`` of the file) as the memory stores them;
    each row that breaks a rule is a :class:`BadRow` (id, language, labels, blank text, a vector that is null,
    of another length than ``dim``, not finite or all zero, a ``published_at`` without a UTC offset, an id
    repeated in the batch); rows of a language not in ``languages`` (None: any) are only counted. (The file's
    dimension as a whole is checked before, by :func:`check_identity`.)
    """
    cols = {name: rb.column(name) for name in rb.schema.names}
    vectors, vec_bad = _vectors(cols["vector"], dim)
    values = {name: col.to_pylist() for name, col in cols.items() if name != "vector"}
    for name in OPTIONAL_COLUMNS:
        values.setdefault(name, [None] * rb.num_rows)
    out = CheckedRows()
    seen: dict[str, int] = {}
    keep: list[int] = []
    for k in range(rb.num_rows):
        aid = values["id"][k]
        try:
            lang = _row_language(values["language"][k], languages)
            if lang is None:
                out.other_language += 1
                continue
            aid = check_article_id(aid)
            if aid in seen:
                raise ValueError(f"id repeated in the batch (row {seen[aid]} has it)")
            if k in vec_bad:
                raise ValueError(vec_bad[k])
            labels, payload = _row_fields(values, k, lang)
        except ValueError as exc:
            out.bad.append(BadRow(first + k, aid if isinstance(aid, str) else None, str(exc)))
            continue
        seen[aid] = first + k
        keep.append(k)
        out.ids.append(aid)
        out.langs.append(lang)
        out.labels.append(labels)
        out.payloads.append(payload)
    out.vectors = vectors[keep]
    return out


def _row_language(raw: Any, languages: frozenset[str] | None) -> str | None:
    """The row's language, or None when it is not among ``languages``; ValueError for a bad code."""
    lang = check_language_code(raw)
    return lang if languages is None or lang in languages else None


def _row_fields(values: dict[str, list], k: int, lang: str) -> tuple[list[str], dict]:
    """The canonical label set and the payload of row ``k``; ValueError with the reason."""
    raw_labels = values["labels"][k]
    if raw_labels is None:
        raise ValueError("labels is null")
    labels = list(dict.fromkeys(check_label(x) for x in raw_labels if not isinstance(x, str) or x.strip()))
    if not labels:
        raise ValueError("no labels (the memory is built of labelled articles)")
    text = values["text"][k]
    if not isinstance(text, str):
        raise ValueError("text is null")
    text = clean_text(text)
    if not text.strip():
        raise ValueError("text is blank (once cleaned: markup and invisible characters removed)")
    title, source = values["title"][k], values["source"][k]
    payload = article_payload(lang, None if title is None else clean_text(title), source, text)
    published = _published_at(values["published_at"][k])
    if published is not None:
        payload["published_at"] = published
    return labels, payload


def _published_at(raw: Any) -> str | None:
    """ISO 8601 in UTC of a timestamp or an ISO string with an offset; None for null; ValueError otherwise."""
    if raw is None:
        return None
    when = raw if isinstance(raw, datetime) else datetime.fromisoformat(str(raw))
    if when.tzinfo is None:
        raise ValueError(f"published_at {raw!s} has no UTC offset")
    return when.astimezone(UTC).isoformat()


def _vectors(col: pa.Array, dim: int) -> tuple[np.ndarray, dict[int, str]]:
    """``(n, dim)`` float32 of a (fixed-size) list column, and per bad row (index in the batch) the reason:
    null, another length, a value not finite, all zeros. Bad rows hold zeros."""
    n = len(col)
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_fixed_size_list(col.type):
        size = col.type.list_size
        flat = col.values.slice(col.offset * size, n * size)
        lengths = np.full(n, size)
        offsets = np.arange(n) * size
    else:
        offsets_all = np.asarray(col.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        lengths = np.diff(offsets_all)
        flat = col.values.slice(int(offsets_all[0]), int(offsets_all[-1] - offsets_all[0]))
        offsets = offsets_all[:-1] - offsets_all[0]
    right = valid & (lengths == dim)
    values = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32)
    if right.all():  # every row has dim values: they lie one after the other
        out = values.reshape(n, dim).copy()
    else:
        out = np.zeros((n, dim), np.float32)
        rows = np.flatnonzero(right)
        out[rows] = values[offsets[rows, None] + np.arange(dim)]
    finite = np.asarray(np.isfinite(out).all(axis=1), dtype=bool)
    nonzero = np.asarray(out.any(axis=1), dtype=bool)
    bad: dict[int, str] = {}
    for k in np.flatnonzero(~(right & finite & nonzero)).tolist():
        bad[k] = ("vector is null" if not valid[k] else f"vector has {lengths[k]} values, expected {dim}"
                  if lengths[k] != dim else "vector holds NaN or inf" if not finite[k] else "vector is all zeros")
    out[~finite] = 0.0
    return out, bad
