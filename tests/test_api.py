"""The HTTP API against the real things: a real ``newsmon serve`` process (uvicorn, with both workers in it, as
in embedded mode), the real Tansu broker, real Redis, the embedded Qdrant engine on a temp dir, the real
e5-small weights and real Slovene news. A label defined over HTTP is seen as a LabelEvent on the topic and
changes the next proposal; bad input gets a readable 4xx.

The stream helpers and fixtures are test_stream.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from newsmon.broker import free_port
from newsmon.demo import article_event
from newsmon.schemas import LabelEvent, LabelProposal, parse_event
from newsmon.schemas.labels import LABEL_EVENTS_KEY
from newsmon.schemas.scoring import registered
from test_stream import REPO, Collector, corpus, publish, stream_settings  # noqa: F401 (fixtures)

LABEL = "client:mercator"
KWE = "mercator* OR merkator*"
TOKEN = "test-token-" + "x" * 8


def serve_env(s, port: int, redis_url: str) -> dict:
    k = s.kafka
    return {**os.environ, "NEWSMON_HOME": str(s.home), "NEWSMON_ENCODER__MODEL": s.encoder.model,
            "NEWSMON_MEMORY__PATH": str(s.memory.path), "NEWSMON_KAFKA__BOOTSTRAP_SERVERS": k.bootstrap_servers,
            "NEWSMON_KAFKA__TOPIC_ARTICLES": k.topic_articles, "NEWSMON_KAFKA__TOPIC_PROPOSALS": k.topic_proposals,
            "NEWSMON_KAFKA__TOPIC_DECISIONS": k.topic_decisions,
            "NEWSMON_KAFKA__TOPIC_LABEL_EVENTS": k.topic_label_events,
            "NEWSMON_KAFKA__CLASSIFIER_GROUP": k.classifier_group, "NEWSMON_KAFKA__UPDATER_GROUP": k.updater_group,
            "NEWSMON_KAFKA__TOPIC_PARTITIONS": "2", "NEWSMON_KAFKA__SESSION_TIMEOUT_MS": "6000",
            "NEWSMON_WORKER__BATCH_MAX_MS": "200", "NEWSMON_WORKER__REDIS_URL": redis_url,
            "NEWSMON_WORKER__REDIS_NAMESPACE": s.worker.redis_namespace, "NEWSMON_API__HOST": "127.0.0.1",
            "NEWSMON_API__PORT": str(port), "NEWSMON_API__TOKEN": TOKEN, "NEWSMON_API__MAX_BODY_BYTES": "300000",
            "NEWSMON_LOG_FORMAT": "json"}


@pytest.fixture
def api(tansu, newsmon_home, tmp_path, redis_url, encoder, corpus):
    """``newsmon serve`` in its own process over a memory of 60 real train articles (built here first)."""
    s = stream_settings(tansu, newsmon_home, tmp_path, redis_url)
    prepare_home(s, newsmon_home, encoder, corpus.split("train")[:60])
    proc, client = start_serve(s, redis_url, tmp_path / "serve.log")
    try:
        yield s, client, proc
    finally:
        stop_serve(proc, client)


def prepare_home(s, newsmon_home, encoder, articles) -> None:
    """The home of a ``newsmon serve`` on ``s``: the session home's ONNX encoder artefacts shared (instead of
    building its own: minutes on a small CPU; built once into the session home by the first process that needs
    them) and the embedded memory filled with ``articles`` (none: left empty)."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.memory import MemoryRouter

    (newsmon_home / "models" / "onnx").mkdir(parents=True, exist_ok=True)
    (s.home / "models").mkdir(parents=True, exist_ok=True)
    (s.home / "models" / "onnx").symlink_to(newsmon_home / "models" / "onnx", target_is_directory=True)
    if articles:
        router = MemoryRouter(s, encoder.model_id, encoder.dim)
        Classifier(s, encoder=encoder, router=router).add_articles(articles)
        router.close()  # releases the embedded memory for the API process


