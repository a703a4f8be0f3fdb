"""Start-up checks of the workers, before the model loads: Kafka answers and the topics are provisioned
(:func:`~newsmon.workers.topics.prepare_topics`), Redis answers, the Qdrant server answers, no other process
holds the embedded memory. Each check gives up
after ``worker.startup_timeout_s`` seconds with a :class:`~newsmon.workers.base.StartupError` (one line naming
the address, credentials left out); with ``worker.wait_for_dependencies`` the worker instead waits, answering
``/readyz`` with 503 and the reason, and tries again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import structlog

from newsmon.shared.classifier import model_identity
from newsmon.shared.config import Settings, redact_url, reveal
from newsmon.shared.memory import MemoryLockedError, MemoryRouter, stored_collections
from newsmon.workers.base import StartupError
from newsmon.workers.observability import HEALTH
from newsmon.workers.topics import prepare_topics

log = structlog.get_logger(__name__)

#: the pseudo-worker whose readiness stands for the start-up checks on /readyz
STARTUP = "startup"


def check_redis(settings: Settings) -> None:
    """PING the Redis of ``worker.redis_url`` (nothing to check without one).

    Raises:
        StartupError: no answer within ``worker.startup_timeout_s`` seconds.
    """
    url = reveal(settings.worker.redis_url)
    if not url:
        return
    import redis  # deferred: only a worker with a Redis URL needs the client

    t = settings.worker.startup_timeout_s
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=t, socket_timeout=t, retry=None)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.exceptions.RedisError, OSError, ValueError) as exc:
        raise StartupError(f"cannot reach Redis at {redact_url(url)} (NEWSMON_WORKER__REDIS_URL) within {t:g} s: "
                           f"{_reason(exc)}") from None


def check_qdrant(settings: Settings) -> None:
    """List the collections of the Qdrant server of ``memory.url`` (nothing to check in the embedded mode).

    Raises:
        StartupError: no answer within ``worker.startup_timeout_s`` seconds, or an error answer (a wrong API
            key).
    """
    url = reveal(settings.memory.url)
    if not url:
        return
    from qdrant_client import QdrantClient  # deferred: 1-2 s import, server mode only

    t = settings.worker.startup_timeout_s
    client = None
    try:
        client = QdrantClient(url=url, api_key=reveal(settings.memory.api_key) or None, timeout=max(1, round(t)))
        client.get_collections()
    except Exception as exc:  # noqa: BLE001 - httpx, grpc and qdrant-client errors alike
        raise StartupError(f"cannot reach the Qdrant server at {redact_url(url)} (NEWSMON_MEMORY__URL) within "
                           f"{t:g} s: {_reason(exc)}") from None
    finally:
        if client is not None:
            client.close()


def check_embedded_memory(settings: Settings) -> None:
    """In the embedded mode, open (and close again) every collection of the production model's version, so
    that a memory held by another process stops the worker now, with the way out, instead of pausing it at
    the first batch. Nothing to check with a Qdrant server, or on an empty memory.

    Raises:
        StartupError: a collection's directory is locked by another process.
    """
    if settings.memory.url or not stored_collections(settings):
        return
    version, dim = model_identity(settings)
    router = MemoryRouter(settings, version, dim)
    try:
        for lang in router.languages():
            router.memory(lang)
    except MemoryLockedError:
        raise StartupError(f"the embedded knowledge memory at {settings.memory_path} is open in another process "
                           "(its lock is held): run both roles in one process (`newsmon worker all`), stop the "
                           "other process, or set NEWSMON_MEMORY__URL to a Qdrant server") from None
    finally:
        router.close()


def preflight(settings: Settings, roles: Sequence[str]) -> None:
    """Every start-up check once: Kafka and the topics of ``roles``, then Redis, then the Qdrant server, then
    the embedded memory's lock.

    Raises:
        StartupError: the first check that failed.
    """
    prepare_topics(settings.kafka, roles, settings.worker.startup_timeout_s)
    check_redis(settings)
    check_qdrant(settings)
    check_embedded_memory(settings)


def wait_for_dependencies(settings: Settings, roles: Sequence[str], stop: threading.Event) -> bool:
    """:func:`preflight`; with ``worker.wait_for_dependencies``, again every ``worker.pause_backoff_s`` seconds
    (at least 1 s) until it passes, ``/readyz`` answering 503 with the reason meanwhile.

    Returns:
        True once the checks passed; False when ``stop`` was set while waiting.

    Raises:
        StartupError: a check failed and waiting is off.
    """
    w = settings.worker
    HEALTH.register(STARTUP)
    try:
        while not stop.is_set():
            try:
                preflight(settings, roles)
                return True
            except StartupError as exc:
                if not w.wait_for_dependencies:
                    raise
                HEALTH.set_ready(STARTUP, f"waiting: {exc}")
                log.warning("waiting for a dependency (NEWSMON_WORKER__WAIT_FOR_DEPENDENCIES)", reason=str(exc))
            HEALTH.beat(STARTUP)
            stop.wait(max(1.0, w.pause_backoff_s))
            HEALTH.beat(STARTUP)
        return False
    finally:
        HEALTH.set_ready(STARTUP, None)  # newsmon_worker_paused{worker="startup"} back to 0
        HEALTH.unregister(STARTUP)


def _reason(exc: BaseException) -> str:
    """The last line of an exception's text, shortened, with its type (never a traceback)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:200]}"
