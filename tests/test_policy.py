"""The error policy's rules without a broker: what is transient, the default policy's verdicts (reason, stage),
a policy named by a setting, retries, backoff, and dead letters that always fit."""

from __future__ import annotations

import hashlib

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException
from pydantic import ValidationError

from newsmon.schemas import (DeadLetterReason, DeadLetterStage, InvalidEvent, NeighbourRef, dead_letter_headers,
                             fit_dead_letter)
from newsmon.shared.config import Settings, WorkerSettings
from newsmon.shared.memory import MemoryUnavailableError
from newsmon.workers.policy import (Action, DefaultErrorPolicy, DependencyCalls, DependencyDown, Failure, TooSlow,
                                    Verdict, backoff_s, is_transient, load_error_policy, membership_lost)

POLICY = DefaultErrorPolicy()


def verdict(exc, stage, isolated=True, probe=lambda: True, phase="handle") -> Verdict:
    return POLICY(Failure(exc, stage, (), phase, isolated, 1, "classifier", probe))


def validation_error() -> ValidationError:
    try:
        NeighbourRef(article_id="Delo 2019-03-04 #12", similarity=0.9)
    except ValidationError as exc:
        return exc
    raise AssertionError("the id with spaces was accepted")


@pytest.mark.parametrize("exc", [MemoryUnavailableError("down"), redis.exceptions.ConnectionError("refused"),
                                 redis.exceptions.TimeoutError("slow"), TimeoutError(), ConnectionResetError(),
                                 DependencyDown("x"),
                                 KafkaException(KafkaError(KafkaError._TRANSPORT, "x", retriable=True))])
def test_transient_errors(exc):
    assert is_transient(exc) and verdict(exc, DeadLetterStage.EMBED).action is Action.PAUSE


def test_one_message_errors_get_a_reason_code_and_the_stage():
    f = Failure(validation_error(), DeadLetterStage.RETRIEVE_AND_SCORE, ())
    assert POLICY(f) == Verdict.retry()  # a batch: one message at a time first
    v = verdict(validation_error(), DeadLetterStage.RETRIEVE_AND_SCORE)
    assert (v.action, v.reason) == (Action.DEAD_LETTER, DeadLetterReason.OUTPUT_INVALID)
    assert "Delo 2019-03-04 #12" in f.detail and f.detail.startswith("stage retrieve_and_score")  # words kept
    v = verdict(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), DeadLetterStage.EMBED)
    assert v.reason is DeadLetterReason.TEXT_REJECTED
    v = verdict(InvalidEvent("invalid JSON: x", "ArticleEvent", DeadLetterReason.INVALID_JSON),
                DeadLetterStage.VALIDATE)
    assert v.reason is DeadLetterReason.INVALID_JSON
    assert verdict(KeyError("x"), DeadLetterStage.EMIT).reason is DeadLetterReason.PROCESSING_FAILED
    assert verdict(TooSlow(DeadLetterStage.LABEL_RULES, 61.0, 60.0), DeadLetterStage.LABEL_RULES).reason \
        is DeadLetterReason.TOO_SLOW
    # not the message's fault when the dependencies do not answer
    assert verdict(KeyError("x"), DeadLetterStage.EMIT, probe=lambda: False).action is Action.PAUSE


def test_commit_and_produce_failures():
    lost = KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    assert verdict(lost, None, phase="commit").action is Action.REJOIN
    assert verdict(KafkaException(KafkaError(KafkaError._TIMED_OUT)), None, phase="commit").action is Action.RETRY
    assert verdict(RuntimeError("x"), None, phase="produce").action is Action.PAUSE


def strict_policy(settings):
    """A deployment's policy: pause on any message's fault instead of dead-lettering it."""
    default = DefaultErrorPolicy(settings)

    def policy(failure):
        v = default(failure)
        return Verdict.pause("strict: " + failure.detail) if v.action is Action.DEAD_LETTER else v
    return policy


def test_a_policy_named_by_a_setting_is_loaded():
    s = Settings()
    assert isinstance(load_error_policy(s), DefaultErrorPolicy)
    s.worker.error_policy = "test_policy:strict_policy"
    assert load_error_policy(s)(Failure(KeyError("x"), DeadLetterStage.EMIT, (), isolated=True)).action \
        is Action.PAUSE
    for bad in ("test_policy", "no_such_module_x:f", "test_policy:nothing_here"):
        s.worker.error_policy = bad
        with pytest.raises(ValueError, match="NEWSMON_WORKER__ERROR_POLICY"):
            load_error_policy(s)


