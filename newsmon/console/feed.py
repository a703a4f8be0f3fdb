"""The console's live state: the proposals and decisions topics read in the ``newsmon serve`` process, decisions
published, and when the knowledge memory applied each one.

A :class:`ConsoleFeed` runs one daemon thread with a Kafka consumer outside any consumer group (it assigns
every partition of ``kafka.topic_proposals`` and ``kafka.topic_decisions`` from the last :data:`BACKLOG`
messages of each on, and commits nothing), so every console process sees every proposal and every decision,
whichever moderator made it. It keeps the highest revision of each article's :class:`LabelProposal` (at most
:data:`MAX_ITEMS`, the oldest dropped), the article's title, outlet and language read from its point in the
knowledge memory (stored before its proposal is produced), and the last decision on it.

Events for the browsers (:meth:`ConsoleFeed.subscribe`; numbered, the last :data:`REPLAY` kept for a browser
that reconnects with ``Last-Event-ID``):

* ``proposal``: a new article (or a higher revision): its queue summary (:meth:`ConsoleFeed.summary`);
* ``decided``: a decision seen on the topic or published here (article, moderator, time, the labels);
* ``applied``: the memory now holds the decision (the point's ``decided_at`` reached the decision's), with the
  seconds from the decision's publication (or from its reading on the topic) to that;
* ``not_applied``: no sign of it after :data:`APPLY_TIMEOUT_S` seconds (an article the memory never saw);
* ``undone``: a decision taken back (an undo, ``ModeratorDecision.undoes``): the article is undecided again; its
  ``applied`` (with ``undo: true``) once the memory restored it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from newsmon.schemas import InvalidEvent, LabelProposal, ModeratorDecision, parse_event
from newsmon.shared.config import Settings
from newsmon.shared.memory import MemoryRouter, decision_time
from newsmon.shared.scoring.retrieval import display_title

log = structlog.get_logger(__name__)

__all__ = ["APPLY_TIMEOUT_S", "BACKLOG", "ConsoleFeed", "Item", "MAX_ITEMS", "REPLAY"]

BACKLOG = 500          # messages per partition read back when the feed starts
MAX_ITEMS = 2000       # articles kept in the queue (the oldest proposals dropped first)
REPLAY = 1000          # events kept for browsers that reconnect
APPLY_TIMEOUT_S = 120  # a decision not applied by then is reported as not applied
POLL_S = 0.03          # how often pending decisions are looked up in the memory (seconds)
HEADING_CHARS = 120    # the queue's title of an article: its headline, or the start of its text cut at a word


@dataclass
class Item:
    """One article in the queue: its latest proposal, what the memory says about it, the last decision."""

    proposal: LabelProposal
    title: str | None = None
    outlet: str | None = None
    lang: str | None = None
    decision: ModeratorDecision | None = None
    applied: bool = False
    applied_s: float | None = None
    not_applied: str | None = None


@dataclass
class _Pending:
    decision: ModeratorDecision
    since: float = field(default_factory=time.monotonic)


class ConsoleFeed:
    """The queue of proposals, the decisions, and the browsers listening to them.

    Args:
        settings: all settings (the topics, the broker); router: returns the knowledge memory to read (called
            each time: a promotion may replace it); producer: where decisions are published.
    """

    def __init__(self, settings: Settings, router: Callable[[], MemoryRouter], producer: Producer):
        self.settings, self._router, self.producer = settings, router, producer
        self.items: OrderedDict[str, Item] = OrderedDict()
        self._lock = threading.RLock()
        self._events: deque[tuple[int, dict]] = deque(maxlen=REPLAY)
        self._seq = itertools.count(1)
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = set()
        self._pending: dict[str, _Pending] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = threading.Event()  # the backlog has been read (or the topics are not there yet)

    # -- life ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the reading thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="newsmon-console-feed", daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Stop the thread (the consumer is closed by it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        k = self.settings.kafka
        consumer = Consumer({**k.client_config(), "group.id": f"newsmon-console-{uuid.uuid4().hex[:12]}",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 50,
                             "client.id": "newsmon-console"})
        try:
            assigned: set[str] = set()
            while not self._stop.is_set():
                missing = [t for t in (k.topic_proposals, k.topic_decisions) if t not in assigned]
                if missing:
                    assigned |= self._assign(consumer, missing, assigned)
                    if len(assigned) < 2:
                        self.started.set()
                        self._stop.wait(1.0)
                        self._check_pending()
                        continue
                    self.started.set()
                try:
                    msgs = consumer.consume(200, POLL_S)
                except KafkaException as exc:
                    log.warning("console feed: the broker did not answer", error=str(exc))
                    self._stop.wait(1.0)
                    continue
                real = [m for m in msgs if m.error() is None]
                for m in msgs:
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        log.warning("console feed: consumer error", error=str(err))
                if real:
                    self._take(real)
                self._check_pending()
        except Exception:  # noqa: BLE001 -- the console goes stale, the API and the workers carry on
            log.exception("console feed stopped")
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer, topics: list[str], assigned: set[str]) -> set[str]:
        """Assign the partitions of ``topics`` that exist from their last :data:`BACKLOG` messages on; returns
        the topics assigned."""
        done: set[str] = set()
        try:
            parts = []
            for topic in topics:
                meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
                if meta is None or meta.error is not None or not meta.partitions:
                    continue
                for p in meta.partitions:
                    lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                    parts.append(TopicPartition(topic, p, max(lo, hi - BACKLOG)))
                done.add(topic)
            if parts:
                consumer.incremental_assign(parts)
        except KafkaException as exc:
            log.warning("console feed: topics not readable yet", error=str(exc))
            return set()
        return done

    # -- reading -------------------------------------------------------------------------------------
    def _take(self, msgs: list[Message]) -> None:
        k = self.settings.kafka
        proposals, decisions = [], []
        for m in msgs:
            try:
                if m.topic() == k.topic_proposals:
                    proposals.append(cast(LabelProposal, parse_event(LabelProposal, m.value())))
                elif m.topic() == k.topic_decisions:
                    decisions.append(cast(ModeratorDecision, parse_event(ModeratorDecision, m.value())))
            except InvalidEvent as exc:  # the workers dead-letter it; the console only skips it
                log.info("console feed: invalid event skipped", topic=m.topic(), reason=exc.reason)
        if proposals:
            self._add_proposals(proposals)
        for d in decisions:
            self._decided(d)

    def _add_proposals(self, proposals: list[LabelProposal]) -> None:
        found = self._find([p.article_id for p in proposals])
        for p in proposals:
            with self._lock:
                old = self.items.get(p.article_id)
                if old is not None and old.proposal.revision >= p.revision:
                    continue
                payload = found.get(p.article_id, {})
                item = Item(proposal=p, title=display_title(payload, HEADING_CHARS),
                            outlet=payload.get("outlet"), lang=payload.get("lang"))
                if old is not None:
                    item.decision, item.applied, item.applied_s = old.decision, old.applied, old.applied_s
                self.items[p.article_id] = item
                self.items.move_to_end(p.article_id)
                while len(self.items) > MAX_ITEMS:
                    self.items.popitem(last=False)
            self._emit({"type": "proposal", "item": self.summary(item)})

    def _find(self, ids: list[str]) -> dict[str, dict]:
        try:
            return {aid: point.payload for aid, (_lang, point) in self._router().find_many(ids).items()}
        except Exception as exc:  # noqa: BLE001 -- the queue shows the article without its title meanwhile
            log.warning("console feed: the memory did not answer", error=str(exc))
            return {}

    def _decided(self, d: ModeratorDecision) -> None:
        if d.undoes is not None:
            return self._undone(d)
        with self._lock:
            item = self.items.get(d.article_id)
            if item is not None and item.decision is not None and item.decision.decided_at >= d.decided_at:
                return  # seen already (published here, or an older one)
            if item is not None:
                item.decision, item.applied, item.applied_s, item.not_applied = d, False, None, None
            self._pending.setdefault(d.article_id, _Pending(d))
            if self._pending[d.article_id].decision.decided_at < d.decided_at:
                self._pending[d.article_id] = _Pending(d)
        self._emit({"type": "decided", **_decision_view(d)})

    def _undone(self, d: ModeratorDecision) -> None:
        """An undo seen on the topic or published here: the article has no decision again."""
        with self._lock:
            item = self.items.get(d.article_id)
            if item is None or item.decision is None or item.decision.decided_at != d.undoes:
                return  # seen already, or another decision replaced the one taken back
            item.decision, item.applied, item.applied_s, item.not_applied = None, False, None, None
            self._pending[d.article_id] = _Pending(d)
        self._emit({"type": "undone", **_decision_view(d), "undoes": d.undoes.isoformat() if d.undoes else None})

    def _check_pending(self) -> None:
        with self._lock:
            todo = dict(self._pending)
        if not todo:
            return
        found = self._find(list(todo))
        for aid, pending in todo.items():
            d, payload = pending.decision, found.get(aid, {})
            at = decision_time(payload)
            waited = time.monotonic() - pending.since
            if (d.undoes.isoformat() in (payload.get("undone") or ()) if d.undoes is not None else
                    at is not None and at >= d.decided_at):
                self._resolve(aid, pending, {"type": "applied", "article_id": aid, "seconds": round(waited, 3),
                                             "moderator": payload.get("moderator"), "undo": d.undoes is not None})
            elif waited > APPLY_TIMEOUT_S:
                why = (f"the memory did not apply the decision within {APPLY_TIMEOUT_S} s (is the memory updater "
                       "running? does the memory know the article?)")
                self._resolve(aid, pending, {"type": "not_applied", "article_id": aid, "reason": why})

    def _resolve(self, aid: str, pending: _Pending, event: dict) -> None:
        with self._lock:
            if self._pending.get(aid) is pending:
                del self._pending[aid]
            item = self.items.get(aid)
            if item is not None and item.decision is not None and item.decision.decided_at == \
                    pending.decision.decided_at:
                item.applied = event["type"] == "applied"
                item.applied_s = event.get("seconds")
                item.not_applied = event.get("reason")
        self._emit(event)

    # -- deciding ------------------------------------------------------------------------------------
    def undo(self, article_id: str, decided_at: datetime, moderator: str,
             timeout_s: float) -> tuple[ModeratorDecision, int, int]:
        """Take back ``moderator``'s decision of ``decided_at`` on the article (:meth:`decide` publishes the undo,
        ``ModeratorDecision.undoes``); returns the undo published, its partition and offset.

        Raises:
            LookupError: the article's latest decision is not that one by ``moderator`` (the reason in words).
            RuntimeError: as :meth:`decide`.
        """
        with self._lock:
            item = self.items.get(article_id)
            d = item.decision if item is not None else None
        if d is None or d.decided_at != decided_at or d.moderator != moderator:
            raise LookupError(f"nothing of yours to undo: the latest decision on {article_id} is " + (
                f"{d.moderator}'s of {d.decided_at.isoformat()}" if d else "none (it is undecided)"))
        undo = ModeratorDecision(article_id=article_id, decisions=d.decisions, moderator=moderator,
                                 decided_at=max(datetime.now(UTC), d.decided_at + timedelta(milliseconds=1)),
                                 undoes=d.decided_at)
        return (undo, *self.decide(undo, timeout_s))

    def decide(self, decision: ModeratorDecision, timeout_s: float) -> tuple[int, int]:
        """Publish ``decision`` (or an undo) to ``kafka.topic_decisions`` and wait for the broker's
        acknowledgement; the memory is then watched for it. Returns ``(partition, offset)``.

        Raises:
            RuntimeError: the broker did not acknowledge within ``timeout_s`` (nothing was decided).
        """
        done: dict = {}

        def delivered(err, msg):
            done["err"], done["msg"] = err, msg

        self.producer.produce(self.settings.kafka.topic_decisions, key=decision.kafka_key(),
                              value=decision.to_bytes(), on_delivery=delivered)
        self.producer.flush(timeout_s)
        if "msg" not in done or done["err"] is not None:
            raise RuntimeError(f"the broker did not acknowledge the decision: {done.get('err') or 'timeout'}")
        log.info("moderator decision published", article_id=decision.article_id, moderator=decision.moderator,
                 labels=[(d.label, d.action) for d in decision.decisions])
        self._decided(decision)
        return done["msg"].partition(), done["msg"].offset()

    # -- reading the state ---------------------------------------------------------------------------
    def summary(self, item: Item) -> dict:
        """What the queue shows of an article (JSON-ready)."""
        p = item.proposal
        return {"article_id": p.article_id, "revision": p.revision, "title": item.title, "outlet": item.outlet,
                "lang": item.lang, "produced_at": p.produced_at.isoformat(), "duplicate_of": p.duplicate_of,
                "abstained": p.abstained,
                "labels": [{"label": x.label, "score": round(x.score, 3), "source": x.source} for x in p.labels],
                "candidates": [x.label for x in p.candidates[:5]],
                "decided": None if item.decision is None else {**_decision_view(item.decision),
                                                               "applied": item.applied}}

    def queue(self, lang: str | None = None, outlet: str | None = None, label: str | None = None,
              limit: int = 200) -> list[dict]:
        """The queue, newest proposal first, filtered (language and outlet exactly, ``label`` as a part of a
        proposed or candidate label's name)."""
        with self._lock:
            items = sorted(self.items.values(), key=lambda i: i.proposal.produced_at, reverse=True)
        out = []
        for it in items:
            if lang and it.lang != lang or outlet and it.outlet != outlet:
                continue
            if label and not any(label.lower() in x.label for x in [*it.proposal.labels, *it.proposal.candidates]):
                continue
            out.append(self.summary(it))
            if len(out) >= limit:
                break
        return out

    def facets(self) -> dict[str, list[str]]:
        """The languages, outlets and labels present in the queue (for the filters)."""
        with self._lock:
            items = list(self.items.values())
        return {"lang": sorted({i.lang for i in items if i.lang}),
                "outlet": sorted({i.outlet for i in items if i.outlet}),
                "label": sorted({x.label for i in items for x in [*i.proposal.labels, *i.proposal.candidates]})}

    def item(self, article_id: str) -> Item | None:
        with self._lock:
            return self.items.get(article_id)

    def next_after(self, article_id: str | None) -> str | None:
        """The next undecided article in queue order after ``article_id`` (the newest undecided when None)."""
        ids = [x["article_id"] for x in self.queue(limit=MAX_ITEMS)]
        start = ids.index(article_id) + 1 if article_id in ids else 0
        for aid in ids[start:] + ids[:start]:
            it = self.item(aid)
            if aid != article_id and it is not None and it.decision is None:
                return aid
        return None

    def find(self, ids: list[str]) -> dict[str, dict]:
        """The memory points' payloads (with ``labels``) of ``ids`` that the memory holds."""
        try:
            found = self._router().find_many(ids)
        except Exception as exc:  # noqa: BLE001
            log.warning("console: the memory did not answer", error=str(exc))
            return {}
        return {aid: {**point.payload, "labels": list(point.labels)} for aid, (_l, point) in found.items()}

    # -- browsers ------------------------------------------------------------------------------------
    def _emit(self, event: dict) -> None:
        with self._lock:
            seq = next(self._seq)
            self._events.append((seq, event))
            subscribers = list(self._subscribers)
        for loop, q in subscribers:
            try:
                loop.call_soon_threadsafe(q.put_nowait, (seq, event))
            except RuntimeError:  # its loop is closed
                self._subscribers.discard((loop, q))

    def subscribe(self, last_id: int | None) -> tuple[asyncio.Queue, list[tuple[int, dict]]]:
        """A queue of ``(id, event)`` for the calling event loop, and the kept events after ``last_id`` (none
        when ``last_id`` is None)."""
        q: asyncio.Queue = asyncio.Queue()
        with self._lock:
            self._subscribers.add((asyncio.get_running_loop(), q))
            missed = [e for e in self._events if last_id is not None and e[0] > last_id]
        return q, missed

    def last_id(self) -> int:
        """The id of the latest event (0 before any): a page rendered now asks for the events after it."""
        with self._lock:
            return self._events[-1][0] if self._events else 0

    def unsubscribe(self, q: asyncio.Queue) -> None:
        with self._lock:
            self._subscribers = {s for s in self._subscribers if s[1] is not q}


def _decision_view(d: ModeratorDecision) -> dict[str, Any]:
    return {"article_id": d.article_id, "moderator": d.moderator, "decided_at": d.decided_at.isoformat(),
            "decisions": [{"label": x.label, "action": x.action} for x in d.decisions]}
