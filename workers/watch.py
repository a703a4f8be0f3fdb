"""Handling in a thread of its own, watched by the loop: the member keeps its partitions whatever a stage does,
and no stage holds a batch past ``worker.stage_budget_s``.

The loop (:class:`~newsmon.workers.base.BatchWorker`) hands each ``handle_batch`` run to :meth:`Watcher.run`,
which starts it in a daemon thread and meanwhile keeps the consumer polling with its partitions paused (it
serves rebalances and stays within ``max.poll.interval.ms``). The worker's stages (``worker.stage(...)``) tell
the run which stage is running and since when. A stage over its budget (model switches excepted), or a batch
still running ``worker.shutdown_grace_s`` after the stop signal, is given up: the thread cannot be killed (a Python
call cannot be interrupted), so it is left to end by itself; it stops at its next stage or output
(:class:`Abandoned`), and the error policy decides about the messages (:class:`~newsmon.workers.policy.TooSlow`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import Consumer, Message

from newsmon.schemas import DeadLetterStage
from newsmon.shared.config import Settings
from newsmon.workers.checkpoint import poll_paused
from newsmon.workers.kafka_io import Outbox
from newsmon.workers.observability import ABANDONED, HEALTH
from newsmon.workers.policy import StageError, TooSlow

log = structlog.get_logger(__name__)

__all__ = ["Abandoned", "Run", "RunOutbox", "ShuttingDown", "Watcher"]


class Abandoned(RuntimeError):
    """Raised in a handling thread the loop gave up on (a stage over its budget, or shutting down), at its next
    stage or output: what it would still do is dropped."""


class ShuttingDown(RuntimeError):
    """The batch in progress did not end within ``worker.shutdown_grace_s`` after the stop signal."""


class Run:
    """One ``handle_batch`` run in its own thread, watched by the loop: the stage running and since when."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.stage: DeadLetterStage | None = None
        self.since, self.scale = time.monotonic(), 1.0
        self.abandoned = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def enter(self, stage: DeadLetterStage, scale: float = 1.0) -> None:
        """``stage`` starts now, its budget ``scale`` times the stage budget."""
        if self.abandoned.is_set():
            raise Abandoned(f"given up before stage {stage.value}")
        self.stage, self.since, self.scale = stage, time.monotonic(), scale

    def leave(self) -> None:
        self.stage, self.since, self.scale = None, time.monotonic(), 1.0

    def overdue(self) -> float | None:
        """Seconds the current stage (or the time outside the stages) has run, when over the budget; model
        switches are not budgeted."""
        elapsed = time.monotonic() - self.since
        if self.stage is DeadLetterStage.MODEL_SWITCH or elapsed <= self.budget_s * self.scale:
            return None
        return elapsed


class RunOutbox:
    """The outbox as one run sees it: once the loop gave the run up, nothing more of it is produced."""

    def __init__(self, outbox: Outbox, run: Run) -> None:
        self._outbox, self._run = outbox, run
        self.key_of = Outbox.key_of

    @property
    def handled(self) -> set:
        return self._outbox.handled

    def produce(self, src: Message, *args: Any, **kwargs: Any) -> None:
        if self._run.abandoned.is_set():
            raise Abandoned("given up before its output")
        self._outbox.produce(src, *args, **kwargs)

    def done(self, src: Message) -> None:
        if self._run.abandoned.is_set():
            raise Abandoned("given up before its output")
        self._outbox.done(src)


class Watcher:
    """Runs a worker's handling in threads of their own (see the module docstring).

    Args:
        name: the worker's name (health beats, metrics, logs); settings: all settings (``worker.stage_budget_s``,
            ``worker.shutdown_grace_s``, ``kafka.max_poll_interval_ms``, read at each run).

    Attributes:
        abandoned: the threads given up on that may still run.
    """

    def __init__(self, name: str, settings: Settings) -> None:
        self.name, self.settings = name, settings
        self._local = threading.local()  # .run: the run of the handling thread
        self._stopping_since: float | None = None
        self.abandoned: list[threading.Thread] = []

    def current(self) -> Run | None:
        """The run of the calling thread (None outside a watched run)."""
        return getattr(self._local, "run", None)

    def run(self, fn: Callable[[Run], None], consumer: Consumer, stop: threading.Event) -> BaseException | None:
        """Run ``fn(run)`` in a daemon thread while this (the loop's) thread keeps ``consumer`` polling, so the
        member keeps its partitions whatever a stage does: once the run has taken a third of
        ``max.poll.interval.ms`` (at most 10 s: a rebalance waits for this member's poll), the assigned
        partitions are paused and polled (a partition assigned meanwhile is sent back to its first message and
        paused too) and resumed at the end. The run is given up when a stage exceeds ``worker.stage_budget_s`` (returns
        :class:`TooSlow` in a :class:`StageError`) or ``worker.shutdown_grace_s`` after ``stop`` (returns
        :class:`ShuttingDown`); its thread is left to end by itself (a Python call cannot be killed): it stops
        at its next stage or output (:class:`Abandoned`). Returns ``fn``'s error, or None."""
        w = self.settings.worker
        # pausing drops the partitions' fetched messages (they are fetched again on resume): not for every batch
        poll_after_s = min(10.0, self.settings.kafka.max_poll_interval_ms / 3000)
        run = Run(w.stage_budget_s)

        def target() -> None:
            self._local.run = run
            try:
                fn(run)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                run.error = exc
            finally:
                run.done.set()

        thread = threading.Thread(target=target, name=f"newsmon-{self.name}-handle", daemon=True)
        thread.start()
        paused, started = False, time.monotonic()
        try:
            while not run.done.wait(0.0 if paused else 0.05):
                HEALTH.beat(self.name)
                if not paused and time.monotonic() - started > poll_after_s:
                    consumer.pause(consumer.assignment())
                    paused = True
                if paused:
                    poll_paused(consumer, 0.1)
                elapsed = run.overdue()
                if elapsed is not None and not run.done.is_set():
                    return self._give_up(run, thread, TooSlow(run.stage, elapsed, run.budget_s * run.scale))
                if stop.is_set():
                    self._stopping_since = self._stopping_since or time.monotonic()
                    if time.monotonic() - self._stopping_since > w.shutdown_grace_s and not run.done.is_set():
                        return self._give_up(run, thread, ShuttingDown(
                            f"the batch did not end within {w.shutdown_grace_s:g} s after the stop signal"))
            return run.error
        finally:
            if paused:
                consumer.resume(consumer.assignment())

    def settle(self, consumer: Consumer, stop: threading.Event) -> None:
        """Wait, polling, up to nine tenths of a stage budget for the runs given up on to end (an abandoned
        embedding or memory write holds the encoder's or the memory's lock), so that the messages handled again
        one at a time do not spend their own budget waiting behind them; a call that is truly stuck is left."""
        threads = [t for t in self.abandoned if t.is_alive()]
        if not threads:
            return

        def join(_run: Run) -> None:
            deadline = time.monotonic() + 0.9 * self.settings.worker.stage_budget_s
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
        self.run(join, consumer, stop)

    def _give_up(self, run: Run, thread: threading.Thread, error: Exception) -> BaseException:
        run.abandoned.set()
        self.abandoned = [t for t in self.abandoned if t.is_alive()] + [thread]
        ABANDONED.labels(self.name).set(len(self.abandoned))
        log.error("handling given up; its thread is left to end by itself", worker=self.name,
                  stage=run.stage.value if run.stage else None, error=str(error),
                  still_running=len(self.abandoned))
        return StageError(run.stage, error) if isinstance(error, TooSlow) and run.stage is not None else error

