"""Prometheus metrics and the liveness / readiness endpoints of the workers.

``GET /metrics`` (Prometheus text format), ``GET /healthz`` (200 while the worker loops are alive: each loop
beats at least every poll; 503 when a loop has not beaten for ``stale_after_s``), ``GET /readyz`` (200 once
every worker has its model, memory and consumer up, its consumer holds its partition assignment, it is not
paused on a failing dependency and its loop is not stale; 503 otherwise,
with the reason; both with the knowledge memory's mode, ``{"memory": {"mode": "embedded", "path": ...}}`` or
``{"mode": "server", "url": ...}`` without credentials).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

ARTICLES = Counter("newsmon_articles_total", "Article events handled, by outcome "
                   "(proposed, duplicate, dead_letter).", ["outcome"], registry=REGISTRY)
BATCH_SIZE = Histogram("newsmon_batch_size", "Messages per classifier micro-batch.",
                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=REGISTRY)
BATCH_SECONDS = Histogram("newsmon_batch_seconds", "Wall time of a classifier micro-batch (seconds), by stage.",
                          ["stage"], buckets=(.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120),
                          registry=REGISTRY)
PROPOSALS_PER_ARTICLE = Histogram("newsmon_proposals_per_article", "Labels proposed per article.",
                                  buckets=(0, 1, 2, 3, 4, 5, 7, 10, 20), registry=REGISTRY)
DEAD_LETTERS = Counter("newsmon_dead_letters_total", "Messages sent to a dead-letter topic, by source topic, "
                       "reason code (newsmon.schemas.DeadLetterReason) and stage (DeadLetterStage, or none).",
                       ["topic", "reason", "stage"], registry=REGISTRY)
PRODUCE_FAILURES = Counter("newsmon_produce_failures_total", "Outputs (proposals, dead letters) the broker did not "
                           "acknowledge, by destination topic; the worker pauses and retries them.", ["topic"],
                           registry=REGISTRY)
GROUP_EVENTS = Counter("newsmon_group_events_total", "Consumer-group events, by worker: assigned, revoked, lost "
                       "(removed from the group), commit_failed (the in-flight batch's offsets dropped; its next "
                       "owner reads it again), consumer_recreated (after a fatal consumer error).",
                       ["worker", "event"], registry=REGISTRY)
CONSUMER_LAG = Gauge("newsmon_consumer_lag", "Messages behind the high watermark, per topic and partition.",
                     ["group", "topic", "partition"], registry=REGISTRY)
DECISIONS = Counter("newsmon_decisions_total", "Moderator decisions handled, by outcome "
                    "(applied, stale, dead_letter; parked: its article not stored yet, applied or dead-lettered "
                    "later; clamped: future-dated, taken as decided now, also counted as applied or stale).",
                    ["outcome"], registry=REGISTRY)
PARKED_DECISIONS = Gauge("newsmon_parked_decisions", "Moderator decisions waiting for their article "
                         "(worker.decision_park_s).", registry=REGISTRY)
LABEL_EVENTS = Counter("newsmon_label_events_total", "Label events applied, by action.", ["action"],
                       registry=REGISTRY)
DECISION_LATENCY = Histogram("newsmon_decision_to_memory_seconds", "From consuming a decision to the memory "
                             "serving it (seconds).", buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2),
                             registry=REGISTRY)
ABANDONED = Gauge("newsmon_abandoned_handlers", "Handling threads a worker gave up on (a stage over "
                  "worker.stage_budget_s) that are still running: a Python call cannot be killed.", ["worker"],
                  registry=REGISTRY)
PAUSED = Gauge("newsmon_worker_paused", "1 while a worker is paused on a failing dependency or a failing "
               "produce.", ["worker"], registry=REGISTRY)


class Health:
    """Liveness beats and readiness flags of the workers in this process."""

    def __init__(self, stale_after_s: float = 120.0):
        self.stale_after_s = stale_after_s
        self._lock = threading.Lock()
        self._beats: dict[str, float] = {}
        self._ready: dict[str, str | None] = {}
        self._joined: dict[str, bool] = {}  # a consumer's worker: whether it has its partition assignment
        self._info: dict = {}

    def set_info(self, **info) -> None:
        """What this process runs, shown on /readyz beside the workers (e.g. ``memory={"mode": "server",
        "url": ...}``); never put credentials here."""
        with self._lock:
            self._info.update(info)

    def register(self, worker: str) -> None:
        with self._lock:
            self._beats[worker] = time.monotonic()
            self._ready[worker] = "starting"

    def beat(self, worker: str) -> None:
        with self._lock:
            self._beats[worker] = time.monotonic()

    def set_ready(self, worker: str, not_ready_reason: str | None = None) -> None:
        """``None`` = ready; a string = not ready, with the reason."""
        with self._lock:
            self._ready[worker] = not_ready_reason
        PAUSED.labels(worker).set(0 if not_ready_reason is None else 1)

    def joining(self, worker: str) -> None:
        """``worker``'s consumer is (re)joining its group: not ready until :meth:`joined`."""
        with self._lock:
            self._joined[worker] = False

    def joined(self, worker: str) -> None:
        """``worker``'s consumer got its partition assignment (possibly empty: more members than partitions)."""
        with self._lock:
            self._joined[worker] = True

    def unregister(self, worker: str) -> None:
        with self._lock:
            self._beats.pop(worker, None)
            self._ready.pop(worker, None)
            self._joined.pop(worker, None)

    def live(self) -> tuple[bool, dict]:
        now = time.monotonic()
        with self._lock:
            ages = {w: round(now - t, 1) for w, t in self._beats.items()}
        return all(a < self.stale_after_s for a in ages.values()), {"beat_age_s": ages}

    def ready(self) -> tuple[bool, dict]:
        """Ready when every registered worker is ready (not paused), has its partition assignment, and its loop
        beat within ``stale_after_s`` (a worker whose loop is stuck is not ready, whatever it said last)."""
        now = time.monotonic()
        with self._lock:
            state, info = dict(self._ready), dict(self._info)
            for w, joined in self._joined.items():
                if not joined and state.get(w) is None:
                    state[w] = "joining its consumer group (no partitions assigned yet)"
            ages = {w: now - t for w, t in self._beats.items()}
        for w, age in ages.items():
            if age >= self.stale_after_s and state.get(w) is None:
                state[w] = f"stale: its loop has not beaten for {age:.0f} s"
        return bool(state) and all(v is None for v in state.values()), {"workers": {
            w: "ready" if v is None else v for w, v in state.items()}, **info}


HEALTH = Health()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/metrics"):
            body, status, ctype = generate_latest(REGISTRY), 200, CONTENT_TYPE_LATEST
        elif self.path.startswith("/healthz"):
            ok, info = HEALTH.live()
            body, status, ctype = json.dumps(info).encode(), 200 if ok else 503, "application/json"
        elif self.path.startswith("/readyz"):
            ok, info = HEALTH.ready()
            body, status, ctype = json.dumps(info).encode(), 200 if ok else 503, "application/json"
        else:
            body, status, ctype = b"not found\n", 404, "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        return


def serve_http(host: str, port: int) -> ThreadingHTTPServer:
    """Start the /metrics, /healthz, /readyz server in a daemon thread; returns it (``shutdown()`` to stop)."""
    server = ThreadingHTTPServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, name="newsmon-http", daemon=True).start()
    return server
