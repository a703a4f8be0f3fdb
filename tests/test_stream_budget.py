"""Time budgets per stage against the real things (a classifier worker process, the Tansu broker process, the
embedded Qdrant engine, real Redis, the real e5-small weights, real Slovene news): an article whose label-rules
stage never ends is dead-lettered ``too_slow`` within the budget, the rest of its batch is proposed, the consumer
keeps its partitions past ``max.poll.interval.ms``; SIGTERM during a slow stage ends the process within
``worker.shutdown_grace_s``, leaving that batch uncommitted.

The slow stage is a pure-Python loop (a Python call cannot be killed, only left behind), patched into the worker
process for the articles that carry a marker word. The helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from test_stream import Collector, committed, corpus, stream_settings, wait_all_committed, wait_until  # noqa: F401
from test_stream_membership import worker_env
from test_stream_policy import headers_of, publish_to_partition

from newsmon.broker import free_port
from newsmon.demo import article_event
from newsmon.schemas import dead_letter_topic

REPO = Path(__file__).resolve().parents[1]
MARKER = "polzevito"

SLOW_LABEL_RULES = """
import os, time
from newsmon.workers.pipeline import ArticlePipeline

rules = ArticlePipeline.match_rules

def match_rules(self, batch):  # pure Python, never yields the call: as a pathological rule would
    slow = [it.event.article_id for it in batch.items if os.environ["MARKER"] in it.text]
    if slow:
        with open(os.environ["SLOW_LOG"], "a") as f:
            f.write(" ".join(slow) + "\\n")
        end = time.monotonic() + float(os.environ["SLOW_S"])
        while time.monotonic() < end:
            sum(range(2000))
    return rules(self, batch)

ArticlePipeline.match_rules = match_rules
from newsmon.cli import app
app(["worker", "classifier"])
"""


def metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            total += float(m.group(2))
    return total


def test_a_pathologically_slow_stage_is_dead_lettered_too_slow_and_the_member_keeps_its_partitions(
        tansu, newsmon_home, tmp_path, redis_url, corpus, encoder):
    from newsmon.shared.classifier import Classifier

    s = stream_settings(tansu, newsmon_home, tmp_path, redis_url)
    s.encoder.max_length = 128
    clf = Classifier(s, encoder=encoder)
    clf.add_articles(corpus.split("train")[:40])
    clf.router.close()  # releases the embedded memory for the worker process
    port, budget = free_port(), 5.0
    env = {**worker_env(s, port, redis_url), "MARKER": MARKER, "SLOW_S": "60",
           "NEWSMON_HOME": str(newsmon_home),  # its ONNX artefact is built once per test home, not per test
           "SLOW_LOG": str(tmp_path / "slow.log"), "NEWSMON_WORKER__SHUTDOWN_GRACE_S": "1",
           "NEWSMON_WORKER__STAGE_BUDGET_S": str(budget), "NEWSMON_KAFKA__MAX_POLL_INTERVAL_MS": "10000"}
    tests = corpus.split("test")
    good = tests[:5]
    slow = article_event(tests[5]).model_copy(update={"article_id": "slow-one"})
    slow = slow.model_copy(update={"body": f"{slow.body} {MARKER}"})
    events = [article_event(a) for a in good[:2]] + [slow] + [article_event(a) for a in good[2:]]
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_articles))
    proc = None
    try:
        publish_to_partition(s, [(e.kafka_key(), e.to_bytes()) for e in events])  # one batch, one partition
        proc = subprocess.Popen([sys.executable, "-c", SLOW_LABEL_RULES], env=env, cwd=REPO,
                                stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT)
        out.wait_for(lambda c: {a.id for a in good} <= set(c.proposals()), 300, "the rest of the batch proposed")
        dlq.wait_for(lambda c: len(c.messages) == 1, 60, "the slow article's dead letter")
        h = headers_of(dlq.messages[0])
        assert dlq.messages[0].key() == b"slow-one" and "slow-one" not in out.proposals()
        assert (h["newsmon-reason"], h["newsmon-stage"]) == ("too_slow", "label_rules")
        assert "over its time budget of 5 s" in h["newsmon-error"]
        seen_at = time.monotonic()
        # the slow calls still run in their abandoned threads; past max.poll.interval.ms the member is still in
        later = tests[6]
        wait_until(lambda: time.monotonic() - seen_at > 11, 15, "max.poll.interval.ms to pass")
        publish_to_partition(s, [(later.id.encode(), article_event(later).to_bytes())])
        out.wait_for(lambda c: later.id in c.proposals(), 120, "a later article's proposal")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles, timeout_s=60)
        assert metric(port, "newsmon_abandoned_handlers", worker="classifier") >= 1
        for event in ("lost", "revoked", "commit_failed", "consumer_recreated"):
            assert metric(port, "newsmon_group_events_total", worker="classifier", event=event) == 0, event
        assert metric(port, "newsmon_group_events_total", worker="classifier", event="assigned") == 1
        ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status == 200 and json.loads(ready.read())["workers"]["classifier"] == "ready"
        # SIGTERM while a slow stage runs, within its budget: the process ends after the shutdown grace, the
        # batch left uncommitted (its next owner reads it again), nothing dead-lettered or proposed for it
        before = committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        again = slow.model_copy(update={"article_id": "slow-two"})
        publish_to_partition(s, [(again.kafka_key(), again.to_bytes())])
        wait_until(lambda: "slow-two" in (tmp_path / "slow.log").read_text(), 60, "the second slow stage")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        stopped_s = time.monotonic() - t0
        assert stopped_s < 30  # the chart gives 120 s
        assert "did not end within 1 s after the stop signal" in (tmp_path / "worker.log").read_text()
        assert committed(s, s.kafka.classifier_group, s.kafka.topic_articles) == before
        assert len(dlq.messages) == 1 and "slow-two" not in out.proposals()
        print(f"\ntoo_slow dead letter with a {budget:g} s budget; SIGTERM in a slow stage -> exit in "
              f"{stopped_s:.1f} s")
    finally:
        out.close()
        dlq.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
