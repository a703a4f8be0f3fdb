"""Archive size: the knowledge memory and the scorer at 100,000, 300,000 and 1,000,000 points of one language
memory, built through the product's own import path (a Parquet archive, ``newsmon memory import``'s function),
with the import rate, the index build, batch-of-16 scoring p50 / p99 without the encoder, the recall of the
indexed search against exact search, decision-to-visible latency (idle and while the index builds), worker start
to ready, the stall when a calibration record changes, RSS (anonymous and file-backed) and disk.

The archive is synthetic but shaped like one (seeded, deterministic, generated in chunks):

- vectors ``d = 384`` as topic clusters that look like text embeddings: a shared mean direction (the anisotropy
  of e5 embeddings: mean pairwise cosine about 0.84, as multilingual-e5-small's on the shared corpora, see
  :data:`E5_REFERENCE`), 400 topics, 12,000 subtopics of Zipf sizes, noise with a decaying spectrum in a random
  basis;
- labels: 12,000, Zipf frequencies, 1-5 per article drawn from the article's subtopic and topic (so neighbours
  share labels, and labels co-occur);
- texts re-sampled (runs of sentences) from ``../shared/data`` (sentinews_sl and reuters21578_en; each subtopic
  its own few source articles, so lexical and dense neighbours agree), cut to the payload limit the product
  stores; language ``sl`` for every point (the sizes are per language memory);
- query articles: held-out points of the same generator.

Per size, in order (``--skip`` leaves steps out; every wait has a time-out):

1. ``generate``: the archive written through the product's Parquet writer (not a product figure);
2. ``import``: the product's bulk import function (rows/s, wall time), in a child process;
3. ``index``: ``EdgeMemory.rebuild_index()`` in a thread while decisions are applied every 0.5 s (decision to
   visible while the index builds), then the index status;
4. ``recall``: the indexed dense top-k against exact search, k = the record's top_k and the hybrid candidates;
5. ``scoring``: ``Scorer.propose`` on batches of 16 (retrieve, fuse, score, decide; vectors given: no encoder),
   p50 / p99 and the retrieve / score split, for the calibration record's parameters (hybrid: the first pass after
   the index build, then the same batches again, warm; then without the lexical search, the fusion re-ranking the
   dense candidates only) and dense only;
6. ``calibrated``: a record shaped like the corpora's calibrations (every lever they keep, stacking included:
   :mod:`scale_calibrated`) written with its models, and batches of 16 scored with it beside the uncalibrated
   record, in alternating rounds (the ratio from the same run), then the calibrated record alone for as many
   rounds, each on articles no earlier batch scored (a worker serves one record and never the same article
   twice: its p99 is the target's figure), in turn with the alternating rounds' articles again (what the
   memory's caches give articles they have served);
7. ``visible``: decision to visible with the index built (idle);
8. ``calibration``: a new calibration record (with its stored models, as the calibration job writes it) while
   batches are proposed: the worst batch after the change against the p99 before;
9. ``worker``: ``newsmon worker all`` (embedded broker) spawned on the memory: spawn to ``/readyz`` 200, then one
   article published on its broker and the time to its proposal (the first batch opens the memory), its RSS;
   and RSS of this process (the classifier without the encoder: anonymous, file-backed, the memory's mapped
   files) and disk.

One record per size, ``benchmarks/results/scale.<size>/`` (the measurements page shows the latest of each), and
with several sizes one table of them all printed at the end.

Usage (repository root; the 1,000,000 size wants a quiet machine, about 10 GB of disk and an hour)::

    .venv/bin/python benchmarks/scale.py --sizes 100000,300000,1000000 --queries 480 --batch 16
    .venv/bin/python benchmarks/scale.py --sizes 20000 --workdir /tmp/scale --keep --skip worker
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from record import BenchmarkRecord, markdown_table

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("generate", "import", "index", "recall", "scoring", "calibrated", "visible", "calibration", "worker")
LANG = "sl"


def record_name(size: int, skip: list[str]) -> str:
    """The record's benchmark name: ``scale.<size>`` for a run of every step, else ``scale.<size>.<steps run, joined
    by +>`` (a partial run is not the latest full run of its size on the measurements page)."""
    run = [s for s in STEPS if s not in skip]
    return f"scale.{size}" if len(run) == len(STEPS) else f"scale.{size}." + "+".join(run)
#: Rows generated and written per chunk (vectors: 50,000 x 384 float32 = 77 MB).
CHUNK = 50_000
#: The issue's acceptance at 1,000,000 points, 12,000 labels, 2 cores.
#: multilingual-e5-small (torch, passage role) on the first 300 articles of each shared corpus: mean pairwise cosine,
#: mean cosine of the nearest, 10th and 50th nearest other article (the generator is shaped after these)
E5_REFERENCE = {"sentinews_sl": {"mean_cos": 0.859, "top1_cos": 0.912, "top10_cos": 0.889, "top50_cos": 0.874},
                "reuters21578_en": {"mean_cos": 0.819, "top1_cos": 0.904, "top10_cos": 0.864, "top50_cos": 0.838}}
TARGETS = {"batch_p99_ms": 250.0, "recall": 0.98, "visible_s": 1.0, "ready_s": 60.0, "stall_s": 1.0,
           "anon_rss_gb": 3.0}


# -- the synthetic archive -------------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _zipf(n: int, s: float, offset: float) -> np.ndarray:
    p = 1.0 / (np.arange(n) + 1.0 + offset) ** s
    return p / p.sum()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def corpus_sentences(data: Path) -> list[list[str]]:
    """The articles of the shared corpora (every split), each as its list of sentences (the corpus loader's
    cleaned text)."""
    from newsmon.shared.data import load_corpus

    out = []
    for name in ("sentinews_sl", "reuters21578_en"):
        for a in load_corpus(data / name).articles:
            sentences = [s for s in _SENTENCE_END.split(a.text) if s.strip()]
            if sentences:
                out.append(sentences)
    if not out:
        raise SystemExit(f"no corpus articles under {data} (sentinews_sl, reuters21578_en)")
    return out


@dataclass
class Rows:
    """Generated rows: ids, ``(n, d)`` float32 unit vectors, label sets, texts, publication times, subtopics."""

    ids: list[str]
    vectors: np.ndarray
    labels: list[list[str]]
    texts: list[str]
    published_at: list[datetime]
    subtopic: np.ndarray


class Archive:
    """The deterministic generator of the archive's rows (see the module docstring); chunk ``c`` holds the rows
    ``c * CHUNK ..`` whatever the size, so a smaller size is a prefix of a larger one.

    Args:
        sentences: the source articles as sentences (:func:`corpus_sentences`); seed: the one seed;
        dim / topics / subtopics / labels: the shape; text_chars: the payload limit texts are cut to.
    """

    #: weights of the parts of a vector: the shared mean direction, topic, subtopic, noise (squared: shares of
    #: the variance; pairs of unrelated articles then have cosine ~ MEAN**2 / total). Chosen so that 300 points
    #: look like :data:`E5_REFERENCE` (mean 0.837, nearest 0.909, 10th 0.869, 50th 0.854)
    MEAN, TOPIC, SUBTOPIC, NOISE = 1.64, 0.42, 0.40, 0.42

    def __init__(self, sentences: list[list[str]], seed: int = 26, dim: int = 384, topics: int = 400,
                 subtopics: int = 12_000, labels: int = 12_000, text_chars: int = 20_000) -> None:
        rng = np.random.default_rng([seed, 0])
        self.seed, self.dim, self.n_topics, self.n_subtopics, self.n_labels = seed, dim, topics, subtopics, labels
        self.sentences, self.text_chars = sentences, text_chars
        # anisotropy: a decaying spectrum in a random orthonormal basis, and one shared mean direction
        self.basis = np.linalg.qr(rng.standard_normal((dim, dim)))[0].astype(np.float32)
        self.spectrum = (1.0 / np.sqrt(1.0 + np.arange(dim) / 8.0)).astype(np.float32)
        self.mean = _unit(rng.standard_normal(dim)).astype(np.float32)
        self.topics = self._directions(rng, topics)
        self.parent = rng.choice(topics, size=subtopics, p=_zipf(topics, 0.7, 5.0))
        self.subtopic_dirs = self._directions(rng, subtopics)
        self.spread = rng.uniform(0.8, 1.25, size=subtopics).astype(np.float32)  # tight and loose subtopics
        self.sub_p = _zipf(subtopics, 1.0, 10.0)[rng.permutation(subtopics)]
        # labels: Zipf weights; every label owned by one subtopic (all 12,000 occur), frequent ones shared
        label_w = _zipf(labels, 1.0, 2.0)
        self.label_names = [f"label-{j:05d}" for j in range(labels)]
        owner = rng.permutation(labels) % subtopics
        self.sub_labels: list[list[int]] = [[] for _ in range(subtopics)]
        for j, s in enumerate(owner):
            self.sub_labels[s].append(j)
        for s in range(subtopics):
            extra = rng.choice(labels, size=rng.choice([0, 1, 2], p=[0.4, 0.45, 0.15]), p=label_w)
            self.sub_labels[s] = list(dict.fromkeys([*self.sub_labels[s], *extra.tolist()]))[:3]
        self.topic_labels = [rng.choice(labels, size=rng.integers(1, 3), p=label_w).tolist() for _ in range(topics)]
        self.label_w = label_w
        # texts: each subtopic re-samples a few source articles (8, consecutive in a shuffled order)
        self.text_start = rng.integers(0, len(sentences), size=subtopics)
        self.text_order = rng.permutation(len(sentences))

    def _directions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` unit directions drawn with the anisotropic spectrum."""
        z = rng.standard_normal((n, self.dim)).astype(np.float32) * self.spectrum
        return _unit(z @ self.basis.T)

    def rows(self, rng: np.random.Generator, n: int, ids: list[str], base_time: datetime) -> Rows:
        """``n`` rows drawn with ``rng``."""
        sub = rng.choice(self.n_subtopics, size=n, p=self.sub_p)
        noise = _unit((rng.standard_normal((n, self.dim)).astype(np.float32) * self.spectrum) @ self.basis.T)
        x = (self.MEAN * self.mean + self.TOPIC * self.topics[self.parent[sub]]
             + self.SUBTOPIC * self.subtopic_dirs[sub] + (self.NOISE * self.spread[sub])[:, None] * noise)
        vectors = _unit(x).astype(np.float32)
        labels: list[list[str]] = []
        u = rng.random((n, 8))
        extra = rng.choice(self.n_labels, size=n, p=self.label_w)
        for i, s in enumerate(sub):
            own = self.sub_labels[s]
            chosen = [j for k, j in enumerate(own) if u[i, k] < (0.9 if k == 0 else 0.6)]
            chosen += [j for k, j in enumerate(self.topic_labels[self.parent[s]]) if u[i, 3 + k] < 0.45]
            if u[i, 5] < 0.2:
                chosen.append(int(extra[i]))
            chosen = list(dict.fromkeys(chosen))[:5] or [own[0]]
            labels.append([self.label_names[j] for j in chosen])
        texts = []
        pick = rng.integers(0, 8, size=n)
        for i, s in enumerate(sub):
            src = self.sentences[self.text_order[(self.text_start[s] + pick[i]) % len(self.sentences)]]
            length = min(len(src), 3 + int(u[i, 6] * 12))
            start = int(u[i, 7] * (len(src) - length + 1))
            texts.append(" ".join(src[start:start + length])[: self.text_chars])
        published = [base_time + timedelta(seconds=int(t)) for t in rng.integers(0, 10 * 365 * 86400, size=n)]
        return Rows(ids, vectors, labels, texts, published, sub)

    def chunk(self, c: int, rows: int = CHUNK) -> Rows:
        """Chunk ``c`` of the archive (``rows`` rows; the last chunk of a size may be cut by the caller)."""
        rng = np.random.default_rng([self.seed, 1, c])
        ids = [f"scale-{c * CHUNK + i:07d}" for i in range(rows)]
        return self.rows(rng, rows, ids, datetime(2016, 1, 1, tzinfo=UTC))

    def chunks(self, n: int) -> Iterator[Rows]:
        """The first ``n`` rows, chunk by chunk."""
        for c in range(math.ceil(n / CHUNK)):
            yield self.chunk(c, min(CHUNK, n - c * CHUNK))

    def queries(self, n: int) -> Rows:
        """``n`` held-out articles of the same distribution (never in the memory)."""
        rng = np.random.default_rng([self.seed, 2])
        return self.rows(rng, n, [f"scale-query-{i:05d}" for i in range(n)], datetime(2026, 1, 1, tzinfo=UTC))

    def extra(self, n: int, tag: str) -> Rows:
        """``n`` further articles (decisions on new points), ids ``scale-<tag>-<i>``."""
        rng = np.random.default_rng([self.seed, 3, sum(map(ord, tag))])
        return self.rows(rng, n, [f"scale-{tag}-{i:05d}" for i in range(n)], datetime(2026, 6, 1, tzinfo=UTC))


