"""Group membership of the classifier workers against the real things (the Tansu broker process, the embedded
Qdrant engine, real Redis, the real e5-small weights, real Slovene news): a member joining, leaving, kicked for
exceeding ``max.poll.interval.ms``, and a worker process SIGKILLed between a produce and its commit.

The helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from newsmon.broker import free_port
from newsmon.workers.classifier_worker import ClassifierWorker
from test_stream import (Collector, committed, corpus, publish_articles, runtime_factory,  # noqa: F401 (fixtures)
                         stream_settings, wait_all_committed, wait_until)

REPO = Path(__file__).resolve().parents[1]


def second_member(s, rt, name: str) -> tuple[ClassifierWorker, threading.Event]:
    """Start another classifier in the group (same process, its own stop event); returns it and the event."""
    stop = threading.Event()
    w = ClassifierWorker(s, rt.classifier, rt.dedup, rt.registry, instance=name)
    t = threading.Thread(target=w.run, args=(stop,), daemon=True)
    t.start()
    rt.threads.append(t)
    return w, stop


def test_rebalance_a_member_joins_then_leaves_mid_stream(runtime_factory, corpus):
    s, rt = runtime_factory(batch_max_messages=4)
    cache, rt.classifier.encoder.cache = rt.classifier.encoder.cache, None  # real embedding: the stream lasts
    rt.start()
    first = next(w for w in rt.workers if w.name == "classifier")
    out = Collector(s, s.kafka.topic_proposals)
    articles = corpus.split("train")[150:270]
    try:
        publish_articles(s, articles)
        out.wait_for(lambda c: len(c.proposals()) >= 12, 120, "the first proposals")
        second, stop_second = second_member(s, rt, "classifier-second")
        wait_until(lambda: second.batches > 0, 120, "the second member to get partitions and work")
        n_assigned = first.group_events["assigned"]
        stop_second.set()  # the second member leaves: its batch is finished and committed, its partitions move
        wait_until(lambda: first.group_events["assigned"] > n_assigned, 60, "the first member to take them back")
        out.wait_for(lambda c: {a.id for a in articles} <= set(c.proposals()), 300, "every article")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        assert all(t.is_alive() for t in rt.threads[:2])
    finally:
        out.close()
        rt.stop.set()
        rt.wait()
        rt.classifier.encoder.cache = cache


def test_member_kicked_after_max_poll_interval_rejoins_and_loses_nothing(runtime_factory, corpus):
    """A loop stuck past ``max.poll.interval.ms`` gets its member removed from the group; its commit fails.
    The worker drops the batch's offsets, rejoins and goes on: every article is proposed and committed, nothing
    stops (before the error policy, the failed commit ended both workers). A slow stage no longer does this (the
    loop polls while a batch is handled, test_stream_budget.py): the loop itself is held here, between a batch's
    produce and its commit."""
    s, rt = runtime_factory(batch_max_messages=4)
    s.kafka.session_timeout_ms = 6000
    s.kafka.max_poll_interval_ms = 10000  # the lowest the settings allow (librdkafka: >= session.timeout.ms)
    worker = next(w for w in rt.workers if w.name == "classifier")
    slow = {"left": 1}

    def stuck_once(msgs):  # the loop thread itself, once, far past max.poll.interval.ms
        if slow["left"]:
            slow["left"] -= 1
            time.sleep(16)

    worker.after_produce = stuck_once
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    articles = corpus.split("test")[:12]
    try:
        publish_articles(s, articles)
        out.wait_for(lambda c: {a.id for a in articles} <= set(c.proposals()), 180, "every article")
        wait_until(lambda: worker.group_events["commit_failed"] + worker.group_events["lost"] > 0, 30,
                   "the kicked member's failed commit or lost partitions")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles, timeout_s=90)
        assert not rt.stop.is_set() and all(t.is_alive() for t in rt.threads)
        assert worker.group_events["assigned"] >= 2  # it rejoined
    finally:
        out.close()


KILL_AFTER_PRODUCE = """
import json, os, signal, sys
from newsmon.workers.base import BatchWorker

def kill_after_produce(worker, msgs, state={"batches": 0}):
    # after the batch's proposals were acknowledged, before its offsets are committed
    state["batches"] += 1
    if worker.name == "classifier" and state["batches"] == int(os.environ["KILL_AT_BATCH"]):
        with open(os.environ["KILL_RECORD"], "w") as f:
            json.dump([[m.partition(), m.offset(), m.key().decode()] for m in msgs], f)
        os.kill(os.getpid(), signal.SIGKILL)

