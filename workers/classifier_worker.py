"""The classifier worker: ``articles`` -> :class:`~newsmon.workers.pipeline.ArticlePipeline` ->
``label-proposals``.

The worker moves messages: it hands each micro-batch to the pipeline's stages (validate -> near-duplicate
check -> embed -> retrieve and score -> label rules -> store pending point -> emit), dead-letters what
validation rejects, produces the proposals and marks the messages done; committing offsets and the error policy are
:class:`~newsmon.workers.base.BatchWorker`'s.

For every proposed article the embedding is kept in the knowledge memory as a *pending* point before the
proposal is produced, so a moderator decision on it never needs the model again. A near-copy of an article
already seen gets ``duplicate_of``, and the original's decided labels without a model call once a moderator decided
on it (see :mod:`newsmon.workers.copies`).

One batch is in flight: the next batch is embedded while the current one is finished (:mod:`newsmon.workers.ahead`
says what stays as without the overlap: offsets, near-copies, model switches, errors).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import structlog

from confluent_kafka import Message, TopicPartition

from newsmon.shared.classifier import Classifier
from newsmon.shared.config import Settings
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.schemas import DeadLetterStage
from newsmon.workers.ahead import Ahead, prepare, take
from newsmon.workers.base import BatchWorker, DependencyDown, probe_ok
from newsmon.workers.checkpoint import send_back
from newsmon.workers.kafka_io import Outbox, record_lag
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import ARTICLES, PROPOSALS_PER_ARTICLE
from newsmon.workers.pipeline import ArticlePipeline
from newsmon.workers.policy import switch_model

log = structlog.get_logger(__name__)


class ClassifierWorker(BatchWorker):
    """Consumer group ``kafka.classifier_group`` on ``kafka.topic_articles``.

    Args:
        settings: all settings; classifier: encoder + memory router; dedup: the near-duplicate index
            (Redis-backed when replicas share it); registry: the label registry (definitions, renames, retired
            labels).
    """

    name = "classifier"

    def __init__(self, settings: Settings, classifier: Classifier, dedup: NearDuplicateIndex,
                 registry: LabelRegistry, instance: str | None = None):
        super().__init__(settings, settings.kafka.classifier_group, [settings.kafka.topic_articles], instance)
        self.pipeline = ArticlePipeline(settings, classifier, dedup, registry, call=self.call)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="newsmon-embed")
        self._inflight: Ahead | None = None  # consumed and being embedded; finished at the next step
        self._current: Ahead | None = None  # the batch handle_batch is finishing
        self._revoked = False  # partitions revoked or lost since the batch in flight was consumed

    def probe(self) -> bool:
        """The pipeline's dependencies answer and every language's calibration record parses (a record that does
        not is a pause until it is fixed, never a dead letter per article)."""
        return probe_ok(self.name, self._check)

    def _check(self) -> None:
        self.pipeline.check_dependencies()
        clf = self.pipeline.classifier
        for lang in clf.router.languages():
            clf.calibrations.read(clf.collection(lang))

    def warm_up(self) -> None:
        """Each language memory's record and its score components' models loaded before the first consume
        (:meth:`Scorer.warm_up <newsmon.shared.scoring.scorer.Scorer.warm_up>`): a started worker's first batch
        costs what a warm one does. A language whose record or models cannot be loaded is logged and left to its
        first batch, which meets the failure under the error policy (a pause, never a dead letter per article)."""
        clf = self.pipeline.classifier
        try:
            langs = clf.router.languages()
        except Exception as exc:  # noqa: BLE001 - the memory unreachable: the first batch meets it under the policy
            log.warning("records not warmed up before the first batch", worker=self.name,
                        error=f"{type(exc).__name__}: {exc}")
            return
        for lang in langs:
            t0 = time.perf_counter()
            try:
                res = clf.scorer.warm_up(lang)
            except Exception as exc:  # noqa: BLE001 - the first batch meets it under the error policy
                log.warning("record not warmed up before the first batch", worker=self.name, lang=lang,
                            error=f"{type(exc).__name__}: {exc}")
                continue
            log.info("record warmed up before the first batch", worker=self.name, lang=lang, record=res.record,
                     seconds=round(time.perf_counter() - t0, 2))

    def step(self, msgs: list[Message], stop: threading.Event) -> None:
        """Prepare the batch just consumed (its embedding starts, :mod:`newsmon.workers.ahead`), then finish the
        one in flight (near-copies, search, scoring, rules, pending points, produce, commit) while the new one
        is embedded; the new one stays in flight until the next step (at most ``batch_max_ms`` later)."""
        if self._revoked:  # the group moved: what is in flight is read again from the committed offsets
            self._inflight, self._revoked = None, False
        nxt = self._prepare(msgs, stop) if msgs else None
        cur, self._inflight = self._inflight, None
        if cur is not None and cur.consumer is self._consumer:
            self._current = cur
            try:
                clean, rewound = self._process(cur.msgs, stop)
            finally:
                self._current = None
            self.batches += 1
            record_lag(self._consumer, self.group)
            if nxt is not None and (not clean or self._revoked):
                send_back(self._consumer, nxt.msgs, rewound, read_by=nxt.consumer)
                nxt, self._revoked = None, False
        self._inflight = nxt
        if stop.is_set() and nxt is None:
            self._executor.shutdown(wait=True)

    def _prepare(self, msgs: list[Message], stop: threading.Event) -> Ahead:
        """:func:`~newsmon.workers.ahead.prepare` in a watched thread (:meth:`~newsmon.workers.watch.Watcher.run`):
        over the stage budget, the batch is left unprepared (handled from its messages in its turn, under the
        budget and the policy)."""
        consumer, box = self._consumer, {}

        def run(_run) -> None:
            box["ahead"] = prepare(self.pipeline, msgs, consumer, self._executor.submit)
        error = self.watcher.run(run, consumer, stop)
        return box["ahead"] if error is None and "ahead" in box else Ahead(msgs, consumer)

    def _group_change(self, event: str, partitions: list[TopicPartition]) -> None:
        super()._group_change(event, partitions)
        if event in ("revoked", "lost"):
            self._revoked = True

    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        p = self.pipeline
        with self.stage(DeadLetterStage.MODEL_SWITCH):
            switch_model(self, p.follow_promotion)
        ahead = self._current if self._current is not None and self._current.msgs is msgs else None
        # the embedding started ahead is bounded per article (max_length tokens): slow means busy, not poisoned
        with self.stage(DeadLetterStage.EMBED, messages=len(msgs)):
            prepared = take(ahead, p) if ahead is not None else None  # after a model switch: its vectors dropped
        with self.stage(DeadLetterStage.VALIDATE):
            batch, rejected = prepared if prepared is not None else p.validate(msgs)
            rejected = [*rejected, *p.refuse_unknown_languages(batch)]
            for m, exc in rejected:
                self.refuse(outbox, m, exc, DeadLetterStage.VALIDATE)
                ARTICLES.labels("dead_letter").inc()
        if not batch.items:
            return
        p.propose(batch, self.stage)  # near-duplicates, embed, retrieve and score, label rules, store pending points
        with self.stage(DeadLetterStage.EMIT):
            for m, proposal in p.emit(batch):
                outbox.produce(m, self.settings.kafka.topic_proposals, proposal.kafka_key(), proposal.to_bytes())
                outbox.done(m)
                ARTICLES.labels("duplicate" if proposal.duplicate_of else "proposed").inc()
                PROPOSALS_PER_ARTICLE.observe(len(proposal.labels))
            p.observe(batch)


__all__ = ["ClassifierWorker", "DependencyDown"]
