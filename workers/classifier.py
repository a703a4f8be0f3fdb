"""The classifier worker: ``articles`` -> :class:`~newsmon.workers.pipeline.ArticlePipeline` ->
``label-proposals``.

The worker moves messages: it hands each micro-batch to the pipeline's stages (validate -> near-duplicate
check -> embed -> retrieve and score -> label rules -> store pending point -> emit), dead-letters what
validation rejects, produces the proposals and marks the messages done; committing offsets and the error policy are
:class:`~newsmon.workers.base.BatchWorker`'s.

For every proposed article the embedding is kept in the knowledge memory as a *pending* point before the
proposal is produced, so a moderator decision on it never needs the model again. A near-copy of an article
already seen gets ``duplicate_of`` and what its original passes on (see :mod:`newsmon.workers.copies`) without a
model call.
"""

from __future__ import annotations

from confluent_kafka import Message

from newsmon.shared.classifier import Classifier
from newsmon.shared.config import Settings
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.schemas import DeadLetterStage
from newsmon.workers.base import BatchWorker, DependencyDown, probe_ok
from newsmon.workers.kafka_io import Outbox
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.observability import ARTICLES, PROPOSALS_PER_ARTICLE
from newsmon.workers.pipeline import ArticlePipeline
from newsmon.workers.policy import switch_model


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

    def probe(self) -> bool:
        return probe_ok(self.name, self.pipeline.check_dependencies)

    def handle_batch(self, msgs: list[Message], outbox: Outbox) -> None:
        p = self.pipeline
        self.at(DeadLetterStage.MODEL_SWITCH)
        switch_model(self, p.follow_promotion)
        self.at(DeadLetterStage.VALIDATE)
        batch, rejected = p.validate(msgs)
        for m, exc in rejected:
            self.reject(outbox, m, exc.code, exc.reason)
            ARTICLES.labels("dead_letter").inc()
        if not batch.items:
            return
        p.propose(batch, self.at)  # near-duplicates, embed, retrieve and score, label rules, store pending points
        self.at(DeadLetterStage.EMIT)
        for m, proposal in p.emit(batch):
            outbox.produce(m, self.settings.kafka.topic_proposals, proposal.kafka_key(), proposal.to_bytes())
            outbox.done(m)
            ARTICLES.labels("duplicate" if proposal.duplicate_of else "proposed").inc()
            PROPOSALS_PER_ARTICLE.observe(len(proposal.labels))
        p.observe(batch)


__all__ = ["ClassifierWorker", "DependencyDown"]
