"""The HNSW index of the embedded knowledge memory: its parameters (:class:`IndexParams`), the engine configuration
that carries them, and the builder of :meth:`newsmon.shared.memory.EdgeMemory.rebuild_index`, which runs as a child
process (the engine holds the interpreter's lock for a whole build, so a serving process cannot build in a thread).

``python -m newsmon.shared.memory.index_build TARGET CONFIG_JSON`` reads pickled pages of points from its standard
input (lists of ``(point id, dense (d,) float32, lexical (indices, values) or None, payload)``, then ``None``), writes
them into a new qdrant-edge shard in the directory ``TARGET``, builds the HNSW index (``optimize``), closes the shard
and prints one JSON line: ``{"points", "load_s", "build_s"}``. ``CONFIG_JSON``: ``{"dim", "lexical", "index"}``
(``index``: the fields of :class:`IndexParams`). Exit status 0 on success; anything else leaves ``TARGET`` for the
parent to delete.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import qdrant_edge as qe

from newsmon.shared.memory.base import LEXICAL_VECTOR, PAYLOAD_INDEXES, KnowledgeMemoryError

_INDEX_KIND = {"keyword": qe.PayloadSchemaType.Keyword, "integer": qe.PayloadSchemaType.Integer}


@dataclass(frozen=True)
class IndexParams:
    """The dense vectors' approximate-search index (HNSW, Malkov & Yashunin 2018) and its search parameters.

    Attributes:
        m: edges per node of the HNSW graph (Qdrant's ``m``).
        ef_construct: candidates kept while building (Qdrant's ``ef_construct``).
        ef: candidates kept while searching (Qdrant's ``hnsw_ef``); at least the k asked for is used.
        quantization: ``"none"`` or ``"int8"`` (scalar quantisation of the indexed vectors, scored with rescoring
            by the original vectors).
        min_points: a memory with fewer points is never indexed (an exact scan is as fast).
        rebuild_unindexed: the embedded engine rebuilds its index (a new generation, off the request path) once
            this many points are outside it.
    """

    m: int = 16
    ef_construct: int = 256
    ef: int = 1024
    quantization: str = "none"
    min_points: int = 20_000
    rebuild_unindexed: int = 50_000

    def __post_init__(self) -> None:
        if self.quantization not in ("none", "int8"):
            raise ValueError(f"quantization must be 'none' or 'int8', got {self.quantization!r}")
        for name in ("m", "ef_construct", "ef", "min_points", "rebuild_unindexed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def engine_config(dim: int, lexical: bool, index: IndexParams) -> Any:
    """The ``qdrant_edge.EdgeConfig`` of a collection: dense cosine vectors of ``dim``, the lexical sparse vector
    (IDF modifier) when ``lexical``, HNSW ``index.m`` / ``index.ef_construct`` (no payload sub-graphs: the only
    filter on the request path, ``labelled``, keeps almost every point), int8 scalar quantisation when asked.

    Memory: the vectors, the HNSW graph, the sparse index and the payloads (the texts are most of it) are memory-mapped
    files (``Memory.Cached``: in the page cache while used, not the process's own memory); only the quantised
    vectors, when asked for, stay in RAM."""
    quant = (qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True)
             if index.quantization == "int8" else None)
    return qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, memory=qe.Memory.Cached),
        sparse_vectors={LEXICAL_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=qe.Memory.Cached)}
        if lexical else {},
        hnsw_config=qe.HnswIndexConfig(m=index.m, ef_construct=index.ef_construct, full_scan_threshold=10_000,
                                       max_indexing_threads=0, payload_m=0, memory=qe.Memory.Cached),
        payload_memory=qe.Memory.Cached,
        quantization_config=quant,
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1))  # KB: an optimize indexes every segment


def ensure_payload_indexes(shard: Any) -> None:
    """Create the payload indexes of :data:`PAYLOAD_INDEXES` that ``shard`` lacks."""
    existing = set(shard.info().payload_schema)
    for name, kind in PAYLOAD_INDEXES.items():
        if name not in existing:
            shard.update(qe.UpdateOperation.create_field_index(name, _INDEX_KIND[kind]))


def run_builder(target: Path, config: dict, export: Callable[[IO[bytes]], int], timeout_s: float
                ) -> tuple[int, dict]:
    """Start the builder child process for ``target`` and feed it with ``export`` (which writes the pages to the
    child's standard input and returns the points written); wait for the build.

    Returns:
        (points exported, the builder's JSON line plus ``export_s``).

    Raises:
        KnowledgeMemoryError: the builder failed (its last lines are in the message) or ran past ``timeout_s``.
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "newsmon.shared.memory.index_build", str(target),
                                 json.dumps(config)], stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert proc.stdin is not None
        try:
            try:
                exported = export(proc.stdin)
            except BrokenPipeError:
                exported = -1  # the builder died; its exit status and last lines say why
            finally:
                proc.stdin.close()
            export_s = time.perf_counter() - t0
            proc.wait(timeout=max(1.0, timeout_s - export_s))
        except subprocess.TimeoutExpired:
            raise KnowledgeMemoryError(f"the index builder of {target} ran past {timeout_s} s") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0 or exported < 0:
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise KnowledgeMemoryError(f"the index builder of {target} failed (exit {proc.returncode}): "
                                   + " | ".join(tail))
    built = json.loads(stdout.decode("utf-8").strip().splitlines()[-1])
    return exported, {**built, "export_s": round(export_s, 3)}


def build(target: Path, config: dict, source: IO[bytes]) -> dict:
    """Write the pages read from ``source`` into a new shard in ``target`` and index it (the child's work).

    Raises:
        ValueError: ``target`` already holds a shard.
    """
    if (target / "edge_config.json").exists():
        raise ValueError(f"{target} already holds a shard")
    index = IndexParams(**config["index"])
    target.mkdir(parents=True, exist_ok=True)
    shard = qe.EdgeShard.create(str(target), engine_config(int(config["dim"]), bool(config["lexical"]), index))
    try:
        ensure_payload_indexes(shard)
        t0, n = time.perf_counter(), 0
        while True:
            page = pickle.load(source)
            if page is None:
                break
            points = []
            for pid, dense, lexical, payload in page:
                vec = dense.tolist() if lexical is None else {"": dense.tolist(),
                                                              LEXICAL_VECTOR: qe.SparseVector(*lexical)}
                points.append(qe.Point(pid, vec, payload))
            shard.update(qe.UpdateOperation.upsert_points(points))
            n += len(points)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        shard.optimize()
        build_s = time.perf_counter() - t0
        shard.flush()
    finally:
        shard.close()
    return {"points": n, "load_s": round(load_s, 3), "build_s": round(build_s, 3)}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m newsmon.shared.memory.index_build TARGET CONFIG_JSON", file=sys.stderr)
        return 2
    result = build(Path(argv[0]), json.loads(argv[1]), sys.stdin.buffer)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
