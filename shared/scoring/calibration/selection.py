"""Which levers the calibration keeps, and why: a lever's lift over the proposals before it, measured on the
calibration articles with a paired bootstrap (:func:`measure`), and the rule that keeps it (:func:`verdict`).

A lever is kept only when its lift holds under resampling: the lower end of the paired bootstrap 90 % interval of
its objective's lift lies above 0 (Efron and Tibshirani, "An Introduction to the Bootstrap", 1993, section 16.4;
the resamples are the calibration articles drawn with replacement, the same draws for both proposals). And it is
never kept when it lowers one of the protected figures (``calibration.protect``: micro-F1, subset accuracy and
macro-F1 by default) by more than :data:`TOLERANCE` beyond the noise: the upper end of that figure's interval below
``-TOLERANCE``. A lever that adds 0.7
micro-F1 and takes 10 points of subset accuracy is refused even where the weighted objective would take the trade,
unless the settings drop subset accuracy from ``protect``. Safety levers (a rule that abstains, one that serves new
labels) are kept by a milder rule, :data:`NOT_WORSE`: they may not lower the objective nor a protected figure.

A lever with a stated prior in its favour (:data:`LIFTS`: one that only raises scores where the article itself
holds the evidence, the label names) is kept when its lift, judged **cross-fitted** (its option chosen on one half of
the calibration articles, judged on the other), is above 0 and no protected figure falls beyond the noise. Why: a
lever whose lift sits near the low end's zero is kept on one split of the same corpus and refused on the next (the
decision flips while the lever is worth most of a point); with the prior, its decision changes only where its
cross-fitted lift crosses 0, where keeping it or not makes no difference. The cross-fitting keeps the choice among
its options from flattering it (a lever that does nothing on a corpus is not kept for the best of its many options
on the articles that chose it).

The resamples are seeded (:data:`SEED`), so the same proposals give the same intervals on every run. Every lever's
lift, interval, verdict and reason go into the calibration's ablation steps and the record's selection report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from newsmon.shared.scoring.objective import Objective, resample_weights, resampled_parts

#: The figures a lever is judged on besides the objective, in the order of :meth:`Objective.parts`.
FIGURES = ("micro_f1", "subset_accuracy", "macro_f1")
#: Bootstrap resamples and their seed; the interval's level (two-sided 90 %: 5th and 95th percentiles).
RESAMPLES, SEED, LOW, HIGH = 500, 13, 5.0, 95.0
#: The keep rules: a lever must lift beyond the noise (the default), or only not make things worse, or (a lever with
#: a prior in its favour, judged cross-fitted) lift at all.
HOLDS, NOT_WORSE, LIFTS = "holds", "not_worse", "lifts"
#: How far beyond the noise a lever may lower a protected figure (a fraction: 1 point): a lever is refused when even
#: the high end of the figure's lift interval lies below ``-TOLERANCE``.
TOLERANCE = 0.01


@dataclass(frozen=True)
class Lift:
    """A lever's lift over the proposals before it: per figure (``objective`` and :data:`FIGURES`), (the lift on
    the calibration articles, the low and high end of its paired bootstrap 90 % interval), fractions."""

    figures: dict[str, tuple[float, float, float]]

    def json(self) -> dict[str, list[float]]:
        """JSON form: figure -> [lift, low, high], rounded to 6 places (what the record's report stores)."""
        return {k: [round(float(x), 6) for x in v] for k, v in self.figures.items()}


@dataclass(frozen=True)
class LeverVerdict:
    """Whether a lever is kept, and why in words (the selection report's)."""

    kept: bool
    why: str


def measure(objective: Objective, Y: np.ndarray, trial: np.ndarray, current: np.ndarray,
            resamples: int = RESAMPLES, seed: int = SEED) -> Lift:
    """The :class:`Lift` of ``(n, L)`` bool proposals ``trial`` over ``current`` against gold ``Y``."""
    W = resample_weights(len(Y), resamples, seed)
    new, old = resampled_parts(W, Y, trial), resampled_parts(W, Y, current)
    point_new, point_old = np.array(objective.parts(Y, trial)), np.array(objective.parts(Y, current))
    out = {}
    for name, d, p in [("objective", objective.weigh(new) - objective.weigh(old),
                        objective.weigh(point_new) - objective.weigh(point_old))] + [
            (f, new[:, j] - old[:, j], point_new[j] - point_old[j]) for j, f in enumerate(FIGURES)]:
        out[name] = (float(p), float(np.percentile(d, LOW)), float(np.percentile(d, HIGH)))
    return Lift(out)


def verdict(lift: Lift, protect: tuple[str, ...] = FIGURES, rule: str = HOLDS, tolerance: float = TOLERANCE
            ) -> LeverVerdict:
    """Keep or not by ``rule`` (:data:`HOLDS`, :data:`NOT_WORSE` or :data:`LIFTS`), protecting the figures
    ``protect`` (none may fall by more than ``tolerance`` beyond the noise).

    Raises:
        ValueError: an unknown rule or figure."""
    if rule not in (HOLDS, NOT_WORSE, LIFTS) or set(protect) - set(FIGURES):
        raise ValueError(f"keep rule {rule!r} / protected figures {protect} unknown")
    lowered = [f for f in protect if lift.figures[f][2] < -tolerance]
    if lowered:
        f = lowered[0]
        return LeverVerdict(False, f"lowers {f.replace('_', ' ')} by more than {100 * tolerance:g} point beyond "
                                   f"the noise: {_pts(lift.figures[f])}")
    point, low, high = lift.figures["objective"]
    if rule == NOT_WORSE:
        if point < -1e-9:
            return LeverVerdict(False, f"lowers the objective: {_pts((point, low, high))}")
        return LeverVerdict(True, f"does not lower the objective ({_pts((point, low, high))}) nor a protected figure")
    if rule == LIFTS:
        if point <= 1e-9:
            return LeverVerdict(False, f"does not lift the objective cross-fitted: {_pts((point, low, high))}")
        return LeverVerdict(True, f"lifts the objective cross-fitted ({_pts((point, low, high))}; kept unless it "
                                  f"does not lift: a prior in its favour) and lowers no protected figure")
    if point <= 1e-9 or low <= 0.0:
        return LeverVerdict(False, f"lift within the noise: {_pts((point, low, high))}")
    return LeverVerdict(True, f"lifts the objective beyond the noise: {_pts((point, low, high))}")


def _pts(v: tuple[float, float, float]) -> str:
    """A lift in points with its interval, e.g. ``+1.2 points [+0.4, +2.0]``."""
    return f"{100 * v[0]:+.1f} points [{100 * v[1]:+.1f}, {100 * v[2]:+.1f}]"


def report_entry(step: dict[str, Any]) -> dict[str, Any]:
    """A step of the ablation as the record's selection report keeps it: the lever, kept or not, why, its lift."""
    return {k: step[k] for k in ("step", "kept", "why", "lift") if k in step}
