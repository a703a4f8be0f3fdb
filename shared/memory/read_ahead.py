"""Reading an opened embedded memory's files into the page cache in the background.

The embedded engine drops its files from the operating system's page cache when a shard closes (measured at a
million points: 4.2 GB cached before a worker's memory closed, 1.0 GB after). A worker that starts again then
reads its HNSW graph, vectors and payloads from disk as its first searches touch them, page by page, at random: its
first 30 batches of 16 ran at 329-340 ms p50 and 763-1,402 ms p99, against 198-214 / 516-571 ms with the files read
ahead and about 200 / 222-272 ms warm (``benchmarks/scale_restart.py``; docs/measurements.md).

:func:`read_ahead` reads the files, whole and in order, from a daemon thread at a lower priority, through one
4 MB buffer: the worker is ready as before and never waits for it. The I/O is the memory's size on disk (about
3.4 GB per million points), read once at disk speed; ``budget_mb`` caps it (files beyond the budget are left to
the searches): set it below the RAM the machine leaves to the page cache, so a larger memory does not push the
rest of the cache out. 0 turns it off. A rebuilt index generation is cold in the same way (its builder's process
closed it): the rebuild's thread reads it in with :func:`read_in` before the swap
(:meth:`newsmon.shared.memory.edge.EdgeMemory._swap_to`).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

#: The standard library's logger, not structlog's: this thread may log before a command has configured logging,
#: and structlog's default then prints to stdout, into a command's JSON output (``newsmon suggest --json``).
log = logging.getLogger(__name__)


#: Qdrant's segment folders in the order a search reads them: the HNSW graph, the dense vectors it scores, the
#: lexical index and vectors, then the payloads; other files after them. The write-ahead log is never read by a
#: search (the engine replays it when the shard opens, before this starts).
ORDER = ("vector_index", "vector_storage", "vector_index-lexical", "vector_storage-lexical", "payload_index",
         "payload_storage")
SKIP = ("wal",)


def _rank(path: Path, directory: Path) -> tuple[int, str]:
    parts = path.relative_to(directory).parts
    ranks = [ORDER.index(p) for p in parts if p in ORDER]
    return (ranks[0] if ranks else len(ORDER), str(path))


def files_within(directory: Path, budget_bytes: int) -> list[Path]:
    """The regular files under ``directory`` (none under :data:`SKIP`) in :data:`ORDER`, then path order, up to
    ``budget_bytes`` of them in all (a file that would pass the budget is skipped, the smaller ones after it still
    fit)."""
    out, total = [], 0
    found = [p for p in directory.rglob("*") if not set(p.relative_to(directory).parts) & set(SKIP)]
    for p in sorted(found, key=lambda p: _rank(p, directory)):
        try:
            if not p.is_file() or p.is_symlink():
                continue
            size = p.stat().st_size
        except OSError:  # removed meanwhile (an optimisation's temporary segment)
            continue
        if total + size <= budget_bytes:
            out.append(p)
            total += size
    return out


#: Bytes read per call (one buffer, reused).
CHUNK = 4 * 2**20


def read_in(paths: list[Path]) -> int:
    """Read each of ``paths`` whole, in order, through one reused buffer (the kernel keeps the pages in its cache);
    returns the bytes read. A file that cannot be read (removed meanwhile) is skipped. ``posix_fadvise(WILLNEED)``
    alone is not enough: Linux reads at most the device's readahead window per call (8 MB here, 128 KB by
    default)."""
    buf, done = bytearray(CHUNK), 0
    for p in paths:
        try:
            with p.open("rb", buffering=0) as f:
                while n := f.readinto(buf):
                    done += n
        except OSError:
            continue
    return done


def read_ahead(directory: Path, budget_mb: int) -> threading.Thread | None:
    """Start reading ``directory``'s files into the page cache in a daemon thread at a lower priority (see the
    module docstring); None when ``budget_mb`` is 0."""
    if budget_mb <= 0:
        return None

    def run() -> None:
        try:  # below the worker's own threads (Linux: a thread's id is its own scheduling entity)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        try:
            paths = files_within(directory, budget_mb * 2**20)
            log.debug("memory read ahead: %s files, %s bytes of %s", len(paths), read_in(paths), directory)
        except OSError as exc:  # the directory removed or moved meanwhile: the searches read what they need
            log.debug("memory read ahead stopped at %s: %s", directory, exc)

    t = threading.Thread(target=run, name="newsmon-read-ahead", daemon=True)
    t.start()
    return t
