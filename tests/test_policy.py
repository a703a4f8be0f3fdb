"""The error policy's rules without a broker: what is transient, which reason and stage a failure gets, retries,
backoff, and dead letters that always fit."""

from __future__ import annotations

import hashlib

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException
from pydantic import ValidationError

from newsmon.schemas import (DeadLetterReason, DeadLetterStage, InvalidEvent, NeighbourRef, dead_letter_headers,
                             fit_dead_letter)
from newsmon.shared.config import WorkerSettings
from newsmon.shared.memory import MemoryUnavailableError
from newsmon.workers.policy import DependencyDown, ErrorPolicy, backoff_s, classify, is_transient, membership_lost


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
    assert is_transient(exc) and classify(exc, DeadLetterStage.EMBED).transient


def test_one_message_errors_get_a_reason_code_and_the_stage():
    f = classify(validation_error(), DeadLetterStage.RETRIEVE_AND_SCORE)
    assert (f.transient, f.reason, f.stage) == (False, DeadLetterReason.OUTPUT_INVALID,
                                                DeadLetterStage.RETRIEVE_AND_SCORE)
    assert "Delo 2019-03-04 #12" in f.detail  # the words stay in the dead letter
    f = classify(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), DeadLetterStage.EMBED)
    assert f.reason is DeadLetterReason.TEXT_REJECTED
    f = classify(InvalidEvent("invalid JSON: x", "ArticleEvent", DeadLetterReason.INVALID_JSON), None)
    assert (f.reason, f.stage) == (DeadLetterReason.INVALID_JSON, DeadLetterStage.VALIDATE)
    assert classify(KeyError("x"), DeadLetterStage.EMIT).reason is DeadLetterReason.PROCESSING_FAILED


def test_membership_errors():
    for code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError._MAX_POLL_EXCEEDED):
        assert membership_lost(KafkaException(KafkaError(code)))
    assert not membership_lost(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert not membership_lost(ValueError())


def test_the_policy_retries_transient_errors_only():
    policy = ErrorPolicy(WorkerSettings(retry_attempts=3))
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
