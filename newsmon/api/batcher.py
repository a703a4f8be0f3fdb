"""``POST /v1/suggest`` under load: a bounded queue of requests, micro-batched across clients by one thread, as
the classifier worker batches its messages; and the readiness checks, run beside the event loop.

The event loop never runs the pipeline and never waits for a thread of its own: a request's articles are queued
(:meth:`SuggestQueue.submit`, an ``asyncio`` future), and one thread takes the queued requests, up to
``worker.batch_max_messages`` articles or ``api.batch_wait_ms`` after the first, through
:func:`suggest_many` (one encoder call, one search per language for all of them),
and hands each request its proposals. With more than ``api.queue_max_articles`` articles waiting, a request is
refused at once: 503 with ``Retry-After`` (the seconds the queue takes to drain at the measured rate, at least 1).
So ``/healthz``, ``/readyz`` and ``/metrics`` answer from the event loop whatever the load; ``/readyz`` from the
last result of :class:`Readiness`, refreshed every :data:`READY_EVERY_S` seconds by a thread of its own.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from newsmon.api.service import ApiError, ApiService
from newsmon.schemas import DeadLetterReason, LabelProposal
from newsmon.shared.scoring.records import CalibrationUnreadable
from newsmon.workers.pipeline import ArticleBatch
from newsmon.workers.proposing import proposals_of, validated

log = structlog.get_logger(__name__)

__all__ = ["READY_EVERY_S", "Readiness", "SuggestQueue", "suggest_many"]

READY_EVERY_S = 0.5  # how often the readiness checks run (seconds)


@dataclass
class _Request:
    articles: list[dict]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    queued: float = field(default_factory=time.monotonic)


class SuggestQueue:
    """The bounded, micro-batched queue of suggest requests (see the module docstring).

    Args:
        service: runs the batches (:func:`suggest_many`); max_articles: the queue's bound (articles);
        batch_articles: articles per batch at most; wait_s: how long a batch waits for more after its first
            request (seconds).
    """

    def __init__(self, service: ApiService, max_articles: int, batch_articles: int, wait_s: float) -> None:
        self.service, self.max_articles = service, max_articles
        self.batch_articles, self.wait_s = batch_articles, wait_s
        self._queue: deque[_Request] = deque()
        self._queued_articles = 0
        self._cond = threading.Condition()
        self._rate = 1.0  # articles per second, a moving average of the batches
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="newsmon-suggest", daemon=True)
        self._thread.start()

    async def submit(self, articles: list[dict]) -> Any:
        """The proposals of ``articles`` (as :meth:`ApiService.suggest`), once their batch ran.

        Raises:
            ApiError: 503 with ``Retry-After`` when the queue is full; the request's own 413 / 422 / 503.
        """
        loop = asyncio.get_running_loop()
        req = _Request(articles, loop.create_future(), loop)
        with self._cond:
            if self._queued_articles and self._queued_articles + len(articles) > self.max_articles:
                retry = max(1, math.ceil(self._queued_articles / max(self._rate, 0.1)))
                raise ApiError(503, f"busy: {self._queued_articles} articles are waiting to be scored (at most "
                                    f"api.queue_max_articles = {self.max_articles}); retry after {retry} s",
                               headers={"Retry-After": str(retry)})
            self._queue.append(req)
            self._queued_articles += len(articles)
            self._cond.notify()
        return await req.future

    def depth(self) -> int:
        """Articles waiting now."""
        with self._cond:
            return self._queued_articles

    def _take(self) -> list[_Request]:
        """The next batch: the first waiting request, then more until ``batch_articles`` or ``wait_s`` passed."""
        with self._cond:
            while not self._queue and not self._stop:
                self._cond.wait(0.5)
            if self._stop:
                return []
            batch, n = [self._queue.popleft()], 0
            n = len(batch[0].articles)
            deadline = time.monotonic() + self.wait_s
            while n < self.batch_articles:
                if self._queue:
                    if n + len(self._queue[0].articles) > self.batch_articles:
                        break
                    batch.append(self._queue.popleft())
                    n += len(batch[-1].articles)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._queued_articles -= n
            return batch

    def _run(self) -> None:
        while not self._stop:
            batch = self._take()
            if not batch:
                continue
            started = time.perf_counter()
            try:
                results: list[Any] = suggest_many(self.service, [r.articles for r in batch])
            except Exception as exc:  # noqa: BLE001 - each request of the batch gets it (a 500 with its reason)
                log.exception("suggest batch failed", requests=len(batch))
                results = [exc] * len(batch)
            n = sum(len(r.articles) for r in batch)
            self._rate = 0.8 * self._rate + 0.2 * n / max(time.perf_counter() - started, 1e-3)
            for req, result in zip(batch, results, strict=True):
                req.loop.call_soon_threadsafe(_settle, req.future, result)

    def close(self) -> None:
        """Stop the thread after the batch in progress; requests still queued get 503."""
        with self._cond:
            self._stop = True
            left, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        for req in left:
            req.loop.call_soon_threadsafe(_settle, req.future, ApiError(503, "the server is stopping"))
        self._thread.join(30)


def suggest_many(service: ApiService, requests: list[list[dict]]) -> list[list[LabelProposal] | Exception]:
    """:meth:`ApiService.suggest` for several requests at once, as one batch through ``service``'s pipeline (the
    micro-batch of :class:`SuggestQueue`): each request validated on its own (its :class:`ApiError` in
    its place: 413, or 422 for an invalid article or one in a language the memory has no collection for), the valid
    ones' articles proposed together through the worker's stages (:mod:`newsmon.workers.proposing`, as ``newsmon
    suggest``), their proposals split back in order. An error of the batch is every valid
    request's. Publishing (``?publish=true``) is the route's, after the batch (:meth:`ApiService.publish_proposals`)."""
    api = service.settings.api
    out: list[list[LabelProposal] | Exception] = []
    parts: list[tuple[int, ArticleBatch]] = []
    with service._lock:
        for r, articles in enumerate(requests):
            if len(articles) > api.max_articles:
                out.append(ApiError(413, f"{len(articles)} articles in one request; at most api.max_articles = "
                                         f"{api.max_articles}"))
                continue
            batch, rejected = validated(service.pipeline, articles)  # a language without a collection: 422
            if rejected:
                errors = [{"index": i, "reason": exc.reason} for i, exc in rejected]
                status = 413 if all(exc.code is DeadLetterReason.TOO_LARGE for _i, exc in rejected) else 422
                out.append(ApiError(status, "; ".join(f"article {e['index']}: {e['reason']}" for e in errors),
                                    errors))
                continue
            out.append([])
            parts.append((r, batch))
        if parts:
            whole = ArticleBatch(size=sum(b.size for _r, b in parts), items=[it for _r, b in parts
                                                                            for it in b.items])
            try:
                proposals = proposals_of(service.pipeline, whole)
            except CalibrationUnreadable as exc:
                for r, _b in parts:
                    out[r] = ApiError(503, str(exc), [{"record": exc.path, "recover": exc.recover}])
                return out
            at = 0
            for r, b in parts:
                out[r], at = proposals[at:at + len(b.items)], at + len(b.items)
    return out



def _settle(future: asyncio.Future, result: Any) -> None:
    if future.done():  # the client went away
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class Readiness:
    """The readiness checks (``check()`` -> ``(ready, info)``) run every :data:`READY_EVERY_S` seconds in a thread
    of their own; :meth:`latest` is the last result (with how old it is), so ``/readyz`` never waits for a
    dependency's time-out or for the pipeline."""

    def __init__(self, check: Callable[[], tuple[bool, dict]]) -> None:
        self.check = check
        self._latest: tuple[bool, dict, float] | None = None
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="newsmon-readyz", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ok, info = self.check()
            except Exception as exc:  # noqa: BLE001 - not ready, with the reason
                ok, info = False, {"error": f"{type(exc).__name__}: {exc}"}
            self._latest = (ok, info, time.monotonic())
            self._first.set()
            self._stop.wait(READY_EVERY_S)

    def latest(self) -> tuple[bool, dict]:
        """The last result, ``checked_s`` (its age in seconds) added; not ready before the first one."""
        got = self._latest
        if got is None:
            return False, {"checks": {"readiness": "the first checks are running"}}
        ok, info, at = got
        return ok, {**info, "checked_s": round(time.monotonic() - at, 2)}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
