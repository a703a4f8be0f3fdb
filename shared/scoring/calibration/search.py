"""Calibration of the scorer: a deterministic search of its parameters on labelled articles that are not the test
split (:class:`~newsmon.shared.scoring.calibration.inputs.CalibrationSet`: the memory's own articles scored
leave-one-out, plus the validation split when there is one).

Objective (:class:`~newsmon.shared.scoring.objective.Objective`, the calibration set's; its weights and protected
figures are settings): by default micro-F1 + subset accuracy (both fractions). Subset accuracy alone gives the search
no signal where articles carry many labels, micro-F1 alone ignores whether whole label sets are right; their sum
chooses well in both cases. macro-F1 may be weighed in too. Each figure is reported.

Every lever is kept only when its lift holds under resampling and lowers no protected figure beyond the noise
(:mod:`.selection`); every step is recorded with its lift, interval, verdict and reason (the ablation, and the
record's selection report).

Order: k, tau and the threshold on a grid; then hybrid retrieval (the dense neighbours fused with a lexical
similarity, when the neighbours' texts are at hand): first the fusion re-ranking the dense top-N candidates, then the
lexical search adding the memory's lexical top-N to them (a sparse search whose cost grows with the memory: kept
only where it lifts over the fusion alone, judged at the weight the fusion's step chose: the lexical grid is walked
once); then each registered score component in registration order, then each
registered decision rule in the order of its ``CALIBRATE_AT``, each by its own ``calibrate`` hook
(:meth:`~newsmon.shared.scoring.components.ScoreComponent.calibrate`,
:meth:`~newsmon.shared.scoring.rules.DecisionRule.calibrate`) on a :class:`~.run.CalibrationRun`: this module names
no component and no rule.

Which option of a grid is taken (the base grid, the lexical weights, each component's options): not the best on the
calibration articles but the centre of the options within the noise of the best (:mod:`.choice`), so that a re-split
of the same corpus gives the same record where its best option flips between near-equal ones.

Same inputs, same record: the grids are walked in a fixed order and a tie goes by a stated rule (:mod:`.choice`;
the grid's order last), the bootstrap resamples are seeded, the articles are in
article-id order (:func:`~.inputs.calibration_set`), and every model the levers fit is deterministic whatever the
thread count.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.heap import trim_heap
from newsmon.shared.scoring.calibration.choice import Choice
from newsmon.shared.scoring.calibration.inputs import CalibrationSet
from newsmon.shared.scoring.calibration.run import GRID_THRESHOLD, CalibrationRun, gold_matrix
from newsmon.shared.scoring.objective import Objective
from newsmon.shared.scoring.calibration.result import LEXICAL_CANDIDATES, CalibrationResult
from newsmon.shared.scoring.lexical import TermVectors, fuse, lexical_cosines
from newsmon.shared.scoring.rae_xmc import rae_xmc_scores_sparse
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval
from newsmon.shared.scoring.rules import rules as registered_rules

#: The grid of the base parameters (k is capped at the neighbours retrieved).
GRID_K = (5, 10, 20, 30, 50, 75, 100, 150, 200)
GRID_TAU = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2)
#: The prior of the base grid's choice (:mod:`.choice`: taken when within the noise of the best): its cell nearest
#: the settings' defaults (k 50, threshold 0.5; tau 0.04 lies between the grid's 0.03 and 0.05).
BASE_PRIOR = {"top_k": 50, "tau": 0.05, "threshold": 0.5}
#: (objective, parameters, figures) of a grid's best.
Found = tuple[float, ScoringParams, tuple[float, float, float]]
#: Lexical weights tried for hybrid retrieval (0 = dense only).
GRID_LEXICAL = (0.2, 0.3, 0.5, 0.7)
#: The objective's name in words (the calibration record's ``objective``): its default's.
OBJECTIVE = Objective().name


def _base_grid(retrieval: Retrieval, Yt: np.ndarray, labels: list[str], extra: dict[str, Any], judge: Objective,
               choice: Choice | None = None) -> Found:
    """The chosen (objective, params, figures) of the k / tau / threshold grid (``labels``: the columns of ``Yt``):
    the centre of the cells within the noise of the best (:mod:`.choice`). With ``choice``, the cells (each with
    ``extra``) are only added to it and nothing is returned (a step choosing over several grids at once)."""
    rows = retrieval.label_matrix(LabelVocab(labels))
    own = choice is None
    choice = choice or Choice(judge, len(Yt), prior=BASE_PRIOR)
    for k, tau in itertools.product(_ks(retrieval), GRID_TAU):
        S = _columns(rae_xmc_scores_sparse(retrieval.sims, rows, k, tau, 1.0, rows.shape[1]), Yt.shape[1])
        choice.add_scores(Yt, S, GRID_THRESHOLD, {**extra, "top_k": k, "tau": tau})
    return _chosen(choice, retrieval, Yt, labels, judge) if own else None  # type: ignore[return-value]


def _ks(retrieval: Retrieval) -> list[int]:
    """The grid's k (capped at the neighbours retrieved)."""
    return [k for k in GRID_K if k <= retrieval.k] or [retrieval.k]


