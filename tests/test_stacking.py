"""Stacking (issue 25): a fusion model fitted by the calibration on its articles' scores, cross-fitted when judged,
stored with the record, and the only way a record that names it is served (never fitted from the memory)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring import LabelVocab, MemoryArticles, Retrieval
from newsmon.shared.scoring.calibration import CalibrationRun, calibration_set
from newsmon.shared.scoring.calibration.run import gold_matrix
from newsmon.shared.scoring.components import MixContext
from newsmon.shared.scoring.components.head_model import HeadModelComponent, HeadModelOptions, HeadScores
from newsmon.shared.scoring.components.label_tree import LabelTreeComponent, LabelTreeOptions, TopLabels
from newsmon.shared.scoring.components.stacking import StackingComponent, StackingEvidence, StackingOptions
from newsmon.shared.scoring.decision import decide
from newsmon.shared.scoring.models import FittedModels


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _sources(m: int = 1200, L: int = 12, seed: int = 0):
    """Two predictors whose reliability depends on the label's frequency: the first (a head model) is right on the
    six frequent labels and noise on the six rare ones, the second (a label tree) the other way round. Returns
    (labels, counts, gold (m, L) bool, first (m, L), second (m, L))."""
    rng = np.random.default_rng(seed)
    labels = [f"l{j}" for j in range(L)]
    counts = {lb: (500 if j < L // 2 else 5) for j, lb in enumerate(labels)}
    gold = rng.random((m, L)) < 0.15
    signal = np.where(gold, rng.uniform(0.55, 1.0, (m, L)), rng.uniform(0.0, 0.45, (m, L)))
    noise = rng.random((m, L))
    frequent = np.arange(L) < L // 2
    first = np.where(frequent, signal, noise).astype(np.float32)
    second = np.where(frequent, noise, signal).astype(np.float32)
    return labels, counts, gold, first, second


def _context(labels, counts, first, second):
    m, L = first.shape
    head = (HeadModelComponent(), HeadModelOptions(weight=0.5), HeadScores(labels, first))
    tree = (LabelTreeComponent(), LabelTreeOptions(weight=0.5), TopLabels([labels] * m, second))
    return MixContext(np.zeros((m, L), np.float32), [head, tree], counts, np.ones(m, np.float32))


def _micro_f1(gold: np.ndarray, P: np.ndarray) -> float:
    return 2 * (gold & P).sum() / (gold.sum() + P.sum())


@pytest.mark.slow  # cross-fitted models on many synthetic labels
def test_stacking_learns_which_predictor_to_trust_for_which_labels_where_a_weighted_average_cannot():
    labels, counts, gold, first, second = _sources()
    average = 0.5 * first + 0.5 * second  # what the weighted mix of the two gives
    best_average = max(_micro_f1(gold, average > t) for t in np.arange(0.05, 1.0, 0.05))
    comp, opts = StackingComponent(), StackingOptions(candidates=12, iterations=100)
    ctx = _context(labels, counts, first, second)
    ev, model = comp.cross_fit(average, LabelVocab(labels), ctx, opts, gold)
    assert ev.fold is not None and len(ev.models) == 5 and model.components == ["head_model", "label_tree"]
    crossed = comp.mix_in_context(average, LabelVocab(labels), ev, opts, ctx)  # each article by a model without it
    stacked = max(_micro_f1(gold, crossed > t) for t in np.arange(0.05, 1.0, 0.05))
    assert stacked > best_average + 0.15, (stacked, best_average)
    # new articles, the one model fitted on all: as good
    labels2, counts2, gold2, first2, second2 = _sources(seed=1)
    served = comp.mix_in_context(0.5 * first2 + 0.5 * second2, LabelVocab(labels2), StackingEvidence([model]), opts,
                                 _context(labels2, counts2, first2, second2))
    assert _micro_f1(gold2, served > 0.5) > best_average + 0.15


def test_only_each_articles_best_candidates_are_scored_and_the_others_get_zero():
    labels, counts, gold, first, second = _sources(m=200)
    average = 0.5 * first + 0.5 * second
    comp, opts = StackingComponent(), StackingOptions(candidates=3, iterations=20)
    ctx = _context(labels, counts, first, second)
    _ev, model = comp.cross_fit(average, LabelVocab(labels), ctx, opts, gold)
    out = comp.mix_in_context(average, LabelVocab(labels), StackingEvidence([model]), opts, ctx)
    top3 = np.argsort(-average, axis=1)[:, :3]
    outside = np.ones_like(out, dtype=bool)
    np.put_along_axis(outside, top3, False, axis=1)
    assert not out[outside].any() and (out > 0).sum(axis=1).max() <= 3


def test_each_option_changes_the_scores():
    """Every option of stacking has an effect (``tests/test_scoring_params.py`` lists it here): ``candidates`` how
    many labels per article it scores, ``iterations`` the trees of its model."""
    labels, counts, gold, first, second = _sources(m=300)
    average = 0.5 * first + 0.5 * second
    comp = StackingComponent()
    ctx = _context(labels, counts, first, second)

    def scores(opts: StackingOptions) -> np.ndarray:
        _ev, model = comp.cross_fit(average, LabelVocab(labels), ctx, opts, gold)
        return comp.mix_in_context(average, LabelVocab(labels), StackingEvidence([model]), opts, ctx)

    base = scores(StackingOptions(candidates=6, iterations=30))
    assert not np.array_equal(base, scores(StackingOptions(candidates=4, iterations=30)))
    assert not np.array_equal(base, scores(StackingOptions(candidates=6, iterations=60)))


def test_a_stored_model_reads_back_and_a_model_of_other_components_is_refused(tmp_path):
    labels, counts, gold, first, second = _sources(m=300)
    average = 0.5 * first + 0.5 * second
    comp, opts = StackingComponent(), StackingOptions(candidates=12, iterations=20)
    ctx = _context(labels, counts, first, second)
    _ev, model = comp.cross_fit(average, LabelVocab(labels), ctx, opts, gold)
    comp.save(model, tmp_path)
    back = comp.load(tmp_path)
    a = comp.mix_in_context(average, LabelVocab(labels), StackingEvidence([model]), opts, ctx)
    b = comp.mix_in_context(average, LabelVocab(labels), StackingEvidence([back]), opts, ctx)
    assert np.array_equal(a, b)
    ctx.steps = ctx.steps[:1]  # the scores now mix only the head model: the model read both
    with pytest.raises(ValueError, match="calibrate again"):
        comp.mix_in_context(average, LabelVocab(labels), StackingEvidence([back]), opts, ctx)
    with pytest.raises(ValueError, match="fitted by the calibration"):
        comp.fit(MemoryArticles(None, ["x"], [("l0",)]), opts)


@pytest.mark.slow  # a whole calibration with stacking
def test_the_calibration_judges_stacking_cross_fitted_and_the_scorer_serves_the_model_it_stored():
    """The component step cross-fits stacking on the calibration articles (so its lift is not its own training
    articles'), keeps it when it lifts, and leaves the model fitted on all of them where the record and eval's
    scorer take the models from; a scorer without that model refuses instead of falling back."""
    labels, counts, gold, first, second = _sources(m=600)
    m = len(gold)
    texts = [f"t{i}" for i in range(m)]
    memory = MemoryArticles(None, texts, [tuple(lb for lb, g in zip(labels, row, strict=True) if g) for row in gold])
    r = Retrieval.from_neighbours([[Hit("a", 0.9, ("l0",)), Hit("b", 0.8, ("l7",))]] * m)
    cal = calibration_set(memory, r)
    cal.given = {"head_model": lambda _o: HeadScores(labels, first),
                 "label_tree": lambda _o: TopLabels([labels] * m, second)}
    cal.label_counts = counts
    vocab = LabelVocab()
    r.label_matrix(vocab)
    vocab.extend(labels)
    Yt = gold_matrix(cal.gold, vocab)
    params = ScoringParams(top_k=2, tau=0.1, threshold=0.5, components=[
        {"name": "head_model", "options": {"weight": 0.5}}, {"name": "label_tree", "options": {"weight": 0.5}}])
    evidence = {"head_model": cal.evidence(HeadModelComponent(), HeadModelOptions(weight=0.5)),
                "label_tree": cal.evidence(LabelTreeComponent(), LabelTreeOptions(weight=0.5))}
    run = CalibrationRun(cal, r, Yt, vocab.labels, params, evidence)
    before = run.parts
    StackingComponent().calibrate(run)
    chosen, parts, kept_evidence = run.params, run.parts, run.evidence
    assert run.steps[-1]["kept"] and parts[0] > before[0] + 0.1
    assert [s.name for s in chosen.components] == ["head_model", "label_tree", "stacking"]
    spec = chosen.components[-1]
    key = ("stacking", StackingComponent().model_key(spec.parsed()))
    assert key in cal.models and kept_evidence["stacking"].fold is not None
    # served: the stored model on every article; close to the cross-fitted figures
    served = dict(kept_evidence, stacking=StackingEvidence([cal.models[key]]))
    Ps = decide(r, LabelVocab(vocab.labels), chosen, served, counts).proposed[:, :Yt.shape[1]]
    assert cal.objective.parts(Yt, Ps)[0] >= parts[0] - 0.02
    alone = chosen.model_copy(update={"components": chosen.components[-1:]})
    with pytest.raises(ValueError, match="fitted by the calibration"):  # without the stored model: no fallback
        FittedModels(memory).get(None, None, alone, True)


def test_the_context_says_which_of_the_first_k_neighbours_carry_each_label():
    from newsmon.shared.scoring.decision import mix_context

    r = Retrieval.from_neighbours([[Hit("a", 0.9, ("x", "y")), Hit("b", 0.8, ("x",)), Hit("c", 0.95, ("z",))]])
    ctx = mix_context(r, np.zeros((1, 3), np.float32), None, k=2)
    assert ctx.carriers == [{"x": (pytest.approx(0.9), 2), "y": (pytest.approx(0.9), 1)}]  # z is the third
    assert ctx.nearest[0] == pytest.approx(0.95)
    assert ctx.set_size[0] == pytest.approx(1.5)  # {x, y} and {x}


def test_the_workers_serve_the_stored_model_and_refuse_a_record_without_it():
    """The worker path: the stacking model travels in the record's archive (``shared/scoring/stored.py``), the
    scorer of the workers loads it and proposes what the calibration's model proposes; a record stored without it
    is refused (its ``fit`` raises), not served with other parameters."""
    from test_stored_models import StoredMemory

    from newsmon.shared.scoring import OneRecord, Resolved, Scorer
    from newsmon.shared.scoring.models import MemoryModels, ModelCache

    rng = np.random.default_rng(5)
    m = 400
    labels = ["a", "b", "c"]
    hits = [[Hit(f"n{i}{j}", float(0.95 - 0.05 * j), (labels[(i + j) % 3],)) for j in range(4)] for i in range(m)]
    r = Retrieval.from_neighbours(hits)
    gold = np.zeros((m, 3), dtype=bool)
    gold[np.arange(m), np.arange(m) % 3] = rng.random(m) < 0.8  # the first neighbour's label, mostly
    params = ScoringParams(top_k=4, tau=0.1, threshold=0.5, lexical_weight=0.0, rules=[{"name": "threshold"}],
                           components=[{"name": "stacking"}])
    comp, opts = StackingComponent(), params.components[0].parsed()
    vocab = LabelVocab(labels)
    from newsmon.shared.scoring.decision import mix_context
    from newsmon.shared.scoring.rae_xmc import rae_xmc_scores

    rae = rae_xmc_scores(r.sims, r.label_matrix(vocab), 4, 0.1, 1.0, 3)
    _ev, model = comp.cross_fit(rae, vocab, mix_context(r, rae, {"a": 5, "b": 5, "c": 5}, 4), opts, gold)
    record = "newsmon_sl_m@20261203T000000Z"
    cache = ModelCache(record)
    cache.models[("stacking", comp.model_key(opts))] = model
    cache.counts = {"a": 5, "b": 5, "c": 5}
    res = Resolved(params, record, frozenset(labels), "calibration")
    scorer = Scorer(OneRecord(res, MemoryModels(StoredMemory(cache))))  # reading the memory fails the test
    (g,) = scorer.score(["t"] * m, ["sl"] * m, None, retrieval=r, resolved=res, vocab=LabelVocab(labels))
    want = decide(r, LabelVocab(labels), params, {"stacking": StackingEvidence([model])}, cache.counts)
    assert np.array_equal(g.decision.proposed[:, :3], want.proposed[:, :3]) and g.decision.proposed.any()
    empty = ModelCache(record)
    empty.counts = cache.counts
    without = Scorer(OneRecord(res, MemoryModels(StoredMemory(empty, MemoryArticles(None, ["x"], [("a",)]),
                                                              any_record=True))))
    with pytest.raises(ValueError, match="calibrate again"):
        without.score(["t"] * m, ["sl"] * m, None, retrieval=r, resolved=res)


def test_the_grid_options_share_one_cross_fit_and_score_exactly_as_their_own_models(monkeypatch):
    """The calibration tries stacking with 200 and 500 trees: each fold's model is fitted once with 500 and read at
    200 (its first 200 trees). That must give bit for bit what a fold model of 200 trees gives, for the cross-fitted
    probabilities and for the fold models a later mix falls back on, and fit five fold models, not ten."""
    from newsmon.shared.scoring.components import stacking

    labels, counts, gold, first, second = _sources(m=300)
    average = 0.5 * first + 0.5 * second
    ctx = _context(labels, counts, first, second)
    fits = []
    real_fit = stacking.fit_model
    monkeypatch.setattr(stacking, "fit_model", lambda *a: fits.append(a[3]) or real_fit(*a))
    comp = StackingComponent()
    monkeypatch.setattr(StackingComponent, "GRID", ({"candidates": 6, "iterations": 20},
                                                    {"candidates": 6, "iterations": 50}))
    few, many = StackingOptions(candidates=6, iterations=20), StackingOptions(candidates=6, iterations=50)
    ev_few, model_few = comp.cross_fit(average, LabelVocab(labels), ctx, few, gold)
    ev_many, _model_many = comp.cross_fit(average, LabelVocab(labels), ctx, many, gold)
    assert fits == [50] * 5  # the folds once (with the most trees); each option's full model when it is read
    assert model_few.classifier.n_iter_ == 20 and model_few.iterations is None
    assert fits == [50] * 5 + [20] and not _model_many.fitted  # the option not read is never fitted
    rows, cols, X, names = comp.pairs(average, LabelVocab(labels), ctx, few)
    direct = real_fit(X, gold[rows, cols].astype(bool), names, 20)
    assert pickle.dumps(direct.classifier) == pickle.dumps(model_few.classifier)  # the model fit_model gives

    alone = StackingComponent()  # the same option cross-fitted on its own: fold models of 20 trees
    monkeypatch.setattr(StackingComponent, "GRID", ({"candidates": 6, "iterations": 20},))
    ev_alone, _ = alone.cross_fit(average, LabelVocab(labels), ctx, few, gold)
    assert np.array_equal(ev_few.scored[2], ev_alone.scored[2])
    assert not np.array_equal(ev_few.scored[2], ev_many.scored[2])
    for shared_model, own_model in zip(ev_few.models, ev_alone.models, strict=True):
        assert own_model.classifier.n_iter_ == 20 and shared_model.classifier.n_iter_ == 50
        assert np.array_equal(shared_model.probabilities(X), own_model.probabilities(X))


def test_a_prediction_holds_openmp_at_one_thread_without_scanning_the_libraries_again(monkeypatch):
    # threadpool_limits reads the process's loaded libraries on every call (3 ms of a batch of 16 at archive size):
    # the predictions go through one controller, made once, and still run on one OpenMP thread
    import threadpoolctl

    import newsmon.shared.scoring.components.stacking as stacking

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    model = stacking.fit_model(X, X[:, 0] + 0.3 * rng.standard_normal(400) > 0, ["a", "b", "c"], 20)
    made, seen = [], []
    real = threadpoolctl.ThreadpoolController

    class Counted(real):
        def __init__(self):
            made.append(1)
            super().__init__()

    monkeypatch.setattr(stacking, "ThreadpoolController", Counted)
    monkeypatch.setattr(stacking, "_OPENMP", [])
    for _ in range(3):
        with stacking.one_prediction_thread():
            seen.append({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "openmp"})
        assert model.probabilities(X[:5]).shape == (5,)
    assert len(made) == 1 and seen[0] and all(s == {1} for s in seen)