def vector_stats(vectors: np.ndarray, sub: np.ndarray) -> dict:
    """Shape of a sample of vectors, as :data:`E5_REFERENCE` measures it (300 points): mean pairwise cosine, mean
    cosine of the nearest, 10th and 50th nearest other point, and the share of nearest of the same subtopic."""
    C = vectors @ vectors.T
    n = len(vectors)
    off = C[~np.eye(n, dtype=bool)]
    np.fill_diagonal(C, -2)
    order = np.argsort(-C, axis=1)
    top = np.take_along_axis(C, order[:, :50], axis=1)
    return {"n": n, "mean_cos": round(float(off.mean()), 3), "top1_cos": round(float(top[:, 0].mean()), 3),
            "top10_cos": round(float(top[:, 9].mean()), 3), "top50_cos": round(float(top[:, 49].mean()), 3),
            "top1_same_subtopic": round(float((sub[order[:, 0]] == sub).mean()), 3)}


# -- process memory and disk ------------------------------------------------------------------------------------


def rss(pid: int | str = "self") -> dict[str, float]:
    """Resident memory of a process in MB: ``rss``, ``anon`` (heap: RssAnon), ``file`` (file-backed pages:
    RssFile, the memory-mapped segments among them), ``hwm`` (peak RSS of the process' life), from
    /proc/<pid>/status."""
    out = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    out[{"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "RssShmem": "shmem",
                         "VmHWM": "hwm"}[key]] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


def mapped(pid: int | str, under: Path) -> float:
    """MB of ``pid``'s resident pages mapped from files under ``under`` (the memory's segments), from
    /proc/<pid>/smaps; 0 when unreadable."""
    total, inside = 0, False
    prefix = str(under.resolve())
    try:
        with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line[0].isupper() or ":" not in line.split()[0]:  # a mapping's header line
                    parts = line.split()
                    inside = len(parts) >= 6 and parts[5].startswith(prefix)
                elif inside and line.startswith("Rss:"):
                    total += int(line.split()[1])
    except OSError:
        return 0.0
    return round(total / 1024, 1)


class RssSampler:
    """Samples this process' RSS every ``every`` seconds in a thread; :meth:`peak` of the samples since
    :meth:`reset`."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._peak: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        now = rss()
        now["children"] = sum(rss(pid).get("rss", 0.0) for pid in children(os.getpid()))
        with self._lock:
            for k in ("rss", "anon", "file", "children"):
                if k in now:
                    self._peak[k] = max(self._peak.get(k, 0.0), now[k])

    def reset(self) -> None:
        with self._lock:
            self._peak = {}

    def peak(self) -> dict[str, float]:
        self.sample()
        with self._lock:
            return dict(self._peak)


def children(pid: int) -> list[int]:
    """The process ids of ``pid``'s descendants (the index builder, the worker), from /proc."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def du(path: Path) -> float:
    """MB on disk of ``path`` and what is under it (allocated blocks, as ``du``)."""
    if path.is_file():
        return round(path.stat().st_blocks * 512 / 2**20, 1)
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return round(total / 2**20, 1)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def ms(x: float) -> float:
    return round(x * 1000, 1)


