"""Annif as a peer in the same eval run (issue 25 item 1): the real Annif package, from its own environment, trained
and scored on a real slice of sentinews_sl beside the TF-IDF SVM; limit and threshold chosen on validation."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from newsmon.cli import app
from newsmon.shared.evaluation.report import format_peer_ratios, ratios_to_peer
from newsmon.shared.predictors.annif_peer import (
    ANNIF_REQUIREMENTS,
    PeerUnavailable,
    annif_executable,
    choose_limit_threshold,
    decide_limit_threshold,
)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
ANNIF_ROWS = ("annif_tfidf", "annif_parabel", "annif_bonsai", "annif_ensemble")


@pytest.fixture(scope="module")
def annif_installed(newsmon_home) -> Path:
    """The peer's environment under the test home (created from the package index on first use, then reused)."""
    try:
        return annif_executable(newsmon_home)
    except PeerUnavailable as exc:
        pytest.skip(f"Annif cannot be installed from the package index here: {exc}")


def test_limit_and_threshold_are_chosen_by_micro_f1_and_applied_as_annif_does():
    scores = np.array([[0.9, 0.5, 0.0, 0.1], [0.2, 0.8, 0.6, 0.0], [0.0, 0.05, 0.0, 0.3], [0, 0, 0, 0]],
                      dtype=np.float32)
    gold = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]]))
    limit, threshold, f1 = choose_limit_threshold(scores, gold)
    assert (limit, f1) == (2, 1.0) and 0.05 < threshold <= 0.3  # the smallest limit and threshold with every hit
    decided = decide_limit_threshold(scores, limit, threshold)
    assert decided.tolist() == gold.toarray().astype(bool).tolist()
    # limit first (the top `limit` by score), then the threshold; a zero score is never proposed
    assert decide_limit_threshold(scores, 1, 0.0).sum(axis=1).tolist() == [1, 1, 1, 0]


def test_the_peers_extra_names_what_the_peer_environment_installs():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras["peers"]) == sorted(ANNIF_REQUIREMENTS)


def test_without_the_environment_and_without_install_the_error_says_how(tmp_path):
    with pytest.raises(PeerUnavailable, match=r"peers/annif.*newsmon eval --peers annif"):
        annif_executable(tmp_path, install=False)


def test_an_unknown_peer_is_a_clear_error(monkeypatch, newsmon_home, sentinews_slice, tmp_path):
    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    res = runner.invoke(app, ["eval", "--data", str(sentinews_slice), "--methods", "svm", "--peers", "magpie",
                              "--out", str(tmp_path)])
    assert res.exit_code != 0 and "unknown peers ['magpie']" in res.output


def test_ratios_to_the_best_peer_row():
    def row(name, uf1, f1, acc):
        return {"name": name, "metrics": {"all": {"uF1": uf1, "F1": f1, "Acc": acc}}}

    methods = {"newsmon": row("newsmon", 0.45, 0.02, 0.5), "annif_parabel": row("P", 0.40, 0.05, 0.4),
               "annif_ensemble": row("E", 0.42, 0.0, 0.36), "svm": row("S", 0.5, 0.1, 0.6)}
    r = ratios_to_peer(methods)
    assert r["best"] == "annif_ensemble" and r["uF1"] == pytest.approx(0.45 / 0.42)
    assert r["F1"] is None and "macro-F1 is 0" in r["why"]["F1"]  # never NaN, the reason instead
    assert "newsmon / E (the peer's best micro-F1): micro-F1 x1.071" in format_peer_ratios(r)
    assert ratios_to_peer({"newsmon": methods["newsmon"]}) == {}


@pytest.mark.slow  # the Annif peer's environment and an eval
def test_eval_with_the_annif_peer_on_a_slice(annif_installed, monkeypatch, newsmon_home, sentinews_slice, tmp_path):
    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    monkeypatch.setenv("NEWSMON_BENCHMARK_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "eval"
    res = runner.invoke(app, ["eval", "--data", str(sentinews_slice), "--methods", "svm", "--peers", "annif",
                              "--out", str(out), "--record"])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "results.json").read_text())
    methods = report["methods"]
    assert list(methods) == ["svm", *ANNIF_ROWS]
    for key in ANNIF_ROWS:
        m = methods[key]
        assert not m.get("error"), m.get("error")
        assert m["params"]["annif"] == "1.4.3" and 1 <= m["params"]["limit"] <= 20
        assert 0 <= m["params"]["threshold"] < 1 and m["measured_in"] == "peer processes"
        assert m["wall_s"] > 0 and 10 < m["peak_rss_mib"] < 4096
        # CPU time of Annif's processes (training a tree and loading its Python cost seconds of CPU)
        assert 0.5 < m["cpu_s"] < m["wall_s"] * (os.cpu_count() or 1) + 1
        assert 0 <= m["metrics"]["all"]["uF1"] <= 1
    # Annif suggests from what it learned: on 10 test articles its best project finds some gold labels
    assert max(methods[k]["metrics"]["all"]["uF1"] for k in ANNIF_ROWS) > 0.1
    assert methods["svm"]["measured_in"].startswith("eval process") and methods["svm"]["peak_rss_mib"] > 10
    assert 0 < methods["svm"]["cpu_s"] < methods["svm"]["wall_s"] * (os.cpu_count() or 1) + 1
    md = (out / "results.md").read_text()
    assert "| Annif omikuji-parabel |" in md and "| method | wall s | CPU s | peak RSS MiB | measured in |" in md
    # --record: the benchmark record eval.<corpus> with the quality and the cost tables
    record = json.loads(next((tmp_path / "results").glob("eval.*/*.json")).read_text())
    assert [t["title"] for t in record["tables"]] == ["Quality on the test split (%)", "Cost of each row"]
    assert record["command"].startswith("newsmon ") and "--peers annif" in record["command"]
    assert [r[0] for r in record["tables"][1]["rows"]] == [methods[k]["name"] for k in methods]
