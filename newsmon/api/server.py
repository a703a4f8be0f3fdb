"""Running the HTTP API under uvicorn: ``newsmon serve`` (alone, or beside the workers in embedded mode) and a
server in a thread for the demo."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any

import structlog
import uvicorn

from newsmon.api.app import create_app
from newsmon.api.service import build_service
from newsmon.shared.config import Settings
from newsmon.workers.runtime import Runtime, build_runtime
from newsmon.workers.topics import check_topics, create_topics

log = structlog.get_logger(__name__)

__all__ = ["serve", "start_in_thread"]


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal capture: uvicorn re-raises a captured SIGTERM after shutting
    down, which would kill the process before the workers finish their batch and commit; :func:`serve`
    handles the signals itself."""

    def capture_signals(self):
        return contextlib.nullcontext()


def serve(settings: Settings, workers: bool | None = None, journal: Any = None) -> None:
    """Serve the API on ``api.host``:``api.port`` until SIGTERM / SIGINT; then the workers finish their batch and
    commit, and everything is closed.

    Args:
        workers: also run both workers in this process (their /metrics, /healthz, /readyz are then the API's);
            default: in embedded mode (no ``memory.url``), where the memory can only be opened by one process.
        journal: the embedded broker's journal (:class:`newsmon.journal.BrokerJournal`), when there is one.
    """
    run_workers = settings.memory.url is None if workers is None else workers
    rt: Runtime | None = None
    if run_workers:
        settings.worker.http_port = None  # one HTTP server: the API's
        rt = build_runtime(settings)
        service = build_service(settings, rt.classifier, rt.registry, rt.dedup, journal)
        rt.start()
    else:
        k = settings.kafka  # the topics the API itself uses: label events out, the latest articles in
        topics = [k.topic_label_events, k.topic_articles]
        (create_topics if k.create_topics else check_topics)(k, topics, settings.worker.startup_timeout_s)
        service = build_service(settings, journal=journal)
    app = create_app(service, with_workers=run_workers)
    log.info("HTTP API starting", host=settings.api.host, port=settings.api.port, workers=run_workers,
             auth=settings.api.token is not None)
    server = _Server(uvicorn.Config(app, host=settings.api.host, port=settings.api.port, log_config=None,
                                    access_log=False))

    def on_signal(signum, _frame):
        log.info("signal received: stopping the API and the workers", signal=signal.Signals(signum).name)
        server.should_exit = True
        if rt is not None:
            rt.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.run()
    finally:
        service.close()
        if rt is not None:
            rt.close()


def start_in_thread(settings: Settings, runtime: Runtime, timeout_s: float = 30.0) -> uvicorn.Server:
    """Start the API for ``runtime``'s workers (same classifier, registry and near-duplicate index) in a daemon
    thread on ``api.host``:``api.port``; returns the server once it accepts connections (set
    ``should_exit = True`` to stop it).

    Raises:
        RuntimeError: it did not start within ``timeout_s`` seconds (e.g. the port is taken).
    """
    service = build_service(settings, runtime.classifier, runtime.registry, runtime.dedup)
    server = _Server(uvicorn.Config(create_app(service, with_workers=True), host=settings.api.host,
                                    port=settings.api.port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, name="newsmon-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the HTTP API did not start on {settings.api.host}:{settings.api.port}")
        time.sleep(0.05)
    return server
