"""What the calibration maximises (:class:`Objective`): a weighted sum of micro-F1, subset accuracy and macro-F1
on the calibration articles, with its bootstrap interval and a running tally for the per-label threshold search.

micro-F1 weighs every proposal alike, so the frequent labels decide it; subset accuracy counts the articles whose
whole label set is right (a moderator who only confirms); macro-F1 weighs every label alike, so a client topic with a
handful of articles counts as much as the biggest (the figure the field reports for the long tail). It is computed as
``eval`` computes it (:func:`newsmon.shared.metrics.classification_metrics`): over the labels that are in the gold
sets or proposed, each label's F1 from its own counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class Objective:
    """Weights of micro-F1, subset accuracy and macro-F1 in the calibration objective (each a fraction in [0, 1];
    the settings' ``calibration`` section chooses them: :meth:`from_settings`), and the figures no lever may lower
    beyond the noise (``protect``: :mod:`newsmon.shared.scoring.calibration.selection`)."""

    micro: float = 1.0
    subset: float = 1.0
    macro: float = 0.0
    protect: tuple[str, ...] = ("micro_f1", "subset_accuracy", "macro_f1")

    @classmethod
    def from_settings(cls, settings: Any) -> Objective:
        """The weights and protected figures of ``settings.calibration`` (a
        :class:`newsmon.shared.config.CalibrationSettings`)."""
        c = settings.calibration
        return cls(c.micro_f1, c.subset_accuracy, c.macro_f1, tuple(c.protect))

    @property
    def name(self) -> str:
        """The objective in words (the calibration record's ``objective``)."""
        parts = [(self.micro, "micro_f1"), (self.subset, "subset_accuracy"), (self.macro, "macro_f1")]
        return " + ".join(n if w == 1 else f"{w:g} * {n}" for w, n in parts if w)

    def parts(self, Y: np.ndarray, P: np.ndarray) -> tuple[float, float, float]:
        """(micro-F1, subset accuracy, macro-F1) of ``(n, L)`` bool proposals ``P`` against gold ``Y``."""
        tp = np.logical_and(P, Y).sum()
        denom = P.sum() + Y.sum()
        f1 = 2.0 * tp / denom if denom else 0.0
        acc = float((P == Y).all(axis=1).mean()) if len(Y) else 0.0
        return float(f1), acc, macro_f1(Y, P)

    def sweep(self, Y: np.ndarray, S: np.ndarray, thresholds: np.ndarray, macro: bool | None = None
              ) -> list[tuple[float, float, float]]:
        """:meth:`parts` of ``S > t`` for each threshold ``t`` of ``thresholds`` (ascending), from one pass over the
        ``(n, L)`` scores ``S`` instead of one per threshold: a score's bin (how many thresholds lie below it) says
        for which thresholds it is proposed, and an article's label set is right exactly for the thresholds at or
        above its best wrong label's bin and below its worst gold label's. Equal to ``parts(Y, S > t)``; macro-F1 is
        computed when ``macro`` (default: when the objective weighs it), else reported as 0."""
        t = np.asarray(thresholds, dtype=np.float64)
        T, n = len(t), len(Y)
        if not n:
            return [(0.0, 0.0, 0.0)] * T
        b = bins(S, t)  # S > t[j]  <=>  j < b
        Yb = Y.astype(bool)
        tp, npred = _above(np.bincount(b[Yb], minlength=T + 1)), _above(np.bincount(b.ravel(), minlength=T + 1))
        ngold = int(Yb.sum())
        lo = np.clip(np.where(Yb, -1, b).max(axis=1), 0, None)  # nothing wrong proposed from threshold lo on
        hi = np.where(Yb, b, T + 1).min(axis=1)                  # every gold label proposed below threshold hi
        ok = np.cumsum(np.bincount(lo, minlength=T + 2) - np.bincount(np.maximum(hi, lo), minlength=T + 2))[:T]
        micro = [2.0 * tp[j] / (npred[j] + ngold) if npred[j] + ngold else 0.0 for j in range(T)]
        macros = self._sweep_macro(Yb, b, T) if (self.macro if macro is None else macro) else [0.0] * T
        return [(float(micro[j]), float(ok[j] / n), macros[j]) for j in range(T)]

    @staticmethod
    def _sweep_macro(Yb: np.ndarray, b: np.ndarray, T: int) -> list[float]:
        """macro-F1 (:func:`macro_f1`) of ``S > t[j]`` for each ``j``, from the bins ``b`` of the scores."""
        L = Yb.shape[1]
        cell = np.arange(L)[None, :] * (T + 1) + b  # (label, bin)
        tp = _above(np.bincount(cell[Yb], minlength=L * (T + 1)).reshape(L, T + 1))
        size = _above(np.bincount(cell.ravel(), minlength=L * (T + 1)).reshape(L, T + 1)) + Yb.sum(axis=0)[:, None]
        used = size > 0
        f1 = np.divide(2.0 * tp, size, out=np.zeros(size.shape), where=used)
        return [float(f1[used[:, j], j].mean()) if used[:, j].any() else 0.0 for j in range(T)]

    def value(self, parts: tuple[float, float, float]) -> float:
        """The weighted sum of (micro-F1, subset accuracy, macro-F1)."""
        return self.micro * parts[0] + self.subset * parts[1] + self.macro * parts[2]

    def __call__(self, Y: np.ndarray, P: np.ndarray) -> float:
        return self.value(self.parts(Y, P))

    def bootstrap(self, Y: np.ndarray, P: np.ndarray, minus: np.ndarray | None = None, n_boot: int = 200,
                  seed: int = 13) -> tuple[float, float]:
        """Bootstrap 90 % interval of the objective of ``P`` over the ``n`` articles; with ``minus`` (other
        proposals for the same articles), of the paired lift ``objective(P) - objective(minus)``, the same resample
        for both (Efron and Tibshirani, "An Introduction to the Bootstrap", 1993, section 16.4)."""
        W = resample_weights(len(Y), n_boot, seed)
        vals = [self.weigh(resampled_parts(W, Y, Q)) for Q in ([P] if minus is None else [P, minus])]
        lift = vals[0] - (vals[1] if minus is not None else 0.0)
        return float(np.percentile(lift, 5)), float(np.percentile(lift, 95))

    def weigh(self, parts: np.ndarray) -> np.ndarray:
        """``(...,)`` the objective of ``(..., 3)`` (micro-F1, subset accuracy, macro-F1) rows."""
        return self.micro * parts[..., 0] + self.subset * parts[..., 1] + self.macro * parts[..., 2]


def bins(S: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``(n, L)`` int64: per score, how many of the ascending float64 ``thresholds`` lie below it
    (``np.searchsorted(thresholds, S.astype(np.float64), side="left")``), searched for the non-zero scores only:
    a score matrix is mostly zeros, which all get the bin of 0."""
    t = np.asarray(thresholds, dtype=np.float64)
    flat = np.ascontiguousarray(S).reshape(-1)
    nz = np.flatnonzero(flat)
    out = np.full(flat.shape, np.searchsorted(t, 0.0, side="left"), dtype=np.intp)
    out[nz] = np.searchsorted(t, flat[nz].astype(np.float64), side="left")
    return out.reshape(S.shape)


def resample_weights(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``(n_boot, n)`` float64: how often each of ``n`` articles is drawn in each of ``n_boot`` seeded bootstrap
    resamples."""
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)]).astype(np.float64) \
        if n else np.zeros((n_boot, 0))


