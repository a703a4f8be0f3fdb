"""One batch in flight (workers/ahead.py): the classifier embeds the next batch while it finishes the current one,
and the offset guarantees hold (nothing committed before its proposal is acknowledged, nothing consumed skipped).

Against the real things where it counts (the Tansu broker process, the embedded Qdrant engine, real Redis, the
real e5-small weights, real Slovene news); the send-back rule also on its own, with a recording consumer, for
the case a stream only meets by chance: a batch paused on one partition while the batch in flight holds another.
The helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition

from newsmon.shared.memory import MemoryUnavailableError
from newsmon.workers.ahead import Ahead
from newsmon.workers.checkpoint import send_back
from test_stream import (Collector, corpus, publish_articles, runtime_factory,  # noqa: F401 (fixtures)
                         wait_all_committed)


class Msg:
    """The three things the send-back rule reads of a consumed message."""

    def __init__(self, topic: str, partition: int, offset: int):
        self._tpo = (topic, partition, offset)

    def topic(self):
        return self._tpo[0]

    def partition(self):
        return self._tpo[1]

    def offset(self):
        return self._tpo[2]


class RecordingConsumer:
    def __init__(self):
        self.seeks: list[tuple[str, int, int]] = []

    def seek(self, tp: TopicPartition):
        self.seeks.append((tp.topic, tp.partition, tp.offset))


def test_a_batch_in_flight_is_sent_back_on_every_partition_its_predecessor_did_not_rewind():
    consumer = RecordingConsumer()
    ahead = Ahead([Msg("a", 0, 12), Msg("a", 0, 13), Msg("a", 1, 40), Msg("a", 1, 41), Msg("a", 2, 7)], consumer)
    # the batch before it paused on partition 0 (sent back to its own first unfinished message, before 12)
    send_back(consumer, ahead.msgs, {("a", 0)}, read_by=ahead.consumer)
    assert sorted(consumer.seeks) == [("a", 1, 40), ("a", 2, 7)]
    # a failed commit sends nothing back: every partition of the batch in flight goes back to its first message
    consumer.seeks.clear()
    send_back(consumer, ahead.msgs, set(), read_by=ahead.consumer)
    assert sorted(consumer.seeks) == [("a", 0, 12), ("a", 1, 40), ("a", 2, 7)]
    # read by a consumer since replaced: dropped, the new consumer starts from the committed offsets
    other = RecordingConsumer()
    send_back(other, ahead.msgs, set(), read_by=ahead.consumer)
    assert other.seeks == []


@pytest.mark.slow
def test_the_next_batch_is_embedded_while_the_current_one_is_finished(runtime_factory, corpus, monkeypatch):
    s, rt = runtime_factory(batch_max_messages=4)
    worker = next(w for w in rt.workers if w.name == "classifier")
    encoder = worker.pipeline.classifier.encoder
    real_encode, real_handle = encoder.encode, worker.handle_batch
    encodes: list[tuple[str, float, float]] = []
    handled: list[tuple[float, float]] = []

    def encode(texts, role="passage", progress=False):
        t0 = time.monotonic()
        try:
            out = real_encode(texts, role, progress)
            time.sleep(0.3)  # a real encoder's time for a batch: here the embeddings are cached, a few ms
            return out
        finally:
            encodes.append((threading.current_thread().name, t0, time.monotonic()))

    def handle_batch(msgs, outbox):
        t0 = time.monotonic()
        try:
            return real_handle(msgs, outbox)
        finally:
            handled.append((t0, time.monotonic()))

    monkeypatch.setattr(encoder, "encode", encode)
    monkeypatch.setattr(worker, "handle_batch", handle_batch)
    articles = corpus.split("test")[:16]
    publish_articles(s, articles)  # all there before the worker starts: every consume finds a full batch
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    try:
        out.wait_for(lambda c: {a.id for a in articles} <= set(c.proposals()), 240, "every proposal")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles, timeout_s=60)
        props = out.proposals()
        assert all(len(props[a.id]) == 1 for a in articles)  # no failure: no repeat
        ahead = [(t0, t1) for name, t0, t1 in encodes if name.startswith("newsmon-embed")]
        assert len(ahead) >= 3, encodes  # the batches were embedded ahead, in the embedding thread
        # at least one embedding ran while another batch was being finished (searched, stored, produced); one
        # after the other, they would never overlap (the start alone is no criterion: the next embedding may be
        # handed over a few ms before the batch's finish begins)
        assert any(a0 < h1 and h0 < a1 for a0, a1 in ahead for h0, h1 in handled), (encodes, handled)
    finally:
        out.close()


@pytest.mark.slow
def test_a_transient_failure_with_a_batch_in_flight_loses_and_skips_nothing(runtime_factory, corpus, monkeypatch):
    """A memory outage on one batch pauses the worker while the next batch is in flight; after it, every article
    is proposed and every offset committed: the batch in flight was consumed again, not skipped."""
    s, rt = runtime_factory(batch_max_messages=3, pause_backoff_s=0.5)
    worker = next(w for w in rt.workers if w.name == "classifier")
    real_retrieve, failures = worker.pipeline.retrieve_and_score, {"left": 1, "at_batch": 2}
    calls = {"n": 0}

    def retrieve_and_score(batch):
        calls["n"] += 1
        if calls["n"] >= failures["at_batch"] and failures["left"]:
            failures["left"] -= 1
            raise MemoryUnavailableError("connection refused (one outage)")
        return real_retrieve(batch)

    monkeypatch.setattr(worker.pipeline, "retrieve_and_score", retrieve_and_score)
    articles = corpus.split("test")[:18]
    publish_articles(s, articles)
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    try:
        out.wait_for(lambda c: {a.id for a in articles} <= set(c.proposals()), 240, "every proposal")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles, timeout_s=60)
        assert failures["left"] == 0 and worker.pauses >= 1
    finally:
        out.close()
