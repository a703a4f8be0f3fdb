"""The stream's error policy, in one place: what is transient, what is one message's fault, and what then.

The workers (:mod:`newsmon.workers.base`) apply it per micro-batch; this module says how each error is taken
(the way quix-streams has ``on_processing_error`` and handlers for revoked and lost partitions):

1. **Transient** (:func:`is_transient`): the knowledge memory unavailable (:class:`MemoryUnavailableError`),
   Redis unreachable or timing out, a retriable Kafka error, a connection error or a time-out, and
   :class:`DependencyDown` (a dependency call that still failed after ``worker.retry_attempts`` tenacity
   retries, :meth:`ErrorPolicy.call`). The batch is not committed (beyond the messages already acknowledged):
   the worker pauses its partitions, reports not-ready, probes with exponential backoff and resumes at the
   first unfinished message.
2. **One message's fault** (:func:`classify` of anything else, when the dependency probe passes): the batch's
   messages are handled one at a time, and each one that still fails alone goes to the dead-letter topic with a
   reason code (:class:`~newsmon.schemas.DeadLetterReason`), the stage it failed in
   (:class:`~newsmon.schemas.DeadLetterStage`) and the error in words; the other messages of the batch
   proceed. Examples: bad data, a proposal built from a stored point that fails the output schema
   (``output_invalid``), a text the encoder rejects (``text_rejected``).
3. **The group moved on**: a failed commit (after retries when the error is retriable) or partitions lost or
   revoked while a batch was in flight (a member kicked after ``max.poll.interval.ms``, fencing): the batch's
   outputs were produced, its offsets are dropped, the partitions' next owner reads them again (at-least-once,
   same keys); the consumer rejoins (a new consumer when librdkafka says the error is fatal). The worker never
   exits for this.
4. **A produce that fails** (a proposal or a dead letter not acknowledged: the topic missing, the broker
   refusing it): like 1, the worker pauses, reports not-ready with the topic and the error
   (``newsmon_produce_failures_total{topic}``), waits with backoff and handles the unacknowledged messages again;
   dead letters are cut to ``worker.dead_letter_max_bytes`` so that their size cannot be the cause.

Anything else that escapes the loop itself (not a batch) ends the process with a non-zero status, so an
orchestrator restarts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from confluent_kafka import KafkaError, KafkaException
from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from newsmon.schemas import DeadLetterReason, DeadLetterStage, InvalidEvent
from newsmon.shared.config import WorkerSettings
from newsmon.shared.memory import MemoryUnavailableError

__all__ = ["DependencyDown", "ErrorPolicy", "Failure", "backoff_s", "classify", "is_transient", "membership_lost",
           "switch_model"]


class DependencyDown(RuntimeError):
    """A dependency call still failed after its retries (transient: the worker pauses)."""


_TRANSIENT_TYPES = (DependencyDown, MemoryUnavailableError, redis.exceptions.ConnectionError,
                    redis.exceptions.TimeoutError, ConnectionError, TimeoutError)

#: Kafka errors meaning this member no longer owns its partitions: drop the batch and rejoin.
_MEMBERSHIP_CODES = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                               KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID,
                               KafkaError._ASSIGNMENT_LOST, KafkaError._STATE, KafkaError._MAX_POLL_EXCEEDED,
                               KafkaError._FENCED})


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` may go away by itself (retry, pause); see the module docstring, point 1."""
    if isinstance(exc, _TRANSIENT_TYPES):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return bool(exc.args[0].retriable())
    return False


def membership_lost(exc: BaseException) -> bool:
    """Whether a Kafka error says this member lost its partitions (point 3: drop the batch, rejoin)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (err.code() in _MEMBERSHIP_CODES or err.fatal())


@dataclass(frozen=True)
class Failure:
    """How one failure is taken: ``transient`` (pause) or one message's (``reason`` and ``stage`` codes for the
    dead letter); ``detail`` is the error in words (dead-letter header and logs only, never a metric label)."""

    transient: bool
    reason: DeadLetterReason
    stage: DeadLetterStage | None
    detail: str


def classify(exc: BaseException, stage: DeadLetterStage | None) -> Failure:
    """The :class:`Failure` for ``exc`` raised at ``stage`` (``None``: outside the stages).

    Reasons: an :class:`InvalidEvent`'s own code; ``output_invalid`` for a pydantic validation error (what the
    worker built fails its schema); ``text_rejected`` for a text that cannot be encoded (a ``UnicodeError``
    anywhere, any error of the embed stage); ``processing_failed`` otherwise.
    """
    detail = f"{type(exc).__name__}: {exc}"
    if stage is not None:
        detail = f"stage {stage.value}: {detail}"
    if is_transient(exc):
        return Failure(True, DeadLetterReason.PROCESSING_FAILED, stage, detail)
    if isinstance(exc, InvalidEvent):
        return Failure(False, exc.code, stage or DeadLetterStage.VALIDATE, exc.reason)
    if isinstance(exc, ValidationError):
        return Failure(False, DeadLetterReason.OUTPUT_INVALID, stage, detail)
    if isinstance(exc, UnicodeError) or stage is DeadLetterStage.EMBED:
        return Failure(False, DeadLetterReason.TEXT_REJECTED, stage, detail)
    return Failure(False, DeadLetterReason.PROCESSING_FAILED, stage, detail)


def backoff_s(settings: WorkerSettings, attempt: int) -> float:
    """Wait before the ``attempt``-th (1, 2, ...) recovery try while paused: ``pause_backoff_s`` doubling per
    attempt, at most ``pause_backoff_max_s`` (seconds)."""
    return float(min(settings.pause_backoff_max_s, settings.pause_backoff_s * 2 ** max(0, attempt - 1)))


class ErrorPolicy:
    """How the workers call their dependencies: transient errors are retried with exponential backoff, then
    raised as :class:`DependencyDown`; other errors propagate at once (they are the message's, see
    :func:`classify`).

    Args:
        settings: ``retry_attempts`` (tries per call) of the worker settings.
    """

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings  # read at each call: settings may change while a worker runs

    def call(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; transient errors retried (``retry_attempts`` tries, backoff 0.2 s .. 2 s).

        Raises:
            DependencyDown: a transient error on the last try too (``what`` and the error in the message, the
                error chained).
            Exception: a non-transient error of ``fn``, unchanged, at its first occurrence.
        """
        try:
            for attempt in Retrying(stop=stop_after_attempt(self.settings.retry_attempts),
                                    retry=retry_if_exception(is_transient),
                                    wait=wait_exponential(multiplier=0.2, max=2.0), reraise=True):
                with attempt:
                    return fn(*args, **kwargs)
        except DependencyDown:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise DependencyDown(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            raise


def switch_model(worker: Any, follow: Callable[[], Any]) -> Any:
    """Run a worker's between-batches model switch (``follow``) as a dependency call: it is never one message's
    fault, so any error of it is transient (:class:`DependencyDown`: the worker pauses and tries again).

    Raises:
        DependencyDown: the switch failed (the error chained).
    """
    try:
        return worker.call("model switch", follow)
    except DependencyDown:
        raise
    except Exception as exc:
        raise DependencyDown(f"model switch failed: {type(exc).__name__}: {exc}") from exc