def resampled_parts(W: np.ndarray, Y: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``(n_boot, 3)`` (micro-F1, subset accuracy, macro-F1) of ``(n, L)`` bool proposals ``P`` against gold ``Y`` on
    each resample (``W``: :func:`resample_weights`). Every count is a sum of integers, exact in float64 whatever the
    order BLAS adds them in, so the figures do not depend on the thread count."""
    n = max(len(Y), 1)
    hit = np.logical_and(P, Y)
    tp, size = W @ hit.sum(axis=1), W @ (P.sum(axis=1) + Y.sum(axis=1))
    micro = np.divide(2.0 * tp, size, out=np.zeros_like(tp), where=size > 0)
    acc = (W @ (P == Y).all(axis=1)) / n
    Hs, Ps, Ys = (sp.csr_matrix(x, dtype=np.float64) for x in (hit, P, Y))
    ctp, csize = np.asarray(W @ Hs), np.asarray(W @ Ps) + np.asarray(W @ Ys)  # (n_boot, L) per-label counts
    used = csize > 0
    f1 = np.divide(2.0 * ctp, csize, out=np.zeros_like(ctp), where=used)
    macro = np.divide(f1.sum(axis=1), used.sum(axis=1), out=np.zeros(len(W)), where=used.sum(axis=1) > 0)
    return np.stack([micro, acc, macro], axis=1)


def _above(counts: np.ndarray) -> np.ndarray:
    """``(..., T)``: per threshold ``j``, the count of the bins above it (``counts[..., j + 1:].sum(-1)``) of
    ``(..., T + 1)`` counts per bin."""
    return np.cumsum(counts[..., ::-1], axis=-1)[..., ::-1][..., 1:]


#: micro-F1 + subset accuracy (the default).
MICRO_AND_SUBSET = Objective(1.0, 1.0, 0.0)


def macro_f1(Y: np.ndarray, P: np.ndarray) -> float:
    """Macro-F1 of ``(n, L)`` bool ``P`` against ``Y`` over the labels in either (0 when there is none)."""
    tp = np.logical_and(P, Y).sum(axis=0)
    size = P.sum(axis=0) + Y.sum(axis=0)
    used = size > 0
    return float((2.0 * tp[used] / size[used]).mean()) if used.any() else 0.0


class Tally:
    """Running counts of the objective of ``(n, L)`` bool proposals ``P`` against gold ``Y``, updated one column at
    a time in O(n) (the per-label threshold search)."""

    def __init__(self, Y: np.ndarray, P: np.ndarray, objective: Objective) -> None:
        self.Y, self.P, self.objective = Y, P.copy(), objective
        self.col_tp = np.logical_and(P, Y).sum(axis=0).astype(np.int64)
        self.col_size = (P.sum(axis=0) + Y.sum(axis=0)).astype(np.int64)
        self.wrong = (P != Y).sum(axis=1)
        used = self.col_size > 0
        self.f1_sum = float((2.0 * self.col_tp[used] / self.col_size[used]).sum())
        self.used = int(used.sum())

    def _after(self, j: int, col: np.ndarray) -> tuple[int, int, np.ndarray]:
        y, old = self.Y[:, j], self.P[:, j]
        return (int(self.col_tp[j] - (old & y).sum() + (col & y).sum()),
                int(self.col_size[j] - old.sum() + col.sum()), self.wrong - (old != y) + (col != y))

    def objective_if(self, j: int, col: np.ndarray) -> float:
        """The objective with column ``j`` of the proposals replaced by ``col`` ``(n,)`` bool."""
        if not len(self.Y):
            return 0.0
        tp, size, wrong = self._after(j, col)
        total_tp = int(self.col_tp.sum()) - int(self.col_tp[j]) + tp
        total_size = int(self.col_size.sum()) - int(self.col_size[j]) + size
        micro = 2.0 * total_tp / total_size if total_size else 0.0
        f1_old = 2.0 * self.col_tp[j] / self.col_size[j] if self.col_size[j] else 0.0
        f1_new = 2.0 * tp / size if size else 0.0
        used = self.used - int(self.col_size[j] > 0) + int(size > 0)
        macro = (self.f1_sum - f1_old + f1_new) / used if used else 0.0
        return self.objective.value((micro, float((wrong == 0).mean()), macro))

    def set(self, j: int, col: np.ndarray) -> None:
        """Replace column ``j`` of the proposals by ``col``."""
        tp, size, wrong = self._after(j, col)
        f1_old = 2.0 * self.col_tp[j] / self.col_size[j] if self.col_size[j] else 0.0
        self.f1_sum += (2.0 * tp / size if size else 0.0) - f1_old
        self.used += int(size > 0) - int(self.col_size[j] > 0)
        self.col_tp[j], self.col_size[j], self.wrong = tp, size, wrong
        self.P[:, j] = col
