"""The calibration's steps on top of the base grid (:mod:`.search`): each score component's options, the bucket
and per-label thresholds; and what every step shares (the state carried forward, recording a step, deciding on the
calibration articles with given parameters)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring.calibration.inputs import CalibrationSet
from newsmon.shared.scoring.calibration.objective import Objective
from newsmon.shared.scoring.calibration.thresholds import bucket_ascent, choose_label_thresholds
from newsmon.shared.scoring.components import ScoreComponent
from newsmon.shared.scoring.decision import decide, mixed_scores, scores_and_context
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval
from newsmon.shared.scoring.rules import get_rule, lifts
from newsmon.shared.scoring.rules.threshold import BUCKET_EDGES, column_thresholds

#: The grid of the base parameters (k is capped at the neighbours retrieved).
GRID_K = (5, 10, 20, 30, 50, 75, 100, 150, 200)
GRID_THRESHOLD = tuple(np.round(np.arange(0.10, 0.76, 0.05), 2))

#: (micro-F1, subset accuracy, macro-F1) on the calibration articles.
Parts = tuple[float, float, float]
#: What a calibration step carries forward: the parameters, their figures and their ``(n, L)`` bool proposals on
#: the calibration articles.
State = tuple[ScoringParams, Parts, np.ndarray]
#: A step's best: (objective, parameters, figures).
Found = tuple[float, ScoringParams, Parts]


def gold_matrix(label_sets: list[tuple[str, ...]], vocab: LabelVocab) -> np.ndarray:
    """``(n, L)`` bool gold over ``vocab`` (labels the memory never saw get columns of their own)."""
    return np.asarray(vocab.encode(label_sets).todense()).astype(bool)


def pad(a: np.ndarray, L: int) -> np.ndarray:
    """``(m, >= L)``: ``a`` with zero columns added up to ``L``."""
    return a if a.shape[1] >= L else np.pad(a, ((0, 0), (0, L - a.shape[1])))


def updated(params: ScoringParams, **fields: Any) -> ScoringParams:
    """``params`` with ``fields`` replaced (validated)."""
    return ScoringParams(**{**params.model_dump(), **fields})


def with_rule(params: ScoringParams, name: str, options: Any) -> ScoringParams:
    """``params`` with rule ``name`` (``options``) in place of its earlier options, the rules in the order they
    run (each rule's ``ORDER``)."""
    specs = [s for s in params.rules if s.name != name] + [{"name": name, "options": options.model_dump()}]
    names = [s["name"] if isinstance(s, dict) else s.name for s in specs]
    order = sorted(range(len(specs)), key=lambda i: (get_rule(names[i]).ORDER, i))
    return updated(params, rules=[specs[i] for i in order])


def with_component(params: ScoringParams, name: str, options: Any) -> ScoringParams:
    """``params`` with component ``name`` (``options``) mixed in last (in place of its earlier options)."""
    specs = [s for s in params.components if s.name != name] + [{"name": name, "options": options.model_dump()}]
    return updated(params, components=specs)


def decide_on(retrieval: Retrieval, Yt: np.ndarray, labels: list[str], params: ScoringParams,
              evidence: Mapping[str, Any], label_counts: Mapping[str, int] | None) -> np.ndarray:
    """``(n, L)`` bool proposals of ``params`` over the columns of ``Yt`` (the scorer's decision)."""
    P = decide(retrieval, LabelVocab(labels), params, evidence, label_counts).proposed
    return pad(P, Yt.shape[1])[:, :Yt.shape[1]]


def scores_on(retrieval: Retrieval, labels: list[str], L: int, params: ScoringParams,
              evidence: Mapping[str, Any], label_counts: Mapping[str, int] | None = None) -> np.ndarray:
    """``(n, L)`` float32 scores of ``params`` (RAE-XMC with its components mixed in)."""
    return pad(mixed_scores(retrieval, LabelVocab(labels), params, evidence, label_counts), L)[:, :L]


def record(name: str, params: ScoringParams, parts: Parts, objective: float, kept: bool, **extra: Any
           ) -> dict[str, Any]:
    """A step of the ablation: its name, parameters, figures on the calibration articles and whether it was
    kept."""
    return {"step": name, "params": params.model_dump(mode="json"), "micro_f1": parts[0],
            "subset_accuracy": parts[1], "macro_f1": parts[2], "objective": objective, "kept": kept, **extra}


def take(steps: list[dict[str, Any]], name: str, found: Found, state: State, trial: np.ndarray, Yt: np.ndarray,
         judge: Objective, keeps: Callable[[float, float, tuple[float, float]], bool] = lifts
         ) -> tuple[State, bool]:
    """Record step ``name`` in ``steps``: its best ``found``, whose ``(n, L)`` proposals are ``trial``, and the
    paired bootstrap 90 % interval of their lift over ``state``'s by the objective ``judge``. Kept by ``keeps``;
    returns the state after it (``found``'s when kept, else ``state``) and whether it was kept."""
    obj, tparams, tparts = found
    _params, parts, current = state
    lift = judge.bootstrap(Yt, trial, current)
    kept = keeps(obj, judge.value(parts), lift)
    steps.append(record(name, tparams, tparts, obj, kept, lift_interval=list(lift)))
    return ((tparams, tparts, trial) if kept else state), kept


def component_step(steps: list[dict[str, Any]], comp: ScoreComponent, cal: CalibrationSet, retrieval: Retrieval,
                   Yt: np.ndarray, labels: list[str], state: State, evidence: dict[str, Any]
                   ) -> tuple[State, dict[str, Any]]:
    """The best of ``comp``'s options (its grid, every threshold; only the current threshold for a component that
    does not re-choose it) on top of ``state``'s parameters, recorded as a step and kept when it lifts; returns the
    state after it and the evidence of the components kept. A component fitted by the calibration
    (``FITTED_BY_CALIBRATION``, e.g. stacking) is cross-fitted on these articles (each judged by a model fitted
    without it) and its model fitted on all of them is the one the record stores."""
    L, judge = Yt.shape[1], cal.objective
    vocab = LabelVocab(labels)
    # the scores so far, and what a component that reads the others sees of those kept before it
    mixed, context = scores_and_context(retrieval, LabelVocab(labels), state[0], evidence, cal.label_counts,
                                        context=comp.READS_CONTEXT)
    before = pad(mixed, L)[:, :L]
    best = None
    for opt in comp.grid():
        if comp.FITTED_BY_CALIBRATION and context is not None:  # cross-fitted here; the model fitted on all: stored
            ev, model = comp.cross_fit(before, vocab, context, opt, Yt)
            cal.cross_fitted(comp, opt, ev, model)
        else:
            ev = cal.evidence(comp, opt)
        S = pad(comp.mix_in_context(before.copy(), vocab, ev, opt, context) if context is not None
                else comp.mix(before.copy(), vocab, ev, opt), L)[:, :L]
        for thr in (GRID_THRESHOLD if comp.RECHOOSES_THRESHOLD else (state[0].threshold,)):
            parts = judge.parts(Yt, S > thr)
            if best is None or judge.value(parts) > best[0][0] + 1e-12:
                best = ((judge.value(parts), (opt, float(thr)), parts), ev)
    (obj, (opt, thr), parts), ev = best
    trial = updated(with_component(state[0], comp.name, opt), threshold=thr)
    tried = {**evidence, comp.name: ev}
    state, kept = take(steps, f"+ {comp.name}", (obj, trial, parts), state,
                       decide_on(retrieval, Yt, labels, trial, tried, cal.label_counts), Yt, judge)
    return state, tried if kept else evidence


def threshold_steps(steps: list[dict[str, Any]], cal: CalibrationSet, retrieval: Retrieval, Yt: np.ndarray,
                    labels: list[str], state: State, evidence: dict[str, Any]) -> State:
    """One threshold per label-frequency bucket (:data:`BUCKET_EDGES`, by coordinate ascent from the threshold
    over :data:`GRID_THRESHOLD`, two rounds), kept when it lifts; then a threshold of its own for each label on at
    least ``LABEL_THRESHOLD_MIN`` memory articles, kept when the paired bootstrap 90 % interval of its 2-fold
    cross-fitted lift lies above 0 (hundreds of parameters fit their own articles, so the in-sample objective cannot
    judge them); the kept thresholds are fitted on all the articles. Both on the same scores (the thresholds change
    nothing else). Without label counts: no step."""
    counts = cal.label_counts
    if counts is None:
        return state
    L, judge = Yt.shape[1], cal.objective
    S = scores_on(retrieval, labels, L, state[0], evidence, counts)
    bucket = np.searchsorted(BUCKET_EDGES, [counts.get(lb, 0) for lb in labels[:L]], side="left")
    chosen, _ = bucket_ascent(S, Yt, bucket, state[0].threshold, GRID_THRESHOLD, judge=judge)
    parts = judge.parts(Yt, S > np.asarray(chosen)[bucket][None, :])
    trial = updated(state[0], bucket_thresholds=tuple(chosen))
    state = take(steps, "+ bucket thresholds", (judge.value(parts), trial, parts), state,
                 decide_on(retrieval, Yt, labels, trial, evidence, counts), Yt, judge)[0]
    params = state[0]
    base = column_thresholds(LabelVocab(labels[:L]), params, counts)
    got = choose_label_thresholds(S, Yt, base, labels[:L], counts, GRID_THRESHOLD, judge)
    trial = updated(params, label_thresholds=got.thresholds)
    steps.append(record("+ label thresholds", trial, got.in_sample, judge.value(got.in_sample), got.holds,
                        cross_fitted_objective=judge.value(got.crossed), cross_fitted_lift=list(got.lift),
                        labels=got.labels))
    if got.holds:
        return (trial, got.in_sample, decide_on(retrieval, Yt, labels, trial, evidence, counts))
    return state
