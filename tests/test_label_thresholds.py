"""Per-label thresholds (SCut) of the ``newsmon`` calibration: the coordinate ascent and the 2-fold cross-fitting on
small cases computed by hand, how a record's thresholds decide, and the calibration keeping them only when they lift
on articles they were not fitted on."""

from __future__ import annotations

import numpy as np
import pytest

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring.calibration import MICRO_AND_SUBSET
from newsmon.shared.scoring import LabelVocab
from newsmon.shared.scoring.rules.threshold import column_thresholds
from newsmon.shared.scoring.rules.threshold_search import (cross_fitted_label_thresholds, eligible_columns,
                                                  label_threshold_ascent, micro_f1_acc, paired_lift_interval)
from test_calibration import Params, _calibrate as calibrate, _r, newsmon_decide  # noqa: I001


S = np.array([[0.9, 0.8], [0.6, 0.7], [0.4, 0.2], [0.3, 0.1]])
Y = np.array([[1, 1], [1, 0], [0, 0], [0, 0]], dtype=bool)


def test_label_threshold_ascent_by_hand():
    base = np.array([0.7, 0.7])
    # at 0.7: proposals [a b], [], [], [] -> tp 2, |P| + |Y| = 2 + 3, micro-F1 0.8; rows 0, 2, 3 exact: 0.75
    assert micro_f1_acc(Y, S > base) == (0.8, 0.75)
    # a at 0.5 adds article 1's a: micro-F1 1.0, every row exact; b at 0.5 would add a false b on article 1
    assert label_threshold_ascent(S, Y, base, [0, 1], (0.5, 0.7)) == {0: 0.5}
    assert label_threshold_ascent(S, Y, base, [1], (0.5, 0.7)) == {}  # only the columns given move
    assert label_threshold_ascent(S, Y, np.array([0.5, 0.7]), [0, 1], (0.5, 0.7)) == {}  # no strict lift


def test_cross_fitting_applies_each_halfs_thresholds_to_the_other_half():
    seed = 5
    fold = np.random.default_rng(seed).permutation(4) % 2 == 0
    base = np.array([0.7, 0.7])
    P = cross_fitted_label_thresholds(S, Y, base, [0], (0.5, 0.7), seed=seed)
    for fit, apply in ((fold, ~fold), (~fold, fold)):
        t = label_threshold_ascent(S[fit], Y[fit], base, [0], (0.5, 0.7)).get(0, 0.7)
        assert (P[apply, 0] == (S[apply, 0] > t)).all()
        assert (P[apply, 1] == (S[apply, 1] > 0.7)).all()  # column 1 was not given: its base threshold


def test_a_lift_carried_by_one_article_does_not_hold():
    gold = np.zeros((100, 3), dtype=bool)
    gold[:, 0] = True
    old = gold.copy()
    old[:10, 1] = True  # ten articles with a false label
    assert paired_lift_interval(gold, old, old) == (0.0, 0.0)
    one = old.copy()
    one[0, 1] = False  # one of them mended: in some resamples it is absent, so the interval reaches 0
    lo, hi = paired_lift_interval(gold, one, old)
    assert lo == 0.0 < hi
    all_ten = gold.copy()  # all ten mended: every resample that holds any of them lifts
    assert paired_lift_interval(gold, all_ten, old)[0] > 0.0


def test_eligible_columns_are_the_frequent_labels_most_frequent_first():
    assert eligible_columns(["a", "b", "c", "d"], {"a": 99, "b": 100, "c": 3000, "e": 500}) == [2, 1]


def test_a_labels_own_threshold_replaces_its_bucket_threshold():
    # neighbours: r 0.3, m 0.2, f 0.3 of the weight (tau large: equal weights)
    r = _r([[(0.9, ("r",)), (0.9, ("m", "r")), (0.9, ("f",)), (0.9, ("r", "m", "f")), (0.9, ("f",))]
            + [(0.9, ())] * 5])
    counts = {"r": 3, "m": 40, "f": 800}
    p = Params(top_k=10, tau=1.0, threshold=0.5, bucket_thresholds=(0.25, 0.35, 0.2, 0.45),
               label_thresholds={"f": 0.25, "retired": 0.1})
    vocab = LabelVocab()
    scores, chosen = newsmon_decide(r, vocab, p, label_counts=counts)
    assert column_thresholds(vocab, p, counts).tolist() == [0.25, 0.35, 0.25]
    assert sorted(vocab.labels[j] for j in np.flatnonzero(chosen[0])) == ["f", "r"]  # f: 0.3 > its own 0.25
    assert column_thresholds(vocab, p, None).tolist() == [0.5, 0.5, 0.25]  # without counts: threshold, then own
    _, without = newsmon_decide(r, vocab, p.model_copy(update={"label_thresholds": None}), label_counts=counts)
    assert sorted(vocab.labels[j] for j in np.flatnonzero(without[0])) == ["r"]
    with pytest.raises(ValueError, match="label thresholds must lie in"):
        ScoringParams(label_thresholds={"f": 1.5})


def _two_frequent_labels(n: int = 60):
    """f carried by odd articles (3 of 10 neighbours carry it then, else 1), g by every third (6 of 10, else 4):
    f needs a cut in [0.1, 0.3), g one in [0.4, 0.6), so no single or bucket threshold serves both (both >= 500)."""
    rows, gold = [], []
    for i in range(n):
        f, g = i % 2 == 1, i % 3 == 0
        nf, ng = (3 if f else 1), (6 if g else 4)
        rows.append([(0.9, tuple(x for x, on in (("f", j < nf), ("g", j < ng)) if on)) for j in range(10)])
        gold.append(tuple(x for x, on in (("f", f), ("g", g)) if on))
    return _r(rows), gold


def test_calibration_keeps_label_thresholds_that_hold_on_articles_they_were_not_fitted_on():
    r, gold = _two_frequent_labels()
    res = calibrate(r, gold, rules=(), new_labels=False, label_counts={"f": 600, "g": 700},
                    objective=MICRO_AND_SUBSET)
    step = next(s for s in res.steps if s["step"] == "+ label thresholds")
    assert step["kept"] and step["labels"] == 2
    before = [s for s in res.steps[:res.steps.index(step)] if s["kept"]][-1]["objective"]
    lift, low, _high = step["lift"]["objective"]  # judged on the cross-fitted proposals
    assert before + lift == pytest.approx(2.0)  # each half's cuts are right on the other half
    assert low > 0  # and the lift holds in the paired bootstrap
    own = res.params.label_thresholds
    assert 0.1 <= own.get("f", res.params.threshold) < 0.3 and 0.4 <= own.get("g", res.params.threshold) < 0.6
    assert (res.figures["micro_f1"], res.figures["subset_accuracy"]) == (1.0, 1.0)
    # the same labels on fewer than 100 memory articles get no threshold of their own
    few = calibrate(r, gold, rules=(), new_labels=False, label_counts={"f": 60, "g": 70})
    step = next(s for s in few.steps if s["step"] == "+ label thresholds")
    assert not step["kept"] and step["labels"] == 0 and few.params.label_thresholds is None
