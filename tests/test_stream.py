"""Integration tests of the streaming workers against the real things: the Tansu broker process, the embedded
Qdrant engine on a temp dir, real Redis on loopback, the real e5-small weights and real Slovene news."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from newsmon.schemas import (LabelDecision, LabelEvent, LabelProposal, ModeratorDecision, dead_letter_topic,
                             parse_event)
from newsmon.workers.topics import ensure_topics
from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.memory import MemoryUnavailableError
from newsmon.demo import article_event
from newsmon.workers.observability import HEALTH
from newsmon.workers.runtime import build_runtime

REPO = Path(__file__).resolve().parents[1]


# -- helpers --------------------------------------------------------------------------------------------------
def stream_settings(tansu, home: Path, tmp_path: Path, redis_url: str, **worker) -> Settings:
    """Settings isolated per test: own topics, consumer groups, Redis namespace, memory directory and home
    (promotion records live in the home); the imported model in the session home is shared."""
    from newsmon.shared.encoder import resolve_model

    ns = uuid.uuid4().hex[:8]
    s = Settings(home=tmp_path / "home")
    s.encoder.model = resolve_model(s.encoder.model, home)
    k = s.kafka
    k.bootstrap_servers = tansu.bootstrap
    k.topic_articles, k.topic_proposals = f"articles-{ns}", f"label-proposals-{ns}"
    k.topic_decisions, k.topic_label_events = f"moderator-decisions-{ns}", f"label-events-{ns}"
    k.classifier_group, k.updater_group = f"classifier-{ns}", f"updater-{ns}"
    k.session_timeout_ms = 6000
    k.topic_partitions = 2
    s.worker.batch_max_ms = 200
    s.worker.http_port = None
    s.worker.redis_url = redis_url
    s.worker.redis_namespace = f"newsmon-test-{ns}"
    s.memory.path = tmp_path / "memory"
    for key, value in worker.items():
        setattr(s.worker, key, value)
    ensure_topics(k.client_config(), k.all_topics(), partitions=2)
    return s


#: (topic, partition) -> the offset after the last message this test module produced there (delivery reports)
PRODUCED: dict[tuple[str, int], int] = {}


def publish(s: Settings, topic: str, items: list[tuple[bytes | None, bytes]]) -> None:
    p = Producer({**s.kafka.client_config(), "enable.idempotence": True, "message.max.bytes": 64 * 1024 * 1024})

    def delivered(err, msg):
        assert err is None, err
        key = (msg.topic(), msg.partition())
        PRODUCED[key] = max(PRODUCED.get(key, 0), msg.offset() + 1)

    for key, value in items:
        p.produce(topic, key=key, value=value, on_delivery=delivered)
    assert p.flush(30) == 0


def publish_articles(s: Settings, articles) -> None:
    publish(s, s.kafka.topic_articles, [(e.kafka_key(), e.to_bytes()) for e in map(article_event, articles)])


class Collector:
    """Reads a topic in the background (its own consumer group) and keeps every message."""

    def __init__(self, s: Settings, topic: str):
        self.messages: list = []
        self._stop = threading.Event()
        self._c = Consumer({**s.kafka.client_config(), "group.id": f"collector-{uuid.uuid4().hex[:6]}",
                            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                            "enable.auto.commit": False})
        self._c.subscribe([topic])
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self._c.poll(0.2)
            if m is not None and m.error() is None:
                self.messages.append(m)
        self._c.close()

    def proposals(self) -> dict[str, list[LabelProposal]]:
        out: dict[str, list[LabelProposal]] = {}
        for m in list(self.messages):
            p = parse_event(LabelProposal, m.value())
            assert m.key() == p.article_id.encode()  # repeats only ever come with the same key
            out.setdefault(p.article_id, []).append(p)
        return out

    def wait_for(self, pred, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred(self):
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    def close(self) -> None:
        self._stop.set()
        self._t.join(10)


def wait_until(pred, timeout_s: float, what: str, every_s: float = 0.1) -> None:
    """Poll ``pred()`` until it is true; fail the test after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def committed(s: Settings, group: str, topic: str, partitions: int = 2) -> list[int]:
    c = Consumer({**s.kafka.client_config(), "group.id": group})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)]
    finally:
        c.close()


def wait_all_committed(s: Settings, group: str, topic: str, timeout_s: float = 30) -> None:
    """Wait until ``group`` has committed everything this test module produced to ``topic``; fail on time-out."""
    wait_until(lambda: committed(s, group, topic) == end_offsets(s, topic), timeout_s,
               f"{group} to commit every message of {topic}", every_s=0.5)


def end_offsets(s: Settings, topic: str, partitions: int = 2) -> list[int]:
    """The log-end offsets of what the test produced (from delivery reports; partitions never written: -1001,
    as a group that committed nothing there reports)."""
    return [PRODUCED.get((topic, p), -1001) for p in range(partitions)]


