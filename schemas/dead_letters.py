"""Dead letters: a message a worker cannot process goes, bytes untouched, to ``<topic>.dlq`` with these headers."""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["DEAD_LETTER_HEADER_NAMES", "DEAD_LETTER_SUFFIX", "HEADER_ERROR", "HEADER_FAILED_AT", "HEADER_SOURCE_OFFSET",
           "HEADER_SOURCE_PARTITION", "HEADER_SOURCE_TOPIC", "HEADER_WORKER", "MAX_ERROR_HEADER_BYTES",
           "dead_letter_headers", "dead_letter_topic"]

DEAD_LETTER_SUFFIX = ".dlq"
HEADER_ERROR = "newsmon-error"
"""Why the message failed (UTF-8, at most ``MAX_ERROR_HEADER_BYTES`` bytes)."""
HEADER_WORKER = "newsmon-worker"
"""Name of the worker that gave up on the message."""
HEADER_FAILED_AT = "newsmon-failed-at"
"""When it gave up: ISO 8601 UTC with milliseconds, e.g. ``2024-05-01T12:00:00.123Z``."""
HEADER_SOURCE_TOPIC = "newsmon-source-topic"
HEADER_SOURCE_PARTITION = "newsmon-source-partition"
"""Partition of the original message, decimal ASCII."""
HEADER_SOURCE_OFFSET = "newsmon-source-offset"
"""Offset of the original message, decimal ASCII."""
DEAD_LETTER_HEADER_NAMES = (HEADER_ERROR, HEADER_WORKER, HEADER_FAILED_AT,
                            HEADER_SOURCE_TOPIC, HEADER_SOURCE_PARTITION, HEADER_SOURCE_OFFSET)
MAX_ERROR_HEADER_BYTES = 4096


def dead_letter_topic(topic: str) -> str:
    """The dead-letter topic of ``topic``: ``<topic>.dlq``."""
    return f"{topic}{DEAD_LETTER_SUFFIX}"


def dead_letter_headers(error: str, worker: str, topic: str, partition: int, offset: int,
                        now: datetime | None = None) -> list[tuple[str, bytes]]:
    """Kafka headers for a dead letter; the message value and key are forwarded untouched.

    ``error`` is cut to 4 KiB of UTF-8 (on a character boundary); ``now`` (timezone-aware; default: the
    current time) is written in UTC with milliseconds. Partition and offset are written as decimal ASCII.
    """
    if now is None:
        now = datetime.now(timezone.utc)
    elif now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("dead_letter_headers: now must be timezone-aware")
    failed_at = now.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    err = error.encode("utf-8", errors="replace")
    if len(err) > MAX_ERROR_HEADER_BYTES:
        err = err[:MAX_ERROR_HEADER_BYTES].decode("utf-8", errors="ignore").encode("utf-8")
    return [
        (HEADER_ERROR, err),
        (HEADER_WORKER, worker.encode("utf-8")),
        (HEADER_FAILED_AT, failed_at.encode("ascii")),
        (HEADER_SOURCE_TOPIC, topic.encode("utf-8")),
        (HEADER_SOURCE_PARTITION, str(int(partition)).encode("ascii")),
        (HEADER_SOURCE_OFFSET, str(int(offset)).encode("ascii")),
    ]
