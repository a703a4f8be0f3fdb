"""Decision semantics through the stream, against the real things (the Tansu broker process, the embedded Qdrant
engine on a temp dir, real Redis, the real e5-small weights, real Slovene news): rejected labels never come
back on near-copies, a decision racing a near-copy revises it, a future-dated decision does not lock an
article, a decision sent before its article is applied when the article arrives, and a model switch in either
order of the workers loses and reverts no decision.

The helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from newsmon.demo import article_event
from newsmon.schemas import LabelDecision, ModeratorDecision, dead_letter_topic
from newsmon.shared.memory import close_all_routers, copy_missing, shared_router
from newsmon.shared.promotion import atomic_write_json, promoted_file
from newsmon.workers.runtime import build_runtime
from test_model_switch import candidate_model
from test_stream import (Collector, corpus, publish, runtime_factory, stream_settings,  # noqa: F401 (fixtures)
                         wait_all_committed)

X = "client:x"


def start(rt, name: str):
    """Start one of the runtime's workers in its own thread (the other one can be started later)."""
    w = next(w for w in rt.workers if w.name == name)
    t = threading.Thread(target=w.run, args=(rt.stop,), daemon=True)
    t.start()
    rt.threads.append(t)
    return w


def send(s, *decisions: ModeratorDecision) -> None:
    publish(s, s.kafka.topic_decisions, [(d.kafka_key(), d.to_bytes()) for d in decisions])


def decision(article_id: str, at: datetime | None = None, **actions: list[str]) -> ModeratorDecision:
    items = [LabelDecision(label=lb, action=a) for a, labels in actions.items() for lb in labels]
    return ModeratorDecision(article_id=article_id, moderator="ana", decisions=items,
                             decided_at=at or datetime.now(timezone.utc))


