"""``newsmon suggest`` applies what was defined through the API (issue 40): a real ``newsmon serve`` (no Kafka, no
Redis: the bundled broker, the embedded Qdrant engine, real e5-small weights, real Slovene news) takes a label rule
(a KwE) and a rename on ``/v1/labels`` (the embedded memory updater keeps them in ``<home>/state/labels.json``);
once it is stopped, ``newsmon suggest`` as a process of its own, on the same
home, proposes the rule's label from its KwE and the renamed label under its new name, exactly as ``POST
/v1/suggest`` did for the same text while the server ran."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
from test_api import wait_for  # the suite's one wait loop (fails on time-out)

from newsmon.broker import free_port
from newsmon.schemas import LabelProposal, parse_event

REPO = Path(__file__).resolve().parents[1]
RULE = "client:suggest-rule"


def _wire(proposal: LabelProposal) -> dict:
    """A proposal as compared across paths: all but its revision, timings and production time."""
    return proposal.model_dump(mode="json", exclude={"revision", "timings", "produced_at"})


def _home(tmp_path: Path, newsmon_home: Path, encoder, train) -> tuple[Path, dict]:
    """A home whose memory holds ``train`` (embedded with the session encoder), and the environment of a process
    run on it as a new user runs one: no Kafka, no Redis, no Qdrant server."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.config import Settings
    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.memory import MemoryRouter

    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (newsmon_home / "models" / "onnx").mkdir(parents=True, exist_ok=True)
    (home / "models" / "onnx").symlink_to(newsmon_home / "models" / "onnx", target_is_directory=True)
    s = Settings(home=home)
    s.encoder.model = resolve_model(s.encoder.model, newsmon_home)
    router = MemoryRouter(s, encoder.model_id, encoder.dim)
    Classifier(s, encoder=encoder, router=router).add_articles(train)
    router.close()
    env = {**os.environ, "NEWSMON_HOME": str(home), "NEWSMON_ENCODER__MODEL": s.encoder.model,
           "NEWSMON_WORKER__BATCH_MAX_MS": "200", "NEWSMON_LOG_FORMAT": "json"}
    for k in ("NEWSMON_KAFKA__BOOTSTRAP_SERVERS", "NEWSMON_WORKER__REDIS_URL", "NEWSMON_MEMORY__URL",
              "NEWSMON_MEMORY__PATH"):
        env.pop(k, None)
    return home, env


def _define_through_the_api(client: httpx.Client, kwe: str, old: str) -> None:
    """The rule and the rename, each applied by the server's memory updater before the next step."""
    r = client.put(f"/v1/labels/{RULE}", json={"kwes": [kwe]})
    assert r.status_code in (200, 202), r.text
    r = client.post(f"/v1/labels/{old}/rename", json={"new_label": f"{old}-renamed"})
    assert r.status_code in (200, 202), r.text

    def applied():
        state = client.get("/v1/labels").json()
        return RULE in state["definitions"] and state["renamed"].get(old) == f"{old}-renamed"

    wait_for(applied, 60, "the rule and the rename applied by the memory updater")


def test_suggest_applies_a_rule_and_a_rename_defined_through_the_api(tmp_path, newsmon_home, encoder, shared_data):
    from newsmon.shared.data import load_corpus

    corpus = load_corpus(shared_data / "sentinews_sl")
    train = corpus.split("train")[:60]
    home, env = _home(tmp_path, newsmon_home, encoder, train)
    old = Counter(lb for a in train for lb in a.labels).most_common(1)[0][0]
    # a test article that carries `old`; the rule's KwE: a word of it (a label no memory article has: rule-only)
    article = next(a for a in corpus.split("test") if old in a.labels)
    kwe = re.findall(r"[^\W\d_]{7,}", article.text.lower())[0]
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "serve"], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, env={**env, "NEWSMON_API__PORT": str(port)})
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)

        def ready():
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return client.get("/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, 300, "newsmon serve ready")
        _define_through_the_api(client, kwe, old)
        r = client.post("/v1/suggest", json={"text": article.text, "lang": "sl", "article_id": article.id})
        assert r.status_code == 200, r.text
        (api,) = [parse_event(LabelProposal, json.dumps(x).encode("utf-8")) for x in r.json()]
        proc.send_signal(signal.SIGTERM)  # the embedded memory has one process: stop the server first
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    res = subprocess.run([sys.executable, "-m", "newsmon.cli", "suggest", article.text, "--lang", "sl", "--id",
                          article.id, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    (got,) = json.loads(res.stdout)
    cli = parse_event(LabelProposal, json.dumps(got).encode("utf-8"))
    (ruled,) = [x for x in cli.labels if x.label == RULE]
    assert ruled.source == "rule" and ruled.rule is not None and ruled.rule.kwe == kwe
    assert {w.lower() for w in ruled.rule.matched} == {kwe}
    named = {x.label for x in [*cli.labels, *cli.candidates]}
    assert f"{old}-renamed" in named and old not in named
    assert _wire(cli) == _wire(api)
