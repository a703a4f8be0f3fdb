"""Wiring: build the workers from settings, run them in threads of one process, stop them on SIGTERM.

Embedded mode (no ``memory.url``): both workers must share one process, since the embedded Qdrant engine
locks its directory; they also share one near-duplicate index and label registry unless ``worker.redis_url``
is set. Production runs one process per role against a Qdrant server and Redis.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer

import structlog

from newsmon.shared.classifier import Classifier, model_identity
from newsmon.shared.config import Settings
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.memory import MemoryRouter, close_all_routers, shared_router
from newsmon.workers.base import BatchWorker
from newsmon.workers.classifier import ClassifierWorker
from newsmon.workers.labels import LabelRegistry, open_registry
from newsmon.workers.memory_updater import MemoryUpdaterWorker
from newsmon.workers.observability import serve_http
from newsmon.workers.topics import ensure_topics

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

    def start(self) -> "Runtime":
        """Start every worker in its own thread (and the HTTP endpoint when ``worker.http_port`` is set)."""
        k = self.settings.kafka
        if k.create_topics:
            ensure_topics(k.client_config(), k.all_topics(), partitions=k.topic_partitions)
        if self.settings.worker.http_port is not None and self.http is None:
            self.http = serve_http(self.settings.worker.http_host, self.settings.worker.http_port)
        for w in self.workers:
            t = threading.Thread(target=self._run_one, args=(w,), name=f"newsmon-{w.name}", daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _run_one(self, worker: BatchWorker) -> None:
        try:
            worker.run(self.stop)
        except Exception:  # noqa: BLE001
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
    rt.registry = open_registry(w.redis_url, f"{w.redis_namespace}:labels")
    if "classifier" in roles:
        rt.classifier = classifier or Classifier(settings)
        rt.router = rt.classifier.router
        rt.dedup = NearDuplicateIndex(threshold=w.dedup_threshold, redis_url=w.redis_url,
                                      namespace=f"{w.redis_namespace}:dedup")
        rt.workers.append(ClassifierWorker(settings, rt.classifier, rt.dedup, rt.registry))
    else:
        version, dim = model_identity(settings)
        rt.router = shared_router(settings, version, dim)
    if "memory-updater" in roles:
        rt.workers.append(MemoryUpdaterWorker(settings, rt.router, rt.registry))
    return rt


def run_until_signalled(settings: Settings, roles: Sequence[str] = ROLES) -> None:
    """Production entry point: run ``roles`` until SIGTERM / SIGINT, then finish the batch, commit, close."""
    rt = build_runtime(settings, roles)

    def on_signal(signum, _frame):
        log.info("signal received: finishing the batch in progress", signal=signal.Signals(signum).name)
        rt.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rt.start()
    try:
        rt.wait()
    finally:
        rt.close()