def _chosen(choice: Choice, retrieval: Retrieval, Yt: np.ndarray, labels: list[str], judge: Objective,
            picked: int | None = None) -> Found:
    """The (objective, params, figures) of the cell ``choice`` takes (``picked``: its index when already
    taken), scored on ``retrieval`` (its figures, macro-F1 too, from the dense scores in float64 as the decision
    compares them)."""
    i = choice.pick()[0] if picked is None else picked
    cell = choice.options[i]
    rows = retrieval.label_matrix(LabelVocab(labels))
    S = _columns(rae_xmc_scores_sparse(retrieval.sims, rows, cell["top_k"], cell["tau"], 1.0, rows.shape[1]),
                 Yt.shape[1])
    parts = judge.parts(Yt, S.toarray() > np.float64(cell["threshold"]))
    return choice.values[i], ScoringParams(**cell), parts


def _columns(S: sp.csr_matrix, L: int) -> sp.csr_matrix:
    """``(m, L)``: the CSR scores ``S`` cut or widened (zero columns) to ``L`` columns, as :func:`.run.pad` does
    a dense matrix."""
    if S.shape[1] > L:
        return sp.csr_matrix(S[:, :L])
    return sp.csr_matrix((S.data, S.indices, S.indptr), shape=(S.shape[0], L))


def _lexical_step(cal: CalibrationSet, terms: TermVectors, Yt: np.ndarray, labels: list[str], search: bool,
                  weights: tuple[float, ...], queries: sp.csr_matrix | None = None) -> tuple[Found, Retrieval]:
    """The chosen cell of the base grids over the lexical ``weights`` (hybrid retrieval's fusion; one choice over
    every weight's grid), with the fused retrieval it was found on. ``search``: the candidates are the dense top-N
    united with the lexical top-N (the calibration's retrieval); else the dense top-N alone (its first
    :data:`LEXICAL_CANDIDATES` by cosine). ``queries``: the term rows of ``cal.texts`` when already at hand (both
    steps read the same)."""
    candidates = cal.retrieval if search else cal.retrieval.head(LEXICAL_CANDIDATES)
    lexical = lexical_cosines(candidates, cal.texts, terms, queries)  # one pass of the texts for every weight
    choice = Choice(cal.objective, len(Yt))
    for w in weights:
        fused = fuse(candidates, cal.texts, w, max(GRID_K), terms, lexical)
        _base_grid(fused, Yt, labels, {"lexical_weight": w, "lexical_search": search}, cal.objective, choice)
        del fused
        trim_heap()  # each weight's fused neighbours freed before the next (newsmon.shared.heap.trim_heap)
    picked = choice.pick()[0]
    fused = fuse(candidates, cal.texts, choice.options[picked]["lexical_weight"], max(GRID_K), terms, lexical)
    return _chosen(choice, fused, Yt, labels, cal.objective, picked), fused


def calibrate(cal: CalibrationSet, terms: TermVectors | None = None, rules: tuple[str, ...] | None = None,
              replay: bool = True) -> CalibrationResult:
    """Choose the scorer's parameters on the ``n`` calibration articles of ``cal`` (see the module docstring).

    Args:
        cal: the articles, their neighbours, gold labels and texts, and the memory the components are fitted on.
        terms: the term-vector cache of hybrid retrieval (tried when ``cal`` has texts and the neighbours' texts).
        rules: the names of the rules to try besides the one that applies the thresholds (whose step, the
            bucket and per-label thresholds, always runs); default: every registered rule, in the order of their
            ``CALIBRATE_AT``; replay: choose the rules judged by a replay (the new-label rule).

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
    trim_heap()  # what fitting the components' first models freed
    dense = fuse(cal.retrieval, [], 0.0, max(GRID_K))
    _obj, params, _parts = _base_grid(dense, Yt, vocab.labels, {}, cal.objective)
    run = CalibrationRun(cal, dense, Yt, vocab.labels, params)
    run.record("base (k, tau, threshold)", params, run.parts, True,
               why="the defaults' cell when within the noise of the best, else the centre of the cells within it")
    if cal.hybrid and cal.texts is not None and cal.retrieval.texts is not None:
        terms = terms or TermVectors()
        queries = terms.rows(list(cal.texts))  # the calibration articles' term rows, for both steps
        weights: tuple[float, ...] = GRID_LEXICAL
        for name, search in (("+ lexical fusion", False), ("+ lexical search", True)):
            (_obj, found, _parts), fused = _lexical_step(cal, terms, Yt, vocab.labels, search, weights, queries)
            if run.offer(name, found, run.decide(found, retrieval=fused)):
                run.use_retrieval(fused)
            weights = (found.lexical_weight,)  # the search: at the fusion's weight (what its candidates add)
    for comp in cal.components():
        comp.calibrate(run)
    for rule in sorted(registered_rules(), key=lambda r: r.CALIBRATE_AT):
        if (rules is None or rule.name in rules or rule.APPLIES_THRESHOLDS) and (replay or not rule.REPLAY):
            rule.calibrate(run)
    lo, hi = cal.objective.bootstrap(Yt, run.proposed)
    parts = run.parts
    figures = {"micro_f1": parts[0], "subset_accuracy": parts[1], "macro_f1": parts[2],
               "objective": cal.objective.value(parts), "objective_lo": lo, "objective_hi": hi,
               "n": float(len(cal.gold))}
    known = cal.known_labels if cal.known_labels is not None else {
        lb for row in cal.retrieval.labels for x in row for lb in x}
    return CalibrationResult(run.params, figures, run.steps, sorted(set(known)))