# -- the product's pieces -------------------------------------------------------------------------------------


def settings_for(workdir: Path, size: int):
    """The settings of one size: home ``<workdir>/home`` (its ``models`` linked to the default home's, so the
    encoder is not imported again), memory ``<workdir>/<size>/memory``; the rest from the environment."""
    from newsmon.shared.config import Settings

    s = Settings()
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    models = home / "models"
    default_models = s.home / "models"
    if not models.exists() and default_models.is_dir() and default_models.resolve() != models.resolve():
        models.symlink_to(default_models.resolve(), target_is_directory=True)
    s = s.model_copy(update={"home": home})
    s.memory.path = workdir / str(size) / "memory"
    return s


class NoEncoder:
    """Stands for the encoder in a :class:`~newsmon.shared.classifier.Classifier` that never embeds: the
    production model's version and dimension (so collections carry the worker's names), ``encode`` refused."""

    adapter = None

    def __init__(self, model_id: str, dim: int) -> None:
        self.model_id, self.dim = model_id, dim

    def encode(self, *_a: Any, **_k: Any) -> np.ndarray:
        raise RuntimeError("the scale benchmark scores given vectors; nothing may embed")

    def close(self) -> None:
        pass


def model_version(settings) -> tuple[str, int]:
    from newsmon.shared.classifier import model_identity

    return model_identity(settings)


def archive_writer():
    """The product's Parquet archive writer: (``ArchiveWriter`` class or None, ``write_parquet`` function)."""
    import importlib

    for name in ("newsmon.shared.memory.archive_writer", "newsmon.shared.memory.archive", "newsmon.shared.memory.bulk"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "write_parquet") or hasattr(mod, "ArchiveWriter"):
            return getattr(mod, "ArchiveWriter", None), getattr(mod, "write_parquet", None)
    raise RuntimeError("the product's Parquet writer (newsmon.shared.memory.archive_writer) is not installed: the "
                       "bulk import has not landed on this checkout")


def write_archive(path: Path, gen: Archive, n: int, version: str) -> dict:
    """Write the first ``n`` rows to ``path`` through the product's writer, chunk by chunk. Several files
    (``path`` is then a folder) when the product only has the one-shot ``write_parquet``."""
    writer_cls, write_parquet = archive_writer()
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    files = []
    counts: dict[str, int] = {}
    if writer_cls is not None:
        with writer_cls(path, gen.dim, version) as w:
            for rows in gen.chunks(n):
                w.write(rows.ids, [LANG] * len(rows.ids), rows.vectors, rows.labels, rows.texts, rows.published_at)
                count_labels(rows, counts)
        files = [path]
    else:
        path.mkdir(parents=True, exist_ok=True)
        for c, rows in enumerate(gen.chunks(n)):
            f = path / f"part-{c:04d}.parquet"
            write_parquet(f, rows.ids, [LANG] * len(rows.ids), rows.vectors, rows.labels, rows.texts,
                          rows.published_at, model_version=version)
            count_labels(rows, counts)
            files.append(f)
    label_counts_file(path).write_text(json.dumps(counts), encoding="utf-8")
    return {"seconds": round(time.perf_counter() - t0, 1), "files": [str(f) for f in files],
            "mb": round(sum(f.stat().st_size for f in files) / 2**20, 1), "labels": len(counts)}


def count_labels(rows: Rows, counts: dict[str, int]) -> None:
    for labels in rows.labels:
        for lb in labels:
            counts[lb] = counts.get(lb, 0) + 1


def label_counts_file(archive: Path) -> Path:
    """Where the archive's label counts are kept beside it (what the calibration job would count in the memory)."""
    return archive.parent / f"{archive.name}.label_counts.json"


def label_counts(archive: Path, gen: Archive, n: int) -> dict[str, int]:
    """Articles per label of the first ``n`` rows: the file written with the archive, else generated again."""
    f = label_counts_file(archive)
    if f.is_file():
        return json.loads(f.read_text(encoding="utf-8"))
    counts: dict[str, int] = {}
    for rows in gen.chunks(n):
        count_labels(rows, counts)
    return counts


def import_function() -> Callable:
    """The product's bulk import function."""
    try:
        from newsmon.shared.memory import bulk
    except ImportError as exc:
        raise RuntimeError("newsmon.shared.memory.bulk is not installed: the bulk import has not landed") from exc
    for name in ("import_parquet", "import_archive", "bulk_import"):
        if hasattr(bulk, name):
            return getattr(bulk, name)
    raise RuntimeError(f"newsmon.shared.memory.bulk has no import function ({dir(bulk)})")


def _import_child(files: list[str], workdir: str, size: int, queue: Any) -> None:
    """In a child process: import the archive files through the product's function into the size's memory;
    puts the report (or the error) on ``queue``."""
    try:
        from newsmon.shared.memory import MemoryRouter

        s = settings_for(Path(workdir), size)
        version, dim = model_version(s)
        fn = import_function()
        router = MemoryRouter(s, version, dim)
        t0 = time.perf_counter()
        reports = []
        try:
            for f in files:
                reports.append(fn(f, router, model_version=version, restart=True))
            t_close = time.perf_counter()
        finally:
            router.close()
        wall = time.perf_counter() - t0
        rows = sum(r.imported for r in reports)
        bad = sum(r.bad for r in reports)
        queue.put({"rows": rows, "bad": bad, "wall_s": round(wall, 1), "rows_per_s": round(rows / wall, 1),
                   "close_s": round(time.perf_counter() - t_close, 1), "peak_rss_mb": rss()["hwm"],
                   "reports": [r.summary() for r in reports]})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def run_import(files: list[str], workdir: Path, size: int, timeout_s: float) -> dict:
    """The import in a spawned child process (this process' RSS stays the classifier's)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_import_child, args=(files, str(workdir), size, queue), name="scale-import")
    proc.start()
    try:
        out = queue.get(timeout=timeout_s)
    except Exception:  # noqa: BLE001 - queue.Empty: the time-out
        out = {"error": f"the import did not finish within {timeout_s:.0f} s"}
    proc.join(30)
    if proc.is_alive():
        proc.kill()
        proc.join(10)
    if "error" in out:
        raise RuntimeError(out["error"])
    return out


def calibration_record(clf, params: dict, counts: dict[str, int], written_by: str = "scale"):
    """Write a calibration record of ``params`` for the ``sl`` collection as the calibration job does (its
    models, here the label counts, stored first; :func:`newsmon.training_jobs.calibrate_memory._write_record`),
    through stores of its own (another process' view: the classifier's cache is not told). Returns its id."""
    from newsmon.shared.scoring.models import ModelCache
    from newsmon.shared.scoring.records import CalibrationRecord, CalibrationStore, record_id
    from newsmon.shared.scoring.stored import ModelStore

    record = CalibrationRecord(collection=clf.collection(LANG), language=LANG, model_version=clf.model_version,
                               params=params, objective="micro_f1 + subset_accuracy",
                               fit_on={"scale_benchmark": True}, written_by=written_by,
                               labels=sorted(counts))
    cache = ModelCache(record_id(record))
    cache.counts = dict(counts)
    store, models = CalibrationStore(clf.settings), ModelStore(clf.settings)
    try:
        record.models = models.write(cache)
        store.write(record)
    finally:
        store.close()
        models.close()
    return record_id(record)


def record_params(top_k: int, lexical_weight: float, candidates: int) -> dict:
    """The scoring parameters of the benchmark's calibration record: a calibrated shape (k, tau, hybrid
    retrieval, bucket thresholds, the threshold, tail-support, new-label-support and too-few-words rules), no
    score components (their models would be fitted by the calibration job on a sample)."""
    from newsmon.schemas.scoring import ScoringParams

    p = ScoringParams(top_k=top_k, tau=0.05, threshold=0.35, lexical_weight=lexical_weight,
                      lexical_candidates=candidates, bucket_thresholds=(0.35, 0.35, 0.3, 0.4),
                      rules=[{"name": "threshold"}, {"name": "tail_support"}, {"name": "new_label_support"},
                             {"name": "too_few_words"}])
    return p.model_dump(mode="json")


class TimedSource:
    """The classifier's neighbour search, timed (the retrieve part of a batch: the search, and the read of the
    neighbours the fusion keeps; the fusion itself, which the search calls between the two, is left to the score
    part); its ``carriers`` search (the evidence of a proposed label no neighbour carries, which a score component
    brought) passed through, untimed here, so the batch does what a worker's does."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0

    def search(self, vectors: Any, langs: Any, top_k: int, exclude: Any = (), texts: Any = None, lexical_k: int = 0,
               keep: Callable | None = None):
        fused = 0.0

        def timed_keep(found: Any) -> Any:
            nonlocal fused
            t = time.perf_counter()
            try:
                return keep(found)
            finally:
                fused += time.perf_counter() - t

        t0 = time.perf_counter()
        try:
            if keep is None:
                return self.inner.search(vectors, langs, top_k, exclude, texts, lexical_k)
            return self.inner.search(vectors, langs, top_k, exclude, texts, lexical_k, keep=timed_keep)
        finally:
            self.seconds += time.perf_counter() - t0 - fused

    def carriers(self, *args: Any, **kwargs: Any):
        return self.inner.carriers(*args, **kwargs)


