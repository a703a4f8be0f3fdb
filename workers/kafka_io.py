"""Kafka building blocks shared by the workers: clients, delivery tracking, dead letters (offsets: committing,
rewinding, polling while paused, are :mod:`newsmon.workers.checkpoint`'s).

Delivery guarantee: at-least-once. A consumed message's offset is committed only after everything it
produced (its proposal, or its dead letter) was acknowledged by the broker (delivery report). The producer
is idempotent (``enable.idempotence=true``, ``acks=all``), so retries inside the client never duplicate; a
crash between produce and commit can repeat a proposal downstream, always with the same key.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from newsmon.schemas import DeadLetterReason, DeadLetterStage, dead_letter_headers, dead_letter_topic, fit_dead_letter
from newsmon.shared.config import Settings
from newsmon.shared.logs import RateLimitedLogBridge
from newsmon.workers.observability import CONSUMER_LAG, DEAD_LETTERS, PRODUCE_FAILURES

log = structlog.get_logger(__name__)


def make_consumer(settings: Settings, group: str, topics: list[str], client_id: str,
                  on_change: Callable[[str, list[TopicPartition]], None] | None = None) -> Consumer:
    """A consumer in ``group`` subscribed to ``topics``; offsets are committed explicitly by the worker.
    librdkafka's own log lines go through structlog with their levels, rate-limited (``RateLimitedLogBridge``),
    as the producer's do.

    Classic group protocol (KIP-848 is not used), ``auto.offset.reset=earliest`` so that a new group reads
    the topic from the start, no auto commit. ``on_change(event, partitions)`` is called with ``assigned``,
    ``revoked`` (a rebalance) or ``lost`` (the member was removed from the group: session time-out,
    ``max.poll.interval.ms`` exceeded, fencing), from inside ``consume``/``poll``.
    """
    k = settings.kafka
    conf = {**k.client_config(), "group.id": group, "client.id": client_id,
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": k.session_timeout_ms,
            "max.poll.interval.ms": k.max_poll_interval_ms, "fetch.max.bytes": 64 * 1024 * 1024,
            "partition.assignment.strategy": "range,roundrobin", "logger": RateLimitedLogBridge("kafka"),
            # a fetch waits at most 100 ms for data (librdkafka: 500 ms): a broker that answers a waiting fetch only
            # when the wait ends (Tansu) would otherwise hold each decision up to 0.5 s before the memory sees it;
            # client_options may set it back
            "fetch.wait.max.ms": 100}
    conf.update(k.client_options)
    c = Consumer(conf)

    def handler(event: str):
        def cb(consumer, partitions):
            log.info(f"partitions {event}", client=client_id,
                     partitions=[f"{p.topic}[{p.partition}]" for p in partitions])
            if event != "assigned":
                for p in partitions:  # another member reports these from now on
                    try:
                        CONSUMER_LAG.remove(group, p.topic, str(p.partition))
                    except KeyError:
                        pass
            if on_change is not None:
                on_change(event, partitions)
        return cb

    c.subscribe(topics, on_assign=handler("assigned"), on_revoke=handler("revoked"), on_lost=handler("lost"))
    return c


def make_producer(settings: Settings, client_id: str) -> Producer:
    """An idempotent producer (acks=all) that accepts messages up to 64 MiB (dead letters keep the original)."""
    conf = {**settings.kafka.client_config(), "client.id": client_id, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.max.bytes": 64 * 1024 * 1024, "compression.type": "lz4",
            "logger": RateLimitedLogBridge("kafka")}
    conf.update(settings.kafka.client_options)
    return Producer(conf)


@dataclass
class Outbox:
    """Tracks the delivery of what one consumed batch produced, per source message.

    ``produce(src, topic, key, value, headers)`` produces and remembers which source message it belongs to;
    ``done(src)`` marks a source message as fully handled (all its outputs produced); ``wait()`` flushes;
    ``acknowledged(src)`` is true once a message is done and every output of it was acknowledged. A produce
    the client refuses at once (too large, unknown topic) or a negative delivery report is recorded in
    ``failed`` (source -> ``(topic, error)``), never raised; ``fatal`` is set when the producer can no longer be
    used (librdkafka's fatal errors, e.g. the idempotent producer fenced).
    """

    producer: Producer
    pending: dict = field(default_factory=dict)   # (topic, partition, offset) -> outstanding count
    failed: dict = field(default_factory=dict)    # (topic, partition, offset) -> (destination topic, error text)
    handled: set = field(default_factory=set)     # (topic, partition, offset) fully handled
    fatal: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def key_of(msg: Message) -> tuple[str, int, int]:
        """``(topic, partition, offset)`` of a consumed message."""
        return msg.topic(), msg.partition(), msg.offset()

    def produce(self, src: Message, topic: str, key: bytes | None, value: bytes, headers=None) -> None:
        """Produce one output of ``src`` to ``topic`` (see the class docstring for failures)."""
        k = self.key_of(src)
        with self._lock:
            self.pending[k] = self.pending.get(k, 0) + 1

        def on_delivery(err, _msg, k=k):
            with self._lock:
                self.pending[k] -= 1
            if err is not None:
                self._fail(k, topic, err)
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then try again
                self.producer.poll(0.5)
            except KafkaException as exc:  # refused at once: too large, unknown topic, fatal producer ...
                with self._lock:
                    self.pending[k] -= 1
                self._fail(k, topic, exc.args[0] if exc.args else exc)
                break

    def _fail(self, k: tuple[str, int, int], topic: str, err) -> None:
        with self._lock:
            self.failed.setdefault(k, (topic, str(err)))
            if isinstance(err, KafkaError) and err.fatal():
                self.fatal = True
        PRODUCE_FAILURES.labels(topic).inc()

    def done(self, src: Message) -> None:
        """``src`` needs nothing more: its outputs (if any) are produced."""
        with self._lock:
            self.handled.add(self.key_of(src))

    def wait(self, timeout_s: float = 60.0) -> None:
        """Flush; afterwards every output has a delivery report or is counted as failed."""
        remaining = self.producer.flush(timeout_s)
        if remaining:
            with self._lock:
                late = [k for k, n in self.pending.items() if n > 0 and k not in self.failed]
            for k in late:
                self._fail(k, "unknown", f"not acknowledged within {timeout_s} s")

    def acknowledged(self, msg: Message) -> bool:
        """Whether ``msg`` is done and every output of it was acknowledged by the broker."""
        k = self.key_of(msg)
        with self._lock:
            return k in self.handled and k not in self.failed and self.pending.get(k, 0) <= 0


def dead_letter(outbox: Outbox, msg: Message, reason: DeadLetterReason, stage: DeadLetterStage | None, detail: str,
                worker: str, max_bytes: int) -> None:
    """Send ``msg`` to ``<topic>.dlq``: the original key and value (the value cut to fit in ``max_bytes``, see
    :func:`newsmon.schemas.fit_dead_letter`), the reason and stage codes and ``detail`` (the error in words) in
    headers. Counted in ``newsmon_dead_letters_total{topic, reason, stage}`` (codes only)."""
    headers = dead_letter_headers(detail, worker, msg.topic(), msg.partition(), msg.offset(), reason=reason,
                                  stage=stage)
    value, headers = fit_dead_letter(msg.key(), msg.value(), headers, max_bytes)
    outbox.produce(msg, dead_letter_topic(msg.topic()), msg.key(), value, headers)
    outbox.done(msg)
    DEAD_LETTERS.labels(msg.topic(), reason.value, stage.value if stage else "none").inc()
    log.warning("dead letter", topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), reason=reason.value,
                stage=stage.value if stage else None, detail=detail[:300], worker=worker,
                cut_from=len(msg.value() or b"") if len(value) < len(msg.value() or b"") else None)


_LAST_LAG: dict[str, float] = {}


def record_lag(consumer: Consumer, group: str, every_s: float = 5.0) -> None:
    """Update the consumer-lag gauge of the assigned partitions (high watermark - position), at most every
    ``every_s`` seconds per group, from the watermarks cached by the last fetches (no broker round trip)."""
    now = time.monotonic()
    if now - _LAST_LAG.get(group, 0.0) < every_s:
        return
    _LAST_LAG[group] = now
    try:
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.position(assigned):
            lo, hi = consumer.get_watermark_offsets(tp, cached=True)
            pos = tp.offset if tp.offset >= 0 else lo
            CONSUMER_LAG.labels(group, tp.topic, str(tp.partition)).set(max(0, hi - pos))
    except Exception as exc:  # noqa: BLE001 - metrics never stop the worker
        log.debug("lag not recorded", error=str(exc))


def real_messages(msgs: list[Message]) -> list[Message]:
    """Drop partition-EOF events; log other consumer errors (librdkafka retries them itself)."""
    out = []
    for m in msgs:
        err = m.error()
        if err is None:
            out.append(m)
        elif err.code() != KafkaError._PARTITION_EOF:
            log.warning("consumer error", error=str(err))
    return out


def read_latest(settings: Settings, topic: str, n: int, timeout_s: float = 10.0) -> list[Message]:
    """The latest ``n`` messages of ``topic`` (by message timestamp, newest first), read without a consumer group:
    the last ``n`` of each partition are fetched, merged, and the newest ``n`` kept.

    Raises:
        KafkaException: the broker cannot be reached (listing the topic or its offsets timed out).
    """
    c = Consumer({**settings.kafka.client_config(), "group.id": "newsmon-read-latest", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        meta = c.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        start, end = [], {}
        for p in meta.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if hi > max(lo, hi - n):
                start.append(TopicPartition(topic, p, max(lo, hi - n)))
                end[p] = hi
        c.assign(start)
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while end and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                err = m.error()
                if err is None:
                    out.append(m)
                    if m.offset() + 1 >= end.get(m.partition(), 0):
                        end.pop(m.partition(), None)
                elif err.code() == KafkaError._PARTITION_EOF:
                    end.pop(m.partition(), None)
        out.sort(key=lambda m: (m.timestamp()[1], m.offset()), reverse=True)
        return out[:n]
    finally:
        c.close()
