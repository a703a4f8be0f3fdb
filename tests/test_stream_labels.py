"""Labels defined by analysts' KwEs, through the stream, against the real things (the Tansu broker process, the
embedded Qdrant engine on a temp dir, real Redis, the real e5-small weights, real Slovene news): a label defined by
a LabelEvent with a KwE and no examples is proposed for the first matching article (``source: rule``) and never
again after its retire event; a definition with a bad KwE is dead-lettered with the position.

The helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from newsmon.demo import article_event
from newsmon.schemas import LabelDefinition, LabelEvent, dead_letter_topic
from test_stream import Collector, corpus, publish, runtime_factory, variant  # noqa: F401 (fixtures)

LABEL = "client:mercator"
KWE = "mercator* OR merkator*"


def wait(pred, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def send(s, *events: LabelEvent) -> None:
    publish(s, s.kafka.topic_label_events, [(e.kafka_key(), e.to_bytes()) for e in events])


def test_label_defined_by_event_proposed_by_its_rule_then_retired(runtime_factory, corpus):
    s, rt = runtime_factory()  # a memory of 150 real train articles, none of them labelled LABEL
    rt.start()
    hits = [a for a in corpus.split("test") if "Mercator" in a.text][:4]
    miss = next(a for a in corpus.split("test") if "ercator" not in a.text)
    out = Collector(s, s.kafka.topic_proposals)
    dlq = Collector(s, dead_letter_topic(s.kafka.topic_label_events))
    try:
        now = datetime.now(timezone.utc)
        bad = json.loads(LabelEvent(action="defined", label="client:bad", occurred_at=now,
                                    definition=LabelDefinition(kwes=["x"])).to_bytes())
        bad["definition"]["kwes"] = ["mercator OR"]
        publish(s, s.kafka.topic_label_events, [(b"client:bad", json.dumps(bad).encode())])
        send(s, LabelEvent(action="defined", label=LABEL, occurred_at=now, actor="analyst",
                           definition=LabelDefinition(kwes=[KWE])))
        wait(lambda: LABEL in rt.registry.snapshot().definitions, 30, "the definition in the registry")
        dlq.wait_for(lambda c: len(c.messages) == 1, 30, "the bad definition's dead letter")
        reason = dict(dlq.messages[0].headers())["newsmon-error"].decode()
        assert "definition.kwes.0" in reason and "position" in reason, reason
        assert "client:bad" not in rt.registry.snapshot().definitions

        publish(s, s.kafka.topic_articles, [(e.kafka_key(), e.to_bytes()) for e in map(article_event,
                                                                                        [miss, hits[0]])])
        out.wait_for(lambda c: {miss.id, hits[0].id} <= set(c.proposals()), 120, "the first two proposals")
        first = {x.label: x for x in out.proposals()[hits[0].id][0].labels}
        assert LABEL in first, out.proposals()[hits[0].id][0]
        assert first[LABEL].source == "rule" and first[LABEL].rule.kwe == KWE
        assert any("Mercator" in w for w in first[LABEL].rule.matched)
        assert LABEL not in {x.label for x in out.proposals()[miss.id][0].labels}

        send(s, LabelEvent(action="retired", label=LABEL, occurred_at=datetime.now(timezone.utc)))
        wait(lambda: LABEL in rt.registry.snapshot().retired, 30, "the retirement in the registry")
        later = [article_event(a) for a in hits[1:]]
        later += [article_event(hits[0]).model_copy(update={"article_id": f"{hits[0].id}-copy"}),  # near-copy
                  variant(hits[0], f"{hits[0].id}-retold")]
        publish(s, s.kafka.topic_articles, [(e.kafka_key(), e.to_bytes()) for e in later])
        ids = {e.article_id for e in later}
        out.wait_for(lambda c: ids <= set(c.proposals()), 120, "the proposals after the retirement")
        for i in ids:
            assert all(x.label != LABEL for p in out.proposals()[i] for x in p.labels), i
    finally:
        out.close()
        dlq.close()
