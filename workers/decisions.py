"""The decision path: moderator decisions and label events -> the knowledge memory and the label registry,
effective for the very next proposal (no retraining, no re-embedding).

Decisions (``moderator-decisions``, key = article_id), :meth:`DecisionService.apply_decision`:

- The article's label set becomes the decision's confirmed + added labels; rejected labels are dropped. The
  point keeps its vector (stored as a pending point when the article was proposed) and becomes retrievable
  evidence at once.
- Idempotent: the same decision twice leaves the same state. Ordered by ``decided_at``: a decision older than
  the one already applied to the article is ignored (``stale``); a later one wins.
- A rejected-only decision (nothing confirmed or added) leaves the article in the memory with no labels and
  ``status = "reviewed"``: it is never used as evidence (only labelled points are searched) but stays known,
  so a later decision can still label it.
- A decision on an article the memory has never seen (no vector to attach labels to) is ``unknown``.

Label events (``label-events``), :meth:`DecisionService.apply_label_event`: ``retired`` -> never proposed again
from the moment the event is consumed; ``renamed`` old -> new -> the old name's history counts for the new
name; ``added`` -> (re-)activated.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import structlog
from confluent_kafka import Message

from newsmon.schemas import LabelEvent, ModeratorDecision, parse_event
from newsmon.shared.classifier import model_identity
from newsmon.shared.config import Settings
from newsmon.shared.memory import MemoryRouter, shared_router
from newsmon.shared.promotion import read_promoted
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import LABEL_EVENTS

log = structlog.get_logger(__name__)

Outcome = Literal["applied", "stale", "unknown"]


class DecisionService:
    """The memory updater's service object: parse, apply decisions, apply label events.

    Args:
        settings: all settings; router: the memories of the production model version (replaced when a
            model is promoted); registry: the label registry.
    """

    def __init__(self, settings: Settings, router: MemoryRouter, registry: LabelRegistry):
        self.settings = settings
        self.router = router
        self.registry = registry

    def follow_promotion(self) -> None:
        """Between batches: write decisions into the promoted model's collections from now on."""
        if not self.settings.encoder.follow_promoted:
            return
        rec = read_promoted(self.settings)
        if rec and rec.get("model_version") not in (None, self.router.model_version):
            version, dim = model_identity(self.settings)
            if version != self.router.model_version:
                log.info("memory updater follows the promoted model", old=self.router.model_version, new=version)
                self.router = shared_router(self.settings, version, dim)

    def new_batch(self) -> None:
        """Start a batch: the language collections are listed again (once) when needed."""
        self.router.new_batch()

    def check_dependencies(self) -> None:
        """Touch the memory and the label registry; raises when one is down."""
        for lang in self.router.languages(refresh=True)[:1]:
            self.router.memory(lang).count()
        self.registry.snapshot()

    def parse(self, msg: Message) -> LabelEvent | ModeratorDecision:
        """The event of a consumed message (by topic).

        Raises:
            InvalidEvent: not a valid event of its topic's schema.
        """
        if msg.topic() == self.settings.kafka.topic_label_events:
            return parse_event(LabelEvent, msg.value())
        return parse_event(ModeratorDecision, msg.value())

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

    def apply_decision(self, dec: ModeratorDecision) -> Outcome:
        """Apply one decision to the article's point; returns ``applied``, ``stale`` or ``unknown``."""
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
            return "applied"
