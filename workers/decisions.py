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
- A decision on an article the memory has never seen (no vector to attach labels to) is ``unknown``: the worker
  parks it until the article arrives (:mod:`newsmon.workers.parking`).
- Future-dated: a ``decided_at`` further ahead than now + ``worker.decision_max_future_s`` (a moderator's clock
  that is wrong) is taken as now (the claimed time is kept in ``decided_at_claimed``), so it cannot lock the
  article against later decisions; a future date stored before this rule is not honoured either.
- Near-copies proposed from the article's old state get revised proposals (:meth:`DecisionService.revise_copies`,
  see :mod:`newsmon.workers.copies`).
- Undo (``undoes`` set, the console's undo): the article returns to its state before the decision taken back (kept
  in the point's ``before`` when a decision is applied: undecided, or the decision before), as long as that decision
  is still the article's latest (else ``stale``); the decision taken back is remembered (``undone``), so it is never
  applied again, even redelivered.

Model switches (:meth:`DecisionService.follow_promotion`): when the nightly job promoted a model, decisions go
to its collections, and the version it replaced stays known (``previous``): a decision is written there first,
then to the promoted version, so whichever worker's catch-up copy runs later carries it over; an article found
only in the replaced version (proposed between the re-embedding and the promotion) is decided there, not
dead-lettered. On switching, the updater carries over the decisions applied to the old version since the
re-embedding (:func:`newsmon.shared.memory.copy_missing` without an encoder).

Label events (``label-events``), :meth:`DecisionService.apply_label_event` (see :mod:`newsmon.workers.labels`):
``defined`` / ``updated`` -> the label's KwEs and filters are stored and match from the next batch on;
``retired`` -> never proposed again from the moment the event is consumed, its rules no longer match;
``renamed`` old -> new -> the old name's history and definition go to the new name; ``added`` -> (re-)activated.
A definition whose KwE does not parse, or that defines a name renamed away, is dead-lettered with the reason
(:meth:`DecisionService.parse`).
"""

from __future__ import annotations

from contextlib import nullcontext
from datetime import datetime, timedelta, timezone
from typing import Literal, cast

import structlog
from confluent_kafka import Message

from newsmon.schemas.base import canonical_label
from newsmon.schemas import DeadLetterReason, InvalidEvent, LabelEvent, LabelProposal, ModeratorDecision, parse_event
from newsmon.shared.classifier import model_identity
from newsmon.shared.config import Settings
from newsmon.shared.limits import decision_over_limit
from newsmon.shared.memory import MemoryRouter, copy_missing, decision_time, replaced_router, shared_router
from newsmon.workers.copies import inherited_labels, revise_copies
from newsmon.workers.labels import LabelConflict, LabelRegistry, apply_event
from newsmon.workers.model_follower import ModelFollower
from newsmon.workers.kwe_stage import kwe_errors
from newsmon.workers.observability import DECISIONS, LABEL_EVENTS

log = structlog.get_logger(__name__)

Outcome = Literal["applied", "stale", "unknown"]
#: The payload fields a decision writes (restored by an undo from the point's ``before``).
DECISION_FIELDS = ("status", "decided_at", "moderator", "rejected_labels", "decided_at_claimed")
MAX_UNDONE = 20  # the decisions taken back that a point remembers


class DecisionService:
    """The memory updater's service object: parse, apply decisions, apply label events.

    Args:
        settings: all settings; router: the memories of the production model version (replaced when a
            model is promoted); registry: the label registry.

    Attributes:
        previous: the memories of the version the last promotion replaced (None before any), also written.
    """

    def __init__(self, settings: Settings, router: MemoryRouter, registry: LabelRegistry):
        self.settings = settings
        self.router = router
        self.previous: MemoryRouter | None = None
        self.registry = registry
        self.follower = ModelFollower(settings, lambda: self.router.model_version, self._switch, self._keep_replaced)

    def follow_promotion(self) -> bool:
        """Between batches (:class:`~newsmon.workers.model_follower.ModelFollower`): write decisions into the
        promoted model's collections from now on, after carrying over the decisions applied to the old version
        since the re-embedding; keep the old version as ``previous``. At the first call of a process started after
        a promotion, ``previous`` is the version the promotion record says it replaced. Returns whether the
        collections written changed."""
        return self.follower.follow()

    def _switch(self, rec: dict) -> bool:
        """Write to the promoted version's collections (when the settings resolve a model other than the one in
        use), the decisions applied to the old version since the re-embedding carried over."""
        version, dim = model_identity(self.settings)
        if version == self.router.model_version:
            return False
        old, new = self.router, shared_router(self.settings, version, dim)
        carried = copy_missing(old, new)
        self.previous, self.router = old, new
        log.info("memory updater follows the promoted model", old=old.model_version, new=version, caught_up=carried)
        return True

    def _keep_replaced(self, rec: dict | None) -> None:
        """``previous``: the version the promotion record says was replaced (a process started after it)."""
        if self.previous is None:
            self.previous = replaced_router(self.settings, rec, self.router.model_version)

    def new_batch(self) -> None:
        """Start a batch: the language collections are listed again (once) when needed."""
        self.router.new_batch()
        if self.previous is not None:
            self.previous.new_batch()

    def check_dependencies(self) -> None:
        """Touch the memory and the label registry; raises when one is down."""
        for lang in self.router.languages(refresh=True)[:1]:
            self.router.memory(lang).count()
        self.registry.snapshot()

    def parse(self, msg: Message) -> LabelEvent | ModeratorDecision:
        """The event of a consumed message (by topic).

        Raises:
            InvalidEvent: not a valid event of its topic's schema; a label definition with a KwE that does not
                parse (the KwE's index, the reason and the character position); a decision naming more labels than
                ``limits.decision_labels`` (``too_large``).
        """
        if msg.topic() == self.settings.kafka.topic_label_events:
            ev = parse_event(LabelEvent, msg.value())
            bad = kwe_errors(ev.definition.kwes) if ev.definition is not None else []
            if bad:
                raise InvalidEvent("; ".join(f"definition.kwes.{i}: {exc}" for i, exc in bad), "LabelEvent")
            return ev
        dec = cast(ModeratorDecision, parse_event(ModeratorDecision, msg.value()))
        why = decision_over_limit(len(dec.decisions), self.settings.limits)
        if why is not None:
            raise InvalidEvent(why, "ModeratorDecision", DeadLetterReason.TOO_LARGE)
        return dec

    def apply_label_event(self, ev: LabelEvent) -> str | None:
        """Update the label registry (define / update / retire / rename / add). Returns None when applied, or
        why the registry refuses the event (:func:`newsmon.workers.labels.conflict`: a name renamed away, a rename
        into one, ...): dead-letter it."""
        if ev.action == "renamed" and self.registry.snapshot().renamed.get(canonical_label(ev.label)) == \
                canonical_label(ev.new_label or ""):  # redelivered (at least once, e.g. re-seeded after a kill)
            log.info("label event applied already", action=ev.action, label=ev.label, new_label=ev.new_label)
            return None
        try:
            apply_event(self.registry, ev)
        except LabelConflict as exc:
            return str(exc)
        LABEL_EVENTS.labels(ev.action).inc()
        log.info("label event applied", action=ev.action, label=ev.label, new_label=ev.new_label)
        return None

    def apply_decision(self, dec: ModeratorDecision) -> Outcome:
        """Apply one decision to the article's point, in the replaced version first (when there is one and it
        holds the article), then in the production one; returns ``applied``, ``stale`` or ``unknown``."""
        at = self.effective_time(dec)
        cur, prev = self.router, self.previous
        with cur.write_lock, (prev.write_lock if prev is not None else nullcontext()):
            in_prev = self._apply_in(prev, dec, at) if prev is not None else None
            outcome = self._apply_in(cur, dec, at)
        return outcome or in_prev or "unknown"

    def effective_time(self, dec: ModeratorDecision) -> datetime:
        """``dec.decided_at``, or now when it lies further ahead than ``worker.decision_max_future_s``."""
        now = datetime.now(timezone.utc)
        if dec.decided_at <= now + timedelta(seconds=self.settings.worker.decision_max_future_s):
            return dec.decided_at
        DECISIONS.labels("clamped").inc()
        log.warning("future-dated decision taken as decided now", article_id=dec.article_id,
                    decided_at=dec.decided_at.isoformat(), moderator=dec.moderator)
        return now

    def _apply_in(self, router: MemoryRouter, dec: ModeratorDecision, at: datetime) -> Outcome | None:
        """Apply to the article's point in ``router``'s collections; None when it is not there."""
        found = router.find(dec.article_id, with_vectors=True)
        if found is None:
            return None
        lang, point = found
        if dec.undoes is not None:
            return self._undo_in(router, lang, point, dec)
        if dec.decided_at.isoformat() in point.payload.get("undone", ()):
            return "stale"  # taken back by an undo: never applied again
        previous = decision_time(point.payload)
        limit = datetime.now(timezone.utc) + timedelta(seconds=self.settings.worker.decision_max_future_s)
        if previous is not None and previous <= limit and previous > at:  # a stored future date is no order
            return "stale"
        labels = tuple(dec.accepted_labels)
        before = {k: point.payload[k] for k in DECISION_FIELDS if k in point.payload}
        payload = {**point.payload, "status": "labelled" if labels else "reviewed", "decided_at": at.isoformat(),
                   "moderator": dec.moderator, "rejected_labels": list(dec.rejected_labels),
                   "before": {**before, "labels": list(point.labels)}}
        payload.pop("decided_at_claimed", None)
        if at != dec.decided_at:
            payload["decided_at_claimed"] = dec.decided_at.isoformat()
        router.memory(lang).upsert([dec.article_id], point.vector[None, :], [labels], [payload])
        return "applied"

    def _undo_in(self, router: MemoryRouter, lang: str, point, dec: ModeratorDecision) -> Outcome:
        """Take back the decision ``dec.undoes`` on ``point`` (see the module docstring): ``applied`` (now, or
        already), ``stale`` when a later decision replaced it or it was never applied."""
        undoes = dec.undoes.isoformat() if dec.undoes is not None else ""
        payload = point.payload
        undone = list(payload.get("undone") or ())
        if undoes in undone:
            return "applied"  # redelivered
        if undoes not in (payload.get("decided_at"), payload.get("decided_at_claimed")) or "before" not in payload:
            return "stale"  # a later decision stands, or the state before it is not known (undone already once)
        before = dict(payload["before"])
        labels = tuple(before.pop("labels", ()))
        restored = {k: v for k, v in payload.items() if k not in (*DECISION_FIELDS, "before")}
        restored.update({**before, "undone": [*undone, undoes][-MAX_UNDONE:]})
        if not labels:
            restored.setdefault("status", "pending")
        router.memory(lang).upsert([dec.article_id], point.vector[None, :], [labels], [restored])
        return "applied"

    def stored(self, article_ids: list[str]) -> set[str]:
        """The ids among ``article_ids`` that the memory holds (production or replaced version)."""
        found = set(self.router.find_many(article_ids))
        if self.previous is not None and len(found) < len(set(article_ids)):
            found |= set(self.previous.find_many([a for a in article_ids if a not in found]))
        return found

    def revise_copies(self, dec: ModeratorDecision) -> list[LabelProposal]:
        """Revised proposals for the near-copies of the decided article that were proposed from its old state
        (see :func:`newsmon.workers.copies.revise_copies`), in the production and the replaced version; call it
        after :meth:`apply_decision` returned ``applied``."""
        snapshot = self.registry.snapshot()
        out: dict[str, LabelProposal] = {}
        for router in (self.router, self.previous):
            if router is None:
                continue
            with router.write_lock:
                found = router.find(dec.article_id)
                if found is None:
                    continue
                lang, original = found
                inherited = inherited_labels(original)
                if inherited is None:  # not decided (any more): nothing to pass on
                    continue
                labels = self.registry.apply(inherited, snapshot)[:self.settings.limits.proposal_labels]
                for p in revise_copies(router, lang, original, labels, dec.decided_at.isoformat()):
                    out.setdefault(p.article_id, p)
        return list(out.values())
