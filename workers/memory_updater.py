"""The memory-updater worker: moderator decisions and label events -> the knowledge memory and the label
registry, effective for the very next proposal (no retraining, no re-embedding).

Decisions (``moderator-decisions``, key = article_id):

- The article's label set becomes the decision's confirmed + added labels; rejected labels are dropped. The
  point keeps its vector (stored as a pending point when the article was proposed) and becomes retrievable
  evidence at once.
- Idempotent: the same decision twice leaves the same state. Ordered by ``decided_at``: a decision older than
  the one already applied to the article is ignored (counted as ``stale``); a later one wins.
- A rejected-only decision (nothing confirmed or added) leaves the article in the memory with no labels and
  ``status = "reviewed"``: it is never used as evidence (only labelled points are searched) but stays known,
  so a later decision can still label it.
- A decision on an article the memory has never seen (no vector to attach labels to) goes to the dead-letter
  topic with that reason.

Label events (``label-events``): ``retired`` -> never proposed again from the moment the event is consumed;
``renamed`` old -> new -> the old name's history counts for the new name; ``added`` -> (re-)activated.
"""

from __future__ import annotations

import time
from datetime import datetime

import structlog
from confluent_kafka import Message

from newsmon.schemas.events import InvalidEvent, LabelEvent, ModeratorDecision, parse_event
from newsmon.shared.classifier import model_identity
from newsmon.shared.config import Settings
from newsmon.shared.memory import MemoryRouter, shared_router
from newsmon.workers.base import BatchWorker
from newsmon.workers.kafka_io import Outbox, dead_letter
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import DECISION_LATENCY, DECISIONS, LABEL_EVENTS

log = structlog.get_logger(__name__)


class MemoryUpdaterWorker(BatchWorker):
    """Consumer group ``kafka.updater_group`` on ``kafka.topic_decisions`` and ``kafka.topic_label_events``."""

    name = "memory-updater"

    def __init__(self, settings: Settings, router: MemoryRouter, registry: LabelRegistry,
                 instance: str | None = None):
        k = settings.kafka
        super().__init__(settings, k.updater_group, [k.topic_decisions, k.topic_label_events], instance)
        self.router = router
        self.registry = registry
        self.applied = 0
        self.latencies_s: list[float] = []  # consume -> memory serving it, per applied decision (last 10k)

    def probe(self) -> bool:
        try:
            for lang in self.router.languages(refresh=True)[:1]:
                self.router.memory(lang).count()
            self.registry.snapshot()
            return True
        except Exception as exc:  # noqa: BLE001
            log.info("probe failed", worker=self.name, error=f"{type(exc).__name__}: {exc}")
            return False

    def maybe_switch_model(self) -> None:
        """Follow a promotion: write decisions into the promoted model's collections from now on."""
        if not self.settings.encoder.follow_promoted:
            return
        from newsmon.shared.promotion import read_promoted

        rec = read_promoted(self.settings)
        if rec and rec.get("model_version") not in (None, self.router.model_version):
            version, dim = model_identity(self.settings)
            if version != self.router.model_version:
                log.info("memory updater follows the promoted model", old=self.router.model_version, new=version)
                self.router = shared_router(self.settings, version, dim)

    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        self.call("model switch", self.maybe_switch_model)
        self.router.new_batch()  # the language collections are listed again, at most once for this batch
        k = self.settings.kafka
        for m in msgs:
            if Outbox.key_of(m) in outbox.handled:
                continue
            consumed = time.perf_counter()
            try:
                if m.topic() == k.topic_label_events:
                    ev = parse_event(LabelEvent, m.value())
                    self.call("label registry", self.apply_label_event, ev)
                else:
                    dec = parse_event(ModeratorDecision, m.value())
                    outcome = self.call("memory", self.apply_decision, dec)
                    if outcome == "unknown":
                        dead_letter(outbox, m, f"unknown article {dec.article_id!r}: no embedding in the knowledge "
                                               "memory to attach labels to", self.instance)
                        DECISIONS.labels("dead_letter").inc()
                        continue
                    DECISIONS.labels(outcome).inc()
                    latency = time.perf_counter() - consumed
                    DECISION_LATENCY.observe(latency)
                    self.latencies_s = self.latencies_s[-9999:] + [latency]
            except InvalidEvent as exc:
                dead_letter(outbox, m, str(exc.reason), self.instance)
                continue
            outbox.done(m)

    # -- the two kinds of events ------------------------------------------------------------------
    def apply_label_event(self, ev: LabelEvent) -> None:
        """Update the label registry (retire / rename / add)."""
        if ev.action == "retired":
            self.registry.retire(ev.label)
        elif ev.action == "renamed":
            self.registry.rename(ev.label, ev.new_label)
        else:
            self.registry.add(ev.label)
        LABEL_EVENTS.labels(ev.action).inc()
        log.info("label event applied", action=ev.action, label=ev.label, new_label=ev.new_label)

    def apply_decision(self, dec: ModeratorDecision) -> str:
        """Apply one decision; returns ``applied``, ``stale`` or ``unknown``."""
        with self.router.write_lock:
            found = self.router.find(dec.article_id, with_vectors=True)
            if found is None:
                return "unknown"
            lang, point = found
            previous = point.payload.get("decided_at")
            if previous and datetime.fromisoformat(previous) > dec.decided_at:
                return "stale"
            labels = tuple(dec.accepted_labels)
            payload = {**point.payload, "status": "labelled" if labels else "reviewed",
                       "decided_at": dec.decided_at.isoformat(), "moderator": dec.moderator,
                       "rejected_labels": list(dec.rejected_labels)}
            self.router.memory(lang).upsert([dec.article_id], point.vector[None, :], [labels], [payload])
            self.applied += 1
            return "applied"
