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
    the settings' ``calibration`` section chooses them: :meth:`from_settings`)."""

    micro: float = 1.0
    subset: float = 1.0
    macro: float = 0.0

    @classmethod
    def from_settings(cls, settings: Any) -> Objective:
        """The weights of ``settings.calibration`` (a :class:`newsmon.shared.config.CalibrationSettings`)."""
        c = settings.calibration
        return cls(c.micro_f1, c.subset_accuracy, c.macro_f1)

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
        rng = np.random.default_rng(seed)
        n = len(Y)
        draws = [rng.integers(0, n, n) for _ in range(n_boot)]
        W = np.stack([np.bincount(ix, minlength=n) for ix in draws]).astype(np.float64)  # (n_boot, n) weights
        vals = [self._resampled(W, Y, Q) for Q in ([P] if minus is None else [P, minus])]
        lift = vals[0] - (vals[1] if minus is not None else 0.0)
        return float(np.percentile(lift, 5)), float(np.percentile(lift, 95))

    def _resampled(self, W: np.ndarray, Y: np.ndarray, P: np.ndarray) -> np.ndarray:
        """``(n_boot,)`` objective of ``P`` on each resample (``W``: how often each article is drawn)."""
        n = max(len(Y), 1)
        hit = np.logical_and(P, Y)
        tp, size = W @ hit.sum(axis=1), W @ (P.sum(axis=1) + Y.sum(axis=1))
        micro = np.divide(2.0 * tp, size, out=np.zeros_like(tp), where=size > 0)
        acc = (W @ (P == Y).all(axis=1)) / n
        out = self.micro * micro + self.subset * acc
        if self.macro:
            Hs, Ps, Ys = (sp.csr_matrix(x, dtype=np.float64) for x in (hit, P, Y))
            ctp, cp, cy = W @ Hs, W @ Ps, W @ Ys  # (n_boot, L) per-label counts on each resample
            used = (cp + cy) > 0
            f1 = np.divide(2.0 * ctp, cp + cy, out=np.zeros_like(ctp), where=used)
            out = out + self.macro * np.divide(f1.sum(axis=1), used.sum(axis=1), out=np.zeros(len(W)),
                                               where=used.sum(axis=1) > 0)
        return out


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
