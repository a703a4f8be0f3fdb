"""Dead letters: a message a worker cannot process goes to ``<topic>.dlq`` with these headers.

The value and key are the original's, untouched, unless the value would not fit under the producer's limit: then
it is cut (``newsmon-truncated`` says from how many bytes, ``newsmon-original-sha256`` identifies the original).
Why the message failed is a closed set of codes (:class:`DeadLetterReason`, header ``newsmon-reason``) and the
stage it failed in (:class:`DeadLetterStage`, header ``newsmon-stage``); the free text (which may name the
article) is only in ``newsmon-error``, never in a metric label.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import StrEnum

__all__ = ["DEAD_LETTER_HEADER_NAMES", "DEAD_LETTER_SUFFIX", "HEADER_ERROR", "HEADER_FAILED_AT",
           "HEADER_ORIGINAL_SHA256", "HEADER_REASON", "HEADER_SOURCE_OFFSET", "HEADER_SOURCE_PARTITION",
           "HEADER_SOURCE_TOPIC", "HEADER_STAGE",
           "HEADER_TRUNCATED", "HEADER_WORKER", "MAX_ERROR_HEADER_BYTES", "DeadLetterReason", "DeadLetterStage",
           "dead_letter_headers", "dead_letter_topic", "fit_dead_letter"]

DEAD_LETTER_SUFFIX = ".dlq"
HEADER_ERROR = "newsmon-error"
"""Why the message failed, in words (UTF-8, at most ``MAX_ERROR_HEADER_BYTES`` bytes)."""
HEADER_REASON = "newsmon-reason"
"""Why the message failed, as a code: a :class:`DeadLetterReason` value (ASCII)."""
HEADER_STAGE = "newsmon-stage"
"""Where it failed: a :class:`DeadLetterStage` value (ASCII)."""
HEADER_WORKER = "newsmon-worker"
"""Name of the worker that gave up on the message."""
HEADER_FAILED_AT = "newsmon-failed-at"
"""When it gave up: ISO 8601 UTC with milliseconds, e.g. ``2024-05-01T12:00:00.123Z``."""
HEADER_SOURCE_TOPIC = "newsmon-source-topic"
HEADER_SOURCE_PARTITION = "newsmon-source-partition"
"""Partition of the original message, decimal ASCII."""
HEADER_SOURCE_OFFSET = "newsmon-source-offset"
"""Offset of the original message, decimal ASCII."""
HEADER_TRUNCATED = "newsmon-truncated"
"""Only on a cut value: the original value's size in bytes, decimal ASCII."""
HEADER_ORIGINAL_SHA256 = "newsmon-original-sha256"
"""Only on a cut value: the SHA-256 of the original value, hex."""
DEAD_LETTER_HEADER_NAMES = (HEADER_ERROR, HEADER_WORKER, HEADER_FAILED_AT, HEADER_SOURCE_TOPIC,
                            HEADER_SOURCE_PARTITION, HEADER_SOURCE_OFFSET, HEADER_REASON, HEADER_STAGE,
                            HEADER_TRUNCATED, HEADER_ORIGINAL_SHA256)
MAX_ERROR_HEADER_BYTES = 4096
_RECORD_OVERHEAD_BYTES = 1024  # record and batch framing, header names; generous


class DeadLetterReason(StrEnum):
    """Why a message was dead-lettered: a closed set (the metric label and the ``newsmon-reason`` header)."""

    INVALID_JSON = "invalid_json"
    """Empty, not UTF-8, not JSON or not a JSON object."""
    UNSUPPORTED_VERSION = "unsupported_version"
    """``schema_version`` missing or not one this worker reads."""
    SCHEMA_VIOLATION = "schema_violation"
    """Valid JSON that the event's schema refuses (a missing field, an empty text, an unknown language ...)."""
    TOO_LARGE = "too_large"
    """Larger than ``worker.max_message_bytes``."""
    UNKNOWN_LANGUAGE = "unknown_language"
    """An article in a language the knowledge memory has no collection for (the error names the languages it
    has)."""
    UNKNOWN_ARTICLE = "unknown_article"
    """A decision on an article the knowledge memory never saw."""
    LABEL_CONFLICT = "label_conflict"
    """A label event the registry cannot apply (an event on a name that was renamed away, a rename into one)."""
    TEXT_REJECTED = "text_rejected"
    """The encoder (its tokenizer, the embedding cache) refused the article's text."""
    OUTPUT_INVALID = "output_invalid"
    """What the worker built for the message (a proposal, from stored points) fails the output schema."""
    TOO_SLOW = "too_slow"
    """A stage ran past ``worker.stage_budget_s`` on this message alone (the rest of its batch went through)."""
    PROCESSING_FAILED = "processing_failed"
    """Any other error of this one message (the rest of its batch went through)."""