def start_serve(s, redis_url: str, log_path, args: tuple = (), env: dict | None = None):
    """``newsmon serve`` (with ``args``) in its own process on ``s`` (:func:`serve_env`, and ``env``) on a free port,
    once ``/readyz`` answers 200: ``(process, client)`` (the client sends the token)."""
    port = free_port()
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "serve", *args],
                            env={**serve_env(s, port, redis_url), **(env or {})}, cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                          headers={"Authorization": f"Bearer {TOKEN}"})
    deadline = time.monotonic() + 300
    try:
        while True:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                if client.get("/readyz").status_code == 200:
                    return proc, client
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "newsmon serve not ready within 300 s"
            time.sleep(0.5)
    except BaseException:
        stop_serve(proc, client)
        raise


def stop_serve(proc, client) -> None:
    client.close()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_for(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_define_a_label_over_http_then_propose_rename_and_retire(api, corpus):
    s, client, proc = api
    hits = [a for a in corpus.split("test") if "Mercator" in a.text][:4]
    events = Collector(s, s.kafka.topic_label_events)
    out = Collector(s, s.kafka.topic_proposals)
    try:
        # auth, unknown label
        assert httpx.get(f"{client.base_url}/v1/labels/{LABEL}").status_code == 401
        assert client.get("/healthz").status_code == 200
        r = client.get(f"/v1/labels/{LABEL}")
        assert r.status_code == 404 and "unknown label" in r.json()["detail"]

        # define over HTTP: the LabelEvent is on the topic, the registry has it when the answer comes (200, read
        # your writes: the GET right after it shows the label)
        r = client.put(f"/v1/labels/{LABEL}", params={"actor": "analyst"}, json={"kwes": [KWE]})
        assert r.status_code == 200 and r.json()["applied"] is True, r.text
        assert r.json()["event"]["action"] == "defined"
        view = client.get(f"/v1/labels/{LABEL}").json()
        assert view["status"] == "active" and view["definition"]["kwes"] == [KWE] and view["examples"] == 0
        events.wait_for(lambda c: c.messages, 30, "the LabelEvent on the topic")
        ev = parse_event(LabelEvent, events.messages[0].value())
        assert events.messages[0].key() == LABEL_EVENTS_KEY
        assert (ev.action, ev.label, ev.definition.kwes, ev.actor) == ("defined", LABEL, [KWE], "analyst")
        r = client.put(f"/v1/labels/{LABEL}", json={"kwes": [KWE]})  # the same definition again: nothing to publish
        assert r.status_code == 200 and r.json()["event"] is None and "already" in r.json()["note"], r.text

        # its effect on the next proposal: on the stream and over HTTP, from the KwE alone
        e0 = article_event(hits[0])
        publish(s, s.kafka.topic_articles, [(e0.kafka_key(), e0.to_bytes())])
        out.wait_for(lambda c: e0.article_id in c.proposals(), 120, "the next proposal on the topic")
        streamed = {x.label: x for x in out.proposals()[e0.article_id][0].labels}
        assert streamed[LABEL].source == "rule" and streamed[LABEL].rule.kwe == KWE
        r = client.post("/v1/suggest", json=json.loads(article_event(hits[1]).to_bytes()))
        assert r.status_code == 200, r.text
        (proposal,) = [LabelProposal.model_validate(p) for p in r.json()]
        assert proposal.article_id == hits[1].id
        assert {x.label: x.source for x in proposal.labels}[LABEL] == "rule"
        # each label says what proposed it, over HTTP as on the topic (LabelProposal v3 on): the retrieval's by a
        # deciding rule and the threshold it was held to, the KwE's by its rule alone
        assert proposal.schema_version == proposal.needs_version() >= 3
        by_source = {x.source: x for x in proposal.labels}
        assert {"retrieval", "rule"} <= set(by_source), proposal.labels
        assert by_source["rule"].decided_by is None and by_source["rule"].rule.kwe == KWE
        for x in proposal.labels:
            if x.source == "retrieval":
                assert x.decided_by in registered("rule") and x.threshold == proposal.scoring.threshold, x
                assert x.decided_by != "threshold" or x.score > x.threshold, x

        # the rule tested on a posted text and on the latest articles of the topic
        r = client.post(f"/v1/labels/{LABEL}/test", json={"text": "Trgovec Mercatorja je objavil rezultate."})
        assert r.status_code == 200 and r.json()["matched"][0]["rule"]["matched"] == ["Mercatorja"]
        r = client.post(f"/v1/labels/{LABEL}/test", json={"articles": 10})
        assert r.status_code == 200 and [m["article_id"] for m in r.json()["matched"]] == [e0.article_id]

        # bad input: a bad KwE with its position, too large, an invalid article
        r = client.put(f"/v1/labels/{LABEL}", json={"kwes": [KWE, "mercator AND lek"]})
        assert r.status_code == 422
        err = r.json()["errors"][0]
        assert (err["loc"], err["position"]) == (["body", "kwes", 1], 9) and "AND" in err["reason"]
        assert "kwes.1" in r.json()["detail"] and "position 9" in r.json()["detail"]
        r = client.post("/v1/suggest", content=b"[" + b" " * 400_000 + b"]",
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]
        chunks = (b" " * 100_000 for _ in range(4))  # no Content-Length: counted as it streams
        r = client.post("/v1/suggest", content=chunks, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]
        lone = json.dumps(json.loads(article_event(hits[2]).to_bytes()))[:-1] + ', "title": "\\ud800"}'
        r = client.post("/v1/suggest", content=lone.encode(), headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "article 0" in r.json()["detail"], r.text
        r = client.delete(f"/v1/labels/{LABEL}", params={"actor": " "})
        assert r.status_code == 422 and "actor" in r.json()["detail"]
        bad = json.loads(article_event(hits[2]).to_bytes()) | {"lang": "xx"}
        r = client.post("/v1/suggest", json=[bad])
        assert r.status_code == 422 and "article 0" in r.json()["detail"] and "ISO 639-1" in r.json()["detail"]

        # rename moves the rule; retire stops it; each readable at once; retiring twice publishes nothing more
        r = client.post(f"/v1/labels/{LABEL}/rename", json={"new_label": "client:mercator-group"})
        assert r.status_code == 200 and r.json()["applied"], r.text
        assert client.get(f"/v1/labels/{LABEL}").json()["status"] == "renamed"
        assert client.put(f"/v1/labels/{LABEL}", json={"kwes": [KWE]}).status_code == 409
        # issue 27: no other event on the renamed-away name, and no rename into it (it dropped the first rename);
        # a label of control characters is refused by the one label policy
        assert client.delete(f"/v1/labels/{LABEL}").status_code == 409
        r = client.post("/v1/labels/gospodarstvo/rename", json={"new_label": LABEL})
        assert r.status_code == 409 and "renamed to 'client:mercator-group'" in r.json()["detail"], r.text
        r = client.put("/v1/labels/%00", json={"kwes": [KWE]})
        assert r.status_code == 422 and "control character U+0000" in r.json()["detail"], r.text
        assert client.delete("/v1/labels/client:mercator-group").status_code == 200
        assert client.get("/v1/labels/client:mercator-group").json()["status"] == "retired"
        r = client.delete("/v1/labels/client:mercator-group")
        assert r.status_code == 200 and r.json()["event"] is None and "already retired" in r.json()["note"], r.text
        r = client.post("/v1/suggest", json=[json.loads(article_event(hits[3]).to_bytes())])
        assert all(not x.label.startswith("client:mercator") for x in LabelProposal.model_validate(r.json()[0])
                   .labels)
        # the rename is keyed by the old name and the retirement by the new one: two partitions, which a consumer
        # may read in either order (Kafka orders a key's messages, not a topic's), so the events are put back in the
        # order they happened before comparing
        events.wait_for(lambda c: len(c.messages) >= 3, 30, "the rename's and the retirement's LabelEvents")
        logged = sorted((parse_event(LabelEvent, m.value()) for m in events.messages), key=lambda e: e.occurred_at)
        assert [e.action for e in logged] == ["defined", "renamed", "retired"]  # no second definition or retirement

        plain_text_decisions_and_4xx(client, corpus)

        # operations
        metrics = client.get("/metrics").text
        assert 'newsmon_api_requests_total{route="/v1/suggest",status="200"}' in metrics
        assert "newsmon_articles_total" in metrics  # the workers' metrics, same process
        doc = client.get("/openapi.json").json()
        assert {"/v1/suggest", "/v1/labels/{label}", "/v1/labels/{label}/rename", "/v1/labels/{label}/test"} <= \
            set(doc["paths"]) and {"ArticleEvent", "SuggestText"} <= set(doc["components"]["schemas"])
        text = json.dumps(doc)
        assert "``" not in text and ":class:" not in text  # Markdown descriptions, no reStructuredText
    finally:
        events.close()
        out.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def _raw(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send ``request`` on a plain socket and return what the server answers before it closes or ``timeout``."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks) and b"}" in chunks[-1]:
                    break
        except TimeoutError:
            pass
    return b"".join(chunks)


def plain_text_decisions_and_4xx(client, corpus):
    """Issue 28 items 4 and 5, issue 27 item 6 (run by the test above, on its server): `{"text": ...}` is
    proposed like an article event; a decision sent over HTTP is applied before the answer and changes the next
    proposal; the token is checked before the body is read; a form-encoded body gets 415 and how to send JSON;
    malformed JSON says why in words."""
    port = int(str(client.base_url).rsplit(":", 1)[1])
    text = corpus.split("test")[0].text
    r = client.post("/v1/suggest", json={"text": text, "lang": "sl"})
    assert r.status_code == 200, r.text
    (first,) = [LabelProposal.model_validate(p) for p in r.json()]
    assert first.article_id.startswith("suggest-") and first.scoring is not None
    r = client.post("/v1/suggest", json=[{"text": text}, {"text": "Vlada je sprejela proračun."}])  # lang detected
    assert r.status_code == 200 and [p["article_id"] for p in r.json()][0] == first.article_id, r.text
    # a decision on it over HTTP: applied before the answer; the next proposal of a near text carries the label
    added = "client:tutorial-label"
    r = client.post("/v1/decisions", json={"article_id": first.article_id, "moderator": "ana",
                                           "decisions": [{"label": added, "action": "added"}]})
    assert r.status_code == 200 and r.json()["applied"] is True, r.text
    r = client.post("/v1/suggest", json={"text": text + " Dodatek.", "lang": "sl"})
    nxt = LabelProposal.model_validate(r.json()[0])
    assert added in {x.label for x in [*nxt.labels, *nxt.candidates]}, nxt
    # 4xx that say what to send
    r = client.post("/v1/suggest", json={"txt": text})
    assert r.status_code == 422 and '{"text": "..."' in r.json()["detail"], r.text
    r = client.post("/v1/suggest", content=b'{"text": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("the body is not valid JSON: "), r.text
    assert "at character 9" in r.json()["detail"] and "Content-Type: application/json" in r.json()["detail"]
    r = client.post("/v1/suggest", content=b'{"text": "x"}',
                    headers={"Content-Type": "application/x-www-form-urlencoded"})  # curl -d without -H
    assert r.status_code == 415 and "Content-Type: application/json" in r.json()["detail"], r.text
    assert client.post(f"/v1/labels/{LABEL}/test").status_code in (200, 404)  # no body: no 422
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and "/docs" in r.json()["detail"]
    # the token before the body: malformed JSON without a token is 401, not 422; a 9 MB body declared and never
    # sent is answered 401 at once (the server did not wait to read it)
    r = httpx.post(f"{client.base_url}/v1/suggest", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 401, r.text
    t0 = time.monotonic()
    answer = _raw(port, b"POST /v1/suggest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 9000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert time.monotonic() - t0 < 5
