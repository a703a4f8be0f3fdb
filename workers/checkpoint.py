"""Offsets: what a worker commits, where it sends its consumer back, how it polls while paused; the one module
that moves a consumer's position (as quix-streams' ``checkpointing/``: offsets are committed only once the
outputs of the messages before them are acknowledged).

The rule, per partition: a message's offset is committed only after everything it produced (its proposal, its
revised proposals, or its dead letter) was acknowledged by the broker (:class:`~newsmon.workers.kafka_io.Outbox`);
the first message not fully acknowledged, and every one after it, is consumed again (:func:`commit_acknowledged`).
A batch that is dropped (a pause, a batch in flight whose predecessor did not end in a clean commit) is sent back
to its first message on each of its partitions (:func:`rewind_to`, :func:`send_back`). A paused consumer keeps
polling (its group membership and rebalances are served); a message of a partition assigned meanwhile is sent
back and the partition paused (:func:`poll_paused`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import structlog
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from newsmon.workers.kafka_io import Outbox
from newsmon.workers.policy import is_transient, membership_lost, retrying

log = structlog.get_logger(__name__)

__all__ = ["Partitions", "commit", "commit_acknowledged", "poll_paused", "rewind_to", "send_back"]

#: ``{(topic, partition)}``
Partitions = set[tuple[str, int]]


def commit(consumer: Consumer, batch: Iterable[Message], outbox: Outbox, attempts: int) -> Partitions:
    """:func:`commit_acknowledged`, a retriable error retried (``attempts`` tries, backoff 0.2 s .. 2 s:
    :func:`newsmon.workers.policy.retrying`), except when the group moved on (:func:`membership_lost`). Returns
    the partitions ``(topic, partition)`` sent back to an unacknowledged message.

    Raises:
        confluent_kafka.KafkaException: the commit still failed (the caller asks the error policy).
    """
    msgs = list(batch)
    for attempt in retrying(attempts, lambda e: is_transient(e) and not membership_lost(e)):
        with attempt:
            return {(tp.topic, tp.partition) for tp in commit_acknowledged(consumer, msgs, outbox)}
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


def commit_acknowledged(consumer: Consumer, batch: Iterable[Message], outbox: Outbox) -> list[TopicPartition]:
    """Commit, per partition, up to the first message whose outputs were not all acknowledged, and seek back
    to that message so it is consumed again. Returns the partitions rewound (empty when all went through).

    Raises:
        confluent_kafka.KafkaException: the commit failed, also for one partition (nothing is lost: the batch
            will be redelivered).
    """
    by_tp: dict[tuple[str, int], list[tuple[int, Message]]] = {}
    for m in batch:
        topic, part, offset = _where(m)
        by_tp.setdefault((topic, part), []).append((offset, m))
    commits, rewind = [], []
    for (topic, part), msgs in by_tp.items():
        msgs.sort(key=lambda om: om[0])
        next_offset = msgs[0][0]
        for offset, m in msgs:
            if not outbox.acknowledged(m):
                rewind.append(TopicPartition(topic, part, offset))
                break
            next_offset = offset + 1
        if next_offset > msgs[0][0]:
            commits.append(TopicPartition(topic, part, next_offset))
    if commits:  # a synchronous commit reports per-partition errors in its result, not by raising
        failed = [tp.error for tp in consumer.commit(offsets=commits, asynchronous=False) or () if tp.error]
        if failed:
            raise KafkaException(failed[0])
    for tp in rewind:
        log.warning("message not finished or not acknowledged: rewinding", topic=tp.topic, partition=tp.partition,
                    offset=tp.offset, error=outbox.failed.get((tp.topic, tp.partition, tp.offset)))
        _seek(consumer, tp)
    return rewind


def rewind_to(consumer: Consumer, batch: Iterable[Message]) -> None:
    """Seek every partition of ``batch`` back to its first message (the batch will be consumed again)."""
    first: dict[tuple[str, int], int] = {}
    for m in batch:
        topic, part, offset = _where(m)
        first[(topic, part)] = min(first.get((topic, part), offset), offset)
    for (topic, part), off in first.items():
        _seek(consumer, TopicPartition(topic, part, off))


def _where(m: Message) -> tuple[str, int, int]:
    """``(topic, partition, offset)`` of a consumed message (set on every message a consume returns;
    confluent-kafka types them optional for the messages a producer makes)."""
    return cast(str, m.topic()), cast(int, m.partition()), cast(int, m.offset())


def _seek(consumer: Consumer, tp: TopicPartition) -> None:
    try:
        consumer.seek(tp)
    except KafkaException as exc:  # partition revoked or lost meanwhile: its next owner reads it from the commit
        log.info("seek skipped", topic=tp.topic, partition=tp.partition, reason=str(exc))


def send_back(consumer: Consumer, batch: Iterable[Message], rewound: Partitions, read_by: Consumer) -> None:
    """Drop a batch consumed ahead (``read_by`` read it) whose predecessor did not end in a clean commit: seek
    each of its partitions to its first message there, except the partitions already sent back further
    (``rewound``); a batch read by a consumer since replaced is simply dropped (the new one starts from the
    committed offsets)."""
    if read_by is not consumer:
        return
    rewind_to(consumer, [m for m in batch if (m.topic(), m.partition()) not in rewound])


def poll_paused(consumer: Consumer, timeout_s: float, beat: Callable[[], None] | None = None) -> None:
    """One poll of a consumer whose partitions are paused (``timeout_s`` seconds at most): it keeps the group
    membership and serves rebalances; paused partitions deliver nothing, so a message that comes is of a
    partition assigned meanwhile: it is sent back (read again after the pause) and the partition paused.
    ``beat`` (the worker's liveness heartbeat) is called first."""
    if beat is not None:
        beat()
    m = consumer.poll(timeout_s)
    if m is not None and m.error() is None:
        rewind_to(consumer, [m])
        consumer.pause(consumer.assignment())
