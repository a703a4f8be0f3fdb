"""The classifier worker's named stages (ArticlePipeline) on the real embedded Qdrant engine, the real e5-small
weights and real Slovene news; Kafka messages are real confluent-kafka ``Message`` objects (no broker needed
at this level)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from confluent_kafka import Message

from newsmon.demo import article_event
from newsmon.shared.data import load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.pipeline import ArticlePipeline


class Counting:
    """A knowledge memory that counts the calls made to it (round trips in server mode)."""

    def __init__(self, memory):
        self.memory = memory
        self.calls: dict[str, int] = {}

    def __getattr__(self, name):
        attr = getattr(self.memory, name)
        if not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)
        return counted


def message(value: bytes, offset: int, key: bytes | None = None) -> Message:
    return Message(topic="articles", partition=0, offset=offset, key=key, value=value,
                   timestamp=(1, int(time.time() * 1000)))


@pytest.fixture(scope="module")
def corpus(shared_data):
    return load_corpus(shared_data / "sentinews_sl")


def test_article_stages_in_order_with_few_memory_calls(memory_classifier, corpus):
    classifier, settings = memory_classifier, memory_classifier.settings
    classifier.add_articles(corpus.split("train")[:60])
    p = ArticlePipeline(settings, classifier, NearDuplicateIndex(), LabelRegistry())
    events = [article_event(a) for a in corpus.split("test")[:3]]
    msgs = [message(e.to_bytes(), i, e.kafka_key()) for i, e in enumerate(events)] + [message(b"{broken", 3)]
    sl = classifier.router._memories["sl"] = Counting(classifier.router._memories["sl"])

    batch, rejected = p.validate(msgs)
    assert [m.offset() for m, _ in rejected] == [3] and "invalid JSON" in rejected[0][1].reason
    assert [it.event.article_id for it in batch.items] == [e.article_id for e in events]
    p.near_duplicates(batch)
    assert all(it.duplicate is None for it in batch.items)
    p.embed(batch)
    assert all(it.vector.shape == (classifier.encoder.dim,) for it in batch.items)
    p.retrieve_and_score(batch)
    assert any(it.proposal.labels for it in batch.items)
    assert all(n.article_id.startswith("sl-") for it in batch.items for x in it.proposal.labels for n in x.neighbours)
    p.store_pending(batch)
    out = p.emit(batch)
    assert [m.offset() for m, _ in out] == [0, 1, 2]
    for (m, proposal), it in zip(out, batch.items):
        assert proposal.article_id == it.event.article_id and proposal.duplicate_of is None
        assert proposal.model_version == classifier.model_version
        assert proposal.memory_version == classifier.collection("sl")
        assert proposal.timings.batch_size == 4 and proposal.timings.embed_ms > 0
        # what a moderator needs to see why: the neighbours' titles, and the best labels below the threshold
        assert all(n.title for x in proposal.labels + proposal.candidates for n in x.neighbours)
        assert proposal.candidates and all(0 < x.score <= settings.scoring.threshold for x in proposal.candidates)
        assert proposal.scoring.threshold == settings.scoring.threshold
    # one batched search (its candidates without payloads) and one read of the neighbours the fusion kept, no count
    # (the language has labelled articles), one get + one upsert for pending points
    assert sl.calls == {"search": 1, "points": 1, "get": 1, "upsert": 1}
    pending = classifier.memory("sl").get([e.article_id for e in events])
    assert all(pt.labels == () and pt.payload["status"] == "pending" for pt in pending)
    assert [pt.payload["proposed_labels"] for pt in pending] == [[x.label for x in it.proposal.labels]
                                                                 for it in batch.items]

    # a near-copy of the first article, which nobody decided on: linked to it, scored on its own (its own vector,
    # a model call: an undecided proposal is never passed on, issue 43 item 2)
    copy = events[0].model_copy(update={"article_id": "copy-of-first"})
    batch2, _ = p.validate([message(copy.to_bytes(), 10)])
    p.near_duplicates(batch2)
    dup = batch2.items[0].duplicate
    assert dup is not None and dup.original_id == events[0].article_id and dup.jaccard >= 0.6
    p.embed(batch2)
    assert batch2.items[0].vector is not None
    p.retrieve_and_score(batch2)
    assert [x.label for x in batch2.items[0].proposal.labels] == pending[0].payload["proposed_labels"]
    assert all(x.source == "retrieval" for x in batch2.items[0].proposal.labels)
    p.store_pending(batch2)
    (_, proposal), = p.emit(batch2)
    assert proposal.duplicate_of == events[0].article_id and proposal.scoring is not None
    stored = classifier.memory("sl").get(["copy-of-first"], with_vectors=True)[0]
    assert stored.payload["duplicate_of"] == events[0].article_id
    np.testing.assert_allclose(stored.vector, batch2.items[0].vector, atol=1e-6)


def test_a_meaningless_text_gets_no_label_and_the_reason(memory_classifier, corpus):
    """1 MB of one letter was proposed the corpus's majority label at 0.413: now the pipeline proposes nothing
    from retrieval for it and says why, and a real article of the same batch is proposed as before."""
    from newsmon.schemas import ArticleEvent

    classifier, settings = memory_classifier, memory_classifier.settings
    classifier.add_articles(corpus.split("train")[:60])
    p = ArticlePipeline(settings, classifier, NearDuplicateIndex(), LabelRegistry())
    real = article_event(corpus.split("test")[0])
    junk = ArticleEvent(**{**real.model_dump(), "article_id": "junk-1", "title": None, "body": "a" * 1_000_000})
    msgs = [message(e.to_bytes(), i, e.kafka_key()) for i, e in enumerate([junk, real])]
    batch, rejected = p.validate(msgs)
    assert not rejected
    p.propose(batch)
    (_, got_junk), (_, got_real) = p.emit(batch)
    assert got_junk.labels == [] and got_junk.abstained == "too few real words (0 < 2)"
    assert got_junk.candidates  # the moderator still sees the best labels below
    assert got_real.abstained is None and got_real.candidates