class DeadLetterStage(StrEnum):
    """Where a message failed: the classifier's stages, the memory updater's, or the produce step."""

    VALIDATE = "validate"
    NEAR_DUPLICATES = "near_duplicates"
    EMBED = "embed"
    RETRIEVE_AND_SCORE = "retrieve_and_score"
    LABEL_RULES = "label_rules"
    STORE_PENDING = "store_pending"
    EMIT = "emit"
    DECISION = "decision"
    LABEL_EVENT = "label_event"
    MODEL_SWITCH = "model_switch"


def dead_letter_topic(topic: str) -> str:
    """The dead-letter topic of ``topic``: ``<topic>.dlq``."""
    return f"{topic}{DEAD_LETTER_SUFFIX}"


def dead_letter_headers(error: str, worker: str, topic: str, partition: int, offset: int,
                        now: datetime | None = None, *, reason: DeadLetterReason | None = None,
                        stage: DeadLetterStage | None = None) -> list[tuple[str, bytes]]:
    """Kafka headers for a dead letter.

    ``error`` is cut to 4 KiB of UTF-8 (on a character boundary); ``now`` (timezone-aware; default: the
    current time) is written in UTC with milliseconds. Partition and offset are written as decimal ASCII;
    ``reason`` and ``stage`` (codes) are added when given.

    Raises:
        ValueError: ``now`` is naive.
    """
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("dead_letter_headers: now must be timezone-aware")
    failed_at = now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    err = error.encode("utf-8", errors="replace")
    if len(err) > MAX_ERROR_HEADER_BYTES:
        err = err[:MAX_ERROR_HEADER_BYTES].decode("utf-8", errors="ignore").encode("utf-8")
    headers = [
        (HEADER_ERROR, err),
        (HEADER_WORKER, worker.encode("utf-8")),
        (HEADER_FAILED_AT, failed_at.encode("ascii")),
        (HEADER_SOURCE_TOPIC, topic.encode("utf-8")),
        (HEADER_SOURCE_PARTITION, str(int(partition)).encode("ascii")),
        (HEADER_SOURCE_OFFSET, str(int(offset)).encode("ascii")),
    ]
    if reason is not None:
        headers.append((HEADER_REASON, DeadLetterReason(reason).value.encode("ascii")))
    if stage is not None:
        headers.append((HEADER_STAGE, DeadLetterStage(stage).value.encode("ascii")))
    return headers


def fit_dead_letter(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
                    max_bytes: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The value and headers of a dead letter that fits in ``max_bytes`` (key, value, headers and framing).

    A value that fits is kept untouched. Otherwise its first bytes are kept (as many as fit) and the headers
    ``newsmon-truncated`` (the original size) and ``newsmon-original-sha256`` are added; the reason, stage, topic,
    partition and offset headers are always kept.

    Raises:
        ValueError: not even the headers and key fit in ``max_bytes``.
    """
    value = value or b""

    def size(v: bytes, hs: list[tuple[str, bytes]]) -> int:
        return len(key or b"") + len(v) + sum(len(n) + len(x) for n, x in hs) + _RECORD_OVERHEAD_BYTES

    if size(value, headers) <= max_bytes:
        return value, headers
    cut_headers = headers + [(HEADER_TRUNCATED, str(len(value)).encode("ascii")),
                             (HEADER_ORIGINAL_SHA256, hashlib.sha256(value).hexdigest().encode("ascii"))]
    room = max_bytes - size(b"", cut_headers)
    if room < 0:
        raise ValueError(f"a dead letter's key and headers alone exceed {max_bytes} bytes")
    return value[:room], cut_headers
