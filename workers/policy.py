"""The stream's error policy as one object: given a failure (the exception, the stage it was raised in, the
message or messages it concerns), it returns what the worker does.

A policy is any callable ``policy(failure: Failure) -> Verdict``; the workers
(:mod:`newsmon.workers.base`) make one per worker from ``worker.error_policy`` (``"package.module:factory"``,
the factory called with the :class:`~newsmon.shared.config.Settings`; unset: :class:`DefaultErrorPolicy`) and
ask it at every failure, the way quix-streams asks its ``on_processing_error`` callback. The worker carries the
verdict out:

- :attr:`Action.RETRY`: handle again. A batch that failed as a whole is handled one message at a time; one
  message is handled once more (``failure.attempt`` counts the tries, so a policy can stop). After a failed
  commit: the offsets are left for the next commit (the outputs were acknowledged).
- :attr:`Action.PAUSE`: commit the acknowledged prefix, pause the partitions (polling on, so the member stays
  in the group), report not-ready, probe the dependencies with backoff, then handle the unfinished messages again.
- :attr:`Action.DEAD_LETTER`: the message (each unfinished one, for a batch) goes to ``<topic>.dlq`` with the
  verdict's reason code, the failure's stage and the error in words; the rest of the batch proceeds.
- :attr:`Action.REJOIN`: the batch's offsets are dropped (nothing more of it is committed); the consumer is
  replaced, so it rejoins the group as a new member, and the partitions' next owner reads the batch again.

The stage travels with the failure, not with the worker: the worker names the stage of the code it runs with
a context (``with worker.stage(DeadLetterStage.EMBED): ...``) that wraps an escaping error in
:class:`StageError`; a stage that exceeds ``worker.stage_budget_s`` fails with :class:`TooSlow`.

:class:`DefaultErrorPolicy`, what newsmon does unless told otherwise:

1. **Transient** (:func:`is_transient`): the knowledge memory unavailable (:class:`MemoryUnavailableError`),
   Redis unreachable or timing out, a retriable Kafka error, a connection error or a time-out, and
   :class:`DependencyDown` (a dependency call that still failed after ``worker.retry_attempts`` tenacity
   retries, :meth:`DependencyCalls.call`), and a produce the broker did not acknowledge: ``pause``.
2. **One message's fault** (anything else, when the dependency probe passes; else ``pause``): a batch is
   handled again one message at a time (``retry``), and each message that still fails alone is dead-lettered
   (``dead_letter``) with a reason code (:func:`reason_for`) and the stage; examples: bad data, a proposal built
   from a stored point that fails the output schema (``output_invalid``), a text the encoder rejects
   (``text_rejected``), a stage over its time budget (``too_slow``).
3. **The group moved on**: a commit refused because this member lost its partitions or was fenced
   (:func:`membership_lost`): ``rejoin``; any other failed commit (after retries when retriable): ``retry``.
   The batch's outputs were produced; at-least-once, same keys. The worker never exits for this.

Anything that escapes the loop itself (not a batch) ends the process with a non-zero status, so an
orchestrator restarts it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

import redis
from confluent_kafka import KafkaError, KafkaException, Message
from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from newsmon.schemas import DeadLetterReason, DeadLetterStage, InvalidEvent
from newsmon.shared.config import SettingError, Settings, WorkerSettings
from newsmon.shared.memory import MemoryUnavailableError
from newsmon.shared.scoring.records import CalibrationUnreadable

__all__ = ["Action", "DefaultErrorPolicy", "DependencyCalls", "DependencyDown", "ErrorPolicy", "Failure",
           "StageError", "TooSlow", "Verdict", "backoff_s", "is_transient", "load_error_policy", "membership_lost",
           "reason_for", "retrying", "switch_model"]


class DependencyDown(RuntimeError):
    """A dependency call still failed after its retries (transient: the worker pauses)."""


class TooSlow(RuntimeError):
    """A stage ran past its time budget (``worker.stage_budget_s``) on a batch or one message.

    Attributes:
        stage: the stage; seconds: how long it had run when it was given up (the call itself may still run in
            its abandoned thread: a Python call cannot be killed).
    """

    def __init__(self, stage: DeadLetterStage | None, seconds: float, budget_s: float) -> None:
        where = f"stage {stage.value}" if stage is not None else "the batch"
        super().__init__(f"{where} ran {seconds:.1f} s, over its time budget of {budget_s:g} s "
                         "(NEWSMON_WORKER__STAGE_BUDGET_S)")
        self.stage, self.seconds = stage, seconds


class StageError(Exception):
    """An error raised inside a stage, carrying the stage (``stage``) and the error itself (``error``, also
    chained as ``__cause__``)."""

    def __init__(self, stage: DeadLetterStage, error: BaseException) -> None:
        super().__init__(f"stage {stage.value}: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


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


class Action(StrEnum):
    """What the worker does with a failure (see the module docstring)."""

    RETRY = "retry"
    PAUSE = "pause"
    DEAD_LETTER = "dead_letter"
    REJOIN = "rejoin"


@dataclass(frozen=True)
class Verdict:
    """A policy's answer: the ``action``; for ``dead_letter`` the ``reason`` code; ``detail``, the error in words
    (dead-letter header, ``/readyz`` and logs; empty: the failure's own)."""

    action: Action
    reason: DeadLetterReason = DeadLetterReason.PROCESSING_FAILED
    detail: str = ""

    @classmethod
    def retry(cls, detail: str = "") -> Verdict:
        return cls(Action.RETRY, detail=detail)

    @classmethod
    def pause(cls, detail: str = "") -> Verdict:
        return cls(Action.PAUSE, detail=detail)

    @classmethod
    def dead_letter(cls, reason: DeadLetterReason, detail: str = "") -> Verdict:
        return cls(Action.DEAD_LETTER, DeadLetterReason(reason), detail)

    @classmethod
    def rejoin(cls, detail: str = "") -> Verdict:
        return cls(Action.REJOIN, detail=detail)


Phase = Literal["handle", "produce", "commit"]


@dataclass(frozen=True)
class Failure:
    """One failure, as a policy sees it.

    Attributes:
        error: the exception (unwrapped from :class:`StageError`); stage: where it was raised (None: outside
            the stages, or a produce or commit); messages: the consumed messages it concerns (one when
            ``isolated``); phase: ``handle`` (processing), ``produce`` (outputs not acknowledged: ``error`` is a
            :class:`ProduceFailed`) or ``commit``; isolated: the messages are handled one at a time (a batch
            failed before); attempt: 1 for the first failure of these messages, 2 after one ``retry`` ...;
            worker: the worker's name (``classifier``, ``memory-updater``); probe: calls the worker's
            dependencies, True when they answer (may take the dependencies' time-outs).
    """

    error: BaseException
    stage: DeadLetterStage | None
    messages: tuple[Message, ...]
    phase: Phase = "handle"
    isolated: bool = False
    attempt: int = 1
    worker: str = "worker"
    probe: Callable[[], bool] = field(default=lambda: True, repr=False, compare=False)

    @property
    def message(self) -> Message | None:
        """The one message of an isolated failure, else None."""
        return self.messages[0] if len(self.messages) == 1 else None

    @property
    def detail(self) -> str:
        """The error in words, with the stage."""
        exc = self.error
        text = exc.reason if isinstance(exc, InvalidEvent) else f"{type(exc).__name__}: {exc}"
        return f"stage {self.stage.value}: {text}" if self.stage is not None else text


class ProduceFailed(RuntimeError):
    """Outputs of a batch the broker did not acknowledge (``topics``: destination topic -> the error)."""

    def __init__(self, topics: dict[str, str], fatal: bool = False) -> None:
        super().__init__("produce failing (" + "; ".join(f"{t}: {e}" for t, e in sorted(topics.items()))[:300] + ")")
        self.topics, self.fatal = topics, fatal


class ErrorPolicy(Protocol):
    """What a deployment may pass in ``worker.error_policy`` (through a factory taking the settings)."""

    def __call__(self, failure: Failure) -> Verdict: ...


def reason_for(exc: BaseException, stage: DeadLetterStage | None) -> DeadLetterReason:
    """The dead-letter reason code of ``exc`` raised at ``stage``: an :class:`InvalidEvent`'s own code;
    ``too_slow`` for :class:`TooSlow`; ``output_invalid`` for a pydantic validation error (what the worker built
    fails its schema); ``text_rejected`` for a text that cannot be encoded (a ``UnicodeError`` anywhere, any
    error of the embed stage); ``processing_failed`` otherwise."""
    if isinstance(exc, InvalidEvent):
        return exc.code
    if isinstance(exc, TooSlow):
        return DeadLetterReason.TOO_SLOW
    if isinstance(exc, ValidationError):
        return DeadLetterReason.OUTPUT_INVALID
    if isinstance(exc, UnicodeError) or stage is DeadLetterStage.EMBED:
        return DeadLetterReason.TEXT_REJECTED
    return DeadLetterReason.PROCESSING_FAILED


class DefaultErrorPolicy:
    """Today's behaviour (the module docstring, points 1-3).

    Args:
        settings: all settings (unused by the default; a custom factory gets the same argument).
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings

    def __call__(self, failure: Failure) -> Verdict:
        exc = failure.error
        if failure.phase == "commit":
            return Verdict.rejoin() if membership_lost(exc) else Verdict.retry()
        if failure.phase == "produce" or is_transient(exc):
            return Verdict.pause()
        if isinstance(exc, CalibrationUnreadable):  # the deployment's state, not the article's: wait for the fix
            return Verdict.pause(f"{failure.detail} (paused until the record is fixed)")
        if not failure.probe():
            return Verdict.pause(f"{failure.detail} (dependency probe failed)")
        if not failure.isolated:
            return Verdict.retry()
        return Verdict.dead_letter(reason_for(exc, failure.stage))


def load_error_policy(settings: Settings) -> ErrorPolicy:
    """The policy ``worker.error_policy`` names (``"package.module:factory"``, the factory called with
    ``settings``), or :class:`DefaultErrorPolicy`.

    Raises:
        SettingError: the setting is not ``module:attribute``, or the module or attribute cannot be imported, or
            the factory (or its call) fails or does not return a callable (one line naming the setting).
    """
    spec = settings.worker.error_policy
    if not spec:
        return DefaultErrorPolicy(settings)
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise SettingError(f"NEWSMON_WORKER__ERROR_POLICY={spec!r}: expected 'package.module:factory'")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError, or the module's own error at import
        raise SettingError(f"NEWSMON_WORKER__ERROR_POLICY={spec!r} cannot be imported: "
                           f"{type(exc).__name__}: {exc}") from None
    try:
        policy = factory(settings)
    except Exception as exc:  # noqa: BLE001 - the operator's factory: its error, named, in one line
        raise SettingError(f"NEWSMON_WORKER__ERROR_POLICY={spec!r}: the factory failed: "
                           f"{type(exc).__name__}: {exc}") from None
    if not callable(policy):
        raise SettingError(f"NEWSMON_WORKER__ERROR_POLICY={spec!r}: the factory returned {type(policy).__name__}, "
                         "not a callable policy(failure) -> Verdict")
    return policy


def backoff_s(settings: WorkerSettings, attempt: int) -> float:
    """Wait before the ``attempt``-th (1, 2, ...) recovery try while paused: ``pause_backoff_s`` doubling per
    attempt, at most ``pause_backoff_max_s`` (seconds)."""
    return float(min(settings.pause_backoff_max_s, settings.pause_backoff_s * 2 ** max(0, attempt - 1)))


def retrying(attempts: int, retry: Callable[[BaseException], bool]) -> Retrying:
    """The workers' one tenacity set-up: ``attempts`` tries of the errors ``retry`` accepts, exponential backoff
    (0.2 s, 0.4 s, ... at most 2 s between tries), the last error re-raised unchanged. Used by the dependency
    calls (:meth:`DependencyCalls.call`) and the offset commits (:func:`newsmon.workers.checkpoint.commit`)."""
    return Retrying(stop=stop_after_attempt(attempts), retry=retry_if_exception(retry),
                    wait=wait_exponential(multiplier=0.2, max=2.0), reraise=True)


class DependencyCalls:
    """How the workers call their dependencies: transient errors are retried with exponential backoff, then
    raised as :class:`DependencyDown`; other errors propagate at once (they are the message's; the error
    policy decides).

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
            for attempt in retrying(self.settings.retry_attempts, is_transient):
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
