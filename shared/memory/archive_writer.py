"""Writing an archive (:mod:`.archive`): one Parquet file of articles and their vectors with the metadata an
import checks, from arrays (:func:`write_parquet`) or chunk by chunk (:class:`ArchiveWriter`). Used by the
tests and the scale benchmarks; a GPU batch job may use it or write the same schema itself."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from newsmon.shared.memory.archive import META_DIM, META_MODEL_VERSION

#: Rows per row group the writer makes: a reader decodes a row group's column chunks in pieces, but smaller
#: groups let a resumed import skip whole groups without reading them.
ROW_GROUP_ROWS = 8192


def archive_schema(dim: int, model_version: str, extra: Sequence[str] = ()) -> pa.Schema:
    """The schema :class:`ArchiveWriter` writes: the required columns, ``published_at`` (timestamp, UTC), the
    ``extra`` optional string columns (``title``, ``source``) and the metadata."""
    fields = [pa.field("id", pa.string(), nullable=False), pa.field("language", pa.string(), nullable=False),
              pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
              pa.field("labels", pa.list_(pa.string()), nullable=False), pa.field("text", pa.string(), nullable=False),
              pa.field("published_at", pa.timestamp("us", tz="UTC"))]
    fields += [pa.field(name, pa.string()) for name in extra]
    return pa.schema(fields, metadata={META_MODEL_VERSION: model_version, META_DIM: str(dim)})


class ArchiveWriter:
    """Writes an archive in chunks (a chunk's arrays in memory at a time, not the whole archive): ``with
    ArchiveWriter(path, dim, model_version) as w: w.write(...)``. The file is written to ``<path>.partial`` and
    renamed on a clean exit, so an interrupted writer leaves no file that looks complete.

    Args:
        path: the Parquet file; dim: ``d``; model_version: the model version of the vectors;
        extra: optional string columns to write (``("title", "source")``); row_group_rows: rows per row group.
    """

    def __init__(self, path: str | Path, dim: int, model_version: str, extra: Sequence[str] = (),
                 row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.path = Path(path)
        self.schema = archive_schema(dim, model_version, extra)
        self.dim, self.extra, self.row_group_rows = dim, tuple(extra), row_group_rows
        self._tmp = self.path.with_name(self.path.name + ".partial")
        self._writer = pq.ParquetWriter(self._tmp, self.schema)

    def write(self, ids: Sequence[str], langs: Sequence[str], vectors: np.ndarray, labels: Sequence[Sequence[str]],
              texts: Sequence[str], published_at: Sequence[datetime | None] | None = None,
              **extra: Sequence[str | None]) -> None:
        """Append ``n`` rows: ``vectors`` ``(n, d)`` (cast to float32), the other sequences of length ``n``;
        ``published_at`` timezone-aware datetimes or None; ``extra`` the optional columns given at construction.

        Raises:
            ValueError: a length or shape mismatch, or an unknown extra column.
        """
        n = len(ids)
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        if vecs.shape != (n, self.dim):
            raise ValueError(f"vectors: expected shape ({n}, {self.dim}), got {vecs.shape}")
        if set(extra) != set(self.extra):
            raise ValueError(f"extra columns: expected {sorted(self.extra)}, got {sorted(extra)}")
        cols = {"id": list(ids), "language": list(langs), "labels": [list(x) for x in labels], "text": list(texts),
                "published_at": list(published_at) if published_at is not None else [None] * n,
                **{k: list(v) for k, v in extra.items()}}
        wrong = {k: len(v) for k, v in cols.items() if len(v) != n}
        if wrong:
            raise ValueError(f"columns of another length than the {n} ids: {wrong}")
        arrays = {name: pa.array(values, type=self.schema.field(name).type) for name, values in cols.items()}
        arrays["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), self.dim)
        table = pa.Table.from_arrays([arrays[f.name] for f in self.schema], schema=self.schema)
        self._writer.write_table(table, row_group_size=self.row_group_rows)

    def close(self, complete: bool = True) -> None:
        """Finish the file (renamed into place when ``complete``, else removed)."""
        self._writer.close()
        if complete:
            os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.close(complete=exc_type is None)


def write_parquet(path: str | Path, ids: Sequence[str], langs: Sequence[str], vectors: np.ndarray,
                  labels: Sequence[Sequence[str]], texts: Sequence[str],
                  published_at: Sequence[datetime | None] | None = None, *, model_version: str,
                  titles: Sequence[str | None] | None = None, sources: Sequence[str | None] | None = None,
                  row_group_rows: int = ROW_GROUP_ROWS) -> Path:
    """Write one archive from arrays in memory (``vectors``: ``(n, d)``); ``titles`` / ``sources`` add those
    columns. For an archive larger than memory use :class:`ArchiveWriter` chunk by chunk. Returns ``path``."""
    extra = {k: v for k, v in (("title", titles), ("source", sources)) if v is not None}
    dim = int(np.shape(vectors)[1])
    with ArchiveWriter(path, dim, model_version, tuple(extra), row_group_rows) as w:
        w.write(ids, langs, vectors, labels, texts, published_at, **extra)
    return Path(path)