def test_membership_errors():
    for code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError._MAX_POLL_EXCEEDED):
        assert membership_lost(KafkaException(KafkaError(code)))
    assert not membership_lost(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert not membership_lost(ValueError())


def test_the_policy_retries_transient_errors_only():
    policy = DependencyCalls(WorkerSettings(retry_attempts=3))
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise MemoryUnavailableError("down")
        return "ok"

    assert policy.call("memory", flaky) == "ok" and len(calls) == 3
    calls.clear()
    with pytest.raises(DependencyDown, match="memory failed: MemoryUnavailableError"):
        policy.call("memory", lambda: calls.append(1) or (_ for _ in ()).throw(MemoryUnavailableError("down")))
    assert len(calls) == 3

    def bad_text():
        calls.append(1)
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    calls.clear()
    with pytest.raises(UnicodeEncodeError):  # not retried, not a dependency failure
        policy.call("encoder", bad_text)
    assert len(calls) == 1


def test_backoff_doubles_up_to_the_maximum():
    w = WorkerSettings(pause_backoff_s=2.0, pause_backoff_max_s=10.0)
    assert [backoff_s(w, a) for a in (1, 2, 3, 4, 10)] == [2.0, 4.0, 8.0, 10.0, 10.0]


def test_dead_letters_always_fit():
    headers = dead_letter_headers("too large: 70 MB", "classifier-1", "articles", 3, 12345,
                                  reason=DeadLetterReason.TOO_LARGE, stage=DeadLetterStage.VALIDATE)
    small = b'{"article_id": "a"}'
    assert fit_dead_letter(b"a", small, headers, 1_000_000) == (small, headers)  # untouched
    huge = b"x" * (70 * 1024 * 1024)
    value, cut = fit_dead_letter(b"a", huge, headers, 1_000_000)
    h = dict(cut)
    assert huge.startswith(value) and 900_000 < len(value) < 1_000_000
    assert len(value) + sum(len(k) + len(v) for k, v in cut) + 1 < 1_000_000
    assert h["newsmon-truncated"] == str(len(huge)).encode()
    assert h["newsmon-original-sha256"] == hashlib.sha256(huge).hexdigest().encode()
    assert (h["newsmon-reason"], h["newsmon-stage"]) == (b"too_large", b"validate")
    assert (h["newsmon-source-topic"], h["newsmon-source-partition"], h["newsmon-source-offset"]) == \
        (b"articles", b"3", b"12345")
    with pytest.raises(ValueError):
        fit_dead_letter(b"k" * 5000, huge, headers, 2000)


def test_readyz_turns_not_ready_when_a_loop_is_stale():
    from newsmon.workers.observability import Health

    h = Health(stale_after_s=0.2)
    h.register("classifier")
    h.set_ready("classifier", None)
    assert h.ready()[0]
    import time
    time.sleep(0.3)
    ok, info = h.ready()
    assert not ok and info["workers"]["classifier"].startswith("stale")
    h.beat("classifier")
    assert h.ready()[0]


@pytest.mark.parametrize("where", ["process", "redis"])
def test_the_decision_park_is_bounded_and_keeps_each_message_once(where, redis_url):
    import uuid

    from newsmon.workers.parking import ParkedMessage, open_park

    park = open_park(redis_url if where == "redis" else None, f"newsmon-test-{uuid.uuid4().hex[:8]}", 2, 60.0)
    a = ParkedMessage("a", "moderator-decisions", 0, 5, b"a", b'{"x": 1}', parked_at=1000.0)
    b = ParkedMessage("b", "moderator-decisions", 1, 7, None, b"{}", parked_at=1001.0)
    assert park.park(a) and park.park(a) and park.park(b) and len(park) == 2  # read again: parked once
    assert not park.park(ParkedMessage("c", "moderator-decisions", 0, 6, b"c", b"{}", parked_at=1002.0))  # full
    assert [(e.article_id, e.id, e.expires_at) for e in park.entries()] == [
        ("a", "moderator-decisions:0:5", 1060.0), ("b", "moderator-decisions:1:7", 1061.0)]
    (got,) = park.get(["moderator-decisions:0:5"])
    assert (got.key(), got.value(), got.topic(), got.partition(), got.offset()) == (
        b"a", b'{"x": 1}', "moderator-decisions", 0, 5)
    park.remove(["moderator-decisions:0:5"])
    assert [e.article_id for e in park.entries()] == ["b"] and len(park) == 1
