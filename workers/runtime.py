"""Wiring: build the workers from settings, run them in threads of one process, stop them on SIGTERM.

Embedded engine (``memory.engine`` edge, the default without ``memory.url``): both workers must share one
process, since the embedded Qdrant engine locks its directory; they also share one near-duplicate index and label
registry unless ``worker.redis_url`` is set. Without Redis the label registry and the parked decisions are kept on
local disk in ``<home>/state`` (:mod:`newsmon.workers.local_state`), so a restart keeps them. Production runs one
process per role against a Qdrant server and Redis.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer

import structlog

from newsmon.shared.classifier import Classifier, model_identity
from newsmon.shared.config import Settings, redact_url
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.memory import MemoryLockedError, MemoryRouter, close_all_routers, shared_router
from newsmon.shared.memory.maintain import IndexMaintainer
from newsmon.workers.base import BatchWorker
from newsmon.workers.classifier_worker import ClassifierWorker
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.local_state import SqliteDecisionPark
from newsmon.workers.memory_updater import MemoryUpdaterWorker
from newsmon.workers.observability import HEALTH, serve_http
from newsmon.workers.proposing import open_label_registry, open_near_duplicates
from newsmon.workers.startup import wait_for_dependencies
from newsmon.workers.topics import prepare_topics

log = structlog.get_logger(__name__)

ROLES = ("classifier", "memory-updater")


@dataclass
class Runtime:
    """The workers of one process and what they share."""

    settings: Settings
    workers: list[BatchWorker] = field(default_factory=list)
    classifier: Classifier | None = None
    router: MemoryRouter | None = None
    registry: LabelRegistry | None = None
    dedup: NearDuplicateIndex | None = None
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    http: ThreadingHTTPServer | None = None
    failed: str | None = None  # why a worker ended by itself (the process then exits non-zero)
    index: IndexMaintainer | None = None  # embedded memory: rebuilds the HNSW index off the request path

    def start(self, provision: bool = True) -> "Runtime":
        """Start every worker in its own thread (and the HTTP endpoint when ``worker.http_port`` is set).

        Args:
            provision: first create (``kafka.create_topics``) or check the workers' topics
                (:func:`~newsmon.workers.topics.prepare_topics`); off when :func:`run_until_signalled` did it.

        Raises:
            StartupError: Kafka unreachable, or a topic missing or with another partition count.
        """
        if provision:
            prepare_topics(self.settings.kafka, [w.name for w in self.workers],
                           self.settings.worker.startup_timeout_s)
        HEALTH.set_info(memory=self.settings.memory_mode())
        if self.settings.worker.http_port is not None and self.http is None:
            self.http = serve_http(self.settings.worker.http_host, self.settings.worker.http_port)
        for w in self.workers:
            t = threading.Thread(target=self._run_one, args=(w,), name=f"newsmon-{w.name}", daemon=True)
            t.start()
            self.threads.append(t)
        if self.router is not None and self.router.engine.keeps_index:  # a Qdrant server indexes by itself
            self.index = IndexMaintainer(self.router.opened, self.settings.memory.index.check_s, self.stop).start()
        return self

    def _run_one(self, worker: BatchWorker) -> None:
        try:
            worker.run(self.stop)
        except MemoryLockedError:
            self.failed = (f"the embedded knowledge memory at {self.settings.memory_path} is open in another "
                           "process: run both roles in one process (`newsmon worker all`), or set "
                           "NEWSMON_MEMORY__URL to a Qdrant server")
            log.error("worker stopped", worker=worker.name, reason=self.failed)
            self.stop.set()
        except Exception as exc:  # noqa: BLE001
            self.failed = f"worker {worker.name} crashed: {type(exc).__name__}: {exc}"
            log.exception("worker crashed", worker=worker.name)
            self.stop.set()

    def wait(self) -> None:
        """Block until the workers end (after ``stop`` is set, each finishes and commits its batch)."""
        while any(t.is_alive() for t in self.threads):
            for t in self.threads:
                t.join(0.5)

    def close(self) -> None:
        """Stop the workers, wait for them, release the memory, encoder and HTTP endpoint."""
        self.stop.set()
        self.wait()
        if self.http is not None:
            self.http.shutdown()
            self.http = None
        for w in self.workers:  # the classifier a worker switched to after a promotion
            if isinstance(w, ClassifierWorker) and w.pipeline.classifier is not self.classifier:
                w.pipeline.classifier.encoder.close()
        if self.classifier is not None:
            self.classifier.close()
        elif self.router is not None:
            self.router.close()
        close_all_routers()


def build_runtime(settings: Settings, roles: Sequence[str] = ROLES, classifier: Classifier | None = None) -> Runtime:
    """Create the shared objects and the workers of ``roles``.

    Args:
        classifier: an already loaded :class:`newsmon.shared.classifier.Classifier` to share (the demo builds
            the memory with it first).

    Raises:
        ValueError: an unknown role.
    """
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown worker roles {sorted(unknown)}; choose from {', '.join(ROLES)}")
    w = settings.worker
    rt = Runtime(settings)
    state = settings.home / "state"  # without Redis: the registry and the park on local disk
    rt.registry = open_label_registry(settings)
    if "classifier" in roles:
        rt.classifier = classifier or Classifier(settings)
        rt.router = rt.classifier.router
        rt.dedup = open_near_duplicates(settings)
        rt.workers.append(ClassifierWorker(settings, rt.classifier, rt.dedup, rt.registry))
    else:
        version, dim = model_identity(settings)
        rt.router = shared_router(settings, version, dim)
    if "memory-updater" in roles:
        park = None if w.redis_url else SqliteDecisionPark(state / "parked.sqlite", w.decision_park_max,
                                                           w.decision_park_s)
        rt.workers.append(MemoryUpdaterWorker(settings, rt.router, rt.registry, park=park))
    return rt


def run_until_signalled(settings: Settings, roles: Sequence[str] = ROLES) -> int:
    """Production entry point: the start-up checks (:func:`~newsmon.workers.startup.wait_for_dependencies`),
    then run ``roles`` until SIGTERM / SIGINT, then finish the batch, commit, close.

    The first log line names the roles, the knowledge memory (mode, and path or URL without credentials), Kafka
    and Redis.

    Returns:
        the exit status: 0 after a signal, 1 when a worker ended by itself (``Runtime.failed`` logged).

    Raises:
        StartupError: a start-up check failed (and ``worker.wait_for_dependencies`` is off).
    """
    k, w = settings.kafka, settings.worker
    log.info("newsmon worker starting", roles=list(roles), memory=settings.memory_mode(),
             kafka=k.bootstrap_servers, topics="create" if k.create_topics else "check",
             redis=redact_url(w.redis_url) if w.redis_url else "in-process")
    HEALTH.set_info(memory=settings.memory_mode())
    stop = threading.Event()
    running = threading.Event()  # set once the workers run; before that a signal ends the process at once

    def on_signal(signum, _frame):
        stop.set()
        if not running.is_set():  # waiting for a dependency or loading the model: nothing to finish
            log.info("signal received before the workers started: exiting", signal=signal.Signals(signum).name)
            raise SystemExit(0)
        log.info("signal received: finishing the batch in progress", signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    http = serve_http(w.http_host, w.http_port) if w.http_port is not None and w.wait_for_dependencies else None
    if not wait_for_dependencies(settings, roles, stop):
        if http is not None:
            http.shutdown()
        return 0
    rt = build_runtime(settings, roles)
    rt.stop, rt.http = stop, http
    running.set()
    rt.start(provision=False)
    try:
        rt.wait()
    finally:
        rt.close()
    return 1 if rt.failed else 0
