"""The stream's error policy against the real things (the Tansu broker process, the embedded Qdrant engine on a
temp dir, real Redis, the real e5-small weights, real Slovene news): one message's fault dead-letters that
message only, dead letters always fit, a failed dead-letter produce pauses visibly and recovers, metric labels
stay a closed set, a deployment's own error policy (a setting) changes what a poison message gets.

The helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from unittest import mock

import numpy as np
from confluent_kafka import Producer

from newsmon.demo import article_event
from newsmon.schemas import DeadLetterReason, DeadLetterStage, LabelDecision, ModeratorDecision, dead_letter_topic
from newsmon.workers.observability import HEALTH, REGISTRY
from newsmon.workers.policy import Action, DefaultErrorPolicy, Verdict
from test_stream import (PRODUCED, Collector, committed, corpus, publish, publish_articles,  # noqa: F401
                         runtime_factory, wait_all_committed, wait_until)

BAD_ID = "Delo 2019-03-04 #12"  # what `memory build` took from a corpus line: spaces and '#'


def publish_to_partition(s, items: list[tuple[bytes, bytes]], partition: int = 0) -> None:
    """Produce to one partition, so that the messages reach the worker in one batch."""
    p = Producer({**s.kafka.client_config(), "message.max.bytes": 200 * 1024 * 1024})

    def delivered(err, msg):
        assert err is None, err
        key = (msg.topic(), msg.partition())
        PRODUCED[key] = max(PRODUCED.get(key, 0), msg.offset() + 1)

    for key, value in items:
        p.produce(s.kafka.topic_articles, key=key, value=value, partition=partition, on_delivery=delivered)
    assert p.flush(120) == 0


def headers_of(m) -> dict[str, str]:
    return {k: v.decode() for k, v in m.headers()}


def test_a_stored_point_failing_the_output_schema_costs_one_message_at_most(runtime_factory, corpus, encoder):
    memory = corpus.split("train")[:60]
    s, rt = runtime_factory(memory)
    s.scoring.top_k = 3
    poisoned = corpus.split("train")[60]
    v = encoder.encode([poisoned.text], role="passage")
    # a point written before ids were checked on the way in (the memory refuses such ids now, and reads them)
    with mock.patch("newsmon.shared.memory.base.check_article_id", lambda i: i):
        rt.router.memory("sl").upsert([BAD_ID], v, [("gospodarstvo",)], [{"lang": "sl", "title": poisoned.title}])
    tests = corpus.split("test")
    sims = encoder.encode([a.text for a in tests], role="query") @ v[0]
    unrelated = tests[int(np.argmin(sims))]  # the bad point is nowhere near its top 3
    near = article_event(poisoned).model_copy(update={"article_id": "near-the-bad-point"})
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_articles))
    worker = next(w for w in rt.workers if w.name == "classifier")
    try:
        publish_to_partition(s, [(near.kafka_key(), near.to_bytes()),
                                 (unrelated.id.encode(), article_event(unrelated).to_bytes())])
        out.wait_for(lambda c: unrelated.id in c.proposals(), 120, "the unrelated article's proposal")
        wait_until(lambda: "near-the-bad-point" in out.proposals() or dlq.messages, 60, "the poisoned article")
        if dlq.messages:  # dead-lettered: that message alone, with the code, the stage and the reason in words
            (m,) = dlq.messages
            h = headers_of(m)
            assert m.key() == b"near-the-bad-point" and m.value() == near.to_bytes()
            assert h["newsmon-reason"] == DeadLetterReason.OUTPUT_INVALID
            assert h["newsmon-stage"] == DeadLetterStage.RETRIEVE_AND_SCORE
            assert BAD_ID in h["newsmon-error"]
        else:  # or proposed without the bad neighbour
            refs = {n.article_id for x in out.proposals()["near-the-bad-point"][0].labels for n in x.neighbours}
            assert BAD_ID not in refs
        later = tests[1] if tests[1].id != unrelated.id else tests[2]
        publish_articles(s, [later])
        out.wait_for(lambda c: later.id in c.proposals(), 60, "a later article's proposal")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        assert not rt.stop.is_set() and all(t.is_alive() for t in rt.threads)
        assert worker.pauses == 0
    finally:
        out.close()
        dlq.close()


def test_a_text_no_encoder_can_take_is_dead_lettered_alone(runtime_factory, corpus):
    """A lone surrogate passes JSON and pydantic, but no UTF-8 exists for it: the tokenizer, the embedding cache
    and the memory's payload all refuse it. Validation refuses it first; the article beside it is proposed."""
    s, rt = runtime_factory(corpus.split("train")[:40])
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_articles))
    good = corpus.split("test")[0]
    ev = json.loads(article_event(good).to_bytes())
    # a lone surrogate: valid JSON, a Python str, but no UTF-8 encoding exists for it
    bad = json.dumps(ev | {"article_id": "lone-surrogate", "body": ev["body"][:400] + " \ud800 konec"}).encode()
    try:
        publish_to_partition(s, [(b"lone-surrogate", bad), (good.id.encode(), article_event(good).to_bytes())])
        out.wait_for(lambda c: good.id in c.proposals(), 120, "the good article's proposal")
        dlq.wait_for(lambda c: len(c.messages) == 1, 60, "the dead letter")
        h = headers_of(dlq.messages[0])
        assert dlq.messages[0].key() == b"lone-surrogate"
        assert (h["newsmon-reason"], h["newsmon-stage"]) == ("schema_violation", "validate")
        assert "not valid Unicode" in h["newsmon-error"]
        assert "lone-surrogate" not in out.proposals()
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
    finally:
        out.close()
        dlq.close()


