"""Model switches never lose or revert a decision: the copy between model versions keeps the newer decision,
and the classifier and the memory updater may switch in either order (the services of one process, without a
broker; the stream version is in test_stream_decisions.py). Real e5-small weights, the real embedded Qdrant
engine, real Slovene news."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import Message

from newsmon.demo import article_event
from newsmon.schemas import ArticleEvent, LabelDecision, ModeratorDecision
from newsmon.shared.config import EncoderSettings, Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.encoder import encoder_identity, resolve_model
from newsmon.shared.memory import MemoryRouter, close_all_routers, copy_missing, shared_router
from newsmon.shared.promotion import atomic_write_json, promoted_file
from newsmon.workers.decisions import DecisionService
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.pipeline import ArticlePipeline

T1 = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
T2 = T1 + timedelta(hours=1)


@pytest.fixture(scope="module")
def corpus(shared_data):
    return load_corpus(shared_data / "sentinews_sl")


def candidate_model(base: str, folder: Path, model_id: str) -> tuple[str, str]:
    """A "fine-tuned" version of ``base`` for switching drills: the same weights (linked, not copied) under
    another model id, so it gets another model version. Returns (path, version under the default runtime)."""
    folder.mkdir(parents=True)
    for f in Path(base).iterdir():
        if f.name != "newsmon_model.json":
            os.symlink(f, folder / f.name)
    info = json.loads((Path(base) / "newsmon_model.json").read_text())
    (folder / "newsmon_model.json").write_text(json.dumps({**info, "model_id": model_id}))
    return str(folder), encoder_identity(str(folder), EncoderSettings())


# -- the copy between model versions ---------------------------------------------------------------------------
def _put(router: MemoryRouter, encoder, aid: str, text: str, labels=(), decided: datetime | None = None):
    payload = {"lang": "sl", "text": text, "status": "pending" if decided is None else "labelled"}
    if decided is not None:
        payload["decided_at"] = decided.isoformat()
    router.memory("sl").upsert([aid], encoder.encode([text], role="passage"), [list(labels)], [payload])


def test_copy_missing_keeps_the_newer_decision_on_either_side(tmp_path, encoder, corpus):
    s = Settings(home=tmp_path / "home")
    s.memory.path = tmp_path / "memory"
    old, new = MemoryRouter(s, "v1", encoder.dim), MemoryRouter(s, "v2", encoder.dim)
    t = [a.text for a in corpus.split("train")[:6]]
    try:
        _put(old, encoder, "a", t[0])                                  # pending in old, decided in new (later)
        _put(new, encoder, "a", t[0], ["new"], T1)
        _put(old, encoder, "b", t[1], ["old"], T2)                     # old decision newer
        _put(new, encoder, "b", t[1], ["new"], T1)
        _put(old, encoder, "c", t[2], ["old"], T1)                     # new decision newer
        _put(new, encoder, "c", t[2], ["new"], T2)
        _put(old, encoder, "d", t[3], ["corpus"])                      # missing in new
        _put(old, encoder, "e", t[4], [], T2)                          # reviewed (nothing left) in old, later
        _put(new, encoder, "e", t[4], ["new"], T1)
        counts = copy_missing(old, new, encoder)
        got = {p.article_id: p for p in new.memory("sl").get(list("abcde"))}
        assert got["a"].labels == ("new",) and got["c"].labels == ("new",)  # never reverted
        assert got["b"].labels == ("old",) and got["e"].labels == ()
        assert got["e"].payload["decided_at"] == T2.isoformat()
        assert got["d"].labels == ("corpus",)
        assert counts == {"sl": 1, "sl:relabelled": 2}
        # without an encoder (the memory updater): decisions are carried, missing points only counted
        _put(old, encoder, "f", t[5], ["corpus"])
        _put(old, encoder, "c", t[2], ["old-later"], T2 + timedelta(minutes=1))
        counts = copy_missing(old, new, None)
        assert counts == {"sl:relabelled": 1, "sl:missing": 1}
        assert new.memory("sl").get(["c", "f"])[0].labels == ("old-later",)
        assert new.memory("sl").get(["f"])[0] is None
    finally:
        old.close()
        new.close()


# -- the two workers switching, in both orders ------------------------------------------------------------------
_OFFSET = iter(range(10**6))


def _message(ev: ArticleEvent) -> Message:
    return Message(topic="articles", partition=0, offset=next(_OFFSET), key=ev.kafka_key(), value=ev.to_bytes(),
                   timestamp=(1, int(time.time() * 1000)))


def _propose(p: ArticlePipeline, articles) -> None:
    batch, rejected = p.validate([_message(article_event(a)) for a in articles])
    assert not rejected
    p.near_duplicates(batch)
    p.embed(batch)
    p.retrieve_and_score(batch)
    p.store_pending(batch)
    p.emit(batch)


def _decision(article_id: str, label: str, at: datetime) -> ModeratorDecision:
    return ModeratorDecision(article_id=article_id, moderator="ana", decided_at=at,
                             decisions=[LabelDecision(label=label, action="added")])


@pytest.fixture
def one_process(tmp_path, newsmon_home, encoder, corpus):
    """The classifier's pipeline and the memory updater's service sharing one process's routers, a memory of
    20 real articles, and a candidate model for the nightly job to promote."""
    s = Settings(home=tmp_path / "home")
    s.encoder.model = resolve_model(s.encoder.model, newsmon_home)
    s.memory.path = tmp_path / "memory"
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.encoder import Encoder

    # its own encoder: the pipeline closes the old model's encoder when it switches (not the session's)
    clf = Classifier(s, encoder=Encoder(s.encoder, newsmon_home))
    clf.add_articles(corpus.split("train")[:20])
    registry = LabelRegistry()
    p = ArticlePipeline(s, clf, NearDuplicateIndex(), registry)
    svc = DecisionService(s, clf.router, registry)
    path, version = candidate_model(s.encoder.model, tmp_path / "candidate", "newsmon-ft-switch-test")
    yield s, p, svc, path, version
    p.classifier.encoder.close()
    if p.classifier is not clf:
        clf.encoder.close()  # idempotent: the switch closed it already
    close_all_routers()


def _nightly_job(s: Settings, p: ArticlePipeline, encoder, path: str, version: str, between) -> None:
    """Re-embed the memory into the candidate's collections, let ``between`` happen, then promote."""
    copy_missing(p.classifier.router, shared_router(s, version, encoder.dim), encoder)
    between()
    atomic_write_json(promoted_file(s), {"model_path": path, "model_version": version,
                                         "replaces": {"model_version": p.classifier.model_version,
                                                      "dim": encoder.dim}})


