"""Corpus loading: real files parse; bad lines are reported with their number and reason, and skipped."""

from __future__ import annotations

import json

from newsmon.shared.data import load_corpus


def test_real_corpora_load(shared_data):
    c = load_corpus(shared_data / "sentinews_sl")
    s = c.summary()
    assert s["articles"] == 1450 and s["train"] == 1150 and s["bad_lines"] == 0
    assert all(a.lang == "sl" and a.labels for a in c.articles)


def test_bad_lines_reported_and_skipped(shared_data, tmp_path):
    good = (shared_data / "sentinews_sl" / "articles.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    first = json.loads(good[0])
    bad = [
        "{not json",
        json.dumps({**first, "id": "x1", "text": "   "}),
        json.dumps({k: v for k, v in first.items() if k != "text"} | {"id": "x2"}),
        json.dumps({**first, "id": "x3", "split": "dev"}),
        json.dumps({**first, "id": "x4", "labels": "economy"}),
        good[0],  # duplicate id
    ]
    path = tmp_path / "articles.jsonl"
    path.write_text("\n".join(good + bad) + "\n", encoding="utf-8")
    c = load_corpus(tmp_path)
    assert len(c.articles) == 3
    assert [b.line for b in c.bad_lines] == [4, 5, 6, 7, 8, 9]
    reasons = [b.reason for b in c.bad_lines]
    assert "invalid JSON" in reasons[0]
    assert "text" in reasons[1] and "text" in reasons[2]
    assert "split" in reasons[3] and "labels" in reasons[4] and "duplicate id" in reasons[5]
    assert c.summary()["bad_lines"] == 6
