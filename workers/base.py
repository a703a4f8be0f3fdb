"""The consume -> handle -> produce -> commit loop shared by the workers, asking the error policy at each failure.

Per micro-batch (up to ``batch_max_messages`` or ``batch_max_ms``): ``handle_batch`` produces every output
through an :class:`~newsmon.workers.kafka_io.Outbox`; the outbox is flushed; offsets are committed up to the
first message not fully acknowledged, which is consumed again.

What happens on an error is the worker's error policy's verdict (:mod:`newsmon.workers.policy`, one object,
``worker.error_policy``): retry (a batch one message at a time, a message once more), pause the partitions and
probe with backoff without committing the unfinished messages, dead-letter a message with its reason code and
stage while the rest of its batch proceeds, or rejoin the group (the batch's offsets dropped). Only an error of
the loop itself ends :meth:`BatchWorker.run` (and the process, with a non-zero status).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from newsmon.schemas import DeadLetterReason, DeadLetterStage, InvalidEvent
from newsmon.shared.config import Settings
from newsmon.workers.checkpoint import commit, poll_paused, rewind_to
from newsmon.workers.kafka_io import Outbox, dead_letter, make_consumer, make_producer, real_messages, record_lag
from newsmon.workers.observability import GROUP_EVENTS, HEALTH
from newsmon.workers.policy import (Action, DependencyCalls, DependencyDown, Failure, Phase, ProduceFailed,
                                    StageError, TooSlow, Verdict, backoff_s, load_error_policy, membership_lost)
from newsmon.workers.watch import Abandoned, RunOutbox, ShuttingDown, Watcher

log = structlog.get_logger(__name__)

__all__ = ["BatchWorker", "DependencyDown", "StartupError", "probe_ok"]


class StartupError(RuntimeError):
    """A worker cannot start: Kafka, Redis or the Qdrant server unreachable, topics missing or with another
    partition count. The message is one line for the operator, naming the address or topic and what to do."""


def probe_ok(worker: str, check: Callable[[], None]) -> bool:
    """Run a dependency check; True when it raised nothing (a failure is logged, not raised)."""
    try:
        check()
        return True
    except Exception as exc:  # noqa: BLE001
        log.info("probe failed", worker=worker, error=f"{type(exc).__name__}: {exc}")
        return False


class BatchWorker:
    """Base class: subclasses set ``name`` and implement ``handle_batch`` and ``probe``.

    Attributes:
        batches: batches handled; group_events: counts of ``assigned``, ``revoked``, ``lost``, ``commit_failed``,
            ``consumer_recreated``; dead_letters: counts per reason code; pauses: times paused.
        after_produce: a hook, set on the class, called as ``hook(worker, msgs)`` with each batch after its
            outputs were acknowledged and before its offsets are committed (None in production; tests use it to
            crash a worker exactly there).
    """

    name = "worker"
    after_produce: Callable[["BatchWorker", list[Message]], None] | None = None

    def __init__(self, settings: Settings, group: str, topics: list[str], instance: str | None = None):
        self.settings = settings
        self.group = group
        self.topics = topics
        self.instance = instance or f"{self.name}-{threading.get_ident() % 100000}"
        self.dependencies = DependencyCalls(settings.worker)
        self.policy = load_error_policy(settings)
        self.batches = 0
        self.pauses = 0
        self.group_events: Counter = Counter()
        self.dead_letters: Counter = Counter()
        self.verdicts: Counter = Counter()
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._produce_streak = 0
        self.watcher = Watcher(self.name, settings)

    # -- to implement -----------------------------------------------------------------------------
    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        """Produce every output of ``msgs`` through ``outbox`` and mark each one ``outbox.done(msg)``; run each
        stage inside :meth:`stage` (it names the stage of a failure); hand a message found invalid to
        :meth:`refuse`.

        Raises:
            Exception: any error; the error policy (:mod:`newsmon.workers.policy`) decides what follows.
        """
        raise NotImplementedError

    def probe(self) -> bool:
        """True when the dependencies answer."""
        return True

    # -- the error policy's entry points ------------------------------------------------------------
    def call(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """A dependency call, transient errors retried (:meth:`newsmon.workers.policy.DependencyCalls.call`)."""
        return self.dependencies.call(what, fn, *args, **kwargs)

    @contextmanager
    def stage(self, stage: DeadLetterStage, messages: int = 1) -> Iterator[None]:
        """Run the body as ``stage``: an error escaping it is raised as :class:`StageError` carrying the stage
        (an inner stage's error keeps its own); the loop holds the stage to ``worker.stage_budget_s`` (times
        ``messages`` for a step whose work is bounded per message, e.g. a batch's embedding).

        Raises:
            Abandoned: the loop gave this run up (its budget ran out, or the worker is stopping).
        """
        run = self.watcher.current()
        if run is not None:
            run.enter(stage, messages)
        try:
            yield
        except (StageError, Abandoned):
            raise
        except Exception as exc:  # noqa: BLE001 - carried to the policy with its stage
            raise StageError(stage, exc) from exc
        finally:
            if run is not None:
                run.leave()

    def refuse(self, outbox: Outbox, msg: Message, error: InvalidEvent, stage: DeadLetterStage) -> None:
        """A message found invalid at ``stage`` (its reason code in ``error.code``): the policy's verdict on it
        alone; dead-lettered by default. A pause or rejoin verdict fails the batch (:class:`StageError`), so
        the loop carries it out."""
        verdict = self._decide(Failure(error, stage, (msg,), isolated=True, worker=self.name, probe=self.probe))
        if verdict.action is Action.DEAD_LETTER or verdict.action is Action.RETRY:  # a retry would refuse again
            self.reject(outbox, msg, verdict.reason if verdict.action is Action.DEAD_LETTER else error.code,
                        verdict.detail or error.reason, stage)
            return
        raise StageError(stage, error)

    def reject(self, outbox: Outbox, msg: Message, reason: DeadLetterReason, detail: str,
               stage: DeadLetterStage | None) -> None:
        """Send ``msg`` to its dead-letter topic with the ``reason`` code, the ``stage`` and ``detail`` in words;
        it counts as handled."""
        dead_letter(outbox, msg, DeadLetterReason(reason), stage, detail, self.instance,
                    self.settings.worker.dead_letter_max_bytes)
        self.dead_letters[DeadLetterReason(reason).value] += 1

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; the batch in progress is finished and committed first.

        Raises:
            Exception: only an error of the loop itself (creating the clients, a bug); batch errors, failed
                commits and lost partitions are handled by the policy.
        """
        w = self.settings.worker
        self.warm_up()
        self._consumer = self._new_consumer()
        self._producer = make_producer(self.settings, self.instance)
        HEALTH.register(self.name)
        HEALTH.set_ready(self.name, None)
        HEALTH.joining(self.name)  # ready once the group assigned its partitions (_group_change)
        log.info("worker started", worker=self.name, instance=self.instance, group=self.group, topics=self.topics)
        try:
            while not stop.is_set():
                HEALTH.beat(self.name)
                try:
                    msgs = real_messages(self._consumer.consume(num_messages=w.batch_max_messages,
                                                                timeout=w.batch_max_ms / 1000))
                except KafkaException as exc:
                    self._consumer_error(exc)
                    continue
                self.step(msgs, stop)
            self.step([], stop)  # a batch still in flight (a worker that overlaps batches) is finished
        finally:
            self._producer.flush(10)
            try:
                self._consumer.close()
            except KafkaException as exc:
                log.warning("consumer close failed", worker=self.name, error=str(exc))
            HEALTH.unregister(self.name)
            log.info("worker stopped", worker=self.name, instance=self.instance)

    def warm_up(self) -> None:
        """Load, before the first consume, what the first batch would otherwise load on its way (here nothing; the
        classifier loads its records' models). Must not raise: a failure is the first batch's to meet, under the
        error policy."""

    def step(self, msgs: list[Message], stop: threading.Event) -> None:
        """Handle what one consume returned (possibly nothing): here the batch at once. The classifier keeps
        one batch in flight instead (:mod:`newsmon.workers.ahead`)."""
        if msgs:
            self._process(msgs, stop)
            self.batches += 1
            record_lag(self._consumer, self.group)

    def _process(self, msgs: list[Message], stop: threading.Event) -> tuple[bool, set[tuple[str, int]]]:
        """One batch under the error policy (see :mod:`newsmon.workers.policy`). Returns whether its offsets
        were committed as usual, and the partitions ``(topic, partition)`` the consumer was sent back on (a
        pause, an unacknowledged message): what was consumed after ``msgs`` there comes again."""
        outbox = Outbox(self._producer)
        verdict = self._handle(msgs, outbox, stop)
        outbox.wait()
        produce_failed = verdict is None and bool(outbox.failed)
        if produce_failed:
            verdict = self._produce_failed(msgs, outbox)
        if verdict is not None and verdict.action is Action.REJOIN:
            self._renew_consumer(verdict.detail)
            return False, set()
        if verdict is not None:  # pause: until the probe passes, or (a produce) after the backoff
            if produce_failed:
                return False, self._pause(msgs, outbox, verdict.detail, stop, lambda: True, self._produce_streak)
            return False, self._pause(msgs, outbox, verdict.detail, stop, self.probe)
        self._produce_streak = 0
        if self.after_produce is not None:
            self.after_produce(msgs)
        rewound = self._commit(msgs, outbox)
        return rewound is not None and not rewound, rewound or set()

    def _decide(self, failure: Failure) -> Verdict:
        """The policy's verdict on ``failure``, its detail filled in and logged."""
        verdict = self.policy(failure)
        if not verdict.detail:
            verdict = Verdict(verdict.action, verdict.reason, failure.detail)
        self.verdicts[verdict.action.value] += 1
        log.warning("failure", worker=self.name, phase=failure.phase, messages=len(failure.messages),
                    stage=failure.stage.value if failure.stage else None, isolated=failure.isolated,
                    attempt=failure.attempt, action=verdict.action.value,
                    reason=verdict.reason.value if verdict.action is Action.DEAD_LETTER else None,
                    detail=verdict.detail[:300])
        return verdict

    def _handle(self, msgs: list[Message], outbox: Outbox, stop: threading.Event) -> Verdict | None:
        """``handle_batch`` under the policy. Returns None when every message is done (handled or
        dead-lettered), else the pause or rejoin verdict that stopped it."""
        failure = self._attempt(msgs, outbox, isolated=False, attempt=1, stop=stop)
        if failure is None:
            return None
        if isinstance(failure.error, ShuttingDown):  # nothing more of it is committed
            return Verdict.pause(failure.detail)
        verdict = self._decide(failure)
        if verdict.action is Action.RETRY:
            if isinstance(failure.error, TooSlow):  # what was given up may hold a lock the messages need
                self.watcher.settle(self._consumer, stop)
            return self._isolate(msgs, outbox, stop)
        if verdict.action is Action.DEAD_LETTER:
            for m in msgs:
                if Outbox.key_of(m) not in outbox.handled:
                    self.reject(outbox, m, verdict.reason, verdict.detail, failure.stage)
            return None
        return verdict

    def _attempt(self, msgs: list[Message], outbox: Outbox, isolated: bool, attempt: int,
                 stop: threading.Event) -> Failure | None:
        """``handle_batch`` once, in a thread of its own (:meth:`Watcher.run`); None when it went through, else
        the failure (its stage unwrapped; :class:`TooSlow` for a stage over its budget)."""
        exc = self.watcher.run(lambda run: self.handle_batch(msgs, RunOutbox(outbox, run)), self._consumer, stop)
        return None if exc is None else self._failure(exc, msgs, "handle", isolated, attempt)

    def _failure(self, exc: BaseException, msgs: list[Message], phase: Phase, isolated: bool = False,
                 attempt: int = 1) -> Failure:
        stage = None
        if isinstance(exc, StageError):
            stage, exc = exc.stage, exc.error
        return Failure(exc, stage, tuple(msgs), phase, isolated, attempt, self.name, self.probe)

    def _isolate(self, msgs: list[Message], outbox: Outbox, stop: threading.Event) -> Verdict | None:
        """Handle the unfinished messages one at a time under the policy (retry, dead-letter). Returns a pause
        or rejoin verdict met on the way (the rest is then left for after it), else None."""
        for m in msgs:
            attempt = 1
            while Outbox.key_of(m) not in outbox.handled:
                failure = self._attempt([m], outbox, isolated=True, attempt=attempt, stop=stop)
                if failure is None:
                    break
                if isinstance(failure.error, ShuttingDown):
                    return Verdict.pause(failure.detail)
                verdict = self._decide(failure)
                if verdict.action is Action.RETRY and not stop.is_set():
                    attempt += 1
                    continue
                if verdict.action is Action.DEAD_LETTER:
                    self.reject(outbox, m, verdict.reason, verdict.detail, failure.stage)
                    break
                return verdict if verdict.action is not Action.RETRY else Verdict.pause(verdict.detail)
        return None

    def _commit(self, msgs: list[Message], outbox: Outbox) -> set[tuple[str, int]] | None:
        """Commit the acknowledged prefix; retriable errors retried; a commit that still fails goes to the
        policy (default: rejoin when the group moved on, else leave the offsets to the next commit; either way
        the batch's offsets are dropped and the partitions' next owner reads them again). Returns the
        partitions sent back to an unacknowledged message, None when the commit failed."""
        try:
            return commit(self._consumer, msgs, outbox, self.settings.worker.retry_attempts)
        except KafkaException as exc:
            self._group_change("commit_failed", [])
            verdict = self._decide(self._failure(exc, msgs, "commit"))
            log.warning("commit failed: the in-flight batch's offsets are dropped; the partitions' next owner "
                        "reads the batch again", worker=self.name, error=str(exc), action=verdict.action.value)
            if verdict.action is Action.REJOIN:  # a new member: the group's view of this one is stale
                self._renew_consumer(str(exc))
        return None

    def _pause(self, msgs: list[Message], outbox: Outbox, reason: str, stop: threading.Event,
               recovered: Callable[[], bool], first_attempt: int = 1) -> set[tuple[str, int]]:
        """Commit the acknowledged prefix, pause, wait with backoff until ``recovered()``, resume at the first
        unfinished message (of the partitions still assigned). Returns the partitions sent back."""
        unfinished = [m for m in msgs if not outbox.acknowledged(m)]
        self._commit(msgs, outbox)  # stops, per partition, at the first unfinished one
        consumer = self._consumer
        consumer.pause(consumer.assignment())
        self.pauses += 1
        HEALTH.set_ready(self.name, f"paused: {reason[:300]}")
        log.error("consumption paused, nothing committed for unfinished messages", worker=self.name,
                  reason=reason[:500], unfinished=len(unfinished))
        started, attempt = time.monotonic(), first_attempt
        while not stop.is_set():
            deadline = time.monotonic() + backoff_s(self.settings.worker, attempt)
            while time.monotonic() < deadline and not stop.is_set():
                poll_paused(consumer, 0.2, lambda: HEALTH.beat(self.name))
            if recovered():
                break
            attempt += 1
        consumer.resume(consumer.assignment())
        rewind_to(consumer, unfinished)
        HEALTH.set_ready(self.name, None)
        log.info("consumption resumed", worker=self.name, paused_s=round(time.monotonic() - started, 1))
        return {(m.topic(), m.partition()) for m in unfinished}

    def _produce_failed(self, msgs: list[Message], outbox: Outbox) -> Verdict:
        """Outputs not acknowledged (a proposal or a dead letter): the policy's verdict (default: pause, with
        backoff growing over consecutive failures, then handle the unacknowledged messages again; a new
        producer after a fatal error)."""
        self._produce_streak += 1
        error = ProduceFailed({topic: err for topic, err in outbox.failed.values()}, outbox.fatal)
        if outbox.fatal:
            self._producer.flush(5)
            self._producer = make_producer(self.settings, self.instance)
        unacknowledged = [m for m in msgs if not outbox.acknowledged(m)]
        verdict = self._decide(self._failure(error, unacknowledged, "produce"))
        if verdict.action in (Action.REJOIN, Action.PAUSE):
            return verdict
        return Verdict.pause(verdict.detail)  # a retry or a dead letter needs the broker too: wait for it

    # -- the consumer's group membership ------------------------------------------------------------
    def _new_consumer(self) -> Consumer:
        return make_consumer(self.settings, self.group, self.topics, self.instance, self._group_change)

    def _group_change(self, event: str, partitions: list[TopicPartition]) -> None:
        self.group_events[event] += 1
        GROUP_EVENTS.labels(self.name, event).inc()
        if event == "assigned":
            HEALTH.joined(self.name)
        elif event in ("lost", "consumer_recreated"):
            HEALTH.joining(self.name)
        if event == "lost":
            log.warning("partitions lost: this member was removed from the group; the batch in flight will not "
                        "be committed and the consumer rejoins", worker=self.name, partitions=len(partitions))

    def _consumer_error(self, exc: KafkaException) -> None:
        """An error raised by ``consume``: a new consumer when librdkafka says it is fatal (fencing), else a
        short wait (the client retries by itself)."""
        if membership_lost(exc) and exc.args[0].fatal():
            self._renew_consumer(str(exc))
        else:
            log.warning("consumer error", worker=self.name, error=str(exc))
            time.sleep(min(1.0, self.settings.worker.pause_backoff_s))

    def _renew_consumer(self, why: str) -> None:
        log.warning("recreating the consumer", worker=self.name, reason=why[:300])
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.info("closing the old consumer failed", worker=self.name, error=str(exc))
        self._consumer = self._new_consumer()
        self._group_change("consumer_recreated", [])