def lone_surrogate_event(good, article_id: str) -> bytes:
    """Valid JSON and a Python str, but no UTF-8 encoding exists for it: refused at validation."""
    ev = json.loads(article_event(good).to_bytes())
    return json.dumps(ev | {"article_id": article_id, "body": ev["body"][:400] + " \ud800 konec"}).encode()


def strict_policy(settings):
    """A deployment's error policy (NEWSMON_WORKER__ERROR_POLICY="test_stream_policy:strict_policy"): a message
    that the default policy would dead-letter holds its partition instead (pause), until an operator acts."""
    default = DefaultErrorPolicy(settings)

    def policy(failure):
        verdict = default(failure)
        if verdict.action is Action.DEAD_LETTER:
            return Verdict.pause(f"strict policy holds {failure.detail}")
        return verdict
    return policy


def test_a_custom_error_policy_named_by_a_setting_changes_what_a_poison_message_gets(runtime_factory, corpus):
    s, rt = runtime_factory(corpus.split("train")[:40], error_policy="test_stream_policy:strict_policy",
                            pause_backoff_s=0.5, pause_backoff_max_s=1.0)
    worker = next(w for w in rt.workers if w.name == "classifier")
    assert not isinstance(worker.policy, DefaultErrorPolicy)
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_articles))
    good = corpus.split("test")[0]
    try:
        publish_to_partition(s, [(b"held", lone_surrogate_event(good, "held")),
                                 (good.id.encode(), article_event(good).to_bytes())])
        wait_until(lambda: worker.pauses >= 2, 120, "the strict policy to pause on the poison message, again")
        ready, info = HEALTH.ready()
        assert not ready and "strict policy holds stage validate" in json.dumps(info)
        assert not dlq.messages and good.id not in out.proposals()
        poison_offset = PRODUCED[(s.kafka.topic_articles, 0)] - 2
        assert committed(s, s.kafka.classifier_group, s.kafka.topic_articles)[0] <= poison_offset
        worker.policy = DefaultErrorPolicy(s)  # the operator's fix: the default policy dead-letters it
        dlq.wait_for(lambda c: len(c.messages) == 1, 60, "the poison message's dead letter")
        h = headers_of(dlq.messages[0])
        assert dlq.messages[0].key() == b"held" and (h["newsmon-reason"], h["newsmon-stage"]) == (
            "schema_violation", "validate")
        out.wait_for(lambda c: good.id in c.proposals(), 120, "the article behind it")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        wait_until(lambda: HEALTH.ready()[0], 30, "/readyz ready again")
    finally:
        out.close()
        dlq.close()