def wait(pred, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def labelled_proposals(s, out: Collector, corpus, n: int):
    """Publish real test articles until ``n`` of them are proposed with labels; their events and labels."""
    events = [article_event(a) for a in corpus.split("test")[:8]]
    publish(s, s.kafka.topic_articles, [(e.kafka_key(), e.to_bytes()) for e in events])
    out.wait_for(lambda c: {e.article_id for e in events} <= set(c.proposals()), 120, "the originals' proposals")
    props = out.proposals()
    found = [(e, [x.label for x in props[e.article_id][0].labels]) for e in events if props[e.article_id][0].labels]
    assert len(found) >= n
    return found[:n]


def latest(out: Collector, article_id: str):
    props = out.proposals().get(article_id, [])
    return max(props, key=lambda p: p.revision) if props else None


def test_rejected_labels_never_come_back_on_near_copies(runtime_factory, corpus):
    s, rt = runtime_factory(corpus.split("train")[:60])
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    try:
        (a, a_labels), = labelled_proposals(s, out, corpus, 1)
        send(s, decision(a.article_id, rejected=a_labels))  # the moderator rejects everything, adds nothing
        wait(lambda: updater.applied == 1, 30, "the decision")
        copy = a.model_copy(update={"article_id": f"{a.article_id}-retitled", "title": "Čisto nov naslov"})
        publish(s, s.kafka.topic_articles, [(copy.kafka_key(), copy.to_bytes())])
        out.wait_for(lambda c: copy.article_id in c.proposals(), 60, "the copy's proposal")
        p = latest(out, copy.article_id)
        assert p.duplicate_of == a.article_id and p.labels == []
    finally:
        out.close()


def test_decision_racing_a_near_copy_revises_the_copy(runtime_factory, corpus):
    """The issue's example, with the race forced: the decision on A (reject L, add X) is sent before A's text
    under a new title, but the memory updater lags behind the classifier; the copy must end with [X]."""
    s, rt = runtime_factory(corpus.split("train")[:60])
    start(rt, "classifier")
    out = Collector(s, s.kafka.topic_proposals)
    try:
        (a, a_labels), = labelled_proposals(s, out, corpus, 1)
        send(s, decision(a.article_id, rejected=a_labels, added=[X]))
        copy = a.model_copy(update={"article_id": f"{a.article_id}-retitled", "title": "Čisto nov naslov"})
        publish(s, s.kafka.topic_articles, [(copy.kafka_key(), copy.to_bytes())])
        out.wait_for(lambda c: copy.article_id in c.proposals(), 60, "the copy's first proposal")
        first = latest(out, copy.article_id)
        # the race happened: the copy was proposed before the decision, scored on its own (A's labels were only a
        # proposal then, which is never passed on)
        assert first.duplicate_of == a.article_id and first.revision == 0
        assert all(x.source == "retrieval" for x in first.labels)
        start(rt, "memory-updater")
        out.wait_for(lambda c: [x.label for x in latest(c, copy.article_id).labels] == [X], 60,
                     "the copy revised to [X]")
        final = latest(out, copy.article_id)
        assert final.duplicate_of == a.article_id and final.revision == 1
    finally:
        out.close()


def test_future_dated_decision_does_not_lock_the_article(runtime_factory, corpus):
    s, rt = runtime_factory(corpus.split("train")[:60])
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    try:
        (a, _), = labelled_proposals(s, out, corpus, 1)
        send(s, decision(a.article_id, at=datetime.now(timezone.utc) + timedelta(days=400), added=["client:future"]))
        wait(lambda: updater.applied == 1, 30, "the future-dated decision")
        send(s, decision(a.article_id, added=["client:now"]))  # correct, and later than the first
        wait(lambda: rt.router.find(a.article_id)[1].labels == ("client:now",), 30, "the correct decision applied")
    finally:
        out.close()


@pytest.fixture
def switching_runtime(tansu, newsmon_home, tmp_path, redis_url, corpus):
    """Both workers on a memory of 20 real articles, the classifier with its own encoder (a switch closes the
    old model's encoder, which must not be the session's)."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.encoder import Encoder

    s = stream_settings(tansu, newsmon_home, tmp_path, redis_url, batch_max_messages=4)
    clf = Classifier(s, encoder=Encoder(s.encoder, newsmon_home))
    clf.add_articles(corpus.split("train")[:20])
    rt = build_runtime(s, classifier=clf)
    yield s, rt
    rt.stop.set()
    rt.wait()
    for w in rt.workers:
        if w.name == "classifier":
            w.pipeline.classifier.encoder.close()
    clf.encoder.close()
    close_all_routers()


@pytest.mark.parametrize("first", ["memory-updater", "classifier"])
def test_model_switch_in_either_order_loses_and_reverts_no_decision(switching_runtime, corpus, encoder, tmp_path,
                                                                     first):
    s, rt = switching_runtime
    clf_w, upd_w = start(rt, "classifier"), start(rt, "memory-updater")
    gate = threading.Event()  # closed: the memory updater has not looked at the promotion yet (mid-batch)
    follow = upd_w.service.follow_promotion
    upd_w.service.follow_promotion = lambda: follow() if gate.is_set() or first == "memory-updater" else None
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_decisions))
    p0, p1, p2, p3 = [article_event(a) for a in corpus.split("test")[:4]]
    now = datetime.now(timezone.utc)

    def proposed(*evs):
        publish(s, s.kafka.topic_articles, [(e.kafka_key(), e.to_bytes()) for e in evs])
        out.wait_for(lambda c: {e.article_id for e in evs} <= set(c.proposals()), 180, "proposals")

    def applied(n):
        wait(lambda: upd_w.applied == n, 60, f"{n} decisions applied")

    try:
        proposed(p0)
        old_version = rt.router.model_version
        path, version = candidate_model(s.encoder.model, tmp_path / "candidate", "newsmon-ft-stream-switch")
        copy_missing(rt.router, shared_router(s, version, encoder.dim), encoder)  # the nightly re-embedding
        send(s, decision(p0.article_id, now - timedelta(minutes=2), added=["client:during"]))
        applied(1)
        proposed(p1)  # after the re-embedding, before the promotion: only in the old version
        atomic_write_json(promoted_file(s), {"model_path": path, "model_version": version,
                                             "replaces": {"model_version": old_version, "dim": encoder.dim}})
        if first == "memory-updater":
            send(s, decision(p1.article_id, now - timedelta(minutes=1), added=["client:p1"]),
                 decision(p0.article_id, now, added=["client:after"]))
            applied(3)
            proposed(p2)  # the classifier switches now
        else:
            proposed(p2)  # the classifier switches first
            send(s, decision(p1.article_id, now - timedelta(minutes=1), added=["client:p1"]))
            applied(2)
            gate.set()
            send(s, decision(p0.article_id, now, added=["client:after"]))
            applied(3)
        assert out.proposals()[p2.article_id][-1].model_version == version
        proposed(p3)
        new = clf_w.pipeline.classifier.memory("sl")
        assert clf_w.pipeline.classifier.model_version == upd_w.service.router.model_version == version
        assert new.get([p0.article_id])[0].labels == ("client:after",)
        assert new.get([p1.article_id])[0].labels == ("client:p1",)
        time.sleep(1.0)
        assert dlq.messages == []
    finally:
        out.close()
        dlq.close()


def test_two_copies_in_one_batch_are_linked_and_a_decision_revises_the_second(runtime_factory, corpus):
    """Issue 27 item 3 through the stream: two events with the same text sent back to back land in one micro-batch
    (one partition, one produce); the second is linked ``duplicate_of`` the first (both were scored in full with
    ``duplicate_of: null``: the index is asked before the batch's points are stored), and a decision on the first
    revises it."""
    s, rt = runtime_factory(corpus.split("train")[:60])
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    try:
        first = article_event(corpus.split("test")[0])
        second = first.model_copy(update={"article_id": f"{first.article_id}-again"})
        publish(s, s.kafka.topic_articles, [(b"same-partition", e.to_bytes()) for e in (first, second)])
        out.wait_for(lambda c: {first.article_id, second.article_id} <= set(c.proposals()), 120, "both proposals")
        p1, p2 = latest(out, first.article_id), latest(out, second.article_id)
        assert p2.timings.batch_size == 2 and p1.duplicate_of is None and p2.duplicate_of == first.article_id
        assert [x.label for x in p2.labels] == [x.label for x in p1.labels]
        assert all(x.source == "retrieval" for x in p2.labels)  # nobody decided on the first: scored on its own
        send(s, decision(first.article_id, added=[X]))
        wait(lambda: updater.applied == 1, 30, "the decision")
        out.wait_for(lambda c: X in {x.label for x in latest(c, second.article_id).labels}, 60, "the copy revised")
        assert latest(out, second.article_id).revision == 1
    finally:
        out.close()


def test_a_decision_sent_before_its_article_is_applied_when_the_article_arrives(runtime_factory, corpus):
    """The moderation tool labels an article the classifier has not stored yet: the decision is parked (in
    Redis), its offset committed, and applied once the article is proposed; nothing is dead-lettered."""
    s, rt = runtime_factory(corpus.split("train")[:40], decision_park_s=300, decision_park_check_s=0.5)
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_decisions))
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    early = article_event(corpus.split("test")[0])
    try:
        send(s, decision(early.article_id, added=[X]))
        wait(lambda: len(updater.park) == 1, 60, "the decision to be parked")
        wait_all_committed(s, s.kafka.updater_group, s.kafka.topic_decisions)  # parked: not held in the log
        assert updater.applied == 0
        publish(s, s.kafka.topic_articles, [(early.kafka_key(), early.to_bytes())])
        out.wait_for(lambda c: early.article_id in c.proposals(), 120, "the article's proposal")
        wait(lambda: updater.applied == 1 and len(updater.park) == 0, 60, "the parked decision applied")
        _lang, point = rt.router.find(early.article_id)
        assert point.labels == (X,) and point.payload["status"] == "labelled"
        time.sleep(1)
        assert not dlq.messages
    finally:
        out.close()
        dlq.close()