def article_event(rows: Rows, i: int) -> Any:
    """Row ``i`` as the ``ArticleEvent`` a producer would send (a fresh id: never a near-copy of an earlier run's)."""
    from newsmon.schemas import ArticleEvent

    return ArticleEvent(article_id=f"{rows.ids[i]}-{time.time_ns()}", title=None, body=rows.texts[i], lang=LANG,
                        outlet="scale-benchmark", country="SI", published_at=datetime.now(UTC))


# -- measurements ---------------------------------------------------------------------------------------------


def index_status(memory: Any) -> dict:
    """``EdgeMemory.index_status()`` as a dict (empty when the memory has none)."""
    fn = getattr(memory, "index_status", None)
    if fn is None:
        return {}
    st = fn()
    if isinstance(st, dict):
        return st
    if hasattr(st, "_asdict"):
        return dict(st._asdict())
    if hasattr(st, "__dataclass_fields__"):
        return {k: getattr(st, k) for k in st.__dataclass_fields__}
    return {"status": str(st)}


def exact_search(memory: Any, vectors: np.ndarray, k: int, flt: Any) -> list:
    """Exact (brute-force) search through the product's ``search(..., exact=True)``."""
    import inspect

    if "exact" not in inspect.signature(memory.search).parameters:
        raise RuntimeError("EdgeMemory.search has no exact=True: the indexed-search piece has not landed")
    return memory.search(vectors, k, flt, exact=True)


def measure_recall(memory: Any, queries: Rows, ks: list[int]) -> dict:
    """Recall of the memory's (indexed) dense top-k against exact search, per k, over the query articles, with
    the classifier's filter (labelled points); and the time per query of each."""
    from newsmon.shared.memory import SearchFilter

    flt = SearchFilter(labelled=True)
    out: dict[str, Any] = {}
    for k in ks:
        t0 = time.perf_counter()
        approx = memory.search(queries.vectors, k, flt)
        t_approx = time.perf_counter() - t0
        t0 = time.perf_counter()
        exact = exact_search(memory, queries.vectors, k, flt)
        t_exact = time.perf_counter() - t0
        per = [len({n.article_id for n in a} & {n.article_id for n in e}) / max(1, len(e))
               for a, e in zip(approx, exact, strict=True)]
        out[str(k)] = {"recall": round(float(np.mean(per)), 4), "min": round(float(np.min(per)), 4),
                       "indexed_ms_per_query": ms(t_approx / len(per)), "exact_ms_per_query": ms(t_exact / len(per))}
    return out


def measure_scoring(clf: Any, queries: Rows, warm: Rows, batch: int, min_batches: int,
                    resolved: Any = None) -> dict:
    """Batches of ``batch`` query articles through ``clf.scorer.propose`` (vectors given: no encoder): per batch
    the wall time and its retrieve part (the neighbour search; the rest is fusion, score components, RAE-XMC and
    the rules). One batch of ``warm`` first, apart (the record read, its models loaded); then the queries in
    batches, cycled when they make fewer than ``min_batches``."""
    return scoring_summary(score_batches(clf, queries, warm, batch, min_batches, resolved))


def scoring_summary(raw: dict) -> dict:
    """p50 / p99 / max of :func:`score_batches`' seconds (one call's, or several calls' concatenated), in ms."""
    walls, retrieve, labels = raw["walls"], raw["retrieve"], raw["labels"]
    score = [a - b for a, b in zip(walls, retrieve, strict=True)]
    return {"batches": len(walls), "first_ms": ms(max(raw["first"])), "p50_ms": ms(pct(walls, 50)),
            "p99_ms": ms(pct(walls, 99)), "max_ms": ms(max(walls)), "retrieve_p50_ms": ms(pct(retrieve, 50)),
            "retrieve_p99_ms": ms(pct(retrieve, 99)), "score_p50_ms": ms(pct(score, 50)),
            "score_p99_ms": ms(pct(score, 99)), "labels_per_article": round(float(np.mean(labels)), 2)}


def score_batches(clf: Any, queries: Rows, warm: Rows, batch: int, min_batches: int, resolved: Any = None) -> dict:
    """What :func:`measure_scoring` measures, raw: ``first`` (the warm batch's seconds, in a list), per batch
    ``walls`` and ``retrieve`` seconds and ``labels`` (mean proposed labels per article)."""
    timed = TimedSource(clf)
    scorer = clf.scorer
    source, scorer.neighbours = scorer.neighbours, timed
    starts = list(range(0, len(queries.ids) - batch + 1, batch))
    starts = (starts * math.ceil(min_batches / max(1, len(starts))))[: max(min_batches, len(starts))]
    walls, retrieve, labels = [], [], []
    try:
        t0 = time.perf_counter()
        scorer.propose(warm.texts[:batch], [LANG] * batch, warm.vectors[:batch], resolved=resolved)
        first = time.perf_counter() - t0
        for start in starts:
            sl = slice(start, start + batch)
            timed.seconds = 0.0
            t0 = time.perf_counter()
            props = scorer.propose(queries.texts[sl], [LANG] * batch, queries.vectors[sl], resolved=resolved)
            walls.append(time.perf_counter() - t0)
            retrieve.append(timed.seconds)
            labels.append(float(np.mean([len(p.labels) for p in props])))
    finally:
        scorer.neighbours = source
    return {"first": [first], "walls": walls, "retrieve": retrieve, "labels": labels}


