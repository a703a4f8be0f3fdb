"""Which option of a grid the calibration takes (:class:`Choice`): the centre of the options whose objective lies
within the noise of the best's, not the best itself.

Why: on a few hundred calibration articles many options of a grid (k 50-100 with tau 0.05-0.2, thresholds 0.2 and
0.25, a component's weight 0.75 or 1.0) score within a fraction of a point of each other, and which of them is the
best flips from one re-split of the same corpus to the next: the record changes, and its test figures move by
3.5 points (issue 38's stability benchmark), while the same parameters on every re-split move them by less than 1.
The options within the noise of the best form a region of the grid that moves much less than its highest point; its
centre is taken.

The rule, for a grid of options ``c`` (each a mapping of named values: ``top_k``, ``tau``, ``threshold``, a
component's options), each with its proposals' per-article counts on the ``n`` calibration articles:

1. the point objective of every option (:meth:`~newsmon.shared.scoring.objective.Objective.value` of its micro-F1,
   subset accuracy and macro-F1), and its objective on each of :data:`RESAMPLES` seeded bootstrap resamples of the
   articles (the same resamples for every option: paired, as :mod:`.selection` judges a lever);
2. ``best``: the option with the highest point objective (the first in grid order on a tie);
3. the options within the noise: those whose lift over ``best`` has a high end (the :data:`HIGH` th percentile over
   the resamples) at or above 0, i.e. not worse than ``best`` beyond the noise (a one-sided 95 % paired bootstrap
   test; Efron and Tibshirani 1993, section 16.4); ``best`` is one of them;
4. with a **prior** (the option the scorer has without calibration: a component's or a rule's default options at
   the threshold chosen so far, the base grid's cell of the settings' defaults), the prior itself when it is one of
   them: the calibration leaves a default the articles cannot tell from the best;
5. else the centre: the one of them with the smallest sum of distances to the others, the distance between two
   options being the sum over their named values of how many grid steps apart they are (a value's step: its rank
   among the values the grid gives that name); on a tie the higher point objective, then the grid order.

Why the prior, and only when it is within the noise: on a small calibration set (the gate's 30 validation articles)
every option is within the noise, and which few fall out moves the centre: a near-identity adapter and production,
calibrated on the same 30 articles, got records 8 micro-F1 points apart on the test articles (issue 38, 6 December);
the defaults, within the noise of both, give both the same record. Taking the option nearest the prior even when the
prior is beyond the noise (CART's one standard error rule) was measured and not kept: on five re-splits of
sentinews_sl it spread the test figures more than the centre (docs/measurements.md, 6 December, night).

macro-F1 enters through its point value only (its resamples would need per-label counts for every option); with the
default objective, which does not weigh it, it does not enter at all.

Same inputs, same choice: the resamples are seeded, every count is an integer (their weighted sums are exact in
float64 whatever the thread count: the same argument as
:func:`~newsmon.shared.scoring.objective.resampled_parts`), and ties are broken by stated rules.
Cost: ``RESAMPLES x n`` float64 weights (200 x 10k articles: 16 MB), and ``RESAMPLES`` floats per option within
:attr:`Choice.margin` of the best so far (the others are beyond the noise without resampling them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.scoring.objective import Objective, _above, bins, resample_weights

#: Bootstrap resamples of the choice and their seed (:data:`.selection.SEED`'s value); the percentile of the lift's
#: high end (one-sided 95 %).
RESAMPLES, SEED, HIGH = 200, 13, 95.0


@dataclass(frozen=True)
class RowCounts:
    """Per calibration article and per threshold, the counts of one option's proposals: ``tp`` (gold labels
    proposed), ``size`` (labels proposed + gold labels) and ``ok`` (1 where the proposed set is the gold set), each
    ``(n, T)`` int64 for ``T`` thresholds (``T`` = 1 for one proposal matrix)."""

    tp: np.ndarray
    size: np.ndarray
    ok: np.ndarray

    @classmethod
    def of(cls, Y: np.ndarray, P: np.ndarray) -> RowCounts:
        """The counts of ``(n, L)`` bool proposals ``P`` against gold ``Y`` (``T`` = 1)."""
        hit = np.logical_and(P, Y).sum(axis=1)
        size = P.sum(axis=1) + Y.sum(axis=1)
        ok = (P == Y).all(axis=1)
        return cls(*(np.asarray(x, dtype=np.int64)[:, None] for x in (hit, size, ok)))

    @classmethod
    def sweep(cls, Y: np.ndarray, S: np.ndarray | sp.csr_matrix, thresholds: Sequence[float]) -> RowCounts:
        """The counts of ``S > t`` for each of the ascending ``thresholds`` (``T`` columns), from ``(n, L)`` scores
        ``S`` (dense, or CSR without repeated entries: the scores not stored are 0), in one pass over the scores as
        :meth:`~newsmon.shared.scoring.objective.Objective.sweep` counts them, per article instead of in total."""
        t = np.asarray(thresholds, dtype=np.float64)
        T, (n, L) = len(t), Y.shape
        Yb = Y.astype(bool, copy=False)
        gold_row = Yb.sum(axis=1).astype(np.int64)
        width = T + 1
        if sp.issparse(S):
            S = sp.csr_matrix(S)
            per_row = np.diff(S.indptr)
            r, c = np.repeat(np.arange(n), per_row), S.indices
            bz = np.searchsorted(t, np.asarray(S.data, dtype=np.float32).astype(np.float64), side="left")
            b0 = int(np.searchsorted(t, 0.0, side="left"))  # the bin of every score not stored
            gold = Yb[r, c]
            unstored_gold = gold_row - np.bincount(r[gold], minlength=n)
            tp_bins = np.bincount(r[gold] * width + bz[gold], minlength=n * width).reshape(n, width)
            tp_bins[:, b0] += unstored_gold
            all_bins = np.bincount(r * width + bz, minlength=n * width).reshape(n, width)
            all_bins[:, b0] += L - per_row
            lo = np.where(L - per_row - unstored_gold > 0, b0, -1)  # a wrong label not stored: bin b0
            np.maximum.at(lo, r[~gold], bz[~gold])
            hi = np.where(unstored_gold > 0, b0, T + 1)
            np.minimum.at(hi, r[gold], bz[gold])
        else:
            b = bins(np.asarray(S), t)
            rows = np.arange(n)[:, None] * width + b
            tp_bins = np.bincount(rows[Yb], minlength=n * width).reshape(n, width)
            all_bins = np.bincount(rows.ravel(), minlength=n * width).reshape(n, width)
            lo = np.where(Yb, -1, b).max(axis=1) if L else np.full(n, -1)
            hi = np.where(Yb, b, T + 1).min(axis=1) if L else np.full(n, T + 1)
        lo = np.clip(lo, 0, None)  # nothing wrong proposed from threshold lo on; every gold one below hi
        j = np.arange(T)[None, :]
        ok = (lo[:, None] <= j) & (j < hi[:, None])
        return cls(_above(tp_bins).astype(np.int64), (_above(all_bins) + gold_row[:, None]).astype(np.int64),
                   ok.astype(np.int64))

    def parts(self, j: int) -> tuple[float, float]:
        """(micro-F1, subset accuracy) of threshold ``j``, from the counts' sums (what
        :meth:`~newsmon.shared.scoring.objective.Objective.parts` computes of the same proposals)."""
        tp, size, n = int(self.tp[:, j].sum()), int(self.size[:, j].sum()), len(self.tp)
        return (2.0 * tp / size if size else 0.0), (float(self.ok[:, j].sum() / n) if n else 0.0)


class Choice:
    """The options of one grid with their figures, and the rule that takes one (see the module docstring).

    ``add`` each option (in grid order), then ``pick``. Stores per option its point objective and its
    ``RESAMPLES`` resampled objectives (float64), nothing ``(n, L)``."""

    def __init__(self, objective: Objective, n: int, resamples: int = RESAMPLES, seed: int = SEED,
                 prior: Mapping[str, Any] | None = None) -> None:
        self.objective, self.n = objective, n
        #: The option taken when it is within the noise (step 4 of the module docstring): the named values an option
        #: must have (an option naming a value the prior does not name matches on the others).
        self.prior: dict[str, Any] = dict(prior or {})
        self._W = resample_weights(n, resamples, seed)
        self.options: list[dict[str, Any]] = []
        self.payloads: list[Any] = []
        self.values: list[float] = []
        self._resampled: list[np.ndarray | None] = []
        self._top = -np.inf
        #: How far below the best an option is beyond the noise without resampling it: 4 / sqrt(n) (the objective's
        #: two fractions each have a standard error of at most 0.5 / sqrt(n), a paired difference of the sum at most
        #: 2 / sqrt(n), and its one-sided 95 % bound is 1.65 of those); only the options within it are resampled.
        self.margin = 4.0 / np.sqrt(max(n, 1)) * max(1.0, objective.micro + objective.subset + objective.macro) / 2

    def add(self, options: Sequence[Mapping[str, Any]], counts: RowCounts,
            macro: Sequence[float] | None = None, payloads: Sequence[Any] | None = None) -> None:
        """Add ``T`` options whose proposals' counts are the ``T`` columns of ``counts`` (e.g. one option's scores
        at ``T`` thresholds), with their macro-F1 (points; default 0) and what :meth:`pick` returns with them."""
        T = counts.tp.shape[1]
        if len(options) != T:
            raise ValueError(f"{len(options)} options for counts of {T} thresholds")
        n = max(self.n, 1)
        macros = [0.0 if macro is None else float(macro[j]) for j in range(T)]
        values = [self.objective.value((*counts.parts(j), macros[j])) for j in range(T)]
        self._top = max([self._top, *values])
        near = [j for j in range(T) if values[j] >= self._top - self.margin]  # the others: beyond the noise
        resampled: dict[int, np.ndarray] = {}
        if near:
            stacked = np.concatenate([counts.tp[:, near], counts.size[:, near], counts.ok[:, near]], axis=1)
            sums = self._W @ stacked.astype(np.float64)  # (resamples, 3 len(near)): integers, exact
            m = len(near)
            tp, size, ok = sums[:, :m], sums[:, m:2 * m], sums[:, 2 * m:]
            micro = np.divide(2.0 * tp, size, out=np.zeros_like(tp), where=size > 0)
            for c, j in enumerate(near):
                resampled[j] = self.objective.weigh(np.stack([micro[:, c], ok[:, c] / n,
                                                              np.full(len(tp), macros[j])], axis=1))
        for j in range(T):
            self.options.append(dict(options[j]))
            self.payloads.append(None if payloads is None else payloads[j])
            self.values.append(values[j])
            self._resampled.append(resampled.get(j))

    def add_scores(self, Y: np.ndarray, S: np.ndarray | sp.csr_matrix, thresholds: Sequence[float],
                   options: Mapping[str, Any], payload: Any = None) -> None:
        """Add ``options`` at each of ``thresholds`` (its ``"threshold"``; sorted ascending), scored by ``S > t``
        for ``(n, L)`` gold ``Y``; :meth:`pick` returns ``(payload, threshold)`` with it."""
        ts = sorted(float(t) for t in thresholds)
        macro = None
        if self.objective.macro:
            dense = S.toarray() if isinstance(S, sp.spmatrix | sp.sparray) else np.asarray(S)
            macro = [p[2] for p in self.objective.sweep(Y, dense, np.asarray(ts, dtype=np.float64), True)]
        self.add([{**options, "threshold": t} for t in ts], RowCounts.sweep(Y, S, ts), macro,
                 [(payload, t) for t in ts])

    def add_proposals(self, Y: np.ndarray, P: np.ndarray, options: Mapping[str, Any], payload: Any = None) -> None:
        """Add ``options`` whose ``(n, L)`` bool proposals are ``P`` (gold ``Y``); :meth:`pick` returns ``payload``
        with it."""
        macro = [self.objective.parts(Y, P)[2]] if self.objective.macro else None
        self.add([options], RowCounts.of(Y, P), macro, [payload])

    def best(self) -> int:
        """The index of the highest point objective (the first on a tie)."""
        if not self.values:
            raise ValueError("no option to choose from")
        v = np.asarray(self.values)
        return int(np.flatnonzero(v >= v.max() - 1e-12)[0])

    def within_noise(self) -> list[int]:
        """The indices (grid order) of the options not worse than :meth:`best` beyond the noise."""
        b = self.best()
        top = self._resampled[b]
        assert top is not None  # the best is always within the margin of the best
        cand = [(i, r) for i, r in enumerate(self._resampled)
                if i != b and r is not None and self.values[i] >= self.values[b] - self.margin]
        high: np.ndarray = np.percentile(np.stack([r for _i, r in cand]) - top, HIGH, axis=1) if cand \
            else np.zeros(0)
        keep = {b} | {i for (i, _r), h in zip(cand, high, strict=True) if h >= 0.0}
        return sorted(keep)

    def pick(self) -> tuple[int, dict[str, Any], Any]:
        """(index, options, payload) of the prior when it is within the noise, else of the centre of the options within
        the noise (the module docstring's rule)."""
        near = self.within_noise()
        if self.prior:
            hits = [i for i in near if all(_key(self.options[i].get(k)) == _key(v) for k, v in self.prior.items())]
            if hits:
                i = sorted(hits, key=lambda a: (-self.values[a], a))[0]
                return i, self.options[i], self.payloads[i]
        steps = _steps(self.options)
        pos = np.array([[steps[k][_key(o.get(k))] for k in sorted(steps)] for o in (self.options[i] for i in near)])
        spread = np.abs(pos[:, None, :] - pos[None, :, :]).sum(axis=(1, 2))
        order = sorted(range(len(near)), key=lambda a: (int(spread[a]), -self.values[near[a]], near[a]))
        i = near[order[0]]
        return i, self.options[i], self.payloads[i]


def _key(v: Any) -> Any:
    """A value as a sortable key (None first: "off" is the lowest step; a value that is not a number or a string
    by its JSON)."""
    if v is None:
        return (0, 0.0)
    return (1, v) if isinstance(v, int | float | str) else (2, json.dumps(v, sort_keys=True, default=str))


def _steps(options: Sequence[Mapping[str, Any]]) -> dict[str, dict[Any, int]]:
    """Per named value, the rank of each value the options give it (None ranks first)."""
    names = sorted({k for o in options for k in o})
    return {k: {v: r for r, v in enumerate(sorted({_key(o.get(k)) for o in options}))} for k in names}
