"""The nightly replay's bookkeeping (``benchmarks/nightly_replay.py``, issue 41 item 3), on a real slice of
sentinews_sl and no model: the stream's days, the corpus the nightly job reads (the gate's held-out half of the
validation split apart from the calibration's, never the stream), the per-day figures and the table's rows (each
night's verdict, whether the retrained arm's calibration record changed overnight, the days after a night together).
The replay itself (real encoder, calibrations, the nightly job, Annif) is a benchmark: its figures are in
``benchmarks/results/nightly_replay.*`` and docs/measurements.md, not here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from newsmon.shared.data import load_corpus
from newsmon.shared.predictors import LabelVocab

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    """``benchmarks/nightly_replay.py`` as a module (it imports its siblings by name, as benchmarks run)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("nightly_replay", BENCHMARKS / "nightly_replay.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["nightly_replay"] = mod  # its dataclasses resolve their annotations through it
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("nightly_replay", None)
        sys.path.remove(str(BENCHMARKS))


def test_days_cover_the_stream_in_order(bench):
    assert bench.days(133, 44) == [(0, 44), (44, 88), (88, 133)]  # a remainder of 1 joins the last day
    assert bench.days(12, 6) == [(0, 6), (6, 12)]
    assert bench.days(100, 30) == [(0, 30), (30, 60), (60, 100)]
    assert bench.days(105, 30) == [(0, 30), (30, 60), (60, 90), (90, 105)]  # half a day or more: a day
    assert bench.days(133, 44, nights=1) == [(0, 44), (44, 88)]
    with pytest.raises(ValueError, match="no night"):
        bench.days(10, 10)
    with pytest.raises(ValueError, match="--every"):
        bench.days(10, 0)


def test_night_corpus_keeps_the_gate_apart(bench, sentinews_slice):
    corpus = load_corpus(sentinews_slice)
    nightly, calibration, gate = bench.night_corpus(corpus)
    val = [a for a in corpus.split("validation") if a.labels]
    assert [a.id for a in calibration] + [a.id for a in gate] == [a.id for a in val]
    assert len(calibration) - len(gate) in (0, 1) and gate
    assert nightly.split("validation") == calibration
    assert [a.id for a in nightly.split("test")] == [a.id for a in gate]  # the gate's held-out articles
    assert not {a.id for a in nightly.split("test")} & {a.id for a in corpus.split("test")}  # never the stream
    assert nightly.split("train") == corpus.split("train")


def test_figures_and_label_sets(bench, sentinews_slice):
    stream = load_corpus(sentinews_slice).split("test")
    gold = [a.labels for a in stream]
    assert bench.figures(gold, gold) == {"uF1": 100.0, "Acc": 100.0}
    assert bench.figures(gold, [()] * len(gold)) == {"uF1": 0.0, "Acc": 0.0}
    half = [g if i % 2 else () for i, g in enumerate(gold)]  # every other article right, the rest nothing
    f = bench.figures(gold, half)
    assert f["Acc"] == round(100 * (len(gold) // 2) / len(gold), 1) and 0 < f["uF1"] < 100
    vocab = LabelVocab(lb for g in gold for lb in g)
    Z = vocab.encode(gold).toarray() > 0
    assert [set(s) for s in bench.label_sets(Z, vocab)] == [set(g) for g in gold]


def test_rows_report_each_night(bench, sentinews_slice):
    stream = load_corpus(sentinews_slice).split("test")
    gold = [a.labels for a in stream]
    plan = bench.days(len(stream), 5)  # 10 articles: 5, 5
    log = []
    for i, (start, stop) in enumerate(plan):
        d = bench.Day(start, stop)
        d.proposed = {"newsmon retrained": gold[start:stop], "newsmon never": [()] * (stop - start),
                      "Annif retrained": gold[start:stop], "Annif never": gold[start:stop]}
        d.records = {"newsmon retrained": [f"sl@{i}"], "newsmon never": ["sl@0"]}
        if i:
            d.night = bench.Night(False, "refused: calibrated newsmon uF1 30.0 < current 40.0 - tolerance 0.5",
                                  412.4)
        log.append(d)
    table = bench.rows(stream, log)
    assert [len(r) for r in table] == [len(bench.COLUMNS)] * 3
    assert table[0][0] == "0 -> day 1 (1–5)" and table[0][-3:] == ["–", "–", "–"]
    assert table[1][0] == "1 -> day 2 (6–10)" and table[1][-3:] == ["refused", "yes", 412]  # refused, yet changed
    assert table[1][1:9] == [100.0, 100.0, 0.0, 0.0, 100.0, 100.0, 100.0, 100.0]
    assert table[2][0] == "days 2–2 (6–10)" and table[2][1:9] == table[1][1:9]
    assert np.isfinite(table[2][1])
