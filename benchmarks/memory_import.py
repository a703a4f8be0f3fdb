"""Bulk import rate: ``newsmon memory import`` of a synthetic archive (random unit vectors, texts re-sampled from a
corpus's words) into an embedded memory (qdrant-edge), rows/s and wall time, without the encoder.

Writes the archive with :class:`~newsmon.shared.memory.archive_writer.ArchiveWriter` (chunk by chunk), imports it
with :func:`~newsmon.shared.memory.bulk.import_parquet` into a fresh memory under a temp folder, then imports it
again (a re-run resumes: nothing left to do). Prints the figures and the process's peak RSS.

Usage (repository root)::

    .venv/bin/python benchmarks/memory_import.py --n 100000 --dim 384 --words 300
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from record import BenchmarkRecord

VERSION = "bench-model@1"


def word_pool(data: Path) -> list[str]:
    """Every whitespace-separated word of the texts of the corpus files (``*.jsonl``) in ``data``."""
    words: list[str] = []
    for f in sorted(data.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                words += json.loads(line)["text"].split()
    return words


def write_archive(path: Path, n: int, dim: int, n_words: int, words: list[str], chunk: int = 10_000) -> float:
    """A synthetic archive of ``n`` rows; returns the seconds spent writing it."""
    from newsmon.shared.memory.archive_writer import ArchiveWriter

    rng = np.random.default_rng(0)
    pool = np.array(words, dtype=object)
    labels = [f"tema-{i}" for i in range(50)]
    t0 = time.perf_counter()
    start = datetime(2020, 1, 1, tzinfo=UTC)
    with ArchiveWriter(path, dim, VERSION) as w:
        for lo in range(0, n, chunk):
            m = min(chunk, n - lo)
            vecs = rng.standard_normal((m, dim)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            texts = [" ".join(pool[rng.integers(0, len(pool), n_words)]) for _ in range(m)]
            w.write([f"bench-{lo + i}" for i in range(m)], ["sl"] * m, vecs,
                    [list(rng.choice(labels, size=int(rng.integers(1, 4)), replace=False)) for _ in range(m)],
                    texts, [start + timedelta(minutes=lo + i) for i in range(m)])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--words", type=int, default=300, help="words per text")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (archive and memory)")
    args = ap.parse_args()

    from newsmon.shared.config import Settings
    from newsmon.shared.memory import MemoryRouter
    from newsmon.shared.memory.bulk import import_parquet

    tmp = Path(tempfile.mkdtemp(prefix="newsmon-import-bench-"))
    with BenchmarkRecord("memory_import") as rec:
        try:
            path = tmp / "archive.parquet"
            write_s = write_archive(path, args.n, args.dim, args.words, word_pool(Path(args.data)))
            rss_written = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            router = MemoryRouter(Settings(home=tmp / "home"), VERSION, args.dim)
            try:
                report = import_parquet(path, router, batch=args.batch, progress=True)
                count = router.memory("sl").count()
                again = import_parquet(path, router, batch=args.batch)
            finally:
                router.close()
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rec.table("Import of a synthetic archive into an embedded memory (qdrant-edge)",
                      ["rows", "d", "words per text", "batch", "file MB", "write s", "import s", "rows/s",
                       "re-run s", "peak RSS MB (writing)", "peak RSS MB (import)"],
                      [[args.n, args.dim, args.words, args.batch, round(path.stat().st_size / 2**20, 1),
                        round(write_s, 1), round(report.seconds, 1), round(report.rows_per_s, 1),
                        round(again.seconds, 2), round(rss_written), round(rss_mb)]],
                      note="One process on a shared 2-core machine without a GPU (the load average of the run "
                           "says how busy it was); the import embeds nothing: it checks each row, cleans the "
                           "text, makes the lexical vector and upserts. The peak RSS of the import includes the "
                           "embedded engine, which holds the memory's points in the process.")
            rec.data.update({"imported": report.imported, "bad": report.bad, "count": count,
                             "rerun_skipped_done": again.skipped_done, "rerun_imported": again.imported})
            assert count == args.n == report.imported and again.imported == 0, rec.data
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