def huge_event(good, article_id: str, mb: int = 70) -> bytes:
    ev = json.loads(article_event(good).to_bytes())
    return json.dumps(ev | {"article_id": article_id, "body": "beseda " * (mb * 1024 * 1024 // 7)}).encode()


def test_huge_event_is_dead_lettered_cut_and_a_failing_dead_letter_pauses_visibly(runtime_factory, corpus):
    """A 70 MB ArticleEvent (the broker accepts it) is dead-lettered cut to the limit, with its reason, topic,
    partition and offset, and the next article is proposed. When even the dead letter cannot be produced (a
    limit above the producer's), the worker pauses, says so in /readyz and the metrics, commits nothing past
    it, and goes on once the produce succeeds."""
    s, rt = runtime_factory(corpus.split("train")[:40], pause_backoff_s=0.5, pause_backoff_max_s=2.0)
    rt.start()
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_articles))
    worker = next(w for w in rt.workers if w.name == "classifier")
    good, after, last = corpus.split("test")[:3]
    try:
        huge = huge_event(good, "huge-1")
        publish_to_partition(s, [(b"huge-1", huge), (after.id.encode(), article_event(after).to_bytes())])
        out.wait_for(lambda c: after.id in c.proposals(), 180, "the article after the 70 MB one")
        dlq.wait_for(lambda c: len(c.messages) == 1, 60, "the 70 MB event's dead letter")
        m = dlq.messages[0]
        h = headers_of(m)
        assert len(m.value()) < s.worker.dead_letter_max_bytes and huge.startswith(m.value())
        assert h["newsmon-reason"] == "too_large" and h["newsmon-stage"] == "validate"
        assert h["newsmon-truncated"] == str(len(huge))
        assert h["newsmon-original-sha256"] == hashlib.sha256(huge).hexdigest()
        assert h["newsmon-source-topic"] == s.kafka.topic_articles and h["newsmon-source-partition"] == "0"
        assert int(h["newsmon-source-offset"]) >= 0
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        before = committed(s, s.kafka.classifier_group, s.kafka.topic_articles)

        failures = REGISTRY.get_sample_value("newsmon_produce_failures_total",
                                             {"topic": dead_letter_topic(s.kafka.topic_articles)}) or 0
        # above what the producer may send (64 MiB), as a broker or client limit below the setting would be: the
        # dead letter is not cut, and its produce fails with MSG_SIZE_TOO_LARGE
        s.worker.dead_letter_max_bytes = 100 * 1024 * 1024
        publish_to_partition(s, [(b"huge-2", huge_event(good, "huge-2")),
                                 (last.id.encode(), article_event(last).to_bytes())])
        wait_until(lambda: not HEALTH.ready()[0], 120, "/readyz to report the pause")
        assert "produce failing" in json.dumps(HEALTH.ready()[1])
        assert REGISTRY.get_sample_value("newsmon_produce_failures_total",
                                         {"topic": dead_letter_topic(s.kafka.topic_articles)}) > failures
        assert REGISTRY.get_sample_value("newsmon_worker_paused", {"worker": "classifier"}) == 1
        assert committed(s, s.kafka.classifier_group, s.kafka.topic_articles)[0] == before[0]
        s.worker.dead_letter_max_bytes = 1_000_000  # the operator's fix: the retry goes through
        dlq.wait_for(lambda c: len(c.messages) == 2, 120, "the second dead letter")
        out.wait_for(lambda c: last.id in c.proposals(), 120, "the article behind it")
        wait_all_committed(s, s.kafka.classifier_group, s.kafka.topic_articles)
        assert HEALTH.ready()[0] and worker.pauses >= 1 and not rt.stop.is_set()
    finally:
        out.close()
        dlq.close()


#: what each bounded label may hold: closed sets, or a name from the settings (topics, groups) / a number
CLOSED = {"reason": {x.value for x in DeadLetterReason}, "event": {"assigned", "revoked", "lost", "commit_failed",
          "consumer_recreated"}, "worker": {"classifier", "memory-updater"},
          "action": {"added", "retired", "renamed", "defined", "updated"},
          "outcome": {"proposed", "duplicate", "dead_letter", "applied", "stale", "clamped", "parked"},
          "stage": {x.value for x in DeadLetterStage} | {"none", "dedup", "embed", "search_score", "rules", "total"}}


def test_metric_labels_stay_a_closed_set_after_poison_inputs(runtime_factory, corpus):
    # decisions on articles that never arrive: parked, dead-lettered when they expire (after a second here)
    s, rt = runtime_factory(corpus.split("train")[:40], decision_park_s=1.0, decision_park_check_s=0.5)
    rt.start()
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_decisions))
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    unknown = [f"Delo_2019-03-0{i}_#1{i}" for i in range(1, 4)]  # valid ids, unknown to the memory
    try:
        publish(s, s.kafka.topic_articles, [(b"x", b'{"article_id": "free text here", '),
                                            (b"y", json.dumps({"schema_version": 7, "article_id": "z z"}).encode())])
        decisions = [ModeratorDecision(article_id=i, moderator="ana", decided_at=datetime.now(
            timezone.utc), decisions=[LabelDecision(label="client:x", action="added")]) for i in unknown]
        publish(s, s.kafka.topic_decisions, [(d.kafka_key(), d.to_bytes()) for d in decisions]
                + [(b"bad", "not json at all, neznani članek ".encode() + unknown[0].encode())])
        dlq.wait_for(lambda c: len(c.messages) == 4, 60, "four dead-lettered decisions")
        assert updater.outcomes["unknown"] == 3
        assert {headers_of(m)["newsmon-reason"] for m in dlq.messages} == {"unknown_article", "invalid_json"}
        wait_until(lambda: REGISTRY.get_sample_value("newsmon_dead_letters_total", {
            "topic": s.kafka.topic_articles, "reason": "invalid_json", "stage": "validate"}) is not None, 60,
            "the articles' dead letters")
        bad = []
        for metric in REGISTRY.collect():
            for sample in metric.samples:
                for name, value in sample.labels.items():  # topics and groups: names from the settings
                    ok = value in CLOSED[name] if name in CLOSED else re.fullmatch(
                        {"partition": r"\d+", "le": r"[\d.e+-]+|\+Inf"}.get(name, r"[\w.-]+"), value)
                    if not ok or any(x in value for x in ("Delo", "neznani", "free", "z z")):
                        bad.append(f"{sample.name}{{{name}={value!r}}}")
        assert not bad, bad
    finally:
        dlq.close()
