"""The calibration objective: micro-F1 + subset accuracy + macro-F1 (each label alike, over the labels in the gold
sets or proposed, as ``eval`` reports it), computed by hand, kept up to date column by column, and bootstrapped."""

from __future__ import annotations

import numpy as np
import pytest

from newsmon.shared.metrics import classification_metrics
from newsmon.shared.scoring.calibration import MICRO_AND_SUBSET, Objective
from newsmon.shared.scoring.objective import Tally, macro_f1


def test_the_parts_by_hand_and_as_eval_reports_them():
    Y = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=bool)
    P = np.array([[1, 0, 1], [1, 0, 0], [0, 0, 0]], dtype=bool)
    micro, acc, macro = Objective().parts(Y, P)
    assert micro == pytest.approx(2 * 2 / (3 + 3))  # tp 2, 3 proposed, 3 gold
    assert acc == pytest.approx(1 / 3)  # the third article only (both empty)
    assert macro == pytest.approx((1.0 + 0.0 + 0.0) / 3)  # a: F1 1; b: gold only; c: proposed only
    m = classification_metrics(Y, P)
    assert (micro, acc, macro) == pytest.approx((m["uF1"], m["Acc"], m["F1"]))
    assert Objective(macro=1.0)(Y, P) == pytest.approx(micro + acc + macro)
    assert Objective()(Y, P) == MICRO_AND_SUBSET(Y, P) == pytest.approx(micro + acc)
    assert MICRO_AND_SUBSET.name == "micro_f1 + subset_accuracy"
    assert Objective(macro=1.0).name == "micro_f1 + subset_accuracy + macro_f1" and macro_f1(Y[:, :0], P[:, :0]) == 0.0


def test_the_tally_follows_each_column_change():
    rng = np.random.default_rng(5)
    Y, P = rng.random((40, 12)) < 0.2, rng.random((40, 12)) < 0.25
    for judge in (Objective(macro=1.0), MICRO_AND_SUBSET, Objective(0.5, 0.0, 2.0)):
        tally, now = Tally(Y, P, judge), P.copy()
        for j in rng.integers(0, 12, 30):
            col = rng.random(40) < 0.3
            after = now.copy()
            after[:, j] = col
            assert tally.objective_if(j, col) == pytest.approx(judge(Y, after))
            if rng.random() < 0.5:
                tally.set(j, col)
                now = after
        assert np.array_equal(tally.P, now)


def test_the_bootstrap_brackets_the_objective_and_pairs_the_resamples():
    rng = np.random.default_rng(6)
    Y, P = rng.random((80, 6)) < 0.3, rng.random((80, 6)) < 0.3
    judge = Objective(macro=1.0)
    lo, hi = judge.bootstrap(Y, P)
    assert lo <= judge(Y, P) <= hi
    assert judge.bootstrap(Y, P, P) == (0.0, 0.0)  # the same proposals: no lift in any resample
    better = P | Y
    assert judge.bootstrap(Y, better, P)[0] > 0