BatchWorker.after_produce = kill_after_produce
from newsmon.cli import app
app(["worker", "classifier"])
"""


def worker_env(s, port: int, redis_url: str) -> dict:
    return {**os.environ, "NEWSMON_HOME": str(s.home), "NEWSMON_ENCODER__MODEL": s.encoder.model,
            "NEWSMON_MEMORY__PATH": str(s.memory.path),
            "NEWSMON_ENCODER__MAX_LENGTH": "128", "NEWSMON_KAFKA__BOOTSTRAP_SERVERS": s.kafka.bootstrap_servers,
            "NEWSMON_KAFKA__TOPIC_ARTICLES": s.kafka.topic_articles,
            "NEWSMON_KAFKA__TOPIC_PROPOSALS": s.kafka.topic_proposals,
            "NEWSMON_KAFKA__TOPIC_DECISIONS": s.kafka.topic_decisions,
            "NEWSMON_KAFKA__TOPIC_LABEL_EVENTS": s.kafka.topic_label_events,
            "NEWSMON_KAFKA__CLASSIFIER_GROUP": s.kafka.classifier_group,
            "NEWSMON_KAFKA__SESSION_TIMEOUT_MS": "6000", "NEWSMON_WORKER__BATCH_MAX_MESSAGES": "32",
            "NEWSMON_KAFKA__TOPIC_PARTITIONS": str(s.kafka.topic_partitions),  # checked at start-up
            "NEWSMON_WORKER__REDIS_URL": redis_url, "NEWSMON_WORKER__REDIS_NAMESPACE": s.worker.redis_namespace,
            "NEWSMON_WORKER__HTTP_PORT": str(port), "NEWSMON_WORKER__HTTP_HOST": "127.0.0.1",
            "NEWSMON_LOG_FORMAT": "json"}


def test_sigkill_between_produce_and_commit_repeats_exactly_that_batch(tansu, newsmon_home, tmp_path, redis_url,
                                                                     corpus, encoder):
    """400 real articles in, a proposal for every one out, while the classifier process is SIGKILLed by a hook
    right after a batch's proposals were acknowledged and before its offsets were committed; after the restart
    exactly that batch is proposed again (same keys), nothing else. Also checks /metrics, /healthz, /readyz."""
    from newsmon.shared.classifier import Classifier

    s = stream_settings(tansu, newsmon_home, tmp_path, redis_url, batch_max_messages=32)
    s.encoder.max_length = 128  # keeps the stream quick on 2 cores
    train = corpus.split("train")
    clf = Classifier(s)
    clf.add_articles(train[:300])
    clf.close()  # releases the embedded memory for the worker process
    stream = (train[300:] + corpus.split("validation") + corpus.split("test"))[:400]
    port = free_port()
    env = {**worker_env(s, port, redis_url), "KILL_AT_BATCH": "4", "KILL_RECORD": str(tmp_path / "killed.json")}
    out = Collector(s, s.kafka.topic_proposals)
    procs = []
    try:
        publish_articles(s, stream)
        procs.append(subprocess.Popen([sys.executable, "-c", KILL_AFTER_PRODUCE], env=env, cwd=REPO,
                                      stdout=open(tmp_path / "worker1.log", "wb"), stderr=subprocess.STDOUT))
        out.wait_for(lambda c: len(c.messages) >= 32, 300, "the first proposals")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'newsmon_articles_total{outcome="proposed"}' in metrics and "newsmon_batch_seconds" in metrics
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200
        ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status == 200
        assert json.loads(ready.read())["memory"] == {"mode": "embedded", "path": str(s.memory.path)}
        assert procs[0].wait(300) == -signal.SIGKILL  # the hook killed it
        killed = json.loads((tmp_path / "killed.json").read_text())
        killed_ids = {key for _p, _o, key in killed}
        assert 0 < len(killed) <= 32
        out.wait_for(lambda c: killed_ids <= set(c.proposals()), 30, "the killed batch's proposals (acknowledged)")
        at_kill = committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        for part, offset, _key in killed:  # produced, never committed: the kill landed between the two
            assert at_kill[part] <= offset
        procs.append(subprocess.Popen([sys.executable, "-m", "newsmon.cli", "worker", "classifier"],
                                      env={**env, "KILL_AT_BATCH": "0"}, cwd=REPO,
                                      stdout=open(tmp_path / "worker2.log", "wb"), stderr=subprocess.STDOUT))
        out.wait_for(lambda c: len(c.proposals()) >= len(stream), 600, "a proposal for every article")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles, timeout_s=60)
        procs[1].send_signal(signal.SIGTERM)  # graceful: finish the batch, commit, close
        assert procs[1].wait(60) == 0
        props = out.proposals()
        assert set(props) == {a.id for a in stream}
        repeated = {i: len(v) - 1 for i, v in props.items() if len(v) > 1}
        print(f"\n{len(stream)} articles: SIGKILL after batch 4's produce ({len(killed)} messages); "
              f"{sum(repeated.values())} proposals repeated after the restart")
        assert repeated == {i: 1 for i in killed_ids}  # exactly the uncommitted batch, once
    finally:
        out.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
