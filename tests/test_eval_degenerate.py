"""`newsmon eval` on a degenerate corpus (8 articles, all one label) gives a table, not a traceback (issue 9):
"–" where a metric is undefined (nDCG with one label) and the reason where a method cannot be fitted (a
one-vs-rest SVM with one class); the other methods still run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from newsmon.cli import app
from newsmon.shared.metrics import ranking_metrics


def test_ndcg_with_one_label_is_undefined_with_the_reason():
    out = ranking_metrics(np.ones((3, 1)), np.ones((3, 1), dtype=np.float32))
    assert math.isnan(out["nDCG@5"]) and "at least 2 labels" in out["undefined"]["nDCG@5"]
    assert out["P@1"] == 1.0


@pytest.mark.slow  # the real encoder weights (a fresh test home builds the ONNX encoder first)
def test_eval_on_eight_articles_with_one_label(shared_data, newsmon_home, tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    rows = [json.loads(x) for x in (shared_data / "sentinews_sl" / "articles.jsonl").read_text(
        encoding="utf-8").splitlines()]
    picked = [r for r in rows if r["split"] == "train"][:5] + [r for r in rows if r["split"] == "validation"][:1] \
        + [r for r in rows if r["split"] == "test"][:2]
    path = tmp_path / "one-label.jsonl"
    path.write_text("".join(json.dumps({**r, "labels": ["politika"]}, ensure_ascii=False) + "\n" for r in picked),
                    encoding="utf-8")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["eval", "--data", str(path), "--out", str(out), "--tune", "2"])
    assert res.exit_code == 0, res.output
    assert "| TF-IDF + SVM | – | – |" in res.output and "| TF-IDF + LogReg | – |" in res.output
    assert "– for TF-IDF + SVM: cannot be fitted: every training article carries each label" in res.output
    assert "– in nDCG@5: nDCG@5 needs at least 2 labels to rank (found 1)" in res.output
    assert "TF-IDF + SVM could not be fitted" in res.output  # the ratio line says why it is missing
    report = json.loads((out / "results.json").read_text())
    methods = report["methods"]
    assert "one class only" in methods["svm"]["error"] and methods["svm"]["metrics"] is None
    for key in ("rae", "rae_tuned", "zshot", "mlknn"):  # the others still ran
        assert methods[key]["metrics"]["all"]["uF1"] == 1.0, key
    assert report["ratio_to_svm"]["rae"]["uF1"] is None
    assert (out / "results.md").read_text().count("– for TF-IDF") == 2
    assert (out / "f1_by_frequency.png").stat().st_size > 1000
