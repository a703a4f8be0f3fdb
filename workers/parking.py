"""Decisions that arrive before their article: parked, applied when the article arrives, dead-lettered only when
they expire unclaimed.

A moderation tool may label an article the classifier has not stored yet (it was routed to the moderators by a
keyword rule, or the classifier is behind). The memory updater parks such a decision (:class:`DecisionPark`)
instead of dead-lettering it, commits its offset, and every ``worker.decision_park_check_s`` looks for the parked
articles in the knowledge memory: a decision whose article is now stored is applied as if it had just arrived
(revised near-copy proposals included); one parked longer than ``worker.decision_park_s`` goes to the dead-letter
topic as ``unknown_article``, with how long it waited. At most ``worker.decision_park_max`` decisions wait; one
more is dead-lettered at once. A parked decision leaves the park only after its outputs were acknowledged, so a
crash in between applies it again (decisions are idempotent).

Where: Redis when ``worker.redis_url`` is set (shared by the replicas, kept across restarts: hash
``<ns>:parked:messages`` id -> the message as JSON, sorted set ``<ns>:parked:due`` ``<article id> <id>`` by
expiry time); else in a SQLite file of the home (:class:`newsmon.workers.local_state.SqliteDecisionPark`, the
workers' runtime) or, for a park built alone, in the process.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass
from typing import cast

import redis
from confluent_kafka import Message

__all__ = ["DecisionPark", "ParkedMessage", "RedisDecisionPark", "open_park"]


class ParkedMessage:
    """A consumed decision message kept in the park; it answers like a consumed ``Message`` (topic, partition,
    offset, key, value, timestamp) so outputs and dead letters name their source.

    Args:
        article_id: the decided article; topic, partition, offset, key, value: the original message's;
        parked_at: when it was parked (Unix seconds).
    """

    def __init__(self, article_id: str, topic: str, partition: int, offset: int, key: bytes | None, value: bytes,
                 parked_at: float) -> None:
        self.article_id, self.parked_at = article_id, parked_at
        self._topic, self._partition, self._offset, self._key, self._value = topic, partition, offset, key, value

    @classmethod
    def of(cls, msg: Message, article_id: str, now: float | None = None) -> ParkedMessage:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if topic is None or partition is None or offset is None:  # only an error event lacks them
            raise ValueError("cannot park a message without its topic, partition and offset")
        return cls(article_id, topic, partition, offset, msg.key(), msg.value() or b"",
                   time.time() if now is None else now)

    @property
    def id(self) -> str:
        """``<topic>:<partition>:<offset>``: one park entry per consumed message (a message read twice is parked
        once)."""
        return f"{self._topic}:{self._partition}:{self._offset}"

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 0, int(self.parked_at * 1000)

    def to_json(self) -> str:
        return json.dumps({"article_id": self.article_id, "topic": self._topic, "partition": self._partition,
                           "offset": self._offset, "parked_at": self.parked_at,
                           "key": base64.b64encode(self._key).decode() if self._key is not None else None,
                           "value": base64.b64encode(self._value).decode()})

    @classmethod
    def from_json(cls, text: str | bytes) -> ParkedMessage:
        d = json.loads(text)
        return cls(d["article_id"], d["topic"], d["partition"], d["offset"],
                   base64.b64decode(d["key"]) if d["key"] is not None else None, base64.b64decode(d["value"]),
                   d["parked_at"])


@dataclass(frozen=True)
class Entry:
    """A park entry: the article it waits for, the message's park id, when it expires (Unix seconds)."""

    article_id: str
    id: str
    expires_at: float


class DecisionPark:
    """The park in the process (embedded mode).

    Args:
        max_decisions: how many may wait at once; expiry_s: how long one may wait (seconds).
    """

    def __init__(self, max_decisions: int, expiry_s: float) -> None:
        self.max_decisions, self.expiry_s = max_decisions, expiry_s
        self._lock = threading.Lock()
        self._messages: dict[str, ParkedMessage] = {}

    def park(self, msg: ParkedMessage) -> bool:
        """Keep ``msg`` until its article arrives or it expires; False when the park is full (not kept). A
        message already parked (read again) keeps its first time."""
        with self._lock:
            if msg.id in self._messages:
                return True
            if len(self._messages) >= self.max_decisions:
                return False
            self._messages[msg.id] = msg
            return True

    def entries(self) -> list[Entry]:
        """Every waiting decision, oldest first."""
        with self._lock:
            msgs = sorted(self._messages.values(), key=lambda m: (m.parked_at, m.id))
        return [Entry(m.article_id, m.id, m.parked_at + self.expiry_s) for m in msgs]

    def get(self, ids: list[str]) -> list[ParkedMessage]:
        """The parked messages of ``ids`` (those still parked), in the order given."""
        with self._lock:
            return [self._messages[i] for i in ids if i in self._messages]

    def remove(self, ids: list[str]) -> None:
        with self._lock:
            for i in ids:
                self._messages.pop(i, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)


class RedisDecisionPark(DecisionPark):
    """The park in Redis (see the module docstring), shared by the memory-updater replicas.

    Raises:
        redis.exceptions.ConnectionError: Redis unreachable (the worker's dependency calls retry, then pause).
    """

    def __init__(self, url: str, namespace: str, max_decisions: int, expiry_s: float) -> None:
        super().__init__(max_decisions, expiry_s)
        self.r = redis.Redis.from_url(url)
        self._msgs, self._due = f"{namespace}:parked:messages", f"{namespace}:parked:due"

    def park(self, msg: ParkedMessage) -> bool:
        if self.r.hexists(self._msgs, msg.id):
            return True
        if self.r.hlen(self._msgs) >= self.max_decisions:
            return False
        pipe = self.r.pipeline(transaction=True)
        pipe.hsetnx(self._msgs, msg.id, msg.to_json())
        pipe.zadd(self._due, {f"{msg.article_id} {msg.id}": msg.parked_at + self.expiry_s}, nx=True)
        pipe.execute()
        return True

    def entries(self) -> list[Entry]:
        out = []
        rows = cast(list[tuple[bytes, float]], self.r.zrange(self._due, 0, -1, withscores=True))
        for member, score in rows:
            article_id, _, mid = member.decode().rpartition(" ")
            out.append(Entry(article_id, mid, float(score)))
        return out

    def get(self, ids: list[str]) -> list[ParkedMessage]:
        if not ids:
            return []
        return [ParkedMessage.from_json(v) for v in self.r.hmget(self._msgs, ids) if v is not None]

    def remove(self, ids: list[str]) -> None:
        if not ids:
            return
        msgs = self.get(ids)
        pipe = self.r.pipeline(transaction=True)
        pipe.hdel(self._msgs, *ids)
        if msgs:
            pipe.zrem(self._due, *[f"{m.article_id} {m.id}" for m in msgs])
        pipe.execute()

    def __len__(self) -> int:
        return int(self.r.hlen(self._msgs))


def open_park(redis_url: str | None, namespace: str, max_decisions: int, expiry_s: float) -> DecisionPark:
    """Redis-backed when ``redis_url`` is set, else in the process."""
    if redis_url:
        return RedisDecisionPark(redis_url, namespace, max_decisions, expiry_s)
    return DecisionPark(max_decisions, expiry_s)
