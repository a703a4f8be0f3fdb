"""Index upkeep of the embedded knowledge memory in a serving process: a background thread that rebuilds a language
memory's HNSW index (:meth:`newsmon.shared.memory.EdgeMemory.rebuild_index`, a child process builds it while the
memory keeps serving) when enough points are outside the index. A Qdrant server indexes by itself: nothing to do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import structlog

from newsmon.shared.memory.base import KnowledgeMemoryError
from newsmon.shared.memory.engines import LocalIndex

log = structlog.get_logger(__name__)


class IndexMaintainer:
    """Checks the open embedded memories every ``check_s`` seconds and rebuilds the index of each one due
    (:meth:`LocalIndex.needs_index`), one at a time, in a daemon thread of its own.

    Args:
        memories: returns the memories open now (e.g. :meth:`MemoryRouter.opened`); those whose index their
            process does not keep (not :class:`~.engines.LocalIndex`: a Qdrant server's) are skipped.
        check_s: seconds between checks, ``> 0``.
        stop: ends the thread (set when the process stops).
    """

    def __init__(self, memories: Callable[[], Iterable[object]], check_s: float, stop: threading.Event) -> None:
        if not check_s > 0:
            raise ValueError(f"check_s must be > 0, got {check_s!r}")
        self.memories = memories
        self.check_s = check_s
        self.stop = stop
        self.thread: threading.Thread | None = None

    def start(self) -> IndexMaintainer:
        self.thread = threading.Thread(target=self._loop, name="newsmon-index", daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(self.check_s):
            self.run_once()

    def run_once(self) -> list[dict]:
        """Rebuild every due embedded memory now; returns what each rebuild reported (a failure is logged and
        reported with its ``error``, and tried again at the next check)."""
        done = []
        for mem in list(self.memories()):
            if self.stop.is_set():
                break
            if not isinstance(mem, LocalIndex):  # a server's memory: the server indexes by itself
                continue
            try:
                if not mem.needs_index():
                    continue
                log.info("index rebuild started", collection=mem.collection, **mem.index_status())
                result = {"collection": mem.collection, **mem.rebuild_index()}
                log.info("index rebuild finished", **result)
            except KnowledgeMemoryError as exc:  # closed meanwhile, builder failed: the live generation serves on
                result = {"collection": mem.collection, "error": str(exc)}
                log.warning("index rebuild failed", **result)
            done.append(result)
        return done