def variant(a, new_id: str, frac: float = 0.4):
    """The same story retold shorter (the first ``frac`` of the body's words): similar, not a near-copy."""
    ev = article_event(a)
    words = ev.body.split()
    return ev.model_copy(update={"article_id": new_id, "body": " ".join(words[: max(10, int(len(words) * frac))])})


@pytest.fixture(scope="module")
def corpus(shared_data):
    return load_corpus(shared_data / "sentinews_sl")


@pytest.fixture
def runtime_factory(tansu, newsmon_home, tmp_path, redis_url, encoder, corpus):
    """Build the memory from 150 real train articles and start both workers in this process."""
    from newsmon.shared.classifier import Classifier

    made = []

    def make(memory_articles=None, calibrate=False, **worker):
        s = stream_settings(tansu, newsmon_home, tmp_path, redis_url, **worker)
        clf = Classifier(s, encoder=encoder)
        clf.add_articles(memory_articles if memory_articles is not None else corpus.split("train")[:150])
        if calibrate:  # as `newsmon memory build --calibrate` does: the workers read the record
            from newsmon.training_jobs.calibrate_memory import calibrate_memory

            calibrate_memory(clf, written_by="memory build")
        rt = build_runtime(s, classifier=clf)
        made.append(rt)
        return s, rt

    yield make
    for rt in made:
        rt.stop.set()
        rt.wait()
        rt.router.close()  # the session encoder stays open for the other tests


# -- tests ----------------------------------------------------------------------------------------------------
def test_poison_inputs_dead_lettered_and_worker_carries_on(runtime_factory, corpus):
    s, rt = runtime_factory()
    rt.start()
    good = corpus.split("test")[0]
    ev = json.loads(article_event(good).to_bytes())
    poison = {
        b"bad-json": b'{"article_id": "x", "body": ',
        b"no-body": json.dumps({k: v for k, v in ev.items() if k != "body"} | {"article_id": "no-body"}).encode(),
        b"huge": json.dumps(ev | {"article_id": "huge", "body": "beseda " * 3_000_000}).encode(),  # ~21 MB
        b"v9": json.dumps(ev | {"article_id": "v9", "schema_version": 9}).encode(),
        b"empty": json.dumps(ev | {"article_id": "empty", "title": " ", "body": "  \n "}).encode(),
    }
    odd_script = ev | {"article_id": "odd-script", "title": "政府通过新的养老金改革法",
                       "body": "政府今天通过了新的养老金改革法律草案。议会将在下个月投票。"}
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_articles))
    out = Collector(s, s.kafka.topic_proposals)
    try:
        publish(s, s.kafka.topic_articles, list(poison.items()) + [
            (b"odd-script", json.dumps(odd_script, ensure_ascii=False).encode()),
            (good.id.encode(), article_event(good).to_bytes())])
        out.wait_for(lambda c: {"odd-script", good.id} <= set(c.proposals()), 120, "the two valid proposals")
        dlq.wait_for(lambda c: len(c.messages) >= len(poison), 60, "five dead letters")
        letters = {m.key(): m for m in dlq.messages}
        assert set(letters) == set(poison)
        for key, m in letters.items():
            headers = dict(m.headers())
            if key == b"huge":  # cut to fit under the producer's limit, the original's size and hash kept
                assert poison[key].startswith(m.value()) and len(m.value()) < s.worker.dead_letter_max_bytes
                assert headers["newsmon-truncated"] == str(len(poison[key])).encode()
            else:
                assert m.value() == poison[key]  # the original bytes, untouched
            assert headers["newsmon-worker"].startswith(b"classifier")
            assert headers["newsmon-source-topic"] == s.kafka.topic_articles.encode()
            assert headers["newsmon-stage"] == b"validate"
        codes = {k: dict(m.headers())["newsmon-reason"].decode() for k, m in letters.items()}
        assert codes == {b"bad-json": "invalid_json", b"no-body": "schema_violation", b"huge": "too_large",
                         b"v9": "unsupported_version", b"empty": "schema_violation"}
        reason = {k: dict(m.headers())["newsmon-error"].decode() for k, m in letters.items()}
        assert "invalid JSON" in reason[b"bad-json"]
        assert "body" in reason[b"no-body"]
        assert "too large" in reason[b"huge"]
        assert "unsupported schema_version 9" in reason[b"v9"]
        assert "empty text" in reason[b"empty"]
        # the worker is still alive and consuming: a later valid article is classified too
        later = corpus.split("test")[1]
        publish_articles(s, [later])
        out.wait_for(lambda c: later.id in c.proposals(), 60, "a proposal after the poison")
        assert all(t.is_alive() for t in rt.threads)
    finally:
        dlq.close()
        out.close()


