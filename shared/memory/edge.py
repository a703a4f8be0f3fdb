"""The embedded knowledge memory: Qdrant's own engine in-process (``qdrant-edge-py``), persistent on disk."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from newsmon.shared.memory.base import (LEXICAL_VECTOR, NAME_BAD_CHARS, PAYLOAD_INDEXES, MemoryLockedError,
                                        check_dim)
from newsmon.shared.memory.common import PointRow, QdrantAdapter

_INDEX_KIND = {"keyword": qe.PayloadSchemaType.Keyword, "integer": qe.PayloadSchemaType.Integer}


class EdgeMemory(QdrantAdapter):
    """Embedded knowledge memory on ``qdrant-edge-py`` (Qdrant's engine in-process).

    Data lives in ``Path(path) / collection`` (created if missing) and
    survives :meth:`close` and process restarts; reopening the directory sees
    it. The directory is locked (WAL lock) while open: a second
    :class:`EdgeMemory` on it, in this or another process, raises
    :class:`MemoryLockedError`. So all workers that use one collection must
    share one instance in one process; otherwise use a Qdrant server.

    Searches are exact brute-force scans of the unindexed segments (fast up
    to roughly 10^5 points); :meth:`optimize` builds the HNSW index
    explicitly (slow; never called on the request path).

    Args:
        path: parent directory of the collections.
        collection: collection name (a directory name; see :func:`collection_name`).
        dim: embedding dimension ``d``, ``>= 1``.

    Raises:
        MemoryLockedError: the directory is already open.
        ValueError: bad arguments, or the stored collection has another
            dimension or distance.
    """

    def __init__(self, path: str | Path, collection: str, dim: int) -> None:
        if not isinstance(collection, str) or not collection or NAME_BAD_CHARS.search(collection):
            raise ValueError(f"collection must be a non-empty name of [A-Za-z0-9_-], got {collection!r}")
        self.collection = collection
        self.dim = check_dim(dim)
        self.directory = Path(path) / collection
        dense = qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine)
        lexical = {LEXICAL_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
        old = self._stored_without_lexical()
        self._handle = self._open(qe.EdgeConfig(vectors=dense, sparse_vectors={} if old else lexical))
        try:
            if old:  # a collection made before the lexical index: add it (its existing points stay dense-only)
                self._live.update(qe.UpdateOperation.create_sparse_vector(LEXICAL_VECTOR, modifier=qe.Modifier.Idf))
            self.lexical = True
            self._ensure_indexes()
        except BaseException:
            self._handle.close()
            raise

    # -- opening ------------------------------------------------------------------------------------------
    def _stored_without_lexical(self) -> bool:
        """Whether the directory holds a collection whose stored config lacks the lexical sparse vector."""
        try:
            stored = json.loads((self.directory / "edge_config.json").read_text())
        except (OSError, ValueError):
            return False
        return LEXICAL_VECTOR not in (stored.get("sparse_vectors") or {})

    def _open(self, config: Any) -> Any:
        directory = str(self.directory)
        has_data = (self.directory / "edge_config.json").exists() or (self.directory / "segments").is_dir()
        try:
            if has_data:
                return qe.EdgeShard.load(directory, config)
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                return qe.EdgeShard.create(directory, config)
            except Exception as exc:  # lost a creation race: somebody created it meanwhile
                if "already contains" not in str(exc):
                    raise
                return qe.EdgeShard.load(directory, config)
        except Exception as exc:
            raise self._translate_open_error(exc) from exc

    def _translate_open_error(self, exc: Exception) -> Exception:
        msg = str(exc)
        if "WouldBlock" in msg or "Can't init WAL" in msg:
            return MemoryLockedError(
                f"knowledge memory {self.directory} is already open (WAL lock held) by another "
                "EdgeMemory in this or another process. Embedded mode (qdrant-edge) needs all "
                "workers in one process sharing one EdgeMemory; for several processes run a "
                "Qdrant server and open the memory with a URL (open_memory(url=...)). "
                f"Engine error: {msg}"
            )
        if "incompatible" in msg.lower():
            return ValueError(
                f"knowledge memory {self.directory} holds a collection that does not match "
                f"dim={self.dim}, cosine distance: {msg}"
            )
        return exc

    def _ensure_indexes(self) -> None:
        existing = set(self._live.info().payload_schema)
        for name, kind in PAYLOAD_INDEXES.items():
            if name not in existing:
                self._live.update(qe.UpdateOperation.create_field_index(name, _INDEX_KIND[kind]))

    # -- engine primitives (see QdrantAdapter) ------------------------------------------------------------
    def _match(self, key: str, value: str) -> Any:
        return qe.FieldCondition(key, match=qe.MatchValue(value))

    def _match_any(self, key: str, values: list[str]) -> Any:
        return qe.FieldCondition(key, match=qe.MatchAny(values))

    def _range(self, key: str, gte: float | None = None, lt: float | None = None) -> Any:
        bounds = {k: v for k, v in (("gte", gte), ("lt", lt)) if v is not None}
        return qe.FieldCondition(key, range=qe.RangeFloat(**bounds))

    def _has_id(self, pids: list[str]) -> Any:
        return qe.HasIdCondition(set(pids))

    def _make_filter(self, must: list, must_not: list) -> Any:
        return qe.Filter(must=must, must_not=must_not)

    def _write(self, points: Sequence[PointRow]) -> None:
        self._live.update(qe.UpdateOperation.upsert_points([
            qe.Point(pid, vec if terms is None else {"": vec, LEXICAL_VECTOR: qe.SparseVector(*terms)}, pl)
            for pid, vec, pl, terms in points]))

    def _delete(self, pids: Sequence[str]) -> None:
        self._live.update(qe.UpdateOperation.delete_points(list(pids)))

    def _set_payloads(self, items: Sequence[tuple[str, dict]]) -> None:
        for pid, fields in items:
            self._live.update(qe.UpdateOperation.set_payload([pid], fields))

    def _retrieve(self, pids: Sequence[str], with_vectors: bool) -> list:
        return self._live.retrieve(list(pids), True, with_vectors)

    def _query(self, queries: np.ndarray, k: int, flt: Any, sparse: Any = None, lexical_k: int = 0) -> list[list]:
        requests = []
        for i, q in enumerate(queries):
            dense = qe.Query.Nearest(q.tolist())
            terms = sparse[i] if sparse is not None else None
            if terms is None:
                requests.append(qe.QueryRequest(limit=k, query=dense, filter=flt, with_payload=True))
                continue
            lexical = qe.Query.Nearest(qe.SparseVector(*terms), using=LEXICAL_VECTOR)
            requests.append(qe.QueryRequest(
                prefetches=[qe.Prefetch(query=dense, limit=k, filter=flt),
                            qe.Prefetch(query=lexical, limit=lexical_k, filter=flt)],
                query=dense, limit=k + lexical_k, with_payload=True))
        return self._live.query_batch(qe.QueryBatchRequest(requests))

    def _count(self, flt: Any) -> int:
        return self._live.count(qe.CountRequest(exact=True, filter=flt))

    def _scroll_page(self, flt: Any, limit: int, offset: Any, with_vectors: bool) -> tuple[list, Any]:
        return self._live.scroll(qe.ScrollRequest(offset=offset, limit=limit, filter=flt, with_payload=True,
                                                  with_vector=with_vectors))

    # -- embedded engine only -----------------------------------------------------------------------------
    def flush(self) -> None:
        """Force pending writes to disk (the WAL already makes them durable)."""
        self._live.flush()

    def optimize(self) -> bool:
        """Merge segments and build the HNSW index; blocks, can take minutes.

        Call it offline (e.g. after a bulk load), never on the request path.
        Returns ``True`` if anything was optimised. After it, searches are
        approximate (HNSW) instead of exact.
        """
        return bool(self._live.optimize())

    def close(self) -> None:
        """Flush, close and unlock the directory. Idempotent; the instance is unusable afterwards."""
        shard, self._handle = getattr(self, "_handle", None), None
        if shard is not None:
            try:
                shard.flush()
            finally:
                shard.close()

    def __repr__(self) -> str:
        return f"EdgeMemory(path={str(self.directory.parent)!r}, collection={self.collection!r}, dim={self.dim})"
