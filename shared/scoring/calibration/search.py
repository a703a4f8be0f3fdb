"""Calibration of the scorer: a deterministic search of its parameters on labelled articles that are not the test
split (:class:`~newsmon.shared.scoring.calibration.inputs.CalibrationSet`: the memory's own articles scored
leave-one-out, plus the validation split when there is one).

Objective (:class:`~newsmon.shared.scoring.calibration.objective.Objective`, the calibration set's; its weights
are settings): by default micro-F1 + subset accuracy (both fractions). Subset accuracy alone gives the search no
signal where articles carry many labels (it is about 0 for every setting), micro-F1 alone ignores whether whole label
sets are right; their sum chooses well in both cases. macro-F1 (every label, client topic, alike) may be weighed
in too. Each figure is reported. The search is a grid, so re-runs on the same data choose
the same parameters; the objective's noise is reported as a bootstrap 90 % interval over the calibration
articles.

Every lever is kept only when it lifts the objective beyond the noise of the calibration articles: the paired
bootstrap 90 % interval of its lift over the proposals before it lies above 0
(:func:`newsmon.shared.scoring.rules.lifts`). A lever kept on any lift at all was chosen by noise: the same
articles embedded again (vectors at cosine 0.997) turned levers on and off and moved the test figures by points.

Order: k, tau and the threshold on a grid; then hybrid retrieval (the dense neighbours fused with a lexical
similarity, when the neighbours' texts are at hand): first the fusion re-ranking the dense top-N candidates, then the
lexical search adding the memory's lexical top-N to them (a sparse search whose cost grows with the memory: kept
only where it lifts over the fusion alone); then each registered score component
(:mod:`newsmon.shared.scoring.components`, in registration order: its options' grid with every threshold, on top
of the components kept before it; :mod:`.levers`); then one threshold per label-frequency bucket and a threshold
of its own for each frequent label (kept when it lifts on articles it was not fitted on); then each registered
decision rule with options to try (:mod:`newsmon.shared.scoring.rules`, by its ``CALIBRATE_AT``), kept as the rule
says (:meth:`~newsmon.shared.scoring.rules.DecisionRule.keeps`); every step is recorded (the ablation). A rule
judged by a replay instead (the new-label rule) is chosen last: it changes nothing for the calibration articles
themselves (every label in their memory is known).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring.calibration.inputs import CalibrationSet
from newsmon.shared.scoring.calibration.levers import (GRID_K, GRID_THRESHOLD, Found, State, component_step,
                                                       decide_on, gold_matrix, pad, record, take, threshold_steps,
                                                       with_rule)
from newsmon.shared.scoring.calibration.objective import Objective
from newsmon.shared.scoring.calibration.result import LEXICAL_CANDIDATES, CalibrationResult
from newsmon.shared.scoring.lexical import TermVectors, fuse
from newsmon.shared.scoring.rae_xmc import rae_xmc_scores
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval
from newsmon.shared.scoring.rules import DecisionRule, rules as registered_rules
from newsmon.shared.scoring.rules.new_label_support import new_label_replay

GRID_TAU = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2)
#: Lexical weights tried for hybrid retrieval (0 = dense only).
GRID_LEXICAL = (0.2, 0.3, 0.5, 0.7)
#: The objective's name in words (the calibration record's ``objective``): its default's.
OBJECTIVE = Objective().name


def _base_grid(retrieval: Retrieval, Yt: np.ndarray, labels: list[str], extra: dict[str, Any], judge: Objective
               ) -> Found:
    """The best (objective, params, figures) of the k / tau / threshold grid (``labels``: the columns of ``Yt``)."""
    rows = retrieval.label_matrix(LabelVocab(labels))
    L = Yt.shape[1]
    best: tuple | None = None
    for k, tau in itertools.product([k for k in GRID_K if k <= retrieval.k] or [retrieval.k], GRID_TAU):
        S = pad(rae_xmc_scores(retrieval.sims, rows, k, tau, 1.0, rows.shape[1]), L)[:, :L]
        for thr in GRID_THRESHOLD:
            parts = judge.parts(Yt, S > thr)
            if best is None or judge.value(parts) > best[0] + 1e-12:
                best = (judge.value(parts), (k, tau, float(thr)), parts)
    (k, tau, thr) = best[1]
    return best[0], ScoringParams(top_k=k, tau=tau, threshold=thr, **extra), best[2]


def _lexical_step(cal: CalibrationSet, terms: TermVectors, Yt: np.ndarray, labels: list[str], search: bool
                  ) -> tuple[Found, Retrieval]:
    """The best base grid over the lexical weights of :data:`GRID_LEXICAL` (hybrid retrieval's fusion), with the
    fused retrieval it was found on. ``search``: the candidates are the dense top-N united with the lexical top-N
    (the calibration's retrieval); else the dense top-N alone (its first :data:`LEXICAL_CANDIDATES` by cosine)."""
    candidates = cal.retrieval if search else cal.retrieval.head(LEXICAL_CANDIDATES)
    best = None
    for w in GRID_LEXICAL:
        fused = fuse(candidates, cal.texts, w, max(GRID_K), terms)
        trial = _base_grid(fused, Yt, labels, {"lexical_weight": w, "lexical_search": search}, cal.objective)
        if best is None or trial[0] > best[0][0]:
            best = (trial, fused)
    return best


def _rule_step(steps: list[dict[str, Any]], rule: DecisionRule, cal: CalibrationSet, retrieval: Retrieval,
               Yt: np.ndarray, labels: list[str], state: State, evidence: dict[str, Any]) -> State:
    """Try each option of ``rule`` on top of ``state``'s parameters, record the best as a step in ``steps`` (kept
    by the rule's :meth:`~newsmon.shared.scoring.rules.DecisionRule.keeps`) and return the state after it."""
    best, judge = None, cal.objective
    for option in rule.grid(cal):
        trial = with_rule(state[0], rule.name, option)
        P = decide_on(retrieval, Yt, labels, trial, evidence, cal.label_counts)
        parts = judge.parts(Yt, P)
        if best is None or judge.value(parts) > best[0][0]:
            best = ((judge.value(parts), trial, parts), P)
    if best is None:
        return state
    return take(steps, f"+ {rule.name}", best[0], state, best[1], Yt, judge, keeps=rule.keeps)[0]


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2.0 * tp / (2 * tp + fp + fn) if tp else 0.0


def _replay_step(steps: list[dict[str, Any]], rule: DecisionRule, retrieval: Retrieval, gold: list[tuple[str, ...]],
                 state: State, judge: Objective) -> ScoringParams:
    """Choose a rule judged by the new-label replay (:func:`new_label_replay`; best F1, then precision); kept when
    its F1 beats the 1-NN rule's on the same replay. Records the step; returns the parameters (with the rule when
    kept)."""
    options = rule.grid()
    keyed = {(o.support, o.neighbours, o.similarity): o for o in options}
    tallies, n_labels = new_label_replay(retrieval, gold, tuple(keyed))
    best = max(keyed, key=lambda o: (_f1(*tallies[o]), tallies[o][0] / max(1, tallies[o][0] + tallies[o][1])))
    kept = n_labels > 0 and _f1(*tallies[best]) > _f1(*tallies[None])
    params, parts, _P = state
    trial = with_rule(params, rule.name, keyed[best])
    tp, fp, fn = tallies[best]
    replay = {"labels": n_labels, "precision": tp / max(1, tp + fp), "recall": tp / max(1, tp + fn),
              "f1": _f1(tp, fp, fn), "one_nn_f1": _f1(*tallies[None])}
    steps.append(record(f"+ {rule.name}", trial, parts, judge.value(parts), kept, replay=replay))
    return trial if kept else params


def calibrate(cal: CalibrationSet, terms: TermVectors | None = None, rules: tuple[str, ...] | None = None,
              replay: bool = True) -> CalibrationResult:
    """Choose the scorer's parameters on the ``n`` calibration articles of ``cal`` (see the module docstring).

    Args:
        cal: the articles, their neighbours, gold labels and texts, and the memory the components are fitted on.
        terms: the term-vector cache of hybrid retrieval (tried when ``cal`` has texts and the neighbours' texts).
        rules: the names of the rules to try (default: every registered rule with options to try), in the order
            of their ``CALIBRATE_AT``; replay: choose the rules judged by a replay (the new-label rule).

    Returns:
        the chosen parameters, their figures and the ablation steps.

    Raises:
        ValueError: no articles, or no neighbours at all.
    """
    if len(cal.gold) == 0 or cal.retrieval.k == 0:
        raise ValueError("calibration needs labelled articles with neighbours")
    vocab = LabelVocab()
    cal.retrieval.label_matrix(vocab)
    for comp in cal.components():
        if comp.FITTED_BY_CALIBRATION:  # brings no label; fitted by its step, on the components before it
            continue
        first = comp.grid()[0]
        vocab.extend(comp.labels(cal.evidence(comp, first), first))
    Yt = gold_matrix(cal.gold, vocab)
    judge = cal.objective
    dense = fuse(cal.retrieval, [], 0.0, max(GRID_K))
    obj, params, parts = _base_grid(dense, Yt, vocab.labels, {}, judge)
    steps = [record("base (k, tau, threshold)", params, parts, obj, True)]
    state: State = (params, parts, decide_on(dense, Yt, vocab.labels, params, {}, cal.label_counts))
    chosen = dense
    if cal.texts is not None and cal.retrieval.texts is not None:
        terms = terms or TermVectors()
        for name, search in (("+ lexical fusion", False), ("+ lexical search", True)):
            found, fused = _lexical_step(cal, terms, Yt, vocab.labels, search)
            state, kept = take(steps, name, found, state,
                               decide_on(fused, Yt, vocab.labels, found[1], {}, cal.label_counts), Yt, judge)
            chosen = fused if kept else chosen
    evidence: dict[str, Any] = {}
    for comp in cal.components():
        state, evidence = component_step(steps, comp, cal, chosen, Yt, vocab.labels, state, evidence)
    state = threshold_steps(steps, cal, chosen, Yt, vocab.labels, state, evidence)
    tried = [r for r in sorted(registered_rules(), key=lambda r: r.CALIBRATE_AT)
             if (rules is None or r.name in rules)]
    for rule in tried:
        if not getattr(rule, "REPLAY", False):
            state = _rule_step(steps, rule, cal, chosen, Yt, vocab.labels, state, evidence)
    params, parts, P = state
    for rule in tried:
        if getattr(rule, "REPLAY", False) and replay:
            state = (_replay_step(steps, rule, chosen, cal.gold, state, judge), parts, P)
    params = state[0]
    lo, hi = judge.bootstrap(Yt, P)
    figures = {"micro_f1": parts[0], "subset_accuracy": parts[1], "macro_f1": parts[2],
               "objective": judge.value(parts), "objective_lo": lo, "objective_hi": hi, "n": float(len(cal.gold))}
    known = cal.known_labels if cal.known_labels is not None else {
        lb for row in cal.retrieval.labels for x in row for lb in x}
    return CalibrationResult(params, figures, steps, sorted(set(known)))
