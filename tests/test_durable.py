"""Standalone and durable (issue 39): a real ``newsmon serve`` with no Kafka and no Redis configured (the bundled
Tansu, embedded; the embedded Qdrant engine; real e5-small weights; real Slovene news) keeps everything a user
did across a SIGKILL and across a SIGTERM: a label rule, a rename, 50 articles published to its broker with
``newsmon publish``, 20 decisions and an undo sent to its API just before the stop are all there after the restart
(the rule and the rename on ``/v1/labels``, 50 proposals on the proposals topic, 20 decisions in the knowledge
memory and the decision taken back still taken back), and its broker never outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from test_api import wait_for  # the suite's one wait loop (fails on time-out)

from newsmon.broker import free_port
from newsmon.demo import article_event
from newsmon.schemas import LabelProposal, parse_event

REPO = Path(__file__).resolve().parents[1]
RULE, KWE = "client:mercator", "mercator* OR merkator*"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.fixture
def standalone(newsmon_home, tmp_path, encoder, shared_data):
    """A home with a memory of 60 real train articles (built here), and a function that starts ``newsmon serve``
    on it, as a new user runs it: no Kafka, no Redis."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.config import Settings
    from newsmon.shared.data import load_corpus
    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.memory import MemoryRouter

    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (newsmon_home / "models" / "onnx").mkdir(parents=True, exist_ok=True)
    (home / "models" / "onnx").symlink_to(newsmon_home / "models" / "onnx", target_is_directory=True)
    s = Settings(home=home)
    s.encoder.model = resolve_model(s.encoder.model, newsmon_home)
    corpus = load_corpus(shared_data / "sentinews_sl")
    router = MemoryRouter(s, encoder.model_id, encoder.dim)
    Classifier(s, encoder=encoder, router=router).add_articles(corpus.split("train")[:60])
    router.close()
    env = {**os.environ, "NEWSMON_HOME": str(home), "NEWSMON_ENCODER__MODEL": s.encoder.model,
           "NEWSMON_KAFKA__SESSION_TIMEOUT_MS": "6000", "NEWSMON_KAFKA__TOPIC_PARTITIONS": "2",
           "NEWSMON_WORKER__BATCH_MAX_MS": "200", "NEWSMON_LOG_FORMAT": "json"}
    for k in ("NEWSMON_KAFKA__BOOTSTRAP_SERVERS", "NEWSMON_WORKER__REDIS_URL", "NEWSMON_MEMORY__URL"):
        env.pop(k, None)
    procs: list[subprocess.Popen] = []

    def start(n: int, ready: bool = True, **settings: str):
        port = free_port()
        out = open(tmp_path / f"serve-{n}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "serve"], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, env={**env, "NEWSMON_API__PORT": str(port), **settings})
        procs.append(proc)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)

        def answers():
            assert proc.poll() is None, (tmp_path / f"serve-{n}.log").read_text()[-3000:]
            try:
                r = client.get("/readyz")
            except httpx.TransportError:
                return False
            return r.status_code == 200 or (not ready and "the first checks" not in r.text)

        wait_for(answers, 300, "newsmon serve ready" if ready else "newsmon serve answering /readyz")
        return proc, client, broker_of(tmp_path / f"serve-{n}.log")

    yield home, corpus, start, s
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def broker_of(log: Path) -> dict:
    """The embedded broker's ``bootstrap`` and ``pid``, from the JSON log line that says it is ready."""
    for line in reversed(log.read_text().splitlines()):
        if '"tansu broker ready"' in line:
            return json.loads(line)
    raise AssertionError(f"no 'tansu broker ready' line in {log}")


