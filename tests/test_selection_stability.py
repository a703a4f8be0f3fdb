"""A lever near the noise is decided the same way on resampled calibration articles (issue 38, the stability of
the selection): the default rule (the low end of the lift's 90 % interval above 0) flips a lever that is worth
about two and a half of its standard errors between resamples of the same articles; the rule with a prior in the
lever's favour (``lifts``: kept when its cross-fitted lift is above 0) keeps it on every resample, and refuses a
lever that changes nothing. The label names' step is judged that way, on proposals cross-fitted in two halves."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring import LabelVocab, MemoryArticles, Retrieval
from newsmon.shared.scoring.calibration import CalibrationRun, calibration_set
from newsmon.shared.scoring.calibration.run import gold_matrix
from newsmon.shared.scoring.calibration.selection import HOLDS, LIFTS, Lift, measure, verdict
from newsmon.shared.scoring.components.label_names import LabelNamesComponent
from newsmon.shared.scoring.objective import Objective


def _lever(n: int = 600, fixed: int = 45, broken: int = 30, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(gold, proposals before, proposals with the lever) of ``n`` one-label articles: the lever fixes ``fixed``
    articles wrong before and breaks ``broken`` right ones (a net lift of 15 articles of 600: on resamples of them,
    3 to 11 points of micro-F1 + subset accuracy, the low end of its 90 % interval from -1.7 to +6.7)."""
    rng = np.random.default_rng(seed)
    Y = np.zeros((n, 2), dtype=bool)
    Y[:, 0] = True
    before = Y.copy()
    wrong = rng.permutation(n)[: n // 3]
    before[wrong] = [False, True]
    after = before.copy()
    after[wrong[:fixed]] = Y[wrong[:fixed]]
    right = np.setdiff1d(np.arange(n), wrong)
    after[right[:broken]] = [False, True]
    return Y, before, after


def test_a_lever_near_the_noise_is_decided_the_same_on_resampled_articles():
    Y, before, after = _lever()
    judge = Objective()
    holds, lifts = [], []
    for seed in range(12):  # the same articles drawn again: what another split of the same corpus looks like
        rows = np.random.default_rng(100 + seed).integers(0, len(Y), len(Y))
        lift = measure(judge, Y[rows], after[rows], before[rows])
        holds.append(verdict(lift, rule=HOLDS).kept)
        lifts.append(verdict(lift, rule=LIFTS).kept)
    assert all(lifts)
    assert any(holds) and not all(holds)  # the default rule flips: the lever sits at its interval's zero


def test_a_lever_that_changes_nothing_is_not_kept_for_its_prior():
    Y, before, _after = _lever()
    v = verdict(measure(Objective(), Y, before.copy(), before), rule=LIFTS)
    assert not v.kept and "does not lift" in v.why


def test_a_lever_with_a_prior_is_still_refused_when_it_lowers_a_protected_figure():
    lift = Lift({"objective": (0.02, 0.01, 0.03), "micro_f1": (0.07, 0.05, 0.09),
                 "subset_accuracy": (-0.05, -0.08, -0.03), "macro_f1": (0.0, 0.0, 0.0)})
    v = verdict(lift, rule=LIFTS)
    assert not v.kept and v.why.startswith("lowers subset accuracy")


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _run(texts: list[str], gold: list[tuple[str, ...]]) -> CalibrationRun:
    """A calibration run on ``texts`` (the memory's own articles, scored out of fold) whose neighbours propose
    ``delo`` (threshold 0.6); the label ``stavka`` is named in the texts."""
    memory = MemoryArticles(None, texts, gold)
    r = Retrieval.from_neighbours([[Hit("a", 0.9, ("delo",)), Hit("b", 0.9, ("drugo",))]] * len(texts))
    cal = calibration_set(memory, r)
    vocab = LabelVocab()
    r.label_matrix(vocab)
    vocab.extend(["stavka"])
    return CalibrationRun(cal, r, gold_matrix(cal.gold, vocab), vocab.labels, ScoringParams(top_k=2, tau=0.1,
                                                                                          threshold=0.6))


def test_the_label_names_are_judged_cross_fitted_and_kept_when_they_lift():
    texts = [f"Stavka in {w} {i}" for i in range(10) for w in ("delavci", "vlada", "sindikat", "plače")]
    run = _run(texts, [("stavka", "delo")] * len(texts))
    LabelNamesComponent().calibrate(run)
    step = run.steps[-1]
    assert step["step"] == "+ label_names" and step["kept"] and "cross-fitted" in step["why"]


def test_the_label_names_are_refused_where_they_add_nothing():
    texts = [f"Stavka in {w} {i}" for i in range(10) for w in ("delavci", "vlada", "sindikat", "plače")]
    gold = [("stavka", "delo") if i % 4 == 0 else ("delo",) for i in range(len(texts))]  # the name means it 1 in 4
    run = _run(texts, gold)
    LabelNamesComponent().calibrate(run)
    step = run.steps[-1]
    assert step["step"] == "+ label_names" and not step["kept"], step["why"]


def test_calibration_components_limits_the_components_tried_on_every_path():
    """``calibration.components``: the components the calibration may try (issue 38's cost lever; the gate drills
    judge the encoder with none); unset, every registered one; an unknown name is refused before any work."""
    from newsmon.shared.config import Settings
    from newsmon.shared.predictors.newsmon import NewsmonPredictor
    from newsmon.shared.scoring.calibration import allowed_components, calibrate

    texts = [f"Stavka in {w} {i}" for i in range(10) for w in ("delavci", "vlada", "sindikat", "plače")]
    gold = [("stavka", "delo")] * len(texts)

    def steps(only):
        memory = MemoryArticles(None, texts, gold)
        r = Retrieval.from_neighbours([[Hit("a", 0.9, ("delo",)), Hit("b", 0.9, ("drugo",))]] * len(texts))
        cal = calibration_set(memory, r)
        cal.only = only
        return [s["step"] for s in calibrate(cal).steps]

    every = steps(None)
    assert "+ label_names" in every
    from newsmon.shared.scoring.components import components

    names = {c.name for c in components()}
    assert steps(frozenset()) == [s for s in every if s[2:] not in names]
    assert "+ label_names" in steps(frozenset({"label_names"})) and "+ label_tree" not in steps(
        frozenset({"label_names"}))
    with pytest.raises(ValueError, match="calibration.components: unknown score component 'nope'; registered: "):
        allowed_components(["nope"])
    p = NewsmonPredictor.from_settings(Settings(calibration={"components": [], "hybrid": False}))
    assert p.components == frozenset() and p.hybrid is False
    assert NewsmonPredictor.from_settings(Settings()).components is None
