"""The classifier worker: ``articles`` -> validate -> near-duplicate check -> embed -> memory search ->
RAE-XMC -> ``label-proposals``.

For every proposed article the embedding is kept in the knowledge memory as a *pending* point (no labels,
``status = "pending"``, the proposal in its payload) before the proposal is produced, so a moderator decision
on it never needs the model again. A near-copy of an article already seen gets ``duplicate_of`` and its
original's labels (confirmed ones when moderated, else the original's proposal) without a model call; its
pending point reuses the original's vector.

Invalid events (not JSON, schema violations, unknown ``schema_version``, empty text, larger than
``worker.max_message_bytes``) go to ``articles.dlq`` with the reason; the worker carries on.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import numpy as np
import structlog
from confluent_kafka import Message

from newsmon.schemas.events import (ArticleEvent, InvalidEvent, LabelProposal, NeighbourRef, ProposedLabel, Timings,
                            parse_event)
from newsmon.shared.classifier import TEXT_PAYLOAD_CHARS, Classifier
from newsmon.shared.config import Settings
from newsmon.shared.memory import SearchFilter, copy_missing
from newsmon.workers.base import BatchWorker, DependencyDown
from newsmon.workers.kafka_io import Outbox, dead_letter
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import ARTICLES, BATCH_SECONDS, BATCH_SIZE, PROPOSALS_PER_ARTICLE

log = structlog.get_logger(__name__)


class ClassifierWorker(BatchWorker):
    """Consumer group ``kafka.classifier_group`` on ``kafka.topic_articles``.

    Args:
        settings: all settings; classifier: encoder + memory router; dedup: a
            :class:`shared.dedup.NearDuplicateIndex` (Redis-backed when replicas share it); registry: the label
            registry (renames, retired labels).
    """

    name = "classifier"

    def __init__(self, settings: Settings, classifier: Classifier, dedup, registry: LabelRegistry,
                 instance: str | None = None):
        super().__init__(settings, settings.kafka.classifier_group, [settings.kafka.topic_articles], instance)
        self.clf = classifier
        self.dedup = dedup
        self.registry = registry
        self._promotion_seen: str | None = None

    # -- model promotion ----------------------------------------------------------------------------
    def maybe_switch_model(self) -> bool:
        """Between batches: when the nightly job promoted another model, load it, copy into its collections
        the points stored since the memory was re-embedded (pending articles, later decisions), and use it
        from the next batch on. Returns whether the model changed."""
        from newsmon.shared.promotion import read_promoted

        if not self.settings.encoder.follow_promoted:
            return False
        rec = read_promoted(self.settings)
        version = rec.get("model_version") if rec else None
        if version is None or version == self._promotion_seen or version == self.clf.model_version:
            self._promotion_seen = version
            return False
        started = time.perf_counter()
        new = Classifier(self.settings)
        copied = copy_missing(self.clf.router, new.router, new.encoder)
        old, self.clf = self.clf, new
        old.encoder.close()
        self._promotion_seen = version
        log.info("switched to the promoted model", old=old.model_version, new=new.model_version,
                 caught_up=copied, seconds=round(time.perf_counter() - started, 1))
        return True

    # -- health -----------------------------------------------------------------------------------
    def probe(self) -> bool:
        try:
            for lang in self.clf.router.languages(refresh=True)[:1]:
                self.clf.memory(lang).count(SearchFilter(labelled=True))
            self.registry.snapshot()
            self.dedup.count()
            return True
        except Exception as exc:  # noqa: BLE001
            log.info("probe failed", worker=self.name, error=f"{type(exc).__name__}: {exc}")
            return False

    # -- one micro-batch --------------------------------------------------------------------------
    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        self.call("model switch", self.maybe_switch_model)
        w = self.settings.worker
        self.clf.router.new_batch()  # the language collections are listed again, at most once for this batch
        t_start = time.perf_counter()
        BATCH_SIZE.observe(len(msgs))
        valid: list[tuple[Message, ArticleEvent, str]] = []
        for m in msgs:
            raw = m.value()
            if raw is not None and len(raw) > w.max_message_bytes:
                dead_letter(outbox, m, f"too large: {len(raw)} bytes > worker.max_message_bytes "
                                       f"{w.max_message_bytes}", self.instance)
                ARTICLES.labels("dead_letter").inc()
                continue
            try:
                ev = parse_event(ArticleEvent, raw)
            except InvalidEvent as exc:
                dead_letter(outbox, m, str(exc.reason), self.instance)
                ARTICLES.labels("dead_letter").inc()
                continue
            valid.append((m, ev, ev.text[:w.max_text_chars]))
        if not valid:
            return

        snapshot = self.call("label registry", self.registry.snapshot)

        def relabel(labels):
            return self.registry.apply(labels, snapshot)

        # near-duplicates, before any model call
        t0 = time.perf_counter()
        dups: dict[int, tuple[str, float, object]] = {}
        for i, (m, ev, text) in enumerate(valid):
            hit = self.call("near-duplicate index", self.dedup.check_and_add, ev.article_id, text)
            if hit is not None:
                found = self.call("memory", self.clf.router.find, hit[0], True)
                if found is not None:
                    dups[i] = (hit[0], hit[1], found)
        dedup_s = time.perf_counter() - t0
        fresh = [i for i in range(len(valid)) if i not in dups]

        embed_s = search_s = 0.0
        proposals: dict[int, list[ProposedLabel]] = {}
        vectors = None
        if fresh:
            t0 = time.perf_counter()
            vectors = self.call("encoder", self.clf.encoder.encode, [valid[i][2] for i in fresh], "query")
            embed_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            props, _ = self.call("memory search", self.clf.propose, [valid[i][2] for i in fresh],
                                 [valid[i][1].lang for i in fresh], vectors=vectors,
                                 exclude=[valid[i][1].article_id for i in fresh], relabel=relabel)
            search_s = time.perf_counter() - t0
            for i, p in zip(fresh, props):
                proposals[i] = [ProposedLabel(label=x.label, score=float(x.score), neighbours=[
                    NeighbourRef(article_id=a, similarity=float(np.clip(s, -1, 1))) for a, s in x.neighbours])
                    for x in p.labels]
        for i, (orig, jaccard, (lang, point)) in dups.items():
            labels = point.labels if point.labels else tuple(point.payload.get("proposed_labels", ()))
            proposals[i] = [ProposedLabel(label=lb, score=float(jaccard),
                                          neighbours=[NeighbourRef(article_id=orig, similarity=float(jaccard))])
                            for lb in relabel(labels)]

        # pending points first: a moderator can only decide on a proposal that was produced after this
        self.call("memory write", self._store_pending, valid, fresh, vectors, dups, proposals)

        now = datetime.now(timezone.utc)
        total_s = time.perf_counter() - t_start
        for i, (m, ev, _text) in enumerate(valid):
            ts_type, ts = m.timestamp()
            queue_ms = max(0.0, now.timestamp() * 1000 - ts) if ts and ts > 0 else 0.0
            lang = dups[i][2][0] if i in dups else ev.lang
            out = LabelProposal(
                article_id=ev.article_id, labels=proposals.get(i, []),
                duplicate_of=dups[i][0] if i in dups else None, model_version=self.clf.model_version,
                memory_version=self.clf.collection(lang),
                timings=Timings(batch_size=len(msgs), queue_ms=queue_ms, dedup_ms=1000 * dedup_s,
                                embed_ms=1000 * embed_s, search_ms=1000 * search_s, score_ms=0.0,
                                total_ms=1000 * total_s),
                produced_at=now)
            outbox.produce(m, self.settings.kafka.topic_proposals, out.kafka_key(), out.to_bytes())
            outbox.done(m)
            ARTICLES.labels("duplicate" if i in dups else "proposed").inc()
            PROPOSALS_PER_ARTICLE.observe(len(out.labels))
        BATCH_SECONDS.labels("dedup").observe(dedup_s)
        BATCH_SECONDS.labels("embed").observe(embed_s)
        BATCH_SECONDS.labels("search_score").observe(search_s)
        BATCH_SECONDS.labels("total").observe(time.perf_counter() - t_start)

    def _store_pending(self, valid, fresh, vectors, dups, proposals) -> None:
        """Upsert pending points (no labels) for articles not yet in the memory; moderated points stay."""
        rows: dict[str, list] = {}
        for pos, i in enumerate(fresh):
            ev = valid[i][1]
            rows.setdefault(ev.lang, []).append((ev, vectors[pos], None, valid[i][2]))
        for i, (orig, _j, (lang, point)) in dups.items():
            if point.vector is not None:
                rows.setdefault(lang, []).append((valid[i][1], point.vector, orig, valid[i][2]))
        index = {valid[i][1].article_id: i for i in range(len(valid))}
        with self.clf.router.write_lock:
            for lang, items in rows.items():
                mem = self.clf.memory(lang)
                existing = mem.get([it[0].article_id for it in items])
                keep = [it for it, p in zip(items, existing)
                        if p is None or (not p.labels and "decided_at" not in p.payload)]
                if not keep:
                    continue
                mem.upsert(
                    [ev.article_id for ev, _v, _o, _t in keep],
                    np.stack([np.asarray(v, dtype=np.float32) for _e, v, _o, _t in keep]),
                    [() for _ in keep],
                    [{"lang": lang, "status": "pending", "title": ev.title, "outlet": ev.outlet,
                      "country": ev.country, "published_at": ev.published_at.isoformat(),
                      "duplicate_of": o, "text": text[:TEXT_PAYLOAD_CHARS],
                      "proposed_labels": [x.label for x in proposals.get(index[ev.article_id], [])]}
                     for ev, _v, o, text in keep])


__all__ = ["ClassifierWorker", "DependencyDown"]
