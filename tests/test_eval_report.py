"""How ``newsmon eval`` shows its figures: low-sample marks, "–" with the reason instead of NaN, and help screens
without value placeholders beside flags."""

from __future__ import annotations

import json
import math

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from newsmon.cli import app
from newsmon.shared.evaluation import LOW_SAMPLE_ARTICLES, format_ratios, markdown_table, table_notes, write_outputs
from newsmon.shared.evaluation.report import ratios_to_svm

NAN = float("nan")


def _group(n_articles: int, **figures) -> dict:
    base = dict.fromkeys(("uF1", "uP", "uR", "F1", "P", "R", "Acc"), NAN if n_articles == 0 else 0.5)
    return {**base, **figures, "n_labels": 3 if n_articles else 0, "n_articles": n_articles}


def _method(name: str, n_test: int, **all_figures) -> dict:
    return {"name": name, "params": {}, "seconds": 1.0,
            "metrics": {"all": _group(n_test, **all_figures), "frequent": _group(0), "rare": _group(7),
                        "ranking": {"P@1": 0.5, "P@3": 0.3, "P@5": 0.2, "nDCG@5": 0.4}},
            "f1_by_frequency": [{"bucket": "0-1", "F1": NAN, "n_labels": 0}]}


def _report(n_test: int, svm_uf1: float = 0.2, rae_uf1: float = 0.5) -> dict:
    methods = {"rae": _method("RAE-XMC", n_test, uF1=rae_uf1, Acc=0.25),
               "svm": _method("TF-IDF + SVM", n_test, uF1=svm_uf1, Acc=0.1)}
    return {"corpus": {"path": "/x/articles.jsonl", "train": 80, "validation": 10, "test": n_test, "bad_lines": 0},
            "methods": methods, "timings": {"total_s": 1.0}, "ratio_to_svm": ratios_to_svm(methods),
            "label_groups": {"all": 40, "frequent": 0, "rare": 35}}


def test_small_test_split_is_marked_low_sample_and_never_prints_nan():
    report = _report(18)
    table = markdown_table(report)
    assert "nan" not in table.lower()
    rae_row = next(line for line in table.splitlines() if line.startswith("| RAE-XMC |"))
    assert "50.0†" in rae_row  # all: 18 test articles
    assert "| – |" in rae_row  # frequent: no such label in test
    notes = "\n".join(table_notes(report))
    assert f"fewer than {LOW_SAMPLE_ARTICLES} test articles (all 18, rare 7)" in notes
    assert "– in frequent: no test article carries a label with >= 500 training occurrences" in notes
    line = format_ratios("RAE-XMC", report["ratio_to_svm"]["rae"])
    assert line == ("RAE-XMC / TF-IDF+SVM: micro-F1 x2.500†, subset accuracy x2.500† "
                    "(† low-sample: 18 test articles, fewer than 100)")


def test_a_ratio_that_cannot_be_formed_is_a_dash_with_its_reason():
    report = _report(18, svm_uf1=0.0)
    r = report["ratio_to_svm"]["rae"]
    assert r["uF1"] is None and r["why"]["uF1"] == "TF-IDF + SVM's micro-F1 is 0"
    assert "micro-F1 – (TF-IDF + SVM's micro-F1 is 0)" in format_ratios("RAE-XMC", r)
    report = _report(18, svm_uf1=NAN, rae_uf1=NAN)
    line = format_ratios("RAE-XMC", report["ratio_to_svm"]["rae"])
    assert "nan" not in line and "micro-F1 – (micro-F1 is undefined" in line


def test_enough_test_articles_carry_no_mark(tmp_path):
    report = _report(150)
    table = markdown_table(report)
    rae_row = next(line for line in table.splitlines() if line.startswith("| RAE-XMC |"))
    assert "| 50.0 |" in rae_row and "50.0†" not in rae_row.split("|")[2]
    assert "x2.500," in format_ratios("RAE-XMC", report["ratio_to_svm"]["rae"])
    assert "all 150" not in "\n".join(table_notes(report))  # only the rare group (7 articles) is low-sample
    write_outputs(report, tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())  # strict JSON for the ratios: no NaN
    assert saved["ratio_to_svm"]["rae"]["uF1"] == pytest.approx(2.5)
    md = (tmp_path / "results.md").read_text()
    assert "RAE-XMC / TF-IDF+SVM: micro-F1 x2.500" in md and "nan" not in md.lower()
    assert not math.isnan(saved["ratio_to_svm"]["rae"]["Acc"])


def _commands(cmd, path: tuple[str, ...] = ()):
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_help_screens_show_no_bool_placeholder():
    paths = list(_commands(get_command(app)))
    assert ("suggest",) in paths and ("memory", "build") in paths
    runner = CliRunner()
    for path in paths:
        res = runner.invoke(app, [*path, "--help"], terminal_width=120)
        assert res.exit_code == 0, (path, res.output)
        assert "<bool>" not in res.output, (path, res.output)
    out = runner.invoke(app, ["suggest", "--help"], terminal_width=120).output
    assert "--json" in out and "<float>" in out  # flags are bare, options that take a value keep their type


def test_the_product_row_has_its_ratio_to_the_svm():
    methods = {"svm": _method("TF-IDF + SVM", 150, uF1=0.40, Acc=0.20),
               "newsmon": _method("newsmon", 150, uF1=0.44, Acc=0.23)}
    ratios = ratios_to_svm(methods)
    assert ratios["newsmon"]["uF1"] == pytest.approx(1.10) and ratios["newsmon"]["Acc"] == pytest.approx(1.15)
