"""One batch in flight: the classifier embeds batch N+1 while it finishes batch N.

The encoder is the stream's limit on a CPU, so it should never wait for the rest of the work around it: while
batch N is searched, scored, stored and produced and its offsets committed, batch N+1 is already consumed,
validated, checked against the near-duplicate index, and embedded by a thread of its own (ONNX Runtime and
torch release the GIL in their kernels). :class:`Ahead` holds such a batch; the worker finishes it at its next
step (:meth:`newsmon.workers.classifier_worker.ClassifierWorker.step`).

What stays as without the overlap:

- **Offsets.** N+1 is committed only after its own outputs are acknowledged, after N's commit. When N does not
  end in a clean commit (a pause, an unacknowledged output, a failed commit), N+1 is dropped and every one of
  its partitions is sent back to its first message (:func:`newsmon.workers.checkpoint.send_back`), so nothing
  consumed is skipped; when the consumer was replaced or its partitions revoked, N+1 is dropped and read again
  from the committed offsets.
- **Near-copies.** Only the index is checked ahead (it needs no memory call); the originals are read from the
  memory in N+1's own turn, after N's pending points are stored. The articles with an index hit are embedded
  then, unless their original's labels were decided (a copy of an undecided original is scored on its own).
- **Model switches.** Vectors embedded ahead by a model that a promotion has replaced in the meantime are
  dropped and embedded again.
- **Errors.** Preparing ahead never fails the loop: an error there leaves the batch to be handled in its turn
  from its messages, under the error policy; an embedding ahead that failed is embedded again in the ``embed``
  stage (retried, classified, dead-lettered or paused as any embedding).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog
from confluent_kafka import Consumer, Message

from newsmon.workers.pipeline import ArticleBatch, ArticleItem, ArticlePipeline

log = structlog.get_logger(__name__)


@dataclass
class Ahead:
    """A batch consumed and prepared while the previous one is finished.

    Attributes:
        msgs: the consumed messages; consumer: the consumer that read them; batch / rejected: what
        ``validate`` made of them (None: preparing failed, the batch is handled from its messages in its turn);
        classifier / items / future: the embedding started ahead (the classifier whose encoder runs it, the
        articles it covers, a future of ``(vectors, seconds)``).
    """

    msgs: list[Message]
    consumer: Consumer
    batch: ArticleBatch | None = None
    rejected: list = field(default_factory=list)
    classifier: Any = None
    items: list[ArticleItem] = field(default_factory=list)
    future: Future | None = None


def prepare(pipeline: ArticlePipeline, msgs: list[Message], consumer: Consumer,
            submit: Callable[..., Future]) -> Ahead:
    """Validate ``msgs``, check their articles against the near-duplicate index and start embedding (through
    ``submit``, an executor's) those with no index hit. Never raises: a failure leaves ``batch`` None."""
    ahead = Ahead(msgs, consumer)
    try:
        batch, rejected = pipeline.validate(msgs)
        if batch.items:
            pipeline.index_near_copies(batch)
            items = [it for it in batch.items if id(it) not in batch.hits]
            if items:
                ahead.classifier, ahead.items = pipeline.classifier, items
                ahead.future = submit(_timed_encode, pipeline.classifier.encoder, [it.text for it in items])
        ahead.batch, ahead.rejected = batch, rejected
    except Exception as exc:  # noqa: BLE001 - handled again in its turn, under the error policy
        log.info("batch not prepared ahead; it is handled from its messages", error=f"{type(exc).__name__}: {exc}")
    return ahead


def take(ahead: Ahead, pipeline: ArticlePipeline) -> tuple[ArticleBatch, list] | None:
    """The prepared batch and its rejected messages, with the vectors embedded ahead set on its articles (when
    that embedding succeeded with the pipeline's current model); None when it was not prepared. Usable once."""
    batch, ahead.batch = ahead.batch, None
    if batch is None:
        return None
    if ahead.future is not None:
        try:
            vectors, seconds = ahead.future.result()
        except Exception as exc:  # noqa: BLE001 - the embed stage embeds these again, under the error policy
            log.warning("embedding ahead failed; the embed stage tries again", error=f"{type(exc).__name__}: {exc}")
            vectors, seconds = None, 0.0
        if vectors is not None and ahead.classifier is pipeline.classifier:
            for it, v in zip(ahead.items, vectors):
                it.vector = v
            batch.seconds["embed"] += seconds
    return batch, ahead.rejected


def _timed_encode(encoder: Any, texts: list[str]) -> tuple[np.ndarray, float]:
    """``(encoder.encode(texts, "query"), seconds)``, timed where it runs."""
    t0 = time.perf_counter()
    return encoder.encode(texts, "query"), time.perf_counter() - t0
