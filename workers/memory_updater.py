"""The memory-updater worker: ``moderator-decisions`` and ``label-events`` ->
:class:`~newsmon.workers.decisions.DecisionService` -> the knowledge memory and the label registry.

The worker moves messages: it parses each one through the service, dead-letters invalid events, parks the
decisions on articles not stored yet (:mod:`newsmon.workers.parking`: applied when the article arrives,
dead-lettered ``unknown_article`` when they expire unclaimed), applies the rest, produces the revised proposals
of near-copies that a decision changed (to the proposals topic, through the outbox: the decision's offset is
committed only once they are acknowledged) and marks the messages done; committing offsets and the error policy are
:class:`~newsmon.workers.base.BatchWorker`'s.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import cast

import structlog
from confluent_kafka import Message

from newsmon.schemas import DeadLetterReason, DeadLetterStage, InvalidEvent, LabelEvent, ModeratorDecision, parse_event
from newsmon.shared.config import Settings, reveal
from newsmon.shared.memory import MemoryRouter
from newsmon.workers.base import BatchWorker, probe_ok
from newsmon.workers.decisions import DecisionService, Outcome
from newsmon.workers.kafka_io import Outbox
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import DECISION_LATENCY, DECISIONS, PARKED_DECISIONS
from newsmon.workers.parking import DecisionPark, ParkedMessage, open_park
from newsmon.workers.policy import StageError, switch_model

log = structlog.get_logger(__name__)


class MemoryUpdaterWorker(BatchWorker):
    """Consumer group ``kafka.updater_group`` on ``kafka.topic_decisions`` and ``kafka.topic_label_events``.

    Attributes:
        applied: decisions applied so far; outcomes: decisions per outcome (applied, stale, unknown); revisions:
            revised near-copy proposals produced; latencies_s: consumed -> memory serving it (seconds), per
            applied decision (the last 10,000).
    """

    name = "memory-updater"

    def __init__(self, settings: Settings, router: MemoryRouter, registry: LabelRegistry,
                 instance: str | None = None, park: DecisionPark | None = None):
        k, w = settings.kafka, settings.worker
        super().__init__(settings, k.updater_group, [k.topic_decisions, k.topic_label_events], instance)
        self.service = DecisionService(settings, router, registry)
        self.park = park or open_park(reveal(w.redis_url), f"{w.redis_namespace}:decisions", w.decision_park_max,
                                      w.decision_park_s)
        self._park_checked = 0.0
        self.applied = 0
        self.outcomes: Counter = Counter()
        self.revisions = 0
        self.latencies_s: list[float] = []

    def probe(self) -> bool:
        return probe_ok(self.name, self.service.check_dependencies)

    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        svc = self.service
        with self.stage(DeadLetterStage.MODEL_SWITCH):
            switch_model(self, svc.follow_promotion)
            svc.new_batch()
        for m in msgs:
            if Outbox.key_of(m) in outbox.handled:
                continue
            consumed = time.perf_counter()
            with self.stage(DeadLetterStage.VALIDATE):
                try:
                    ev = svc.parse(m)
                except InvalidEvent as exc:
                    self.refuse(outbox, m, exc, DeadLetterStage.VALIDATE)
                    continue
            if isinstance(ev, LabelEvent):
                with self.stage(DeadLetterStage.LABEL_EVENT):
                    refused = self.call("label registry", svc.apply_label_event, ev)
                    if refused:
                        self.refuse(outbox, m, InvalidEvent(refused, "LabelEvent", DeadLetterReason.LABEL_CONFLICT),
                                    DeadLetterStage.LABEL_EVENT)
                        continue
            else:
                with self.stage(DeadLetterStage.DECISION):
                    outcome = self.settle(m, ev, outbox)
                    if outcome == "unknown":
                        self.outcomes[outcome] += 1
                        refused = self._park(m, ev)
                        if refused is None:
                            outbox.done(m)
                            continue
                        DECISIONS.labels("dead_letter").inc()
                        self.refuse(outbox, m, InvalidEvent(
                            f"unknown article {ev.article_id!r}: no embedding in the knowledge memory to attach "
                            f"labels to; {refused}", "ModeratorDecision", DeadLetterReason.UNKNOWN_ARTICLE),
                            DeadLetterStage.DECISION)
                        continue
                    latency = time.perf_counter() - consumed
                    DECISION_LATENCY.observe(latency)
                    self.latencies_s = self.latencies_s[-9999:] + [latency]
            outbox.done(m)

    def settle(self, m: Message, ev: ModeratorDecision, outbox: Outbox) -> Outcome:
        """Settle one decision, the one way for a consumed and a parked one (:meth:`handle_batch`,
        :meth:`settle_parked`): apply ``ev`` (of message ``m``), then produce the revised proposals of the
        near-copies it changed through ``outbox`` (keyed to ``m``: its offset waits for them). Returns the outcome,
        counted unless ``unknown`` (the caller parks the decision or leaves it parked)."""
        outcome = self.call("memory", self.service.apply_decision, ev)
        if outcome == "unknown":
            return outcome
        self.outcomes[outcome] += 1
        DECISIONS.labels(outcome).inc()
        if outcome == "applied":
            self.applied += 1
            for revised in self.call("memory", self.service.revise_copies, ev):
                outbox.produce(m, self.settings.kafka.topic_proposals, revised.kafka_key(), revised.to_bytes())
                self.revisions += 1
        return outcome

    # -- decisions waiting for their article ---------------------------------------------------------
    def _park(self, m: Message, ev: ModeratorDecision) -> str | None:
        """Park the decision ``m`` until its article arrives; None when parked, else why not."""
        w = self.settings.worker
        if w.decision_park_s <= 0:
            return "decisions are not parked (worker.decision_park_s = 0)"
        if not self.call("decision park", self.park.park, ParkedMessage.of(m, ev.article_id)):
            return f"the decision park is full ({w.decision_park_max} decisions wait for their article)"
        DECISIONS.labels("parked").inc()
        log.info("decision parked until its article arrives", article_id=ev.article_id, topic=m.topic(),
                 partition=m.partition(), offset=m.offset())
        return None

    def step(self, msgs: list[Message], stop: threading.Event) -> None:
        """The batch, then (every ``worker.decision_park_check_s``) the parked decisions
        (:meth:`settle_parked`); an error there is logged and the parked decisions are tried again later."""
        super().step(msgs, stop)
        now = time.monotonic()
        if now - self._park_checked >= self.settings.worker.decision_park_check_s:
            self._park_checked = now
            try:
                self.settle_parked()
            except Exception as exc:  # noqa: BLE001 - they stay parked: nothing is lost
                log.warning("parked decisions not settled; tried again later", worker=self.name,
                            error=f"{type(exc).__name__}: {exc}")

    def settle_parked(self) -> tuple[int, int]:
        """Apply the parked decisions whose article is now stored (with their revised near-copy proposals) and
        dead-letter those expired unclaimed (``unknown_article``, stage ``decision``, with how long they waited);
        each leaves the park once its outputs were acknowledged. Returns ``(applied or stale, dead-lettered)``."""
        entries = self.call("decision park", self.park.entries)
        PARKED_DECISIONS.set(len(entries))
        if not entries:
            return 0, 0
        svc, now = self.service, time.time()
        svc.new_batch()
        stored = self.call("memory", svc.stored, sorted({e.article_id for e in entries}))
        claim = [e.id for e in entries if e.article_id in stored]
        expired = [e.id for e in entries if e.article_id not in stored and e.expires_at <= now]
        if not claim and not expired:
            return 0, 0
        assert self._producer is not None, "the memory updater's producer is started with the worker"
        outbox, settled, dead = Outbox(self._producer), [], 0
        for pm in self.call("decision park", self.park.get, claim):
            ev = cast(ModeratorDecision, parse_event(ModeratorDecision, pm.value()))  # valid when it was parked
            outcome = self.settle(pm, ev, outbox)
            if outcome == "unknown":  # gone again (a replaced model version): it waits on
                continue
            outbox.done(pm)
            settled.append(pm)
            log.info("parked decision applied: its article arrived", article_id=ev.article_id, outcome=outcome,
                     waited_s=round(now - pm.parked_at, 1))
        for pm in self.call("decision park", self.park.get, expired):
            try:
                self.refuse(outbox, pm, InvalidEvent(
                    f"unknown article {pm.article_id!r}: the decision waited {now - pm.parked_at:.0f} s "
                    f"(worker.decision_park_s {self.settings.worker.decision_park_s:g}) and its article never "
                    "arrived", "ModeratorDecision", DeadLetterReason.UNKNOWN_ARTICLE), DeadLetterStage.DECISION)
            except StageError:  # the policy holds it: it stays parked
                continue
            DECISIONS.labels("dead_letter").inc()
            settled.append(pm)
            dead += 1
        outbox.wait()
        done = [pm.id for pm in settled if outbox.acknowledged(pm)]
        self.call("decision park", self.park.remove, done)
        PARKED_DECISIONS.set(len(entries) - len(done))
        return len(settled) - dead, dead
