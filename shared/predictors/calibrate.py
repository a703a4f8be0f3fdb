"""Calibration of the ``newsmon`` predictor: a deterministic search of its parameters on labelled articles
that are not the test split: the memory's own articles scored leave-one-out (each against the others) plus the
validation split when there is one.

Objective: micro-F1 + subset accuracy (both fractions). Subset accuracy alone gives the search no signal where
articles carry many labels (it is about 0 for every setting), micro-F1 alone ignores whether whole label sets
are right; their sum chooses well in both cases and both figures are reported. The search is a grid, so re-runs
on the same data choose the same parameters; the objective's noise is reported as a bootstrap 90 % interval
over the calibration articles.

Every lever is kept only when it lifts the objective beyond the noise of the calibration articles: the paired
bootstrap 90 % interval of its lift over the proposals before it lies above 0 (:func:`_lifts`). A lever kept on
any lift at all was chosen by noise: the same articles embedded again (vectors at cosine 0.997) turned the label
keys and the label-set vote on and off and moved the test figures by several points.

Order: k, tau and the threshold on a grid; then hybrid retrieval (the dense neighbours fused with a lexical
similarity, when the neighbours' texts are at hand), kept only when it lifts the objective; then the label keys
(RAE-XMC's label part of the memory, :mod:`newsmon.shared.predictors.label_keys`) likewise; then the head model
(a logistic regression over words and punctuation per frequent label, mixed into those labels' scores,
:mod:`newsmon.shared.predictors.head_model`; the memory's own articles scored out of fold) likewise; then one
threshold per label-frequency bucket, likewise, and a threshold of its own for each frequent label, kept when it
lifts the objective on articles it was not fitted on (:mod:`newsmon.shared.predictors.thresholds`); then each decision
rule (floor, label-set vote, label count, tail support) is tried on top and kept only when it lifts the objective,
except tail support, kept unless it lowers it (it serves labels that appear after the calibration, which a
leave-one-out over a static corpus cannot show); every step is recorded (the ablation). Last, the new-label rule
(labels the calibration never saw) is chosen by a replay of new labels on the calibration articles
(:func:`new_label_replay`) and kept when it beats the rules without it there; it changes nothing for the
calibration articles themselves (every label in their memory is known).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.head_model import HeadScores
from newsmon.shared.predictors.label_keys import LabelHits, key_scores
from newsmon.shared.predictors.lexical import TermVectors, fuse
from newsmon.shared.predictors.new_labels import NEW_LABEL_GRID, new_label_replay
from newsmon.shared.predictors.rules import BUCKET_EDGES, column_thresholds, mixed_scores, newsmon_decide
from newsmon.shared.predictors.rae_xmc import rae_xmc_scores
from newsmon.shared.predictors.params import LEXICAL_CANDIDATES, CalibrationResult, Params
from newsmon.shared.predictors.retrieval import LabelVocab, Retrieval
from newsmon.shared.predictors.thresholds import (bootstrap_objective, bucket_ascent, choose_label_thresholds,
                                                  paired_lift_interval)
from newsmon.shared.predictors.thresholds import micro_f1_acc as _micro_f1_acc

#: The grid of the base parameters (k is capped at the neighbours retrieved).
GRID_K = (5, 10, 20, 30, 50, 75, 100, 150, 200)
GRID_TAU = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2)
GRID_THRESHOLD = tuple(np.round(np.arange(0.10, 0.76, 0.05), 2))
#: Lexical weights tried for hybrid retrieval (0 = dense only), and the candidates fused: the dense top-N united
#: with the lexical top-N of the knowledge memory (hybrid search).
GRID_LEXICAL = (0.2, 0.3, 0.5, 0.7)
#: The decision rules tried on top of the base, in this order, each kept only where it lifts.
RULE_GRID: dict[str, list[dict[str, Any]]] = {
    "floor": [{"floor": f} for f in (0.0, 0.1, 0.2, 0.3)],
    "set_vote": [{"set_vote": v} for v in (0.25, 0.35, 0.45, 0.55, 0.65)],
    "label_count": [{"label_count": c} for c in (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)],
    "tail_support": [{"tail_support": s, "tail_neighbours": n, "tail_similarity": t}
                     for s, n, t in ((3, 10, 0.88), (3, 5, 0.85), (3, 5, 0.88), (3, 5, 0.9), (2, 3, 0.9),
                                     (3, 3, 0.9), (3, 3, 0.92), (3, 3, 0.94))],
}
OBJECTIVE = "micro_f1 + subset_accuracy"
#: The label keys' options (lambda, nearest keys, temperature), tried on the chosen k / tau with every threshold.
LABEL_KEY_GRID = tuple(itertools.product((0.1, 0.25, 0.5, 1.0), (3, 10), (0.01, 0.02, 0.05)))
#: The head model's options (its C, then its weight beta), tried on the parameters before it with every threshold.
HEAD_GRID = tuple(itertools.product((1.0, 10.0, 100.0), (0.25, 0.5, 0.75, 1.0)))
#: What the calibration gets for the head model: the calibration articles' head probabilities for a given C
#: (out of fold for the memory's own articles; :func:`newsmon.shared.predictors.head_model.calibration_head_scores`).
HeadAt = Callable[[float], HeadScores]


def _gold(label_sets: list[tuple[str, ...]], vocab: LabelVocab) -> np.ndarray:
    """``(n, L)`` bool gold over ``vocab`` (labels the memory never saw get columns of their own)."""
    Y = vocab.encode(label_sets)
    return np.asarray(Y.todense()).astype(bool)


def _pad(a: np.ndarray, L: int) -> np.ndarray:
    return a if a.shape[1] >= L else np.pad(a, ((0, 0), (0, L - a.shape[1])))


def bootstrap_interval(Yt: np.ndarray, P: np.ndarray, n_boot: int = 200, seed: int = 13) -> tuple[float, float]:
    """Bootstrap 90 % interval of the objective (micro-F1 + subset accuracy) over the ``n`` articles."""
    return bootstrap_objective(Yt, P, n_boot=n_boot, seed=seed)


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


def _lexical_step(retrieval: Retrieval, query_texts: list[str], terms: TermVectors, Yt: np.ndarray,
                  labels: list[str]) -> tuple[tuple[float, Params, float, float], Retrieval]:
    """The best base grid over the lexical weights of :data:`GRID_LEXICAL` (hybrid retrieval's fusion), with the
    fused retrieval it was found on."""
    best = None
    for w in GRID_LEXICAL:
        fused = fuse(retrieval, query_texts, w, max(GRID_K), terms)
        trial = _base_grid(fused, Yt, labels, {"lexical_weight": w})
        if best is None or trial[0] > best[0][0]:
            best = (trial, fused)
    return best


def _label_keys_step(retrieval: Retrieval, hits: LabelHits, Yt: np.ndarray, labels: list[str], params: Params
                     ) -> tuple[float, Params, float, float]:
    """The best (objective, params, micro-F1, subset accuracy) of the label keys' grid (:data:`LABEL_KEY_GRID`
    and every threshold) on top of ``params``' k and tau (RAE-XMC's label part of the memory)."""
    vocab = LabelVocab(labels)
    L = Yt.shape[1]
    rae = _pad(rae_xmc_scores(retrieval.sims, retrieval.label_matrix(vocab), params.top_k, params.tau, 1.0, L), L)
    best = None
    for lam, n, tau in LABEL_KEY_GRID:
        S = (rae[:, :L] + lam * key_scores(hits, n, tau, vocab.index, L)) / (1 + lam)
        for thr in GRID_THRESHOLD:
            f1, acc = _micro_f1_acc(Yt, S > thr)
            if best is None or f1 + acc > best[0] + 1e-12:
                extra = {"threshold": float(thr), "label_lambda": lam, "label_keys": n, "label_tau": tau}
                best = (f1 + acc, Params(**{**params.as_dict(), **extra}), f1, acc)
    return best


def _scores(retrieval: Retrieval, hits: LabelHits | None, labels: list[str], L: int, params: Params,
            head: HeadScores | None = None) -> np.ndarray:
    """``(n, L)`` float32 scores with ``params``' k, tau, label keys and head model (the threshold part of the
    decision)."""
    vocab = LabelVocab(labels)
    return _pad(mixed_scores(retrieval, retrieval.label_matrix(vocab), vocab, params, hits, head), L)[:, :L]


def _head_step(retrieval: Retrieval, hits: LabelHits | None, head_at: HeadAt, Yt: np.ndarray, labels: list[str],
               params: Params) -> tuple[tuple[float, Params, float, float], HeadScores]:
    """The best (objective, params, micro-F1, subset accuracy) of the head model's grid (:data:`HEAD_GRID` and
    every threshold) on top of ``params``, with the head probabilities of the C it chose."""
    best = None
    for c, beta in HEAD_GRID:
        head = head_at(c)
        trial = Params(**{**params.as_dict(), "head_weight": beta, "head_c": c})
        S = _scores(retrieval, hits, labels, Yt.shape[1], trial, head)
        for thr in GRID_THRESHOLD:
            f1, acc = _micro_f1_acc(Yt, S > thr)
            if best is None or f1 + acc > best[0][0] + 1e-12:
                best = ((f1 + acc, Params(**{**trial.as_dict(), "threshold": float(thr)}), f1, acc), head)
    return best


def _bucket_step(S: np.ndarray, Yt: np.ndarray, labels: list[str], params: Params,
                 label_counts: dict[str, int]) -> tuple[float, Params, float, float]:
    """One threshold per label-frequency bucket (:data:`newsmon.shared.predictors.rules.BUCKET_EDGES`), by
    coordinate ascent from ``params.threshold`` over :data:`GRID_THRESHOLD` (two rounds, buckets in order), on the
    ``(n, L)`` scores ``S`` (:func:`_scores`). Returns the best (objective, params, micro-F1, subset accuracy)."""
    L = Yt.shape[1]
    bucket = np.searchsorted(BUCKET_EDGES, [label_counts.get(lb, 0) for lb in labels[:L]], side="left")
    chosen, _ = bucket_ascent(S, Yt, bucket, params.threshold, GRID_THRESHOLD)
    f1, acc = _micro_f1_acc(Yt, S > np.asarray(chosen)[bucket][None, :])
    return f1 + acc, Params(**{**params.as_dict(), "bucket_thresholds": tuple(chosen)}), f1, acc


def _label_threshold_step(steps: list[dict[str, Any]], S: np.ndarray, Yt: np.ndarray, labels: list[str],
                          params: Params, label_counts: dict[str, int], f1: float, acc: float
                          ) -> tuple[Params, float, float]:
    """A threshold of its own for each label on at least ``LABEL_THRESHOLD_MIN`` memory articles
    (:mod:`newsmon.shared.predictors.thresholds`), on top of ``params``' thresholds. Kept when the paired bootstrap
    90 % interval of its 2-fold cross-fitted lift lies above 0 (hundreds of parameters fit their own articles, so
    the in-sample objective cannot judge them); the kept thresholds are fitted on all the articles. Records the
    step in ``steps``; returns the parameters, micro-F1 and subset accuracy after it. ``S``: the ``(n, L)`` scores,
    as for :func:`_bucket_step` (the thresholds change nothing else)."""
    L = Yt.shape[1]
    base = column_thresholds(LabelVocab(labels[:L]), params, label_counts)
    got = choose_label_thresholds(S, Yt, base, labels[:L], label_counts, GRID_THRESHOLD)
    trial = Params(**{**params.as_dict(), "label_thresholds": got.thresholds})
    (tf1, tacc), kept = got.in_sample, got.holds
    steps.append({"step": "+ label thresholds", "params": trial.as_dict(), "micro_f1": tf1, "subset_accuracy": tacc,
                  "objective": tf1 + tacc, "kept": kept, "cross_fitted_objective": sum(got.crossed),
                  "cross_fitted_lift": list(got.lift), "labels": got.labels})
    return (trial, tf1, tacc) if kept else (params, f1, acc)


#: What a calibration step carries forward: the parameters, their micro-F1 and subset accuracy, and their
#: ``(n, L)`` bool proposals on the calibration articles.
State = tuple[Params, float, float, np.ndarray]


def _take(steps: list[dict[str, Any]], name: str, found: tuple[float, Params, float, float], state: State,
          trial: np.ndarray, Yt: np.ndarray, keeps: Callable[[float, float, tuple[float, float]], bool] | None = None
          ) -> tuple[State, bool]:
    """Record step ``name`` in ``steps``: its best (objective, params, micro-F1, subset accuracy) ``found``, whose
    ``(n, L)`` proposals are ``trial``, and the paired bootstrap 90 % interval of their lift over ``state``'s.
    Kept by ``keeps`` (default :func:`_lifts`: it lifts the objective and the interval lies above 0); returns the
    state after it (``found``'s when kept, else ``state``) and whether it was kept."""
    obj, tparams, tf1, tacc = found
    params, f1, acc, current = state
    lift = paired_lift_interval(Yt, trial, current)
    kept = (keeps or _lifts)(obj, f1 + acc, lift)
    steps.append({"step": name, "params": tparams.as_dict(), "micro_f1": tf1, "subset_accuracy": tacc,
                  "objective": obj, "kept": kept, "lift_interval": list(lift)})
    return ((tparams, tf1, tacc, trial) if kept else state), kept


def _lifts(trial: float, current: float, lift: tuple[float, float]) -> bool:
    """Whether a lever is kept: it lifts the objective and the paired bootstrap 90 % interval of the lift lies
    above 0. A lift inside the noise of the calibration articles is not kept: re-embedding the same articles
    (cosine 0.997) turned such levers on and off and moved the test figures by several points."""
    return trial > current + 1e-9 and lift[0] > 0


def _rule_step(steps: list[dict[str, Any]], rule: str, retrieval: Retrieval, Yt: np.ndarray, labels: list[str],
               state: State, label_hits: LabelHits | None, label_counts: dict[str, int] | None,
               head: HeadScores | None = None) -> State:
    """Try each option of decision rule ``rule`` on top of ``state``'s parameters, record the best as a step in
    ``steps`` (:func:`_take`, kept by :func:`_keeps`) and return the state after it."""
    best = None
    for option in RULE_GRID[rule]:
        trial = Params(**{**state[0].as_dict(), **option})
        P = _decide(retrieval, Yt, labels, trial, label_hits, label_counts, head)
        tf1, tacc = _micro_f1_acc(Yt, P)
        if best is None or tf1 + tacc > best[0][0]:
            best = ((tf1 + tacc, trial, tf1, tacc), P)
    return _take(steps, f"+ {rule}", best[0], state, best[1], Yt,
                 keeps=functools.partial(_keeps, rule))[0]


def _keeps(rule: str, trial: float, current: float, lift: tuple[float, float]) -> bool:
    """Whether a rule step is kept: as every lever (:func:`_lifts`), except tail support, the new-label lever,
    kept unless it lowers the objective (a static corpus cannot show its benefit: no label appears over time in a
    leave-one-out)."""
    return _lifts(trial, current, lift) or (rule == "tail_support" and trial >= current - 1e-9)


def _decide(retrieval: Retrieval, Yt: np.ndarray, labels: list[str], params: Params, label_hits: LabelHits | None,
            label_counts: dict[str, int] | None, head: HeadScores | None = None) -> np.ndarray:
    """``(n, L)`` bool proposals of ``params`` over the columns of ``Yt``."""
    _, P = newsmon_decide(retrieval, LabelVocab(labels), params, label_hits=label_hits, label_counts=label_counts,
                          head=head)
    return _pad(P, Yt.shape[1])[:, :Yt.shape[1]]


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2.0 * tp / (2 * tp + fp + fn) if tp else 0.0


def _new_label_step(steps: list[dict[str, Any]], retrieval: Retrieval, gold: list[tuple[str, ...]], params: Params,
                    f1: float, acc: float) -> Params:
    """Choose the new-label rule by :func:`new_label_replay` (best F1, then precision); kept when its F1 beats
    the 1-NN rule's on the same replay. Records the ablation step in ``steps``; returns the parameters (with the
    rule when kept)."""
    tallies, n_labels = new_label_replay(retrieval, gold)
    best = max(NEW_LABEL_GRID, key=lambda o: (_f1(*tallies[o]), tallies[o][0] / max(1, tallies[o][0] + tallies[o][1])))
    kept = n_labels > 0 and _f1(*tallies[best]) > _f1(*tallies[None])
    trial = Params(**{**params.as_dict(), "new_label_support": best[0], "new_label_neighbours": best[1],
                      "new_label_similarity": best[2]})
    tp, fp, fn = tallies[best]
    replay = {"labels": n_labels, "precision": tp / max(1, tp + fp), "recall": tp / max(1, tp + fn),
              "f1": _f1(tp, fp, fn), "one_nn_f1": _f1(*tallies[None])}
    steps.append({"step": "+ new-label support", "params": trial.as_dict(), "micro_f1": f1, "subset_accuracy": acc,
                  "objective": f1 + acc, "kept": kept, "replay": replay})
    return trial if kept else params


def _lever_steps(steps: list[dict[str, Any]], retrieval: Retrieval, dense: Retrieval, query_texts: list[str] | None,
                 terms: TermVectors | None, Yt: np.ndarray, labels: list[str], state: State,
                 hits: LabelHits | None, counts: dict[str, int] | None, head_at: HeadAt | None = None
                 ) -> tuple[Retrieval, State, HeadScores | None]:
    """Hybrid retrieval, the label keys, the head model, the bucket and the per-label thresholds, each tried on
    top of ``state`` and recorded in ``steps``; returns the retrieval chosen, the state after them and the head
    probabilities kept (None when the head model is not)."""
    chosen = dense
    if query_texts is not None and retrieval.texts is not None:
        found, fused = _lexical_step(retrieval, query_texts, terms or TermVectors(), Yt, labels)
        state, kept = _take(steps, "+ lexical fusion", found, state, _decide(fused, Yt, labels, found[1], hits,
                                                                            counts), Yt)
        chosen = fused if kept else chosen
    if hits is not None:
        found = _label_keys_step(chosen, hits, Yt, labels, state[0])
        state = _take(steps, "+ label keys", found, state, _decide(chosen, Yt, labels, found[1], hits, counts), Yt)[0]
    head = None
    if head_at is not None:
        found, trial_head = _head_step(chosen, hits, head_at, Yt, labels, state[0])
        state, kept = _take(steps, "+ head model", found, state,
                            _decide(chosen, Yt, labels, found[1], hits, counts, trial_head), Yt)
        head = trial_head if kept else None
    if counts is not None:  # the bucket thresholds, then the per-label ones, on the same scores
        S = _scores(chosen, hits, labels, Yt.shape[1], state[0], head)
        found = _bucket_step(S, Yt, labels, state[0], counts)
        state = _take(steps, "+ bucket thresholds", found, state,
                      _decide(chosen, Yt, labels, found[1], hits, counts, head), Yt)[0]
        params, f1, acc = _label_threshold_step(steps, S, Yt, labels, state[0], counts, state[1], state[2])
        if steps[-1]["kept"]:  # their proposals
            state = (params, f1, acc, _decide(chosen, Yt, labels, params, hits, counts, head))
    return chosen, state, head


def calibrate(retrieval: Retrieval, gold: list[tuple[str, ...]], rules: tuple[str, ...] = tuple(RULE_GRID),
              query_texts: list[str] | None = None, terms: TermVectors | None = None,
              memory_labels: Iterable[str] | None = None, new_labels: bool = True,
              label_hits: LabelHits | None = None, label_counts: dict[str, int] | None = None,
              head: HeadAt | None = None) -> CalibrationResult:
    """Choose the ``newsmon`` predictor's parameters on ``n`` calibration articles.

    Args:
        retrieval: the articles' dense top-K neighbours in the memory (leave-one-out for memory articles); with
            their texts and ``query_texts`` (the articles' own texts), hybrid retrieval (lexical fusion,
            :func:`newsmon.shared.predictors.lexical.fuse`) is tried as a step after the base grid.
        gold: their ``n`` true label sets.
        rules: the decision rules to try (names of :data:`RULE_GRID`), in order.
        memory_labels: the labels of the memory (the result's ``known_labels``; default: the neighbours' labels).
        new_labels: choose the new-label rule (:func:`new_label_replay`) as the last step.
        label_hits: the articles' nearest label keys (leave-one-out for memory articles), aligned with
            ``retrieval``; given, the label keys are tried after hybrid retrieval and kept when they lift.
        label_counts: memory articles per label; given, frequency-bucket thresholds are tried after the label keys
            and kept when they lift, then per-label thresholds (kept when they lift cross-fitted).
        head: the articles' head-model probabilities for a given C (:data:`HeadAt`, out of fold for memory
            articles); given, the head model (:data:`HEAD_GRID`) is tried after the label keys and kept when it
            lifts.

    Returns:
        the chosen parameters, their figures and the ablation steps.

    Raises:
        ValueError: no articles, or no neighbours at all.
    """
    if len(gold) == 0 or retrieval.k == 0:
        raise ValueError("calibration needs labelled articles with neighbours")
    vocab = LabelVocab()
    retrieval.label_matrix(vocab)
    if label_hits is not None:
        vocab.extend(lb for row in label_hits.labels for lb in row)
    if head is not None:
        vocab.extend(head(HEAD_GRID[0][0]).labels)
    Yt = _gold(gold, vocab)
    dense = fuse(retrieval, [], 0.0, max(GRID_K))
    _, params, f1, acc = _base_grid(dense, Yt, vocab.labels, {})
    steps = [{"step": "base (k, tau, threshold)", "params": params.as_dict(), "micro_f1": f1,
              "subset_accuracy": acc, "objective": f1 + acc, "kept": True}]
    state = (params, f1, acc, _decide(dense, Yt, vocab.labels, params, label_hits, label_counts))
    chosen, state, kept_head = _lever_steps(steps, retrieval, dense, query_texts, terms, Yt, vocab.labels, state,
                                            label_hits, label_counts, head)
    for rule in rules:
        state = _rule_step(steps, rule, chosen, Yt, vocab.labels, state, label_hits, label_counts, kept_head)
    params, f1, acc, P = state
    if new_labels:
        params = _new_label_step(steps, chosen, gold, params, f1, acc)
    lo, hi = bootstrap_interval(Yt, P)
    figures = {"micro_f1": f1, "subset_accuracy": acc, "objective": f1 + acc, "objective_lo": lo,
               "objective_hi": hi, "n": float(len(gold))}
    known = memory_labels if memory_labels is not None else {lb for row in retrieval.labels for x in row for lb in x}
    return CalibrationResult(params, figures, steps, sorted(set(known)))

