"""Calibration of the ``newsmon`` predictor: a deterministic search of its parameters on labelled articles
that are not the test split: the memory's own articles scored leave-one-out (each against the others) plus the
validation split when there is one.

Objective: micro-F1 + subset accuracy (both fractions). Subset accuracy alone gives the search no signal where
articles carry many labels (it is about 0 for every setting), micro-F1 alone ignores whether whole label sets
are right; their sum chooses well in both cases and both figures are reported. The search is a grid, so re-runs
on the same data choose the same parameters; the objective's noise is reported as a bootstrap 90 % interval
over the calibration articles.

Order: k, tau and the threshold on a grid; then hybrid retrieval (the dense neighbours fused with a lexical
similarity, when the neighbours' texts are at hand), kept only when it lifts the objective; then each decision
rule (floor, label-set vote, tail support) is tried on top and kept only when it lifts the objective, except tail
support, kept unless it lowers it (it serves labels that appear after the calibration, which a leave-one-out over
a static corpus cannot show); every step is recorded (the ablation).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.rules import RULE_DEFAULTS, newsmon_decide
from newsmon.shared.predictors.lexical import TermVectors, fuse
from newsmon.shared.predictors.rae_xmc import rae_xmc_scores
from newsmon.shared.predictors.retrieval import LabelVocab, Retrieval

#: The grid of the base parameters (k is capped at the neighbours retrieved).
GRID_K = (5, 10, 20, 30, 50, 75, 100, 150, 200)
GRID_TAU = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2)
GRID_THRESHOLD = tuple(np.round(np.arange(0.10, 0.76, 0.05), 2))
#: Lexical weights tried for hybrid retrieval (0 = dense only), and the candidates fused: the dense top-N united
#: with the lexical top-N of the knowledge memory (hybrid search).
GRID_LEXICAL = (0.2, 0.3, 0.5, 0.7)
LEXICAL_CANDIDATES = 200
#: The decision rules tried on top of the base, in this order, each kept only where it lifts.
RULE_GRID: dict[str, list[dict[str, Any]]] = {
    "floor": [{"floor": f} for f in (0.0, 0.1, 0.2, 0.3)],
    "set_vote": [{"set_vote": v} for v in (0.25, 0.35, 0.45, 0.55, 0.65)],
    "tail_support": [{"tail_support": s, "tail_neighbours": n, "tail_similarity": t}
                     for s, n, t in ((3, 10, 0.88), (3, 5, 0.85), (3, 5, 0.88), (3, 5, 0.9), (2, 3, 0.9),
                                     (3, 3, 0.9), (3, 3, 0.92), (3, 3, 0.94))],
}
OBJECTIVE = "micro_f1 + subset_accuracy"


@dataclass
class Params:
    """The ``newsmon`` predictor's parameters (the fields of :class:`newsmon.shared.config.RaeSettings`)."""

    top_k: int = 50
    tau: float = 0.04
    threshold: float = 0.5
    floor: float | None = None
    set_vote: float | None = None
    tail_support: int = 0
    tail_neighbours: int = 5
    tail_similarity: float = 0.9
    lexical_weight: float = 0.0
    lexical_candidates: int = LEXICAL_CANDIDATES

    def as_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (JSON-able)."""
        return dict(self.__dict__)


@dataclass
class CalibrationResult:
    """What :func:`calibrate` chose and why.

    Attributes:
        params: the chosen parameters; figures: their ``micro_f1``, ``subset_accuracy``, ``objective``,
        ``objective_lo`` / ``objective_hi`` (bootstrap 90 %) and ``n`` on the calibration articles;
        steps: the ablation, one entry per step (``step``, ``params``, ``micro_f1``, ``subset_accuracy``,
        ``objective``, ``kept``).
    """

    params: Params
    figures: dict[str, float]
    steps: list[dict[str, Any]] = field(default_factory=list)


def _micro_f1_acc(Yt: np.ndarray, P: np.ndarray) -> tuple[float, float]:
    """(micro-F1, subset accuracy) of ``(n, L)`` bool predictions against ``(n, L)`` bool gold."""
    tp = np.logical_and(P, Yt).sum()
    denom = P.sum() + Yt.sum()
    f1 = 2.0 * tp / denom if denom else 0.0
    return float(f1), float((P == Yt).all(axis=1).mean()) if len(Yt) else 0.0


def _gold(label_sets: list[tuple[str, ...]], vocab: LabelVocab) -> np.ndarray:
    """``(n, L)`` bool gold over ``vocab`` (labels the memory never saw get columns of their own)."""
    Y = vocab.encode(label_sets)
    return np.asarray(Y.todense()).astype(bool)


def _pad(a: np.ndarray, L: int) -> np.ndarray:
    return a if a.shape[1] >= L else np.pad(a, ((0, 0), (0, L - a.shape[1])))


def bootstrap_interval(Yt: np.ndarray, P: np.ndarray, n_boot: int = 200, seed: int = 13) -> tuple[float, float]:
    """Bootstrap 90 % interval of the objective (micro-F1 + subset accuracy) over the ``n`` articles."""
    rng = np.random.default_rng(seed)
    n = len(Yt)
    tp = np.logical_and(P, Yt).sum(axis=1)
    size = P.sum(axis=1) + Yt.sum(axis=1)
    exact = (P == Yt).all(axis=1)
    vals = []
    for _ in range(n_boot):
        ix = rng.integers(0, n, n)
        d = size[ix].sum()
        vals.append((2.0 * tp[ix].sum() / d if d else 0.0) + exact[ix].mean())
    return float(np.percentile(vals, 5)), float(np.percentile(vals, 95))


def _base_grid(retrieval: Retrieval, Yt: np.ndarray, labels: list[str], extra: dict[str, Any]
               ) -> tuple[float, Params, float, float]:
    """The best (objective, params, micro-F1, subset accuracy) of the k / tau / threshold grid (``labels``: the
    columns of ``Yt``)."""
    rows = retrieval.label_matrix(LabelVocab(labels))
    L = Yt.shape[1]
    best: tuple[float, Params, float, float] | None = None
    for k, tau in itertools.product([k for k in GRID_K if k <= retrieval.k] or [retrieval.k], GRID_TAU):
        S = _pad(rae_xmc_scores(retrieval.sims, rows, k, tau, 1.0, rows.shape[1]), L)[:, :L]
        for thr in GRID_THRESHOLD:
            f1, acc = _micro_f1_acc(Yt, S > thr)
            if best is None or f1 + acc > best[0] + 1e-12:
                best = (f1 + acc, Params(k, tau, float(thr), **extra), f1, acc)
    return best


def _keeps(rule: str, trial: float, current: float) -> bool:
    """Whether a rule step is kept: it must lift the objective, except tail support, the new-label lever, kept
    unless it lowers it (a static corpus cannot show its benefit: no label appears over time in a leave-one-out)."""
    return trial > current + 1e-9 or (rule == "tail_support" and trial >= current - 1e-9)


def calibrate(retrieval: Retrieval, gold: list[tuple[str, ...]], rules: tuple[str, ...] = tuple(RULE_GRID),
              query_texts: list[str] | None = None, terms: TermVectors | None = None) -> CalibrationResult:
    """Choose the ``newsmon`` predictor's parameters on ``n`` calibration articles.

    Args:
        retrieval: the articles' dense top-K neighbours in the memory (leave-one-out for memory articles); with
            their texts and ``query_texts`` (the articles' own texts), hybrid retrieval (lexical fusion,
            :func:`newsmon.shared.predictors.lexical.fuse`) is tried as a step after the base grid.
        gold: their ``n`` true label sets.
        rules: the decision rules to try (names of :data:`RULE_GRID`), in order.

    Returns:
        the chosen parameters, their figures and the ablation steps.

    Raises:
        ValueError: no articles, or no neighbours at all.
    """
    if len(gold) == 0 or retrieval.k == 0:
        raise ValueError("calibration needs labelled articles with neighbours")
    vocab = LabelVocab()
    retrieval.label_matrix(vocab)
    Yt = _gold(gold, vocab)
    dense = fuse(retrieval, [], 0.0, max(GRID_K))
    _, params, f1, acc = _base_grid(dense, Yt, vocab.labels, {})
    steps = [{"step": "base (k, tau, threshold)", "params": params.as_dict(), "micro_f1": f1,
              "subset_accuracy": acc, "objective": f1 + acc, "kept": True}]
    chosen = dense
    if query_texts is not None and retrieval.texts is not None:
        terms = terms or TermVectors()
        trial_best = None
        for w in GRID_LEXICAL:
            fused = fuse(retrieval, query_texts, w, max(GRID_K), terms)
            trial = _base_grid(fused, Yt, vocab.labels, {"lexical_weight": w})
            if trial_best is None or trial[0] > trial_best[0][0]:
                trial_best = (trial, fused)
        (obj, tparams, tf1, tacc), fused = trial_best
        kept = obj > f1 + acc + 1e-9
        steps.append({"step": "+ lexical fusion", "params": tparams.as_dict(), "micro_f1": tf1,
                      "subset_accuracy": tacc, "objective": obj, "kept": kept})
        if kept:
            params, f1, acc, chosen = tparams, tf1, tacc, fused
    for rule in rules:
        trial_best = None
        for option in RULE_GRID[rule]:
            trial = Params(**{**params.as_dict(), **option})
            _, P = newsmon_decide(chosen, LabelVocab(vocab.labels), trial)
            tf1, tacc = _micro_f1_acc(Yt, _pad(P, Yt.shape[1])[:, :Yt.shape[1]])
            if trial_best is None or tf1 + tacc > trial_best[0]:
                trial_best = (tf1 + tacc, trial, tf1, tacc)
        kept = _keeps(rule, trial_best[0], f1 + acc)
        steps.append({"step": f"+ {rule}", "params": trial_best[1].as_dict(), "micro_f1": trial_best[2],
                      "subset_accuracy": trial_best[3], "objective": trial_best[0], "kept": kept})
        if kept:
            _, params, f1, acc = trial_best
    _, P = newsmon_decide(chosen, LabelVocab(vocab.labels), params)
    lo, hi = bootstrap_interval(Yt, _pad(P, Yt.shape[1])[:, :Yt.shape[1]])
    figures = {"micro_f1": f1, "subset_accuracy": acc, "objective": f1 + acc, "objective_lo": lo,
               "objective_hi": hi, "n": float(len(gold))}
    return CalibrationResult(params, figures, steps)


def rule_defaults() -> dict[str, Any]:
    """The decision rules' parameters when nothing is calibrated (all off)."""
    return dict(RULE_DEFAULTS)
