"""The memory-updater worker: ``moderator-decisions`` and ``label-events`` ->
:class:`~newsmon.workers.decisions.DecisionService` -> the knowledge memory and the label registry.

The worker moves messages: it parses each one through the service, dead-letters invalid events and decisions
on unknown articles, applies the rest, produces the revised proposals of near-copies that a decision changed
(to the proposals topic, through the outbox: the decision's offset is committed only once they are
acknowledged) and marks the messages done; committing offsets and the error policy are
:class:`~newsmon.workers.base.BatchWorker`'s.
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Message

from newsmon.schemas import DeadLetterReason, DeadLetterStage, InvalidEvent, LabelEvent
from newsmon.shared.config import Settings
from newsmon.shared.memory import MemoryRouter
from newsmon.workers.base import BatchWorker, probe_ok
from newsmon.workers.decisions import DecisionService
from newsmon.workers.kafka_io import Outbox
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import DECISION_LATENCY, DECISIONS
from newsmon.workers.policy import switch_model


class MemoryUpdaterWorker(BatchWorker):
    """Consumer group ``kafka.updater_group`` on ``kafka.topic_decisions`` and ``kafka.topic_label_events``.

    Attributes:
        applied: decisions applied so far; outcomes: decisions per outcome (applied, stale, unknown); revisions:
            revised near-copy proposals produced; latencies_s: consumed -> memory serving it (seconds), per
            applied decision (the last 10,000).
    """

    name = "memory-updater"

    def __init__(self, settings: Settings, router: MemoryRouter, registry: LabelRegistry,
                 instance: str | None = None):
        k = settings.kafka
        super().__init__(settings, k.updater_group, [k.topic_decisions, k.topic_label_events], instance)
        self.service = DecisionService(settings, router, registry)
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
                    outcome = self.call("memory", svc.apply_decision, ev)
                    self.outcomes[outcome] += 1
                    if outcome == "unknown":
                        DECISIONS.labels("dead_letter").inc()
                        self.refuse(outbox, m, InvalidEvent(
                            f"unknown article {ev.article_id!r}: no embedding in the knowledge memory to attach "
                            "labels to", "ModeratorDecision", DeadLetterReason.UNKNOWN_ARTICLE),
                            DeadLetterStage.DECISION)
                        continue
                    DECISIONS.labels(outcome).inc()
                    if outcome == "applied":
                        self.applied += 1
                        for revised in self.call("memory", svc.revise_copies, ev):
                            outbox.produce(m, self.settings.kafka.topic_proposals, revised.kafka_key(),
                                           revised.to_bytes())
                            self.revisions += 1
                    latency = time.perf_counter() - consumed
                    DECISION_LATENCY.observe(latency)
                    self.latencies_s = self.latencies_s[-9999:] + [latency]
            outbox.done(m)