def test_feedback_new_label_rename_and_retire(runtime_factory, corpus, encoder):
    # Memory: 60 real articles. Then four real articles about the same story (the most similar group among the
    # validation/test articles) that are not near-copies of each other.
    memory = corpus.split("train")[:60]
    pool = corpus.split("validation") + corpus.split("test")
    P = encoder.encode([a.text for a in pool], role="query")
    S = P @ P.T
    np.fill_diagonal(S, -1)
    anchor = int(np.argmax(np.sort(S, axis=1)[:, -3:].mean(axis=1)))
    group = [pool[j] for j in np.argsort(-S[anchor])[:3]] + [pool[anchor]]
    first3, fourth = group[:3], group[3]
    # The production settings: no hand-lowered k, the memory calibrated (memory build --calibrate). The softmax
    # alone cannot carry a label confirmed on three articles at the calibrated k; the new-label rule (a label the
    # calibration never saw) or the tail-support rule does.
    s, rt = runtime_factory(memory, calibrate=True)
    assert "top_k" not in s.scoring.model_fields_set
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    try:
        publish_articles(s, first3)
        out.wait_for(lambda c: {a.id for a in first3} <= set(c.proposals()), 120, "three proposals")
        assert all(p[0].duplicate_of is None for p in out.proposals().values())
        now = datetime.now(timezone.utc)
        decisions = [ModeratorDecision(article_id=a.id, moderator="ana", decided_at=now, decisions=[
            LabelDecision(label="client:lasko-takeover", action="added")]) for a in first3]
        publish(s, s.kafka.topic_decisions, [(d.kafka_key(), d.to_bytes()) for d in decisions])
        wait_until(lambda: updater.applied == 3, 30, "three decisions applied")
        assert max(updater.latencies_s) < 1.0  # consumed -> served by the memory within 1 s
        publish_articles(s, [fourth])
        out.wait_for(lambda c: fourth.id in c.proposals(), 60, "the fourth proposal")
        p4 = out.proposals()[fourth.id][0]
        labels = {x.label: x for x in p4.labels}
        assert p4.scoring.calibration is not None and p4.scoring.top_k > 3, p4.scoring
        assert "client:lasko-takeover" in labels, p4
        support = {n.article_id for n in labels["client:lasko-takeover"].neighbours}
        assert support <= {a.id for a in first3} and support

        # a later, older decision is ignored; the same decision twice leaves the same state
        stale = ModeratorDecision(article_id=first3[0].id, moderator="bob", decided_at=now - timedelta(hours=1),
                                  decisions=[LabelDecision(label="client:lasko-takeover", action="rejected")])
        publish(s, s.kafka.topic_decisions, [(stale.kafka_key(), stale.to_bytes()),
                                             (decisions[0].kafka_key(), decisions[0].to_bytes())])
        # wait for the stale decision itself (and the repeat after it), not for something sent later
        wait_until(lambda: updater.outcomes["stale"] == 1 and updater.outcomes["applied"] == 4, 30,
                   "the stale decision and the repeated one")
        assert rt.router.find(first3[0].id)[1].labels == ("client:lasko-takeover",)  # the stale rejection lost
        # rename, then retire: the renamed label carries the history; the retired one never comes back
        renamed = LabelEvent(action="renamed", label="client:lasko-takeover", new_label="client:pivovarna-lasko",
                             occurred_at=now)
        publish(s, s.kafka.topic_label_events, [(renamed.kafka_key(), renamed.to_bytes())])
        wait_until(lambda: "client:lasko-takeover" in rt.registry.snapshot()[0], 30, "the rename")
        point = rt.router.find(first3[0].id)[1]
        assert point.labels == ("client:lasko-takeover",)  # the stale rejection did not win
        ev = variant(fourth, f"{fourth.id}-retold")
        publish(s, s.kafka.topic_articles, [(ev.kafka_key(), ev.to_bytes())])
        out.wait_for(lambda c: ev.article_id in c.proposals(), 60, "the renamed proposal")
        p5 = out.proposals()[ev.article_id][0]
        assert p5.duplicate_of is None  # found through retrieval, not as a near-copy
        assert "client:pivovarna-lasko" in {x.label for x in p5.labels}
        assert "client:lasko-takeover" not in {x.label for x in p5.labels}

        retired = LabelEvent(action="retired", label="client:pivovarna-lasko", occurred_at=now)
        publish(s, s.kafka.topic_label_events, [(retired.kafka_key(), retired.to_bytes())])
        wait_until(lambda: "client:pivovarna-lasko" in rt.registry.snapshot()[1], 30, "the retirement")
        ids = []
        for n, a in enumerate(group):
            e = article_event(a).model_copy(update={"article_id": f"{a.id}-copy-{n}"})  # near-copies
            r = variant(a, f"{a.id}-retold-{n}")  # and retellings
            ids += [e.article_id, r.article_id]
            publish(s, s.kafka.topic_articles, [(r.kafka_key(), r.to_bytes())])
            publish(s, s.kafka.topic_articles, [(e.kafka_key(), e.to_bytes())])
        out.wait_for(lambda c: set(ids) <= set(c.proposals()), 60, "proposals after the retirement")
        for i in ids:
            assert all(x.label != "client:pivovarna-lasko" for p in out.proposals()[i] for x in p.labels)
    finally:
        out.close()


