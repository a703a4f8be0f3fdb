"""Threshold search of the threshold rule's calibration step: one threshold per label-frequency bucket, and a
threshold of its own for each frequent label, both by coordinate ascent on the calibration objective
(:class:`~newsmon.shared.scoring.objective.Objective`) over fixed ``(n, L)`` scores, each judged on articles it was
not fitted on (2-fold cross-fitting).

A threshold per label is the classic SCut strategy of multi-label text categorisation (Yang, "A study of
thresholding strategies for text categorization", SIGIR 2001, section 2.2): each category's threshold is the one
that is best for it on held-out articles. With hundreds of parameters it fits its own calibration articles, so
:func:`cross_fitted_label_thresholds` judges it on articles it was not fitted on (two folds, each fitted on the
other), and only labels carried by at least :data:`LABEL_THRESHOLD_MIN` memory articles get one (enough
positives to place a cut); every other label keeps its bucket's. They are kept only when the paired bootstrap
interval of that cross-fitted lift lies above 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from newsmon.shared.scoring.objective import Objective, Tally

#: A label carried by at least this many memory articles may get a threshold of its own (the two upper
#: frequency buckets: :data:`newsmon.shared.scoring.rules.threshold.BUCKET_EDGES`).
LABEL_THRESHOLD_MIN = 100


def micro_f1_acc(Yt: np.ndarray, P: np.ndarray) -> tuple[float, float]:
    """(micro-F1, subset accuracy) of ``(n, L)`` bool predictions against ``(n, L)`` bool gold."""
    tp = np.logical_and(P, Yt).sum()
    denom = P.sum() + Yt.sum()
    f1 = 2.0 * tp / denom if denom else 0.0
    return float(f1), float((P == Yt).all(axis=1).mean()) if len(Yt) else 0.0


def label_threshold_ascent(S: np.ndarray, Y: np.ndarray, base: np.ndarray, columns: Sequence[int],
                           grid: Sequence[float], rounds: int = 2, objective: Objective = Objective()
                           ) -> dict[int, float]:
    """A threshold of its own for each of ``columns`` (coordinate ascent, ``rounds`` passes in the order given),
    starting from ``base``.

    Args:
        S: ``(n, L)`` scores; Y: ``(n, L)`` bool gold; base: ``(L,)`` the thresholds every column starts from.
        columns: the columns that may move; grid: the thresholds tried for each.

    Returns:
        {column: threshold} for the columns whose best threshold differs from ``base`` (a strict lift of the
        ``objective`` on these ``n`` articles).
    """
    tally = Tally(Y, S > base[None, :], objective)
    chosen: dict[int, float] = {}
    for _ in range(rounds):
        for j in columns:
            current = chosen.get(j, float(base[j]))
            best, best_t = tally.objective_if(j, tally.P[:, j]), current
            col = S[:, j].astype(np.float64)  # compared in float64, as the decision compares (a float32 0.1 > 0.1)
            for t in grid:
                got = tally.objective_if(j, col > t)
                if got > best + 1e-12:
                    best, best_t = got, float(t)
            if best_t != current:
                tally.set(j, col > best_t)
                chosen[j] = best_t
    return {j: t for j, t in chosen.items() if t != float(base[j])}


def cross_fitted_label_thresholds(S: np.ndarray, Y: np.ndarray, base: np.ndarray, columns: Sequence[int],
                                  grid: Sequence[float], seed: int = 13, objective: Objective = Objective()
                                  ) -> np.ndarray:
    """``(n, L)`` bool proposals of per-label thresholds judged on articles they were not fitted on: the ``n``
    articles split in two seeded halves, each half's proposals made with the thresholds
    :func:`label_threshold_ascent` fitted on the other half (2-fold cross-fitting)."""
    n = len(Y)
    fold = np.random.default_rng(seed).permutation(n) % 2 == 0
    P = S > base[None, :]
    for fit, apply in ((fold, ~fold), (~fold, fold)):
        if not fit.any() or not apply.any():
            continue
        own = label_threshold_ascent(S[fit], Y[fit], base, columns, grid, objective=objective)
        thr = base.copy()
        for j, t in own.items():
            thr[j] = t
        P[apply] = S[apply] > thr[None, :]
    return P


def eligible_columns(labels: Sequence[str], label_counts: Mapping[str, int],
                     minimum: int = LABEL_THRESHOLD_MIN) -> list[int]:
    """Columns of ``labels`` carried by at least ``minimum`` memory articles, the most frequent first."""
    cols = [j for j, lb in enumerate(labels) if label_counts.get(lb, 0) >= minimum]
    return sorted(cols, key=lambda j: (-label_counts[labels[j]], j))


def bootstrap_objective(Y: np.ndarray, P: np.ndarray, minus: np.ndarray | None = None, n_boot: int = 200,
                        seed: int = 13, objective: Objective = Objective()) -> tuple[float, float]:
    """Bootstrap 90 % interval of the ``objective`` of ``(n, L)`` bool proposals ``P`` against gold ``Y`` (with
    ``minus``: of the paired lift over it; :meth:`Objective.bootstrap`)."""
    return objective.bootstrap(Y, P, minus, n_boot, seed)


def paired_lift_interval(Y: np.ndarray, new: np.ndarray, old: np.ndarray, n_boot: int = 200, seed: int = 13,
                         objective: Objective = Objective()) -> tuple[float, float]:
    """Paired bootstrap 90 % interval of the objective's lift of ``new`` over ``old`` (:func:`bootstrap_objective`)."""
    return objective.bootstrap(Y, new, old, n_boot, seed)


