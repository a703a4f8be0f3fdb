"""Proposals for articles that do not come from the articles topic -- ``POST /v1/suggest`` (the HTTP API) and
``newsmon suggest`` (the CLI) -- through the classifier worker's own stages, so every path proposes alike.

One way for all of them (:func:`validated` then :func:`proposals_of`):

1. the article events are read as the worker reads its messages (:meth:`ArticlePipeline.validate
   <newsmon.workers.pipeline.ArticlePipeline.validate>`: the size bound ``worker.max_message_bytes``, the schema,
   the text cleaned and cut to ``worker.max_text_chars``), and one in a language the knowledge memory has no
   collection for is refused (``refuse_unknown_languages``);
2. :meth:`~newsmon.workers.pipeline.ArticlePipeline.propose` runs the near-duplicate check, the embedding,
   retrieval and scoring with the neighbours' labels mapped through the **label registry** (renames, retired
   labels), the **label rules** (the analysts' KwEs: evidence, rule-only proposals, refused proposals, rule
   candidates) and, for a kept batch, the pending points;
3. :meth:`~newsmon.workers.pipeline.ArticlePipeline.emit` builds each :class:`~newsmon.schemas.LabelProposal` as the
   worker produces it on the topic.

The label registry and the near-duplicate index are the workers' (:func:`open_label_registry`,
:func:`open_near_duplicates`): Redis with ``worker.redis_url``; without it the registry the embedded memory updater
keeps in ``<home>/state/labels.json`` (so a rule defined through the API of ``newsmon serve`` is applied by a later
``newsmon suggest``) and an index of this process only.

``keep`` (:attr:`~newsmon.workers.pipeline.ArticleBatch.keep`): the API keeps what it proposes (indexed as a
near-duplicate original, stored as a pending point, so a moderator decision on it works); ``newsmon suggest`` only
answers its caller: it looks the article up in the near-duplicate index (a near-copy of a decided article gets the
original's labels, as in the worker) and writes nothing.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Message

from newsmon.schemas import InvalidEvent, LabelProposal
from newsmon.shared.classifier import Classifier
from newsmon.shared.config import Settings, reveal
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.workers.labels import LabelRegistry, open_registry
from newsmon.workers.local_state import FileLabelRegistry
from newsmon.workers.pipeline import ArticleBatch, ArticlePipeline

__all__ = ["article_messages", "open_label_registry", "open_near_duplicates", "open_pipeline", "proposals_of",
           "validated"]


def open_label_registry(settings: Settings) -> LabelRegistry:
    """The label registry the workers of ``settings`` read: in Redis with ``worker.redis_url`` (shared by every
    replica), else the one the embedded memory updater keeps in ``<home>/state/labels.json``
    (:class:`~newsmon.workers.local_state.FileLabelRegistry`; read here, written only by a change).

    Raises:
        ValueError: the registry file does not parse (it names the file).
    """
    w = settings.worker
    if w.redis_url:
        return open_registry(reveal(w.redis_url), f"{w.redis_namespace}:labels")
    return FileLabelRegistry(settings.home / "state" / "labels.json")


def open_near_duplicates(settings: Settings) -> NearDuplicateIndex:
    """The near-duplicate index of ``settings``: in Redis with ``worker.redis_url`` (shared by every replica), else
    one of this process only (``worker.dedup_threshold``, ``worker.dedup_boilerplate_min_docs``)."""
    w = settings.worker
    return NearDuplicateIndex(threshold=w.dedup_threshold, redis_url=reveal(w.redis_url),
                              boilerplate_min_docs=w.dedup_boilerplate_min_docs, namespace=f"{w.redis_namespace}:dedup")


def open_pipeline(settings: Settings, classifier: Classifier | None = None) -> ArticlePipeline:
    """The classifier worker's article pipeline for ``settings``: ``classifier`` (default: the production model
    and memory), the workers' label registry and near-duplicate index; dependency calls made once
    (:func:`~newsmon.workers.pipeline.call_directly`). The registry is opened first: a registry file that does
    not parse fails before the model is loaded.

    Raises:
        ValueError: the registry file does not parse (:func:`open_label_registry`).
    """
    registry = open_label_registry(settings)
    dedup = open_near_duplicates(settings)
    return ArticlePipeline(settings, classifier or Classifier(settings), dedup, registry)


def article_messages(articles: list[dict], now_ms: int | None = None) -> list[Message]:
    """The article events (JSON objects) as the messages the worker consumes: topic ``api``, partition 0, offset
    = the article's index, timestamp ``now_ms`` (milliseconds since the epoch; default now). The value is ASCII
    JSON (``\\u`` escapes), so a lone surrogate reaches validation (refused there) instead of failing to encode."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return [Message(topic="api", partition=0, offset=i, value=json.dumps(a).encode(), timestamp=(1, now_ms))
            for i, a in enumerate(articles)]


def validated(pipeline: ArticlePipeline, articles: list[dict],
              keep: bool = True) -> tuple[ArticleBatch, list[tuple[int, InvalidEvent]]]:
    """The batch of the valid ``articles`` (article events, JSON objects) and the refused ones as ``(index,
    why)`` in order: what the worker dead-letters (too large, invalid, empty once cleaned) and an article in a
    language the memory has no collection for (reason ``unknown_language``, naming the languages there are; no
    collection is created). ``keep``: see the module docstring."""
    batch, rejected = pipeline.validate(article_messages(articles))
    rejected = [*rejected, *pipeline.refuse_unknown_languages(batch)]
    batch.keep = keep
    return batch, sorted(((m.offset() or 0, exc) for m, exc in rejected), key=lambda r: r[0])


def proposals_of(pipeline: ArticlePipeline, batch: ArticleBatch) -> list[LabelProposal]:
    """The proposals of a batch with valid articles, in batch order, through the worker's stages
    (:meth:`~newsmon.workers.pipeline.ArticlePipeline.propose`, then ``emit``).

    Raises:
        newsmon.shared.scoring.records.CalibrationUnreadable: a calibration record does not parse.
    """
    pipeline.propose(batch)
    return [p for _m, p in pipeline.emit(batch)]