def test_memory_outage_pauses_commits_nothing_and_resumes(runtime_factory, corpus):
    s, rt = runtime_factory(batch_max_messages=8)
    lang = "sl"
    real = rt.router.memory(lang)

    class Outage:
        """The knowledge memory becoming unreachable: every call raises what a Qdrant server outage raises."""

        down = False

        def __getattr__(self, name):
            attr = getattr(real, name)
            if callable(attr) and Outage.down:
                def fail(*a, **k):
                    raise MemoryUnavailableError("connection refused (memory outage)")
                return fail
            return attr

    rt.router._memories[lang] = Outage()
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    try:
        warm = corpus.split("test")[:4]
        publish_articles(s, warm)
        out.wait_for(lambda c: {a.id for a in warm} <= set(c.proposals()), 120, "proposals before the outage")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        before = committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        Outage.down = True
        batch = corpus.split("test")[4:24]
        publish_articles(s, batch)
        t_down = time.monotonic()
        wait_until(lambda: HEALTH.ready()[0] is False, 30, "the worker to pause")
        assert "paused" in json.dumps(HEALTH.ready()[1])
        while time.monotonic() - t_down < 30:
            assert committed(s, s.kafka.classifier_group, s.kafka.topic_articles) == before
            assert not ({a.id for a in batch} & set(out.proposals()))
            time.sleep(3)
        Outage.down = False
        out.wait_for(lambda c: {a.id for a in batch} <= set(c.proposals()), 120, "every article after the outage")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        assert HEALTH.ready()[0] is True
    finally:
        out.close()


def test_workers_follow_a_promoted_model_without_loss(runtime_factory, corpus, tmp_path):
    """The nightly job promotes a model while the workers run: they switch between batches, carry the
    articles stored meanwhile into the new version's collection, and lose or double-commit nothing."""
    import shutil

    from newsmon.shared.promotion import atomic_write_json, promoted_file

    s, rt = runtime_factory(corpus.split("train")[:40], batch_max_messages=8)
    old_version = rt.classifier.model_version
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    try:
        first = corpus.split("train")[40:64]
        publish_articles(s, first)
        out.wait_for(lambda c: {a.id for a in first} <= set(c.proposals()), 180, "proposals before the promotion")
        # a "new version": the same weights under another model id (the rollout gate has already approved it)
        cand = tmp_path / "candidate"
        shutil.copytree(rt.classifier.encoder.name_or_path, cand)
        info = json.loads((cand / "newsmon_model.json").read_text())
        info["model_id"] = "newsmon-ft-test-candidate"
        (cand / "newsmon_model.json").write_text(json.dumps(info))
        from newsmon.shared.encoder import encoder_identity

        new_version = encoder_identity(str(cand), s.encoder)
        atomic_write_json(promoted_file(s), {"model_path": str(cand), "model_version": new_version})
        second = corpus.split("train")[64:88]
        publish_articles(s, second)
        out.wait_for(lambda c: {a.id for a in second} <= set(c.proposals()), 300, "proposals after the promotion")
        props = out.proposals()
        assert {p[0].model_version for a in first for p in [props[a.id]]} == {old_version}
        assert {p[-1].model_version for a in second[-8:] for p in [props[a.id]]} == {new_version}
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        worker = next(w for w in rt.workers if w.name == "classifier")
        new_mem = worker.pipeline.classifier.memory("sl")
        # the 40 memory articles and the 24 pending ones from before the switch were carried over
        assert all(p is not None for p in new_mem.get([a.id for a in corpus.split("train")[:64]]))
        # a decision now lands in the new version's collection
        d = ModeratorDecision(article_id=first[0].id, moderator="ana", decided_at=datetime.now(timezone.utc),
                              decisions=[LabelDecision(label="client:after-switch", action="added")])
        publish(s, s.kafka.topic_decisions, [(d.kafka_key(), d.to_bytes())])
        wait_until(lambda: new_mem.get([first[0].id])[0].labels == ("client:after-switch",), 30,
                   "the decision in the new version's collection")
    finally:
        out.close()