@dataclass
class LabelThresholdChoice:
    """What :func:`choose_label_thresholds` found.

    Attributes:
        thresholds: {label: threshold} fitted on all ``n`` articles; labels: how many labels were eligible;
        in_sample / crossed: (micro-F1, subset accuracy, macro-F1) with them on the articles they were fitted on /
        cross-fitted (:func:`cross_fitted_label_thresholds`); lift: the paired bootstrap 90 % interval of the
        cross-fitted objective's lift over ``base`` (:func:`paired_lift_interval`); crossed_proposals: the
        ``(n, L)`` bool cross-fitted proposals the threshold rule's step is judged on (the run's selection rule).
    """

    thresholds: dict[str, float]
    labels: int
    in_sample: tuple[float, float, float]
    crossed: tuple[float, float, float]
    lift: tuple[float, float]
    crossed_proposals: np.ndarray | None = None


def choose_label_thresholds(S: np.ndarray, Y: np.ndarray, base: np.ndarray, labels: Sequence[str],
                            label_counts: Mapping[str, int], grid: Sequence[float],
                            objective: Objective = Objective()) -> LabelThresholdChoice:
    """Per-label thresholds for the frequent labels (:func:`eligible_columns`) on top of ``base`` ``(L,)``, with
    ``S`` ``(n, L)`` scores and ``Y`` ``(n, L)`` bool gold, by ``objective``."""
    columns = eligible_columns(labels, label_counts)
    crossed = cross_fitted_label_thresholds(S, Y, base, columns, grid, objective=objective)
    own = label_threshold_ascent(S, Y, base, columns, grid, objective=objective)
    thr = base.copy()
    thr[list(own)] = list(own.values())
    return LabelThresholdChoice({labels[j]: t for j, t in sorted(own.items())}, len(columns),
                                objective.parts(Y, S > thr[None, :]), objective.parts(Y, crossed),
                                paired_lift_interval(Y, crossed, S > base[None, :], objective=objective), crossed)


def bucket_ascent(S: np.ndarray, Y: np.ndarray, bucket: np.ndarray, start: float, grid: Sequence[float],
                  rounds: int = 2, judge: Objective = Objective()) -> tuple[list[float], float]:
    """One threshold per frequency bucket (``bucket``: ``(L,)`` int in 0..3, the column's bucket) by coordinate
    ascent from ``start`` over ``grid`` (``rounds`` passes, buckets in order). Returns (the 4 thresholds, their
    objective (``judge``) on the ``n`` articles)."""
    chosen = [float(start)] * 4

    def objective(thr: list[float]) -> float:
        return judge(Y, S > np.asarray(thr)[bucket][None, :])

    best = objective(chosen)
    for _ in range(rounds):
        for b in range(4):
            for t in grid:
                trial = chosen[:b] + [float(t)] + chosen[b + 1:]
                got = objective(trial)
                if got > best + 1e-12:
                    best, chosen = got, trial
    return chosen, best


def cross_fitted_buckets(S: np.ndarray, Y: np.ndarray, bucket: np.ndarray, start: float, grid: Sequence[float],
                         judge: Objective = Objective(), seed: int = 13) -> np.ndarray:
    """``(n, L)`` bool proposals of bucket thresholds judged on articles they were not fitted on: the ``n``
    articles in two seeded halves, each half's proposals made with the thresholds :func:`bucket_ascent` fitted on
    the other half (four parameters fitted on the articles they are judged on flatter themselves)."""
    fold = np.random.default_rng(seed).permutation(len(Y)) % 2 == 0
    P = S > np.float64(start)  # float64, as the decision compares
    for fit, apply in ((fold, ~fold), (~fold, fold)):
        if not fit.any() or not apply.any():
            continue
        chosen, _ = bucket_ascent(S[fit], Y[fit], bucket, start, grid, judge=judge)
        P[apply] = S[apply] > np.asarray(chosen)[bucket][None, :]
    return P
