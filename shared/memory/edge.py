"""The embedded knowledge memory: Qdrant's own engine in-process (``qdrant-edge-py``), persistent on disk.

Longer than 400 lines: the adapter and its index generations (export, child build, journal, swap, retire) share one
live handle and one lock."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from newsmon.shared.memory.base import (LEXICAL_VECTOR, NAME_BAD_CHARS, SEARCH_PAYLOAD_EXCLUDED, KnowledgeMemoryError,
                                        MemoryLockedError, check_dim)
from newsmon.shared.memory.common import (TIE_MARGIN, PointRow, QdrantAdapter, split_hybrid, stored_terms,
                                         with_cosines)
from newsmon.shared.memory.index_build import IndexParams, engine_config, ensure_payload_indexes, run_builder
from newsmon.shared.memory.read_ahead import files_within, read_ahead, read_in

#: File in the collection directory naming the live index generation (JSON; absent: generation 0, the directory
#: itself is the shard, as every collection made before index generations).
GENERATION_FILE = "generation.json"
#: Points per page of the export to the index builder.
EXPORT_PAGE = 512
#: Seconds the replaced generation stays open after a swap (reads that picked its handle just before finish).
RETIRE_AFTER_S = 2.0
#: The engine's folder of the segments an optimisation builds in a shard: a killed one's are never read again.
ENGINE_TEMP = "temp_segments"
#: The payload a search's hits carry: every field but the text.
HIT_PAYLOAD = qe.PayloadSelector.Exclude(list(SEARCH_PAYLOAD_EXCLUDED))


class EdgeMemory(QdrantAdapter):
    """Embedded knowledge memory on ``qdrant-edge-py`` (Qdrant's engine in-process).

    Data lives in ``Path(path) / collection`` (created if missing) and survives :meth:`close` and process
    restarts; reopening the directory sees it. The directory is locked (WAL lock) while open: a second
    :class:`EdgeMemory` on it, in this or another process, raises :class:`MemoryLockedError`. So all workers that
    use one collection must share one instance in one process; otherwise use a Qdrant server.

    Searches are exact brute-force scans of the unindexed segments (fast up to roughly 10^5 points);
    :meth:`optimize` builds the HNSW index explicitly (slow; never called on the request path).

    Args:
        path: parent directory of the collections.
        collection: collection name (a directory name; see :func:`collection_name`).
        dim: embedding dimension ``d``, ``>= 1``.
        index: the HNSW parameters (default :class:`IndexParams`'s).
        read_ahead_mb: MB of the live generation's files read into the page cache in the background once open,
            and of a rebuilt generation's before the swap (the engine drops a closed shard's files from the cache;
            :mod:`newsmon.shared.memory.read_ahead`); 0 = none.

    Raises:
        MemoryLockedError: the directory is already open.
        ValueError: bad arguments, or the stored collection has another
            dimension or distance.
    """

    def __init__(self, path: str | Path, collection: str, dim: int, index: IndexParams | None = None,
                 read_ahead_mb: int = 0) -> None:
        if not isinstance(collection, str) or not collection or NAME_BAD_CHARS.search(collection):
            raise ValueError(f"collection must be a non-empty name of [A-Za-z0-9_-], got {collection!r}")
        self.collection = collection
        self.dim = check_dim(dim)
        self.index = index if index is not None else IndexParams()
        self.directory = Path(path) / collection
        self._state = self._read_generation()
        old = self._stored_without_lexical()
        self._handle = self._open(engine_config(self.dim, not old, self.index))
        self._swap_lock = threading.RLock()  # writes vs the swap to a rebuilt generation
        self._rebuild_lock = threading.Lock()  # one rebuild at a time
        self._journal: list[tuple[str, Any]] | None = None  # writes since a rebuild's export began
        try:
            if old:  # a collection made before the lexical index: add it (its existing points stay dense-only)
                self._live.update(qe.UpdateOperation.create_sparse_vector(LEXICAL_VECTOR, modifier=qe.Modifier.Idf))
            self.lexical = True
            ensure_payload_indexes(self._live)
            self._remove_stale()
        except BaseException:
            self._handle.close()
            raise
        self.read_ahead_mb = read_ahead_mb
        read_ahead(self.shard_directory, read_ahead_mb)

    # -- index generations --------------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """The live index generation (0: the collection directory itself, never rebuilt)."""
        return int(self._state.get("generation", 0))

    @property
    def shard_directory(self) -> Path:
        """The live generation's shard directory."""
        return self._generation_dir(self.generation)

    def _generation_dir(self, n: int) -> Path:
        return self.directory if n == 0 else self.directory / f"gen-{n}"

    def _read_generation(self) -> dict:
        try:
            state = json.loads((self.directory / GENERATION_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"generation": 0}
        except (OSError, ValueError) as exc:
            raise KnowledgeMemoryError(f"{self.directory / GENERATION_FILE} is unreadable: {exc}") from exc
        if not isinstance(state, dict) or not isinstance(state.get("generation"), int):
            raise KnowledgeMemoryError(f"{self.directory / GENERATION_FILE} names no generation: {state!r}")
        return state

    def _save_state(self, generation: int, indexed_points: int) -> None:
        """Record ``generation`` as the live one, indexed with ``indexed_points`` points now with this memory's
        :class:`IndexParams` (:data:`GENERATION_FILE`, replaced atomically)."""
        state = {"generation": generation, "indexed_points": indexed_points,
                 "built_at": datetime.now(UTC).isoformat(timespec="seconds"), "params": vars(self.index)}
        tmp = self.directory / f".{GENERATION_FILE}.tmp"
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self.directory / GENERATION_FILE)
        self._state = state

    def _remove_stale(self) -> None:
        """Delete what a crash or a swap left behind: generations other than the live one (a rebuild that never
        finished, a replaced one), generation 0's own files once a later generation is live, and the engine's
        :data:`ENGINE_TEMP` (a killed optimisation's segment builders). Runs with the live generation open (its
        lock held) and not optimising, so no other process or thread is using them."""
        live = self.generation
        shutil.rmtree(self.shard_directory / ENGINE_TEMP, ignore_errors=True)
        for entry in self.directory.iterdir() if self.directory.is_dir() else ():
            if entry.name.startswith("gen-"):
                if entry.name != f"gen-{live}":
                    shutil.rmtree(entry, ignore_errors=True)
            elif live and entry.name != GENERATION_FILE and not entry.name.startswith(f".{GENERATION_FILE}"):
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)

    def index_status(self) -> dict:
        """The index as it stands: ``points`` (all, exact count), ``indexed`` (points in the live generation when it
        was built, 0 for generation 0), ``unindexed`` (points since: searched exactly), ``generation``, ``built_at``
        (ISO 8601 UTC or None) and the :class:`IndexParams` it was built with."""
        points = int(self._live.count(qe.CountRequest(exact=True)))
        indexed = int(self._state.get("indexed_points", 0))
        return {"points": points, "indexed": indexed, "unindexed": max(0, points - indexed),
                "generation": self.generation, "built_at": self._state.get("built_at"),
                "params": self._state.get("params")}

    def needs_index(self) -> bool:
        """Whether :meth:`rebuild_index` is due: at least ``index.min_points`` points and ``index.rebuild_unindexed``
        of them outside the index (or none indexed yet)."""
        st = self.index_status()
        if st["points"] < self.index.min_points:
            return False
        return st["indexed"] == 0 or st["unindexed"] >= self.index.rebuild_unindexed

    def rebuild_index(self, timeout_s: float = 6 * 3600.0) -> dict:
        """Build the HNSW index of every point into a new generation, off the request path, and swap to it.

        Blocks the calling thread (run it in a background thread); the memory keeps answering reads and writes
        meanwhile. The points are exported page by page to a child process (``python -m
        newsmon.shared.memory.index_build``), which writes them into a new shard, builds the index (the engine holds
        the interpreter's lock while it builds, so it cannot run in this process) and exits. Every write made after
        the export began is kept in a journal and replayed onto the new generation before the swap (writes are
        idempotent by point id), so nothing written meanwhile is lost; a decision stays searchable at once, in the
        old generation before the swap and in the new one after it. The swap waits only for the replay.

        Returns:
            ``{"generation", "points", "export_s", "build_s", "replayed", "swap_s", "seconds"}``.

        Raises:
            KnowledgeMemoryError: a rebuild is already running, the builder failed (its last lines are in the
                message) or ran past ``timeout_s``; the live generation is unchanged.
        """
        if not self._rebuild_lock.acquire(blocking=False):
            raise KnowledgeMemoryError(f"{self!r}: an index rebuild is already running")
        t0 = time.perf_counter()
        target = self._generation_dir(self.generation + 1)
        try:
            shutil.rmtree(target, ignore_errors=True)
            with self._swap_lock:
                self._journal = []
                self._live.flush()
            exported, built = run_builder(target, {"dim": self.dim, "lexical": bool(self.lexical),
                                                   "index": vars(self.index)}, self._export, timeout_s)
            swap = self._swap_to(target, exported)
            return {"generation": self.generation, "points": exported, "export_s": built["export_s"],
                    "build_s": built["build_s"], **swap, "seconds": round(time.perf_counter() - t0, 3)}
        except BaseException:
            with self._swap_lock:
                self._journal = None
            shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            self._rebuild_lock.release()

    def _export(self, sink: Any) -> int:
        """Write every point of the live generation to ``sink`` as pickled pages of ``(id, dense (d,) float32, lexical
        (indices, values) or None, payload)`` tuples, then ``None``; returns the points written. Holds the
        interpreter's lock one page at a time."""
        n, offset = 0, None
        while True:
            records, offset = self._live.scroll(qe.ScrollRequest(offset=offset, limit=EXPORT_PAGE, with_payload=True,
                                                                 with_vector=True))
            page = []
            for r in records:
                vec = r.vector if isinstance(r.vector, dict) else {"": r.vector}
                page.append((str(r.id), np.asarray(vec[""], dtype=np.float32), stored_terms(vec),
                             dict(r.payload or {})))
            if page:
                pickle.dump(page, sink, protocol=pickle.HIGHEST_PROTOCOL)
                n += len(page)
            if offset is None or not records:
                break
            time.sleep(0)  # let the request path in between pages
        pickle.dump(None, sink, protocol=pickle.HIGHEST_PROTOCOL)
        sink.flush()
        return n

    def _swap_to(self, target: Path, exported: int) -> dict:
        """Open the built generation in ``target``, replay the journal onto it and make it the live one."""
        if self.read_ahead_mb > 0:  # in the rebuild's thread, before any lock
            read_in(files_within(target, self.read_ahead_mb * 2**20))
        t0 = time.perf_counter()
        new = qe.EdgeShard.load(str(target), engine_config(self.dim, bool(self.lexical), self.index))
        try:
            with self._swap_lock:
                journal, self._journal = self._journal or [], None
                for op, arg in journal:
                    self._apply(new, op, arg)
                old = self._handle
                self._save_state(self.generation + 1, exported)
                self._handle = new
        except BaseException:
            new.close()
            raise
        swap_s = time.perf_counter() - t0
        threading.Timer(RETIRE_AFTER_S, self._retire, args=(old,)).start()
        return {"replayed": len(journal), "swap_s": round(swap_s, 3)}

    def _retire(self, old: Any) -> None:
        """Close a replaced generation and delete its files (generation 0: the directory's own shard files)."""
        try:
            old.close()
        except Exception:  # noqa: BLE001 - already closed with the memory
            pass
        if self._handle is not None:
            self._remove_stale()

    # -- opening ------------------------------------------------------------------------------------------
    def _stored_without_lexical(self) -> bool:
        """Whether the directory holds a collection whose stored config lacks the lexical sparse vector."""
        try:
            stored = json.loads((self.shard_directory / "edge_config.json").read_text())
        except (OSError, ValueError):
            return False
        return LEXICAL_VECTOR not in (stored.get("sparse_vectors") or {})

    def _open(self, config: Any) -> Any:
        shard_dir = self.shard_directory
        directory = str(shard_dir)
        has_data = (shard_dir / "edge_config.json").exists() or (shard_dir / "segments").is_dir()
        try:
            if has_data:
                return qe.EdgeShard.load(directory, config)
            shard_dir.mkdir(parents=True, exist_ok=True)
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
                "Qdrant server (NEWSMON_MEMORY__URL, memory.engine server). "
                f"Engine error: {msg}"
            )
        if "incompatible" in msg.lower():
            return ValueError(
                f"knowledge memory {self.directory} holds a collection that does not match "
                f"dim={self.dim}, cosine distance: {msg}"
            )
        return exc

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
        self._change("upsert", list(points))

    def _delete(self, pids: Sequence[str]) -> None:
        self._change("delete", list(pids))

    def _set_payloads(self, items: Sequence[tuple[str, dict]]) -> None:
        self._change("payload", list(items))

    def _change(self, op: str, arg: Any) -> None:
        """Apply one write to the live generation, and keep it in the journal while a rebuild runs."""
        with self._swap_lock:
            self._apply(self._live, op, arg)
            if self._journal is not None:
                self._journal.append((op, arg))

    @staticmethod
    def _apply(shard: Any, op: str, arg: Any) -> None:
        if op == "upsert":
            shard.update(qe.UpdateOperation.upsert_points([
                qe.Point(pid, vec if terms is None else {"": vec, LEXICAL_VECTOR: qe.SparseVector(*terms)}, pl)
                for pid, vec, pl, terms in arg]))
        elif op == "delete":
            shard.update(qe.UpdateOperation.delete_points(arg))
        else:
            for pid, fields in arg:
                shard.update(qe.UpdateOperation.set_payload([pid], fields))

    def _retrieve(self, pids: Sequence[str], with_vectors: bool, with_text: bool = True) -> list:
        return self._live.retrieve(list(pids), True if with_text else HIT_PAYLOAD, with_vectors)

    def _query(self, queries: np.ndarray, k: int, flt: Any, sparse: Any = None, lexical_k: int = 0,
               exact: bool = False, payloads: bool = True) -> list[list]:
        """See :meth:`QdrantAdapter._query`. A hybrid query is two plain requests of one batch (dense, lexical),
        united here; the lexical hits the dense ones lack get their cosine from an exact dense search of their ids
        (one request with two prefetches costs this engine several times as much: ``benchmarks/scale.py``). A hit
        whose point was deleted between the two batches is left out."""
        quant = (qe.QuantizationSearchParams(rescore=True, oversampling=2.0)
                 if self.index.quantization == "int8" and not exact else None)
        params = qe.SearchParams(hnsw_ef=max(self.index.ef, k + TIE_MARGIN), exact=exact, quantization=quant)
        with_vector = [LEXICAL_VECTOR] if self.lexical else False  # the lexical fusion reads the stored terms
        payload = HIT_PAYLOAD if payloads else False
        requests: list = []
        hybrid = [sparse is not None and bool(lexical_k) and sparse[i] is not None for i in range(len(queries))]
        for i, q in enumerate(queries):
            requests.append(qe.QueryRequest(limit=k + TIE_MARGIN, query=qe.Query.Nearest(q.tolist()), filter=flt,
                                            with_payload=payload, params=params, with_vector=with_vector))
            if hybrid[i]:
                lexical = qe.Query.Nearest(qe.SparseVector(*sparse[i]), using=LEXICAL_VECTOR)
                requests.append(qe.QueryRequest(limit=lexical_k + TIE_MARGIN, query=lexical, filter=flt,
                                                with_payload=payload, with_vector=with_vector))
        answers = self._live.query_batch(qe.QueryBatchRequest(requests)) if requests else []
        out, extra = split_hybrid(answers if payloads else self._tied_payloads(answers), hybrid, k, lexical_k)
        if extra:
            cosines = self._live.query_batch(qe.QueryBatchRequest([
                qe.QueryRequest(limit=len(hits), query=qe.Query.Nearest(queries[i].tolist()),
                                filter=qe.Filter(must=[qe.HasIdCondition({h.id for h in hits})]),
                                params=qe.SearchParams(exact=True), with_payload=False, with_vector=False)
                for i, hits in extra.items()]))
            for (i, hits), scored in zip(extra.items(), cosines, strict=True):
                out[i] += with_cosines(hits, scored)
        return out

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
        """Merge segments and build the HNSW index in this process; blocks it entirely (the engine holds the
        interpreter's lock), minutes for a large memory. Offline only (``newsmon memory index`` with no worker
        running); a serving process uses :meth:`rebuild_index`. Returns ``True`` if anything was optimised;
        searches of the indexed points are then approximate (HNSW).
        """
        with self._swap_lock:
            points = int(self._live.count(qe.CountRequest(exact=True)))
            shutil.rmtree(self.shard_directory / ENGINE_TEMP, ignore_errors=True)  # an earlier one's, killed
            changed = bool(self._live.optimize())
            if changed or not self._state.get("indexed_points"):
                self._save_state(self.generation, points)
            return changed

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
