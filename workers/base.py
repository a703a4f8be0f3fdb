"""The consume -> handle -> produce -> commit loop shared by the workers, and their error policy.

Per micro-batch (up to ``batch_max_messages`` or ``batch_max_ms``): ``handle_batch`` produces every output
through an :class:`~newsmon.workers.kafka_io.Outbox`; the outbox is flushed; offsets are committed up to the
first message not fully acknowledged, which is consumed again.

Error policy (all of it here, so that it changes in one place):

1. **Bad input** (a message that cannot be handled because of its own content: invalid JSON or schema, too
   large, a decision on an unknown article): :meth:`BatchWorker.reject` sends it, bytes untouched, to the
   dead-letter topic with the reason; the worker carries on.
2. **Dependency calls** (Qdrant, Redis, the model) go through :meth:`ErrorPolicy.call`: ``retry_attempts``
   tenacity retries with exponential backoff, then :class:`DependencyDown`.
3. **A failed batch** (:meth:`BatchWorker._process`): when the dependency probe fails too, the worker commits
   nothing for the unfinished messages, pauses its partitions, reports not-ready, probes every
   ``pause_backoff_s`` seconds (while polling, so it stays in the consumer group), then resumes from the first
   unfinished message. When the probe succeeds, the failure is not the dependency's: the batch's messages are
   handled one by one, and a message that still fails alone is rejected as in 1, with the error as its reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import Consumer, Message, Producer
from tenacity import Retrying, stop_after_attempt, wait_exponential

from newsmon.shared.config import Settings, WorkerSettings
from newsmon.workers.kafka_io import (Outbox, commit_acknowledged, dead_letter, make_consumer, make_producer,
                                      real_messages, record_lag, rewind_to)
from newsmon.workers.observability import HEALTH

log = structlog.get_logger(__name__)


class DependencyDown(RuntimeError):
    """A dependency call still failed after its retries."""


class StartupError(RuntimeError):
    """A worker cannot start: Kafka, Redis or the Qdrant server unreachable, topics missing or with another
    partition count. The message is one line for the operator, naming the address or topic and what to do."""


class ErrorPolicy:
    """How the workers call their dependencies: retries with exponential backoff, then :class:`DependencyDown`.

    Args:
        settings: ``retry_attempts`` (tries per call) of the worker settings.
    """

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings  # read at each call: settings may change while a worker runs

    def call(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with tenacity retries (exponential backoff 0.2 s .. 2 s).

        Raises:
            DependencyDown: the last try failed too (``what`` and the error in the message, the error chained).
        """
        try:
            for attempt in Retrying(stop=stop_after_attempt(self.settings.retry_attempts),
                                    wait=wait_exponential(multiplier=0.2, max=2.0), reraise=True):
                with attempt:
                    return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise DependencyDown(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def probe_ok(worker: str, check: Callable[[], None]) -> bool:
    """Run a dependency check; True when it raised nothing (a failure is logged, not raised)."""
    try:
        check()
        return True
    except Exception as exc:  # noqa: BLE001
        log.info("probe failed", worker=worker, error=f"{type(exc).__name__}: {exc}")
        return False


class BatchWorker:
    """Base class: subclasses set ``name`` and implement ``handle_batch`` and ``probe``."""

    name = "worker"

    def __init__(self, settings: Settings, group: str, topics: list[str], instance: str | None = None):
        self.settings = settings
        self.group = group
        self.topics = topics
        self.instance = instance or f"{self.name}-{threading.get_ident() % 100000}"
        self.policy = ErrorPolicy(settings.worker)
        self.batches = 0

    # -- to implement -----------------------------------------------------------------------------
    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        """Produce every output of ``msgs`` through ``outbox`` and mark each one ``outbox.done(msg)``.

        Raises:
            DependencyDown: a dependency call failed after its retries.
        """
        raise NotImplementedError

    def probe(self) -> bool:
        """True when the dependencies answer."""
        return True

    # -- the error policy's entry points ------------------------------------------------------------
    def call(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """A dependency call under the error policy (:meth:`ErrorPolicy.call`)."""
        return self.policy.call(what, fn, *args, **kwargs)

    def reject(self, outbox: Outbox, msg: Message, reason: str) -> None:
        """Bad input: send ``msg`` to its dead-letter topic with ``reason`` (it counts as handled)."""
        dead_letter(outbox, msg, reason, self.instance)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; the batch in progress is finished and committed first."""
        w = self.settings.worker
        consumer = make_consumer(self.settings, self.group, self.topics, self.instance)
        producer = make_producer(self.settings, self.instance)
        HEALTH.register(self.name)
        HEALTH.set_ready(self.name, None)
        log.info("worker started", worker=self.name, instance=self.instance, group=self.group, topics=self.topics)
        try:
            while not stop.is_set():
                HEALTH.beat(self.name)
                msgs = real_messages(consumer.consume(num_messages=w.batch_max_messages,
                                                      timeout=w.batch_max_ms / 1000))
                if msgs:
                    self._process(consumer, producer, msgs, stop)
                    self.batches += 1
                    record_lag(consumer, self.group)
        finally:
            producer.flush(10)
            consumer.close()
            del producer
            HEALTH.unregister(self.name)
            log.info("worker stopped", worker=self.name, instance=self.instance)

    def _process(self, consumer: Consumer, producer: Producer, msgs: list[Message], stop: threading.Event) -> None:
        """One batch under the error policy: pause on a dependency down, else isolate the failing message."""
        outbox = Outbox(producer)
        try:
            self.handle_batch(msgs, outbox)
        except DependencyDown as exc:
            if not self.probe():
                outbox.wait()
                self._pause(consumer, msgs, outbox, str(exc), stop)
                return
            log.warning("batch failed with healthy dependencies; handling messages one by one", error=str(exc))
            for m in msgs:
                if Outbox.key_of(m) in outbox.handled:  # already dead-lettered or proposed
                    continue
                try:
                    self.handle_batch([m], outbox)
                except DependencyDown as exc1:
                    if self.probe():
                        self.reject(outbox, m, f"processing failed: {exc1}")
                    else:
                        outbox.wait()
                        self._pause(consumer, msgs, outbox, str(exc1), stop)
                        return
        outbox.wait()
        commit_acknowledged(consumer, msgs, outbox)

    def _pause(self, consumer: Consumer, msgs: list[Message], outbox: Outbox, reason: str,
               stop: threading.Event) -> None:
        """Commit the acknowledged prefix, pause, probe until healthy, resume at the first unfinished message."""
        unfinished = [m for m in msgs if not outbox.acknowledged(m)]
        commit_acknowledged(consumer, msgs, outbox)  # stops, per partition, at the first unfinished one
        consumer.pause(consumer.assignment())
        HEALTH.set_ready(self.name, f"paused: {reason[:200]}")
        log.error("dependency down: consumption paused, nothing committed for unfinished messages",
                  worker=self.name, reason=reason, unfinished=len(unfinished))
        started = time.monotonic()
        while not stop.is_set():
            HEALTH.beat(self.name)
            deadline = time.monotonic() + self.settings.worker.pause_backoff_s
            while time.monotonic() < deadline and not stop.is_set():
                m = consumer.poll(0.2)  # keeps the group membership; paused partitions deliver nothing
                if m is not None and m.error() is None:
                    rewind_to(consumer, [m])  # a partition assigned during the pause: read it again later
                    consumer.pause(consumer.assignment())
            if self.probe():
                break
        consumer.resume(consumer.assignment())
        rewind_to(consumer, unfinished)
        HEALTH.set_ready(self.name, None)
        log.info("dependency back: consumption resumed", worker=self.name,
                 paused_s=round(time.monotonic() - started, 1))