@pytest.mark.parametrize("first", ["memory-updater", "classifier"])
def test_two_workers_switching_in_either_order_lose_and_revert_nothing(one_process, encoder, corpus, first):
    s, p, svc, path, version = one_process
    p0, p1, p2 = corpus.split("test")[:3]
    _propose(p, [p0])  # proposed before the re-embedding: copied by it, still pending
    now = datetime.now(timezone.utc)

    def meanwhile():
        # a decision during the re-embedding (old collection only), and an article proposed after it
        assert svc.apply_decision(_decision(p0.id, "client:during", now - timedelta(minutes=2))) == "applied"
        _propose(p, [p1])

    _nightly_job(s, p, encoder, path, version, meanwhile)
    if first == "memory-updater":
        svc.follow_promotion()
        # an article proposed between re-embedding and promotion is not unknown; a decision right after the
        # promotion is not overwritten by the classifier's catch-up copy
        assert svc.apply_decision(_decision(p1.id, "client:p1", now - timedelta(minutes=1))) == "applied"
        assert svc.apply_decision(_decision(p0.id, "client:after", now)) == "applied"
        assert p.follow_promotion()
    else:
        assert p.follow_promotion()
        # the memory updater has not switched yet (another process, mid-batch): it still writes the old version
        assert svc.apply_decision(_decision(p1.id, "client:p1", now - timedelta(minutes=1))) == "applied"
        svc.follow_promotion()
        assert svc.apply_decision(_decision(p0.id, "client:after", now)) == "applied"
    assert p.classifier.model_version == svc.router.model_version == version
    _propose(p, [p2])
    new = p.classifier.memory("sl")
    got = {pt.article_id: pt for pt in new.get([p0.id, p1.id, p2.id])}
    assert got[p0.id].labels == ("client:after",)
    assert got[p1.id].labels == ("client:p1",)
    assert got[p2.id] is not None and got[p2.id].payload["status"] == "pending"


def test_restarted_workers_catch_up_from_the_version_they_replace(one_process, encoder, corpus):
    """A worker process started after the promotion (no live switch) still finds and carries over what was
    stored in the replaced version after the re-embedding."""
    from newsmon.shared.classifier import Classifier

    s, p, svc, path, version = one_process
    p0, p1 = corpus.split("test")[:2]
    now = datetime.now(timezone.utc)
    _nightly_job(s, p, encoder, path, version, lambda: _propose(p, [p0, p1]))
    # both processes restart on the promoted model
    new_clf = Classifier(s)
    registry = LabelRegistry()
    restarted_updater = DecisionService(s, shared_router(s, version, encoder.dim), registry)
    restarted_updater.follow_promotion()
    assert restarted_updater.apply_decision(_decision(p0.id, "client:p0", now)) == "applied"
    restarted = ArticlePipeline(s, new_clf, NearDuplicateIndex(), registry)
    restarted.follow_promotion()
    got = new_clf.memory("sl").get([p0.id, p1.id])
    assert got[0] is not None and got[0].labels == ("client:p0",)
    assert got[1] is not None and got[1].payload["status"] == "pending"
    new_clf.encoder.close()