def proposals_on_topic(bootstrap: str, ids: set[str], timeout_s: float) -> set[str]:
    """The article ids among ``ids`` with a proposal on the proposals topic (read from the start)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-durable-read", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        meta = c.list_topics("label-proposals", timeout=10).topics["label-proposals"]
        c.assign([TopicPartition("label-proposals", p, 0) for p in meta.partitions])
        seen: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not ids <= seen:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    seen.add(parse_event(LabelProposal, m.value()).article_id)
        return seen & ids
    finally:
        c.close()


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_restart_of_serve_loses_nothing_a_user_did(standalone, stop):
    home, corpus, start, s = standalone
    proc, client, broker = start(1)
    # a rule, a rename of a label the memory knows
    r = client.put(f"/v1/labels/{RULE}", json={"kwes": [KWE]})
    assert r.status_code in (200, 202), r.text
    known = sorted({lb for a in corpus.split("train")[:60] for lb in a.labels})
    old = next(lb for lb in known if ":" not in lb and lb != RULE)
    r = client.post(f"/v1/labels/{old}/rename", json={"new_label": f"{old}-renamed"})
    assert r.status_code in (200, 202), r.text
    # 50 articles published with `newsmon publish` (issue 43: it finds the broker in the home and answers once the
    # journal has them), 20 decisions on them sent to its API, a decision taken back (an undo), then the stop at once
    articles = corpus.split("test")[:50]
    file = home.parent / "articles.jsonl"
    file.write_text("".join(a.model_dump_json() + "\n" for a in articles), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "NEWSMON_KAFKA__BOOTSTRAP_SERVERS"}
    res = subprocess.run([sys.executable, "-m", "newsmon.cli", "publish", str(file)], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env={**env, "NEWSMON_HOME": str(home)})
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["published"] == 50 and summary["journal"] == str(home / "broker" / "journal.sqlite"), summary
    decided = {a.id: "client:decided" for a in articles[:20]}
    for article_id, label in decided.items():
        r = client.post("/v1/decisions", json={"article_id": article_id, "moderator": "ana",
                                               "decisions": [{"label": label, "action": "added"}]})
        assert r.status_code in (200, 202), r.text
    stored = corpus.split("train")[0].id  # in the memory: the decision and its undo apply at once
    undone = {"article_id": stored, "moderator": "ana", "decisions": [{"label": "client:undone", "action": "added"}]}
    r = client.post("/v1/decisions", json=undone)
    assert r.status_code == 200, r.text
    taken_back = r.json()["decision"]["decided_at"]
    r = client.post("/v1/decisions", json={**undone, "undoes": taken_back})
    assert r.status_code == 200 and r.json()["decision"]["undoes"] == taken_back, r.text
    proc.send_signal(stop)
    proc.wait(60)
    assert wait_for(lambda: not _alive(broker["pid"]), 2, "the broker to die with its parent")
    # the restart: everything is there
    proc, client, broker = start(2)
    assert json.loads((home / "broker" / "broker.json").read_text())["pid"] == broker["pid"]
    view = client.get(f"/v1/labels/{RULE}").json()
    assert view["status"] == "active" and view["definition"]["kwes"] == [KWE], view
    view = client.get(f"/v1/labels/{old}-renamed").json()
    assert view["renamed_from"] == [old], view
    assert client.get(f"/v1/labels/{old}").json()["status"] == "renamed"
    ids = {a.id for a in articles}
    found = proposals_on_topic(broker["bootstrap"], ids, 240)
    assert found == ids, f"{len(found)} of 50 proposals after the restart; missing {sorted(ids - found)[:5]}"
    # the decisions: applied in the memory (read once the server stopped and released it)
    def all_applied():
        r = client.get("/metrics").text
        return "newsmon_parked_decisions 0.0" in r
    wait_for(all_applied, 120, "no decision left parked")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert not _alive(broker["pid"])
    from newsmon.shared.classifier import model_identity
    from newsmon.shared.memory import MemoryRouter

    version, dim = model_identity(s)
    router = MemoryRouter(s, version, dim)
    try:
        found_points = {a: router.find(a) for a in decided}
        applied = {a for a, f in found_points.items() if f is not None and decided[a] in f[1].labels}
        was_undone = router.find(stored)
    finally:
        router.close()
    assert applied == set(decided), f"{len(applied)} of 20 decisions applied; missing {sorted(set(decided) - applied)}"
    assert was_undone is not None and "client:undone" not in was_undone[1].labels, was_undone
    undone_at = [datetime.fromisoformat(t) for t in was_undone[1].payload.get("undone", ())]
    assert datetime.fromisoformat(taken_back.replace("Z", "+00:00")) in undone_at, was_undone[1].payload


def test_a_truncated_calibration_record_is_a_state_not_a_failure_per_article(standalone):
    """A calibration record cut short (truncated JSON): ``/readyz`` 503 naming the record's file and how to recover,
    ``/v1/suggest`` 503 saying the same (was: 500 Internal Server Error), the articles streamed meanwhile are not
    dead-lettered (were: every one, ``processing_failed`` at ``retrieve_and_score``) but wait; once the record is
    written again the server is ready and proposes them."""
    from newsmon.shared.classifier import model_identity
    from newsmon.shared.memory import collection_name
    from newsmon.shared.scoring.records import CalibrationRecord, CalibrationStore

    home, corpus, start, s = standalone
    version, _dim = model_identity(s)
    collection = collection_name(s.memory.collection_prefix, "sl", version)
    record = CalibrationRecord(collection=collection, language="sl", model_version=version,
                               params={"top_k": 50}, objective="micro_f1")
    CalibrationStore(s).write(record)
    path = s.memory_path / "calibration" / f"{collection}.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    proc, client, broker = start(1, ready=False)
    r = wait_for(lambda: (lambda x: x if "calibration" in x.json().get("checks", {}) else None)(client.get("/readyz")),
                 60, "/readyz with its checks")
    assert r.status_code == 503 and str(path) in r.json()["checks"]["calibration"], r.text
    assert "newsmon tune" in r.json()["checks"]["calibration"], r.text
    r = client.post("/v1/suggest", json={"text": corpus.split("test")[0].text, "lang": "sl"})
    assert r.status_code == 503 and str(path) in r.json()["detail"] and "newsmon tune" in r.json()["detail"], r.text
    articles = corpus.split("test")[:3]
    producer = Producer({"bootstrap.servers": broker["bootstrap"], "acks": "all"})
    for a in articles:
        ev = article_event(a)
        producer.produce("articles", key=ev.kafka_key(), value=ev.to_bytes())
    assert producer.flush(30) == 0
    time.sleep(15)  # the classifier meets the record meanwhile
    assert _count(broker["bootstrap"], "articles.dlq") == 0, "an article was dead-lettered for the record"
    path.write_text(text)  # fixed (as `newsmon tune` would write it again)
    wait_for(lambda: client.get("/readyz").status_code == 200, 60, "ready once the record is fixed")
    ids = {a.id for a in articles}
    assert proposals_on_topic(broker["bootstrap"], ids, 180) == ids
    assert _count(broker["bootstrap"], "articles.dlq") == 0


def _count(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-durable-count"})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions)
    finally:
        c.close()


def test_a_decision_with_more_labels_than_the_limit_is_refused_on_every_path(standalone):
    """A decision naming 20,000 labels was accepted (3.6 s) and a near-copy's proposal then carried them all. Now,
    beyond ``limits.decision_labels`` (default 1000): 422 naming the limit on the API (at once, before the labels
    are validated), dead-lettered ``too_large`` at stage ``validate`` on the decisions topic."""
    home, corpus, start, s = standalone
    proc, client, broker = start(1)
    article = corpus.split("train")[0].id
    many = [{"label": f"client:l{i}", "action": "added"} for i in range(1001)]
    t0 = time.perf_counter()
    r = client.post("/v1/decisions", json={"article_id": article, "moderator": "ana", "decisions": many})
    assert r.status_code == 422 and "limits.decision_labels = 1000" in r.json()["detail"], r.text
    assert time.perf_counter() - t0 < 5
    ok = client.post("/v1/decisions", json={"article_id": article, "moderator": "ana", "decisions": many[:1000]})
    assert ok.status_code in (200, 202), ok.text
    body = json.dumps({"schema_version": 1, "article_id": article, "moderator": "ana", "decided_at":
                       "2026-12-01T00:00:00Z", "decisions": many}).encode()
    producer = Producer({"bootstrap.servers": broker["bootstrap"], "acks": "all"})
    producer.produce("moderator-decisions", key=article.encode(), value=body)
    assert producer.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker["bootstrap"], "group.id": "test-durable-dlq",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["moderator-decisions.dlq"])
    try:
        def dead_letter():
            for m in c.consume(10, 0.5):
                if m.error() is None:
                    return dict(m.headers() or [])
            return None
        headers = wait_for(dead_letter, 120, "the decision on the dead-letter topic")
    finally:
        c.close()
    assert headers["newsmon-reason"] == b"too_large" and headers["newsmon-stage"] == b"validate", headers
    assert b"limits.decision_labels" in headers.get("newsmon-error", b""), headers


def test_a_full_suggest_queue_answers_503_with_retry_after_and_health_stays_quick(standalone):
    """Issue 39 item 2: with more articles waiting than ``api.queue_max_articles`` a request is refused at once, 503
    with ``Retry-After`` (was: every request waited on a lock in a worker thread, p99 up to 108 s), the others are
    scored together, and ``/healthz`` answers meanwhile (was: up to 12.7 s behind the scoring)."""
    import concurrent.futures

    home, corpus, start, s = standalone
    proc, client, broker = start(1, NEWSMON_API__QUEUE_MAX_ARTICLES="2", NEWSMON_ENCODER__CACHE="false")
    texts = [a.text for a in corpus.split("test")[:12]]

    def post(text):
        with httpx.Client(base_url=str(client.base_url), timeout=120) as c:
            return c.post("/v1/suggest", json={"text": text, "lang": "sl"})

    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        pending = [pool.submit(post, t) for t in texts]
        health = []
        while not all(f.done() for f in pending):  # while the scoring runs
            t0 = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            health.append(time.perf_counter() - t0)
            time.sleep(0.1)
        answers = [f.result() for f in pending]
    assert health, "the requests ended before /healthz was asked"
    codes = sorted(r.status_code for r in answers)
    busy = [r for r in answers if r.status_code == 503]
    assert set(codes) == {200, 503} and busy, codes
    assert all(int(r.headers["retry-after"]) >= 1 and "api.queue_max_articles = 2" in r.json()["detail"]
               for r in busy), [r.text for r in busy]
    assert max(health) < 1.0, health