def measure_calibrated(clf: Any, queries: Rows, gen: Archive, params: dict, record: str | None,
                       counts: dict[str, int], args: argparse.Namespace) -> dict:
    """The calibrated record beside the uncalibrated one (issue 38 item 4): the record of
    :mod:`scale_calibrated` (every lever the corpora's calibrations keep, stacking included, trained on a sample)
    written with its models, then ``args.calibrated_rounds`` rounds in each of which every variant scores the
    query batches (:func:`score_batches`, its warm batch first: a record switch loads its stored models, as a
    worker's first batch under a new record): ``uncalibrated`` (the benchmark's record ``params``, hybrid),
    ``uncalibrated_without_lexical_search`` (the same retrieval as the calibrated record: the fusion re-ranks the
    dense top candidates), ``calibrated`` and, with ``args.calibrated_lexical_search``,
    ``calibrated_with_lexical_search`` (every lever on). The rounds alternate the variants, so the load of a shared
    machine falls on each alike; the ratios calibrated / uncalibrated come from the same run. The calibrated record
    stays the collection's record afterwards."""
    from scale_calibrated import calibrated_params, fit_calibrated, write_calibrated_record

    from newsmon.schemas.scoring import ScoringParams
    from newsmon.shared.scoring import Resolved
    from newsmon.shared.scoring.records import record_id

    out: dict[str, Any] = {}
    train = gen.extra(args.calibrated_train, "stacking")
    cal_params = calibrated_params(params)
    t0 = time.perf_counter()
    models, out["fit"] = fit_calibrated(clf, cal_params, counts, train.texts, train.vectors, train.labels,
                                        args.calibrated_sample)
    out["fit"]["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    fit_on = {"scale_benchmark": True, "memory_sample": out["fit"]["sample"]["articles"],
              "stacking_articles": args.calibrated_train}
    current = clf.calibrations.read(clf.collection(LANG))  # the uncalibrated record (its stored label counts)
    plain = current if current is not None and record_id(current) == record else None
    variants = {"uncalibrated": (plain, Resolved(ScoringParams.model_validate(params), record, None,
                                                 "calibration")),
                "uncalibrated_without_lexical_search": (plain, Resolved(
                    ScoringParams.model_validate({**params, "lexical_search": False}), record, None, "calibration")),
                "calibrated": write_calibrated_record(clf, cal_params, models, counts, fit_on)}
    out["params"] = cal_params
    out["record"] = variants["calibrated"][1].record
    if args.calibrated_lexical_search:
        searched = calibrated_params(params, lexical_search=True)
        variants["calibrated_with_lexical_search"] = write_calibrated_record(clf, searched, models, counts, fit_on)
    raw: dict[str, dict[str, list]] = {name: {"first": [], "walls": [], "retrieve": [], "labels": []}
                                       for name in variants}
    warm = gen.extra(args.batch, "warm")
    n_batches = max(1, len(queries.ids) // args.batch)
    for _round in range(args.calibrated_rounds):
        for name, (stored, resolved) in variants.items():
            if stored is not None:  # the variant's record is the collection's current one while it is scored
                clf.calibrations.write(stored)
            got = score_batches(clf, queries, warm, args.batch, n_batches, resolved)
            for key, values in got.items():
                raw[name][key].extend(values)
    clf.calibrations.write(variants["calibrated"][0])  # left as the collection's record (a profile reads it)
    out["variants"] = {name: scoring_summary(r) for name, r in raw.items()}
    # then the calibrated record served alone, as a worker serves its one record (no switch between records, whose
    # models, caches and pages the alternating rounds share), its warm batch first, apart. A worker never sees the
    # same article twice: each round scores articles no earlier batch scored (``calibrated_alone``, the target's
    # figure); beside it, in turn, the alternating rounds' articles again (``calibrated_alone_repeated``: what the
    # memory's caches give a query they have seen, the method of the records before 8 December)
    fresh: dict[str, list] = {"first": [], "walls": [], "retrieve": [], "labels": []}
    repeated: dict[str, list] = {"first": [], "walls": [], "retrieve": [], "labels": []}
    for r in range(args.calibrated_rounds):
        unseen = gen.extra(len(queries.ids), f"alone-{r}")
        for into, qs in ((fresh, unseen), (repeated, queries)):
            for key, values in score_batches(clf, qs, warm, args.batch, n_batches,
                                             variants["calibrated"][1]).items():
                into[key].extend(values)
    out["calibrated_alone"] = scoring_summary(fresh)
    out["calibrated_alone_repeated"] = scoring_summary(repeated)
    v = out["variants"]
    out["rounds"] = args.calibrated_rounds
    out["ratios"] = {f"{a} / {b} {q}": round(v[a][q] / v[b][q], 3)
                     for a, b in (("calibrated", "uncalibrated"), ("calibrated", "uncalibrated_without_lexical_search"))
                     for q in ("p50_ms", "p99_ms")}
    out["target_p99_ms"] = TARGETS["batch_p99_ms"]
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


class DecisionProbe:
    """Applies a moderator decision every ``every`` seconds through the memory updater's service
    (:class:`newsmon.workers.decisions.DecisionService`), alternating an existing labelled point (a label added)
    and a new point (upserted pending, as the classifier worker stores it, then decided), and measures each until a
    search filtered on the new label finds the point (visible), giving up after ``give_up_s``."""

    def __init__(self, clf: Any, existing: list[str], fresh: Rows, every: float = 0.5, give_up_s: float = 10.0):
        from newsmon.workers.decisions import DecisionService
        from newsmon.workers.labels import LabelRegistry

        self.clf, self.every, self.give_up_s = clf, every, give_up_s
        self.service = DecisionService(clf.settings, clf.router, LabelRegistry())
        self.existing, self.fresh = list(existing), fresh
        self.n = 0
        self.lat: dict[str, list[float]] = {"existing": [], "new": []}
        self.not_visible = 0
        self.errors: list[str] = []

    def one(self) -> None:
        from newsmon.schemas.decisions import ModeratorDecision
        from newsmon.shared.memory import SearchFilter

        i = self.n
        self.n += 1
        kind = "new" if i % 2 else "existing"
        label = f"visible-{os.getpid()}-{time.monotonic_ns()}"
        memory = self.clf.memory(LANG)
        if kind == "new":
            j = (i // 2) % len(self.fresh.ids)
            aid, vec = f"{self.fresh.ids[j]}-{i}", self.fresh.vectors[j]
            with self.clf.router.write_lock:
                memory.upsert([aid], vec[None, :], [[]], [{"lang": LANG, "status": "pending",
                                                          "text": self.fresh.texts[j]}])
            decided = [{"label": self.fresh.labels[j][0], "action": "confirmed"}, {"label": label, "action": "added"}]
        else:
            aid = self.existing[(i // 2) % len(self.existing)]
            point = memory.get([aid], with_vectors=True)[0]
            if point is None:
                self.errors.append(f"{aid} not stored")
                return
            vec = point.vector
            decided = [{"label": lb, "action": "confirmed"} for lb in point.labels] + [{"label": label,
                                                                                         "action": "added"}]
        dec = ModeratorDecision(article_id=aid, decisions=decided, moderator="scale-benchmark",
                                decided_at=datetime.now(UTC))
        t0 = time.perf_counter()
        outcome = self.service.apply_decision(dec)
        if outcome != "applied":
            self.errors.append(f"{aid}: {outcome}")
            return
        flt = SearchFilter(labelled=True, labels=(label,))
        while True:
            hits = memory.search(vec[None, :], 1, flt)[0]
            if hits and hits[0].article_id == aid:
                self.lat[kind].append(time.perf_counter() - t0)
                return
            if time.perf_counter() - t0 > self.give_up_s:
                self.not_visible += 1
                return
            time.sleep(0.005)

    def run(self, until: Callable[[], bool], min_decisions: int, max_s: float) -> None:
        """Apply decisions every ``every`` seconds until ``until()`` holds and ``min_decisions`` were made, or
        ``max_s`` passed."""
        t_end = time.monotonic() + max_s
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            try:
                self.one()
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            if until() and self.n >= min_decisions:
                return
            time.sleep(max(0.0, self.every - (time.monotonic() - t0)))

    def summary(self) -> dict:
        both = self.lat["existing"] + self.lat["new"]
        out: dict[str, Any] = {"decisions": self.n, "visible": len(both), "not_visible_within_s": self.not_visible,
                               "give_up_s": self.give_up_s}
        if both:
            out.update({"p50_ms": ms(pct(both, 50)), "p99_ms": ms(pct(both, 99)), "max_ms": ms(max(both))})
        for kind, lat in self.lat.items():
            if lat:
                out[kind] = {"n": len(lat), "p99_ms": ms(pct(lat, 99)), "max_ms": ms(max(lat))}
        if self.errors:
            out["errors"] = self.errors[:10]
            out["n_errors"] = len(self.errors)
        return out


def measure_index_build(clf: Any, probe: DecisionProbe, timeout_s: float, how: str) -> dict:
    """Build the index: ``rebuild_index()`` (online: a thread, decisions applied meanwhile) or ``optimize()``
    (offline, in-process); time, status before and after, decision to visible meanwhile."""
    memory = clf.memory(LANG)
    before = index_status(memory)
    fn = getattr(memory, "rebuild_index" if how == "rebuild" else "optimize", None)
    if fn is None:
        raise RuntimeError(f"EdgeMemory has no {'rebuild_index' if how == 'rebuild' else 'optimize'}()")
    result: dict[str, Any] = {}

    def build() -> None:
        t0 = time.perf_counter()
        try:
            result["returned"] = repr(fn())
        except BaseException as exc:  # noqa: BLE001 - reported
            result["error"] = f"{type(exc).__name__}: {exc}"
        result["seconds"] = round(time.perf_counter() - t0, 1)

    t = threading.Thread(target=build, name="index-build", daemon=True)
    t.start()
    if how == "rebuild":
        probe.run(lambda: not t.is_alive(), min_decisions=4, max_s=timeout_s)
    t.join(timeout_s)
    if t.is_alive():
        raise RuntimeError(f"the index build did not finish within {timeout_s:.0f} s")
    if "error" in result:
        raise RuntimeError(result["error"])
    return {"how": how, **result, "status_before": before, "status_after": index_status(memory),
            "visible_while_building": probe.summary() if how == "rebuild" else None}


def measure_calibration_stall(clf: Any, queries: Rows, batch: int, params: dict, counts: dict[str, int],
                              before_batches: int, timeout_s: float) -> dict:
    """Propose batches in a loop; after ``before_batches`` write a new calibration record (as another process
    would) and go on until proposals carry it plus 5 batches: the worst batch after the write against the p99
    before, and how long until the new record was in use (the store re-reads a record after its ``ttl_s``)."""
    n = len(queries.ids)
    walls_before, walls_after = [], []
    new_id, t_write, t_seen = None, 0.0, None
    after_seen = 0
    i = 0
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        start = (i * batch) % (n - batch + 1)
        i += 1
        sl = slice(start, start + batch)
        t0 = time.perf_counter()
        props = clf.scorer.propose(queries.texts[sl], [LANG] * batch, queries.vectors[sl])
        wall = time.perf_counter() - t0
        if new_id is None:
            walls_before.append(wall)
            if len(walls_before) >= before_batches:
                t_write = time.perf_counter()
                new_id = calibration_record(clf, {**params, "tau": params.get("tau", 0.05) * 1.01}, counts)
            continue
        walls_after.append(wall)
        record = props[0].scoring.calibration if props and props[0].scoring is not None else None
        if record == new_id:
            if t_seen is None:
                t_seen = time.perf_counter()
            after_seen += 1
            if after_seen >= 5:
                break
    if t_seen is None:
        raise RuntimeError(f"proposals did not carry the new record {new_id} within {timeout_s:.0f} s")
    return {"record": new_id, "p99_before_ms": ms(pct(walls_before[1:], 99)), "max_after_ms": ms(max(walls_after)),
            "stall_ms": ms(max(0.0, max(walls_after) - pct(walls_before[1:], 50))),
            "seconds_until_in_use": round(t_seen - t_write, 1), "batches_after": len(walls_after),
            "store_ttl_s": clf.calibrations.ttl_s}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker_env(settings: Any) -> dict:
    """The environment of a ``newsmon`` subprocess on the size's home and memory: this one's, its ``NEWSMON_*``
    settings kept (e.g. ``NEWSMON_MEMORY__INDEX__*``) except those that place the home, memory, broker and port."""
    drop = ("NEWSMON_HOME", "NEWSMON_MEMORY__PATH", "NEWSMON_MEMORY__URL", "NEWSMON_KAFKA__BOOTSTRAP_SERVERS",
            "NEWSMON_WORKER__HTTP_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"NEWSMON_HOME": str(settings.home), "NEWSMON_MEMORY__PATH": str(settings.memory_path)})
    return env


def prepare_encoder(settings: Any, timeout_s: float) -> dict:
    """``newsmon model build-onnx`` (not timed as start-up: the encoder's runtime artefact is built once per
    model, on first use or at image build)."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "newsmon.cli", "model", "build-onnx"], cwd=ROOT,
                          env=worker_env(settings), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"newsmon model build-onnx failed: {(proc.stderr or proc.stdout)[-500:]}")
    return {"seconds": round(time.monotonic() - t0, 1)}


def first_proposal(log_path: Path, article: Any, settings: Any, timeout_s: float) -> float:
    """Seconds from publishing ``article`` (an ``ArticleEvent``) on the worker's embedded broker (its address read
    from the worker's log) to its proposal on the proposals topic: the first batch (memory opened, encoder,
    search, scoring)."""
    from confluent_kafka import Consumer, Producer

    from newsmon.schemas import LabelProposal, parse_event

    found = re.findall(r"tansu broker ready\s+bootstrap=(\S+)", log_path.read_text(errors="replace"))
    if not found:
        raise RuntimeError(f"no embedded broker address in {log_path}")
    conf = {"bootstrap.servers": found[-1]}
    consumer = Consumer({**conf, "group.id": f"scale-{os.getpid()}", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    consumer.subscribe([settings.kafka.topic_proposals])
    producer = Producer(conf)
    try:
        t0 = time.monotonic()
        producer.produce(settings.kafka.topic_articles, key=article.kafka_key(), value=article.to_bytes())
        producer.flush(10)
        while time.monotonic() - t0 < timeout_s:
            m = consumer.poll(0.5)
            if m is None or m.error() is not None:
                continue
            if parse_event(LabelProposal, m.value()).article_id == article.article_id:
                return round(time.monotonic() - t0, 2)
        raise RuntimeError(f"no proposal for {article.article_id} within {timeout_s:.0f} s")
    finally:
        consumer.close()


def measure_worker_start(settings: Any, log_path: Path, timeout_s: float, article: Any) -> dict:
    """Spawn ``newsmon worker all`` (embedded broker, the size's memory) and time spawn to ``/readyz`` 200 (the
    start-up checks open the memory once and close it; the encoder loads); then publish ``article`` and time its
    proposal (the first batch opens the memory again); the worker's RSS at ready and after the first proposal;
    then SIGTERM."""
    prepared = prepare_encoder(settings, timeout_s)
    port = free_port()
    env = {**worker_env(settings), "NEWSMON_WORKER__HTTP_PORT": str(port)}
    log = open(log_path, "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "worker", "all"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ready_s, status, body = None, None, None
    try:
        while time.monotonic() - t0 < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {proc.returncode} before it was ready (log: {log_path})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    status, body = r.status, r.read().decode()
                if status == 200:
                    ready_s = time.monotonic() - t0
                    break
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read().decode()
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        if ready_s is None:
            raise RuntimeError(f"/readyz not 200 within {timeout_s:.0f} s (last {status}: {body}; log: {log_path})")
        at_ready = rss(proc.pid)
        first = first_proposal(log_path, article, settings, min(120.0, timeout_s))
        t_first = time.monotonic()
        while time.monotonic() - t_first < 5:  # the memory is open now (the first batch opened it)
            time.sleep(0.5)
        return {"ready_s": round(ready_s, 1), "first_proposal_s": first, "encoder_prepared_s": prepared["seconds"],
                "rss_ready_mb": at_ready, "rss_after_first_mb": rss(proc.pid),
                "mapped_memory_mb": mapped(proc.pid, settings.memory_path)}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


# -- one size -------------------------------------------------------------------------------------------------


def run_size(size: int, args: argparse.Namespace, gen: Archive, queries: Rows, sampler: RssSampler) -> dict:
    """Every step of one size; a step that fails is recorded with its error and the others go on."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.memory import MemoryRouter

    workdir = Path(args.workdir)
    s = settings_for(workdir, size)
    version, dim = model_version(s)
    out: dict[str, Any] = {"size": size, "model_version": version, "dim": dim}
    errors: dict[str, str] = {}
    skip = set(args.skip)
    archive = workdir / str(size) / ("archive.parquet" if archive_writer()[0] is not None else "archive")

    def step(name: str, fn: Callable[[], Any]) -> Any:
        if name in skip:
            return None
        print(f"[{size:,}] {name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - the record says what failed; the other steps run
            errors[name] = f"{type(exc).__name__}: {exc}"
            print(f"[{size:,}] {name} failed: {errors[name]}", flush=True)
            return None
        print(f"[{size:,}] {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
        out[name] = value
        return value

    step("generate", lambda: write_archive(archive, gen, size, version))
    files = ([str(archive)] if archive.is_file() else sorted(str(p) for p in archive.glob("*.parquet"))
             if archive.is_dir() else [])
    if "import" not in skip:
        if not files:
            errors["import"] = f"no archive at {archive}"
            out["errors"] = errors
            return out
        if s.memory_path.exists():
            shutil.rmtree(s.memory_path)  # a fresh memory: the import measures a full load
    step("import", lambda: run_import(files, workdir, size, args.timeout_import))
    if "import" not in out and not s.memory_path.exists():
        out["errors"] = errors
        return out

    sampler.reset()
    t0 = time.perf_counter()
    router = MemoryRouter(s, version, dim)
    clf = Classifier(s, encoder=NoEncoder(version, dim), router=router)
    memory = clf.memory(LANG)
    out["open_s"] = round(time.perf_counter() - t0, 2)
    out["points"] = memory.count(None)
    out["rss_open_mb"] = rss()
    counts = label_counts(archive, gen, size)  # what the calibration job stores: the whole memory's counts
    params = record_params(args.top_k, args.lexical_weight, args.candidates)
    step("record", lambda: {"id": calibration_record(clf, params, counts), "params": params,
                            "labels": len(counts)})
    existing = [f"scale-{i:07d}" for i in np.random.default_rng(7).integers(0, size, 200)]
    try:
        step("index", lambda: measure_index_build(clf, DecisionProbe(clf, existing, gen.extra(400, "build")),
                                                  args.timeout_index, args.index_build))
        out["rss_after_index_mb"] = rss()
        step("recall", lambda: measure_recall(memory, queries, sorted({args.top_k, args.candidates})))
        from newsmon.shared.scoring import Resolved

        def scoring() -> dict:
            warm = gen.extra(args.batch, "warm")
            res = {"record": measure_scoring(clf, queries, warm, args.batch, args.batches)}
            # the same batches again: the first pass after opening (or rebuilding) the memory pays for the page
            # cache; the second is the steady state of a running worker
            res["record_second_pass"] = measure_scoring(clf, queries, warm, args.batch, args.batches)
            # the record's parameters without the lexical search (the fusion re-ranks the dense candidates only),
            # its stored models read the same way, warm
            from newsmon.schemas.scoring import ScoringParams

            record_id = (out.get("record") or {}).get("id")
            no_search = Resolved(ScoringParams.model_validate({**params, "lexical_search": False}), record_id,
                                 None, "calibration")
            res["record_without_lexical_search"] = measure_scoring(clf, queries, warm, args.batch, args.batches,
                                                                   resolved=no_search)
            dense = Resolved(clf.settings.scoring, None, None, "defaults")
            res["dense_defaults"] = measure_scoring(clf, queries, warm, args.batch, args.batches, resolved=dense)
            return res

        step("scoring", scoring)
        out["rss_after_scoring_mb"] = rss()
        step("calibrated", lambda: measure_calibrated(clf, queries, gen, params,
                                                      (out.get("record") or {}).get("id"), counts, args))

        def visible() -> dict:
            probe = DecisionProbe(clf, existing, gen.extra(400, "idle"))
            probe.run(lambda: True, min_decisions=args.decisions, max_s=args.decisions * 2 + 60)
            return probe.summary()

        step("visible", visible)
        step("calibration", lambda: measure_calibration_stall(clf, queries, args.batch, params, counts,
                                                              args.batches, args.timeout_calibration))
        out["rss_steady_mb"] = rss()
        out["rss_peak_mb"] = sampler.peak()
        out["mapped_memory_mb"] = mapped("self", s.memory_path)
    finally:
        clf.close()
    out["disk_mb"] = {"memory": du(s.memory_path), "archive": du(archive) if archive.exists() else None}
    step("worker", lambda: measure_worker_start(s, workdir / str(size) / "worker.log", args.timeout_worker,
                                                article_event(queries, 0)))
    out["errors"] = errors
    return out


# -- the tables -----------------------------------------------------------------------------------------------


def _get(d: dict | None, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _fmt(v: Any) -> Any:
    return "-" if v is None else v


def table(results: list[dict], args: argparse.Namespace) -> tuple[list[str], list[list], str]:
    """(columns, rows, note) of the archive-size table, one column per size."""
    cols = [f"{r['size']:,}" for r in results]

    def row(name: str, fn: Callable[[dict], Any]) -> list:
        return [name] + [_fmt(fn(r)) for r in results]

    k, c = str(args.top_k), str(args.candidates)
    rows = [
        row("import rows/s", lambda r: _get(r, "import", "rows_per_s")),
        row("import wall s", lambda r: _get(r, "import", "wall_s")),
        row("memory open s", lambda r: r.get("open_s")),
        row("index build s", lambda r: _get(r, "index", "seconds")),
        row(f"batch of {args.batch} p50 ms (record: hybrid, k {args.top_k})",
            lambda r: _get(r, "scoring", "record", "p50_ms")),
        row(f"batch of {args.batch} p99 ms (record)", lambda r: _get(r, "scoring", "record", "p99_ms")),
        row("  of which retrieve p99 ms", lambda r: _get(r, "scoring", "record", "retrieve_p99_ms")),
        row("  of which fuse + score + decide p99 ms", lambda r: _get(r, "scoring", "record", "score_p99_ms")),
        row(f"batch of {args.batch} p50 / p99 ms (record, second pass: warm)",
            _pair_of("scoring", "record_second_pass", "p50_ms", "p99_ms")),
        row(f"batch of {args.batch} p50 / p99 ms (record without the lexical search, warm)",
            _pair_of("scoring", "record_without_lexical_search", "p50_ms", "p99_ms")),
        row("  of which retrieve / fuse + score + decide p99 ms",
            _pair_of("scoring", "record_without_lexical_search", "retrieve_p99_ms", "score_p99_ms")),
        row(f"batch of {args.batch} p99 ms (defaults: dense, k 50)",
            lambda r: _get(r, "scoring", "dense_defaults", "p99_ms")),
        row(f"batch of {args.batch} p50 / p99 ms, calibrated record (every lever, stacking; no lexical search)",
            _pair_of("calibrated", "variants", "calibrated", "p50_ms", "p99_ms")),
        row("  the same record served alone after the rounds, articles not scored before (as a worker serves it) "
            "p50 / p99 ms", _pair_of("calibrated", "calibrated_alone", "p50_ms", "p99_ms")),
        row("  the same run: served alone, the rounds' articles again p50 / p99 ms",
            _pair_of("calibrated", "calibrated_alone_repeated", "p50_ms", "p99_ms")),
        row("  of which retrieve / fuse + score + decide p99 ms",
            _pair_of("calibrated", "variants", "calibrated", "retrieve_p99_ms", "score_p99_ms")),
        row("  same run: uncalibrated without the lexical search p50 / p99 ms",
            _pair_of("calibrated", "variants", "uncalibrated_without_lexical_search", "p50_ms", "p99_ms")),
        row("  same run: uncalibrated (hybrid) p50 / p99 ms",
            _pair_of("calibrated", "variants", "uncalibrated", "p50_ms", "p99_ms")),
        row("  same run: calibrated with the lexical search p50 / p99 ms",
            _pair_of("calibrated", "variants", "calibrated_with_lexical_search", "p50_ms", "p99_ms")),
        row("  ratio calibrated / uncalibrated without the lexical search, p50 / p99",
            lambda r: _pair(_get(r, "calibrated", "ratios", f"{_VS_PLAIN} p50_ms"),
                            _get(r, "calibrated", "ratios", f"{_VS_PLAIN} p99_ms"))),
        row("  calibrated record's models: fit s / stacking's training pairs",
            lambda r: _pair(_get(r, "calibrated", "fit", "seconds", "total"),
                            _get(r, "calibrated", "fit", "stacking", "pairs"))),
        row(f"recall@{k} of exact", lambda r: _get(r, "recall", k, "recall")),
        row(f"recall@{c} of exact", lambda r: _get(r, "recall", c, "recall")),
        row("decision visible p99 / max ms, idle",
            lambda r: _pair(_get(r, "visible", "p99_ms"), _get(r, "visible", "max_ms"))),
        row("decision visible p99 / max ms, index building",
            _pair_of("index", "visible_while_building", "p99_ms", "max_ms")),
        row("worker start to ready s", lambda r: _get(r, "worker", "ready_s")),
        row("calibration change: worst batch ms (p99 before)",
            lambda r: _pair(_get(r, "calibration", "max_after_ms"), _get(r, "calibration", "p99_before_ms"))),
        row("RSS MB, this process steady: anon + file", lambda r: _pair(_get(r, "rss_steady_mb", "anon"),
                                                                     _get(r, "rss_steady_mb", "file"), " + ")),
        row("  of which the memory's mapped files MB", lambda r: r.get("mapped_memory_mb")),
        row("RSS MB, this process peak", lambda r: _get(r, "rss_peak_mb", "rss")),
        row("RSS MB, index builder (child) peak", lambda r: _get(r, "rss_peak_mb", "children")),
        row("worker start: first proposal s after ready", lambda r: _get(r, "worker", "first_proposal_s")),
        row("RSS MB, worker after its first proposal: anon + file",
            lambda r: _pair(_get(r, "worker", "rss_after_first_mb", "anon"),
                            _get(r, "worker", "rss_after_first_mb", "file"), " + ")),
        row("  of which the memory's mapped files MB", lambda r: _get(r, "worker", "mapped_memory_mb")),
        row("disk MB, memory", lambda r: _get(r, "disk_mb", "memory")),
        row("disk MB, archive (Parquet)", lambda r: _get(r, "disk_mb", "archive")),
    ]
    return ["points"] + cols, rows, (
              f"{os.cpu_count()} cores; labels {args.labels:,}, d 384, one language memory (sl); "
                   f"{args.queries} held-out queries; no encoder (vectors given). Targets at 1,000,000: batch p99 <= "
                   f"{TARGETS['batch_p99_ms']:.0f} ms, recall >= {TARGETS['recall']}, decision visible <= 1 s, "
                   f"worker ready <= {TARGETS['ready_s']:.0f} s, calibration stall <= 1 s, anonymous RSS <= 3 GB "
                   "plus the mapped index.")


#: The calibrated step's ratio of the same retrieval (the fusion re-ranking the dense candidates).
_VS_PLAIN = "calibrated / uncalibrated_without_lexical_search"


def _pair_of(*keys: str) -> Any:
    """A table cell of a size's result: :func:`_pair` of the last two keys' figures under the path of the others
    (``_pair_of("scoring", "dense_defaults", "p50_ms", "p99_ms")``)."""
    *path, a, b = keys
    return lambda r: _pair(_get(r, *path, a), _get(r, *path, b))


def _pair(a: Any, b: Any, sep: str = " / ") -> str:
    return "-" if a is None and b is None else f"{_fmt(a)}{sep}{_fmt(b)}"


# -- main -------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,300000,1000000", help="memory sizes (points), comma-separated")
    p.add_argument("--queries", type=int, default=480, help="held-out query articles")
    p.add_argument("--batch", type=int, default=16, help="articles per scoring batch")
    p.add_argument("--batches", type=int, default=30, help="scoring batches measured (at least)")
    p.add_argument("--decisions", type=int, default=20, help="decisions applied for the idle visibility figure")
    p.add_argument("--workdir", default=None, help="where archives and memories go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the workdir (default: removed at the end)")
    p.add_argument("--skip", default="", help=f"steps to leave out, comma-separated: {','.join(STEPS)}")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="the shared corpora (texts)")
    p.add_argument("--labels", type=int, default=12_000)
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--top-k", type=int, default=50, help="the calibration record's top_k (the default's)")
    p.add_argument("--candidates", type=int, default=None,
                   help="the record's lexical_candidates (default: the calibration's LEXICAL_CANDIDATES)")
    p.add_argument("--lexical-weight", type=float, default=0.2, help="the record's lexical weight (0: dense only)")
    p.add_argument("--index-build", choices=("rebuild", "optimize"), default="rebuild",
                   help="rebuild_index() online with decisions meanwhile, or optimize() offline")
    p.add_argument("--timeout-import", type=float, default=3 * 3600)
    p.add_argument("--timeout-index", type=float, default=3 * 3600)
    p.add_argument("--timeout-worker", type=float, default=600)
    p.add_argument("--timeout-calibration", type=float, default=900)
    p.add_argument("--calibrated-sample", type=int, default=None,
                   help="memory articles the calibrated record's components are fitted on (default: the "
                        "calibration's calibration.max_memory_articles)")
    p.add_argument("--calibrated-train", type=int, default=2000,
                   help="held-out articles the calibrated record's stacking model is trained on")
    p.add_argument("--calibrated-rounds", type=int, default=3,
                   help="rounds of the calibrated step (each variant scores every query batch once per round)")
    p.add_argument("--calibrated-lexical-search", action="store_true",
                   help="also score the calibrated record with the lexical search on (every lever)")
    p.add_argument("--stats", action="store_true", help="print the generator's vector statistics and exit")
    args = p.parse_args(argv)
    args.sizes = [int(x.replace("_", "")) for x in args.sizes.split(",") if x.strip()]
    args.skip = [x.strip() for x in args.skip.split(",") if x.strip()]
    bad = set(args.skip) - set(STEPS)
    if bad:
        p.error(f"unknown steps {sorted(bad)}; choose from {', '.join(STEPS)}")
    if args.calibrated_sample is None:
        from newsmon.shared.config import Settings

        args.calibrated_sample = Settings().calibration.max_memory_articles
    if args.candidates is None:
        from newsmon.shared.scoring.calibration import LEXICAL_CANDIDATES

        args.candidates = LEXICAL_CANDIDATES
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from newsmon.shared.classifier import TEXT_PAYLOAD_CHARS

    gen = Archive(corpus_sentences(Path(args.data)), seed=args.seed, labels=args.labels,
                  text_chars=TEXT_PAYLOAD_CHARS)
    queries = gen.queries(args.queries)
    if args.stats:
        sample = next(gen.chunks(300))
        print(json.dumps({"generator": vector_stats(sample.vectors, sample.subtopic), "e5": E5_REFERENCE}))
        return 0
    own_workdir = args.workdir is None
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="newsmon-scale-")
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    sample = next(gen.chunks(300))
    generator = {"seed": args.seed, "topics": gen.n_topics, "subtopics": gen.n_subtopics, "labels": gen.n_labels,
                 "source_articles": len(gen.sentences), "vectors": vector_stats(sample.vectors, sample.subtopic),
                 "e5_reference": E5_REFERENCE,
                 "labels_per_article": round(float(np.mean([len(x) for x in sample.labels])), 2)}
    run_settings = {"top_k": args.top_k, "candidates": args.candidates, "lexical_weight": args.lexical_weight,
                    "batch": args.batch, "queries": args.queries, "index_build": args.index_build,
                    "memory_index": _index_settings()}
    try:
        with RssSampler() as sampler:
            for size in args.sizes:  # one record per size: benchmarks/results/scale.<size>/
                with BenchmarkRecord(record_name(size, args.skip)) as rec:
                    rec.data.update(generator=generator, settings=run_settings)
                    result = run_size(size, args, gen, queries, sampler)
                    rec.data["size"] = result
                    results.append(result)
                    rec.table("Archive size", *table([result], args))
                if not args.keep:  # the next size's disk: this one's archive and memory go
                    shutil.rmtree(Path(args.workdir) / str(size), ignore_errors=True)
        if len(results) > 1:
            columns, rows, note = table(results, args)
            print(f"\nArchive size, every size of this run\n\n{markdown_table(columns, rows)}\n\n{note}")
    finally:
        if own_workdir and not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
        elif args.keep:
            print(f"workdir kept: {args.workdir}")
    return 0 if all(not r.get("errors") for r in results) else 1


def _index_settings() -> dict | None:
    """The ``memory.index`` settings in effect (None before they exist)."""
    from newsmon.shared.config import Settings

    idx = getattr(Settings().memory, "index", None)
    return idx.model_dump(mode="json") if idx is not None and hasattr(idx, "model_dump") else None


if __name__ == "__main__":
    sys.exit(main())
