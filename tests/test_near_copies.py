"""Decisions and near-copies on the real embedded Qdrant engine, the real e5-small weights and real Slovene news
(the article stages and the decision service without a broker; the stream versions are in
test_stream_decisions.py): what a moderated original passes on, a decision racing a near-copy, revised
proposals, and future-dated decisions."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import Message

from newsmon.demo import article_event
from newsmon.schemas import ArticleEvent, LabelDecision, LabelProposal, ModeratorDecision
from newsmon.shared.data import load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.workers.decisions import DecisionService
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.pipeline import ArticlePipeline

X = "client:x"


@pytest.fixture(scope="module")
def corpus(shared_data):
    return load_corpus(shared_data / "sentinews_sl")


@pytest.fixture
def services(memory_classifier, corpus):
    """The article pipeline and the decision service of one process, on 60 real memory articles."""
    clf = memory_classifier
    clf.add_articles(corpus.split("train")[:60])
    registry = LabelRegistry()
    return (ArticlePipeline(clf.settings, clf, NearDuplicateIndex(), registry),
            DecisionService(clf.settings, clf.router, registry))


_OFFSET = iter(range(10**6))


def message(ev: ArticleEvent) -> Message:
    return Message(topic="articles", partition=0, offset=next(_OFFSET), key=ev.kafka_key(), value=ev.to_bytes(),
                   timestamp=(1, int(time.time() * 1000)))


def propose(p: ArticlePipeline, events: list[ArticleEvent]) -> dict[str, LabelProposal]:
    """Every stage of the classifier on one batch; the proposals by article id."""
    batch, rejected = p.validate([message(e) for e in events])
    assert not rejected
    p.near_duplicates(batch)
    p.embed(batch)
    p.retrieve_and_score(batch)
    p.store_pending(batch)
    return {prop.article_id: prop for _m, prop in p.emit(batch)}


def retitled(ev: ArticleEvent, new_id: str) -> ArticleEvent:
    """The same body under another headline: a near-copy."""
    return ev.model_copy(update={"article_id": new_id, "title": f"Novo: {ev.title or 'brez naslova'}"})


def decision(article_id: str, at: datetime | None = None, **actions: list[str]) -> ModeratorDecision:
    items = [LabelDecision(label=lb, action=a) for a, labels in actions.items() for lb in labels]
    return ModeratorDecision(article_id=article_id, moderator="ana", decisions=items,
                             decided_at=at or datetime.now(timezone.utc))


def labelled_originals(p: ArticlePipeline, corpus, n: int) -> list[tuple[ArticleEvent, list[str]]]:
    """``n`` real test articles whose proposal has at least one label, with their proposed labels."""
    events = [article_event(a) for a in corpus.split("test")[:12]]
    props = propose(p, events)
    out = [(e, [x.label for x in props[e.article_id].labels]) for e in events if props[e.article_id].labels]
    assert len(out) >= n, "too few real articles with a proposal"
    return out[:n]


def test_a_moderated_original_passes_on_its_confirmed_labels_only(services, corpus):
    p, svc = services
    (a, a_labels), (b, b_labels), (c, c_labels) = labelled_originals(p, corpus, 3)
    assert svc.apply_decision(decision(a.article_id, rejected=a_labels)) == "applied"  # reviewed: nothing left
    assert svc.apply_decision(decision(b.article_id, confirmed=b_labels[:1], rejected=b_labels[1:],
                                       added=[X])) == "applied"
    copies = propose(p, [retitled(a, "a-copy"), retitled(b, "b-copy"), retitled(c, "c-copy")])
    assert copies["a-copy"].duplicate_of == a.article_id
    assert copies["a-copy"].labels == []  # never the rejected proposal
    assert [x.label for x in copies["b-copy"].labels] == [b_labels[0], X]
    assert all(x.source == "duplicate" for x in copies["b-copy"].labels)
    # unmoderated: its proposal is not passed on; the copy is scored on its own (issue 43 item 2)
    assert copies["c-copy"].duplicate_of == c.article_id
    assert all(x.source == "retrieval" for x in copies["c-copy"].labels) and copies["c-copy"].scoring is not None


def test_decision_landing_while_a_near_copy_is_in_flight_reaches_the_copy(services, corpus):
    """The classifier read the original before the decision landed, and stores the copy after it."""
    p, svc = services
    (a, a_labels), = labelled_originals(p, corpus, 1)
    batch, _ = p.validate([message(retitled(a, "a-copy"))])
    p.near_duplicates(batch)  # reads A as proposed: a_labels
    assert svc.apply_decision(decision(a.article_id, rejected=a_labels, added=[X])) == "applied"
    p.embed(batch)
    p.retrieve_and_score(batch)
    p.store_pending(batch)
    (_m, prop), = p.emit(batch)
    assert prop.duplicate_of == a.article_id and [x.label for x in prop.labels] == [X]
    stored = p.classifier.memory("sl").get(["a-copy"])[0]
    assert stored.payload["proposed_labels"] == [X]  # what its own later copies and revisions start from


def test_a_decision_revises_the_copies_proposed_from_the_old_state(services, corpus):
    p, svc = services
    (a, a_labels), (b, b_labels) = labelled_originals(p, corpus, 2)
    first = propose(p, [retitled(a, "a-copy-1"), retitled(a, "a-copy-2"), retitled(b, "b-copy")])
    assert first["a-copy-1"].duplicate_of == a.article_id and first["a-copy-1"].revision == 0
    assert all(x.source == "retrieval" for x in first["a-copy-1"].labels)  # A undecided: scored on its own
    # a copy that was itself moderated keeps its own decision
    assert svc.apply_decision(decision("a-copy-2", confirmed=a_labels)) == "applied"
    dec = decision(a.article_id, rejected=a_labels, added=[X])
    assert svc.apply_decision(dec) == "applied"
    revised = svc.revise_copies(dec)
    assert [r.article_id for r in revised] == ["a-copy-1"]
    r = revised[0]
    assert r.revision == 1 and r.duplicate_of == a.article_id and [x.label for x in r.labels] == [X]
    assert r.labels[0].source == "duplicate" and r.labels[0].neighbours[0].article_id == a.article_id
    assert r.memory_version == p.classifier.collection("sl") and r.model_version == p.classifier.model_version
    # the same decision again (redelivered: its revision may never have been acknowledged): the same revision
    assert svc.apply_decision(dec) == "applied"
    again = svc.revise_copies(dec)
    assert [(x.article_id, x.revision, [lb.label for lb in x.labels]) for x in again] == [("a-copy-1", 1, [X])]
    # a later decision that changes the labels again: the next revision; one that changes nothing: none
    dec2 = decision(a.article_id, at=dec.decided_at + timedelta(seconds=1), confirmed=[X], added=["client:y"])
    assert svc.apply_decision(dec2) == "applied"
    assert [(x.revision, [lb.label for lb in x.labels]) for x in svc.revise_copies(dec2)] == [(2, [X, "client:y"])]
    dec3 = decision(b.article_id, confirmed=b_labels)
    assert svc.apply_decision(dec3) == "applied" and svc.revise_copies(dec3) == []
    # a copy proposed after all this starts from the original's current labels
    later = propose(p, [retitled(a, "a-copy-3")])["a-copy-3"]
    assert [x.label for x in later.labels] == [X, "client:y"]


def test_a_future_dated_decision_is_clamped_and_does_not_lock_the_article(services, corpus):
    p, svc = services
    skew = p.settings.worker.decision_max_future_s
    (a, _), (b, _) = labelled_originals(p, corpus, 2)
    future = datetime.now(timezone.utc) + timedelta(days=400)  # a moderator's PC with a wrong clock
    assert svc.apply_decision(decision(a.article_id, at=future, added=["client:future"])) == "applied"
    point = p.classifier.memory("sl").get([a.article_id])[0]
    assert point.labels == ("client:future",)
    assert datetime.fromisoformat(point.payload["decided_at"]) <= datetime.now(timezone.utc) + timedelta(seconds=skew)
    assert point.payload["decided_at_claimed"] == future.isoformat()
    # a correct decision made afterwards wins
    assert svc.apply_decision(decision(a.article_id, added=["client:now"])) == "applied"
    assert p.classifier.memory("sl").get([a.article_id])[0].labels == ("client:now",)
    # within the skew a decision is taken as dated (small clock differences are normal)
    near = datetime.now(timezone.utc) + timedelta(seconds=skew / 2)
    assert svc.apply_decision(decision(b.article_id, at=near, added=["client:near"])) == "applied"
    assert p.classifier.memory("sl").get([b.article_id])[0].payload["decided_at"] == near.isoformat()
    # a point locked by a future date stored before this rule existed is unlocked too
    mem = p.classifier.memory("sl")
    old = mem.get([b.article_id], with_vectors=True)[0]
    mem.upsert([b.article_id], old.vector[None, :], [old.labels], [{**old.payload, "decided_at": future.isoformat()}])
    assert svc.apply_decision(decision(b.article_id, added=["client:fixed"])) == "applied"
    assert mem.get([b.article_id])[0].labels == ("client:fixed",)


def test_a_copy_of_an_undecided_original_keeps_its_own_scores(services, corpus):
    """Issue 43 item 2: a near-copy of an article nobody decided on is scored as any article (its own labels,
    scores, neighbours, candidates and scoring), only linked ``duplicate_of`` its original; what nobody decided is
    never passed on as certainty (source ``duplicate``, score the Jaccard, no candidates). Two copies in one batch,
    whose original is not even stored yet, alike. Once the original is decided, the next copy takes the decision."""
    p, svc = services
    (a, a_labels), = labelled_originals(p, corpus, 1)
    same = a.model_copy(update={"article_id": "a-resent"})  # the same text sent twice
    copies = propose(p, [retitled(a, "a-copy"), same])
    for pid in ("a-copy", "a-resent"):
        c = copies[pid]
        assert c.duplicate_of == a.article_id, pid
        assert c.labels and all(x.source == "retrieval" and x.neighbours for x in c.labels), c.labels
        assert c.scoring is not None and c.candidates, pid
    b = article_event(corpus.split("test")[20])
    twins = propose(p, [b, b.model_copy(update={"article_id": "b-twin"})])
    assert twins["b-twin"].duplicate_of == b.article_id
    assert all(x.source == "retrieval" for x in twins["b-twin"].labels) and twins["b-twin"].scoring is not None
    assert svc.apply_decision(decision(a.article_id, confirmed=a_labels[:1], added=[X])) == "applied"
    later = propose(p, [retitled(a, "a-copy-after")])["a-copy-after"]
    assert [(x.label, x.source) for x in later.labels] == [(a_labels[0], "duplicate"), (X, "duplicate")]


def test_a_text_sent_twice_over_the_api_is_not_made_certain(services, corpus, tansu):
    """The issue's example on ``POST /v1/suggest``: the second sending came back ``duplicate_of`` the first with its
    undecided labels at score 1.0, source ``duplicate``, no candidates. Now it is scored on its own."""
    from fastapi.testclient import TestClient

    from newsmon.api.app import create_app
    from newsmon.api.service import ApiService
    from newsmon.workers.kafka_io import make_producer

    p, _svc = services
    p.settings.kafka.bootstrap_servers = tansu.bootstrap
    text = article_event(corpus.split("test")[3]).text
    api = ApiService(p.settings, p, make_producer(p.settings, "newsmon-api-test"))
    with TestClient(create_app(api)) as client:
        first = client.post("/v1/suggest", json={"text": text, "lang": "sl", "article_id": "sent-1"}).json()[0]
        again = client.post("/v1/suggest", json={"text": text, "lang": "sl", "article_id": "sent-2"}).json()[0]
    assert again["duplicate_of"] == "sent-1"
    assert again["labels"] and all(x["source"] == "retrieval" for x in again["labels"]), again["labels"]
    assert [x["label"] for x in again["labels"]] == [x["label"] for x in first["labels"]]
    assert again["scoring"] is not None and again["candidates"]


def test_an_undo_returns_the_article_to_where_it_was(services, corpus):
    """Issue 43 item 5 at the memory updater: an undo (``undoes``, the console's) takes a decision back: a pending
    article is pending again with its proposal, a corpus article gets its own labels back, a redelivered decision
    that was undone stays undone, and a decision replaced by a later one cannot be undone any more."""
    p, svc = services
    (a, a_labels), (b, _b_labels) = labelled_originals(p, corpus, 2)
    mem = p.classifier.memory("sl")
    before = mem.get([a.article_id])[0]
    d = decision(a.article_id, rejected=a_labels, added=[X])
    assert svc.apply_decision(d) == "applied" and mem.get([a.article_id])[0].labels == (X,)
    undo = ModeratorDecision(article_id=a.article_id, moderator="ana", decisions=d.decisions,
                             decided_at=d.decided_at + timedelta(seconds=5), undoes=d.decided_at)
    assert undo.schema_version == 2
    assert svc.apply_decision(undo) == "applied"
    after = mem.get([a.article_id])[0]
    assert after.labels == () and after.payload["status"] == "pending" and "decided_at" not in after.payload
    assert after.payload["proposed_labels"] == before.payload["proposed_labels"]
    assert svc.apply_decision(d) == "stale" and mem.get([a.article_id])[0].labels == ()  # redelivered: stays undone
    assert svc.apply_decision(undo) == "applied"  # the undo redelivered: nothing more
    # a copy proposed now is scored on its own again: the original is undecided
    assert all(x.source == "retrieval" for x in propose(p, [retitled(a, "a-copy-after-undo")])["a-copy-after-undo"]
               .labels)
    # a corpus article: its archive's labels come back
    train = corpus.split("train")[0]
    own = mem.get([train.id])[0].labels
    dt = decision(train.id, rejected=list(own), added=[X])
    assert svc.apply_decision(dt) == "applied"
    assert svc.apply_decision(ModeratorDecision(article_id=train.id, moderator="ana", decisions=dt.decisions,
                                                decided_at=datetime.now(timezone.utc), undoes=dt.decided_at)) == \
        "applied"
    assert mem.get([train.id])[0].labels == own and "status" not in mem.get([train.id])[0].payload
    # replaced by a later decision: too late to undo it
    d1 = decision(b.article_id, added=[X])
    d2 = decision(b.article_id, at=d1.decided_at + timedelta(seconds=1), added=["client:y"])
    assert svc.apply_decision(d1) == svc.apply_decision(d2) == "applied"
    late = ModeratorDecision(article_id=b.article_id, moderator="ana", decisions=d1.decisions,
                             decided_at=d2.decided_at + timedelta(seconds=1), undoes=d1.decided_at)
    assert svc.apply_decision(late) == "stale" and mem.get([b.article_id])[0].labels == ("client:y",)
