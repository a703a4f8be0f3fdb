"""Feeding the queue (issue 43 item 1): ``newsmon publish FILE.jsonl`` puts articles on the articles topic of the
configured broker (or of the standalone ``newsmon serve`` of the same home), reporting each bad line and the counts;
``POST /v1/suggest?publish=true`` puts its proposals on the proposals topic, where the console's queue reads them.
The real Tansu broker, real Redis-free embedded memory, the real e5-small weights and real Slovene news; the
tutorial run from a fresh home, in a real browser, is tests/test_console_tutorial.py."""

from __future__ import annotations

import json
import subprocess
import sys

from test_api import wait_for
from test_stream import Collector, corpus, publish, stream_settings  # noqa: F401 (fixtures)
from typer.testing import CliRunner

from newsmon.cli import app
from newsmon.demo import article_event
from newsmon.schemas import ArticleEvent, LabelProposal, parse_event


def lines_of(corpus) -> list[str]:
    """Corpus lines (two test articles, one train article), an ArticleEvent, and four bad lines."""
    tests, train = corpus.split("test")[:2], corpus.split("train")[0]
    rows = [a.model_dump(mode="json") | {"split": a.split} for a in (*tests, train)]
    event = json.loads(article_event(corpus.split("test")[2]).model_copy(update={"article_id": "ev-1"}).to_bytes())
    return [json.dumps(rows[0], ensure_ascii=False), "{not json", json.dumps(rows[1], ensure_ascii=False),
            json.dumps({**rows[0], "id": "bad-lang", "lang": "xx"}, ensure_ascii=False),
            json.dumps(rows[2], ensure_ascii=False), json.dumps(event, ensure_ascii=False),
            json.dumps(rows[0], ensure_ascii=False), "[1, 2]"]


def test_publish_puts_the_articles_on_the_topic_and_reports_bad_lines(tansu, newsmon_home, tmp_path, redis_url,
                                                                     corpus, monkeypatch):
    s = stream_settings(tansu, newsmon_home, tmp_path, redis_url)
    file = tmp_path / "articles.jsonl"
    file.write_text("\n".join(lines_of(corpus)) + "\n", encoding="utf-8")
    for key, value in (("NEWSMON_HOME", str(s.home)), ("NEWSMON_KAFKA__BOOTSTRAP_SERVERS", tansu.bootstrap),
                       ("NEWSMON_KAFKA__TOPIC_ARTICLES", s.kafka.topic_articles)):
        monkeypatch.setenv(key, value)
    out = Collector(s, s.kafka.topic_articles)
    try:
        res = CliRunner().invoke(app, ["publish", str(file), "--split", "test"])
        assert res.exit_code == 0, res.output
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        assert summary["published"] == 3 and summary["bad_lines"] == 4 and summary["topic"] == s.kafka.topic_articles
        for line, why in ((2, "invalid JSON"), (4, "lang"), (7, "duplicate id"), (8, "not a JSON object")):
            assert f"skipped line {line}: " in res.stderr and why in res.stderr, (line, res.stderr)
        out.wait_for(lambda c: len(c.messages) >= 3, 30, "the published articles")
        events = [parse_event(ArticleEvent, m.value()) for m in out.messages]
        tests = corpus.split("test")
        # the train line left out; the order across partitions is the consumer's (each key keeps its own order)
        assert sorted(e.article_id for e in events) == sorted([tests[0].id, tests[1].id, "ev-1"])
        assert [m.key() for m in out.messages] == [e.kafka_key() for e in events]
        assert events[0].body and events[0].lang == "sl"
    finally:
        out.close()


def test_publish_without_a_broker_says_how_to_get_one(tmp_path, corpus, monkeypatch):
    """No Kafka configured and no ``newsmon serve`` in the home: one line saying what to start; a record left by a
    killed ``serve`` is recognised as such."""
    home = tmp_path / "home"
    monkeypatch.setenv("NEWSMON_HOME", str(home))
    monkeypatch.delenv("NEWSMON_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    file = tmp_path / "a.jsonl"
    file.write_text(lines_of(corpus)[0] + "\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["publish", str(file)])
    assert res.exit_code == 2 and "`newsmon serve`" in res.stderr and "NEWSMON_KAFKA__BOOTSTRAP_SERVERS" in res.stderr
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    home.mkdir()
    (home / "standalone.json").write_text(json.dumps({"bootstrap": "127.0.0.1:1", "pid": int(gone.stdout),
                                                      "command": "serve"}), encoding="utf-8")
    res = CliRunner().invoke(app, ["publish", str(file)])
    assert res.exit_code == 2 and "is no longer running" in res.stderr, res.stderr
    res = CliRunner().invoke(app, ["publish", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2 and "no corpus at" in res.stderr


def test_suggest_with_publish_reaches_the_console_queue(memory_classifier, corpus, tansu, newsmon_home, tmp_path,
                                                        redis_url):
    """``/v1/suggest`` answers its caller only (the console: 404 "Not in the queue"); with ``?publish=true`` the
    proposal is on the proposals topic and the console's queue shows it."""
    from fastapi.testclient import TestClient

    from newsmon.api.app import create_app
    from newsmon.api.service import build_service
    from newsmon.shared.dedup import NearDuplicateIndex
    from newsmon.workers.labels import LabelRegistry

    clf = memory_classifier
    clf.add_articles(corpus.split("train")[:60])
    s = stream_settings(tansu, newsmon_home, tmp_path, redis_url)
    s.memory.path = clf.settings.memory.path
    clf.settings.kafka = s.kafka
    out = Collector(s, s.kafka.topic_proposals)
    svc = build_service(clf.settings, clf, LabelRegistry(), NearDuplicateIndex())
    text = corpus.split("test")[4].text
    try:
        with TestClient(create_app(svc)) as client:
            assert client.post("/console/login", data={"name": "ana"}).status_code == 200  # followed to the queue
            r = client.post("/v1/suggest", json={"text": text, "lang": "sl", "article_id": "quiet"})
            assert r.status_code == 200
            assert client.get("/console/articles/quiet").status_code == 404
            r = client.post("/v1/suggest", params={"publish": "true"},
                            json={"text": text, "lang": "sl", "article_id": "queued"})
            assert r.status_code == 200, r.text
            answered = LabelProposal.model_validate(r.json()[0])
            out.wait_for(lambda c: "queued" in c.proposals(), 30, "the proposal on the topic")
            assert out.proposals()["queued"][0] == answered
            assert "quiet" not in out.proposals()
            wait_for(lambda: any(x["article_id"] == "queued" for x in client.get("/console/api/queue").json()["items"]),
                 30, "the proposal in the console's queue")
            page = client.get("/console/articles/queued")
            assert page.status_code == 200 and answered.labels[0].label in page.text
            # the labels page's live test on the latest articles: a title-less article is shown by the start of
            # its text, cut at a word (issue 43 item 4), never by its bare id
            bare = article_event(corpus.split("test")[6]).model_copy(update={"article_id": "bare", "title": None})
            publish(s, s.kafka.topic_articles, [(bare.kafka_key(), bare.to_bytes())])
            word = next(w for w in bare.body.split() if w.isalpha() and len(w) > 4).lower()
            r = client.post("/v1/labels/client:x/test", json={"definition": {"kwes": [word]}, "articles": 5})
            (hit,) = [m for m in r.json()["matched"] if m["article_id"] == "bare"]
            assert hit["title"] and " ".join(bare.body.split()).startswith(hit["title"].removesuffix("…")), hit
    finally:
        out.close()
        svc.close()
