"""The predictor interface: the registry, and every registered method through fit / scores / decide on small
cases computed by hand (each method module has its test here)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from newsmon.shared.config import Settings
from newsmon.shared.predictors import (MLKNN, LabelVocab, MlKnnPredictor, Predictor, QueryBatch, RaeXmcPredictor,
                                       Retrieval, TrainingSet, available, get_predictor, neighbour_counts,
                                       one_nn_scores, rae_xmc_scores, register)


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _train() -> TrainingSet:
    texts = ["vlada sprejela pokojninsko reformo", "parlament glasoval o pokojninah", "nogometna tekma v ljubljani",
             "rokometna tekma v celju"]
    vocab = LabelVocab(["politics", "sport"])
    labels = vocab.encode([("politics",), ("politics",), ("sport",), ("sport",)])
    # leave-one-out neighbours of each training article among the others (k = 1)
    loo = Retrieval.from_neighbours([[Hit("t1", .9, ("politics",))], [Hit("t0", .9, ("politics",))],
                                     [Hit("t3", .8, ("sport",))], [Hit("t0", .2, ("politics",))]], top_k=1)
    return TrainingSet(texts, labels, vocab, retrieval=loo)


def _queries() -> QueryBatch:
    r = Retrieval.from_neighbours([
        [Hit("t0", .9, ("politics",)), Hit("t2", .5, ("sport",))],
        [Hit("t2", .8, ("sport",)), Hit("t3", .7, ("sport",))],
    ], top_k=2)
    return QueryBatch(["reforma pokojnin v parlamentu", "tekma v ljubljani"], ["sl", "sl"], retrieval=r)


def test_registry_names_in_report_order():
    assert available() == ("rae", "zshot", "mlknn", "svm", "logreg", "newsmon")
    assert all(isinstance(get_predictor(n), Predictor) for n in available())
    with pytest.raises(KeyError, match="unknown predictor 'nope'.*rae"):
        get_predictor("nope")


def test_a_name_cannot_be_registered_twice():
    class Other(RaeXmcPredictor):
        name = "rae"

    with pytest.raises(ValueError, match="already registered"):
        register(Other)
    assert get_predictor("rae").__class__ is RaeXmcPredictor


def test_rae_xmc_through_the_interface_equals_the_scoring_function():
    train, q = _train(), _queries()
    p = get_predictor("rae", top_k=2, tau=0.1, lam=1.0, threshold=0.5).fit(train)
    s = p.scores(q)
    want = rae_xmc_scores(q.retrieval.sims, q.retrieval.label_matrix(train.vocab), 2, 0.1, 1.0, len(train.vocab))
    np.testing.assert_array_equal(s, want)
    assert s.dtype == np.float32 and s.shape == (2, 2)
    assert p.decide(s).tolist() == [[True, False], [False, True]]
    assert p.params == {"top_k": 2, "tau": 0.1, "lam": 1.0, "threshold": 0.5} and p.neighbours_needed() == 2


def test_rae_xmc_reads_its_settings():
    s = Settings()
    s.scoring.top_k, s.scoring.threshold = 7, 0.3
    p = RaeXmcPredictor.from_settings(s)
    assert (p.top_k, p.tau, p.threshold) == (7, s.scoring.tau, 0.3)
    assert RaeXmcPredictor.from_settings(s, top_k=3).top_k == 3


def test_zero_shot_one_nn_through_the_interface():
    train, q = _train(), _queries()
    p = get_predictor("zshot").fit(train)
    s = p.scores(q)
    np.testing.assert_array_equal(s, one_nn_scores(q.retrieval.sims, q.retrieval.label_matrix(train.vocab), 2))
    assert p.decide(s).tolist() == [[True, False], [False, True]]


def test_mlknn_through_the_interface_uses_the_leave_one_out_neighbours():
    train, q = _train(), _queries()
    p = get_predictor("mlknn", k=1).fit(train)
    assert isinstance(p, MlKnnPredictor) and p.params == {"k": 1, "s": 1.0}
    ref = MLKNN(k=1).fit(train.labels, neighbour_counts(train.retrieval.label_matrix(train.vocab), 4, 1, 1, 2))
    s = p.scores(q)
    np.testing.assert_array_equal(s, ref.predict_proba(
        neighbour_counts(q.retrieval.label_matrix(train.vocab), 2, 2, 1, 2)))
    assert p.decide(s).tolist() == (s > 0.5).tolist()
    with pytest.raises(ValueError, match="leave-one-out"):
        get_predictor("mlknn").fit(TrainingSet(train.texts, train.labels, train.vocab))


@pytest.mark.parametrize("name, threshold", [("svm", 0.0), ("logreg", 0.5)])
def test_tfidf_baselines_through_the_interface(name, threshold):
    texts = [f"vlada parlament reforma zakon {i}" for i in range(6)]
    texts += [f"tekma gol igrišče zmaga {i}" for i in range(6)]
    vocab = LabelVocab(["politics", "sport", "never"])
    train = TrainingSet(texts, vocab.encode([("politics",)] * 6 + [("sport",)] * 6), vocab)
    p = get_predictor(name).fit(train)
    assert not p.needs_retrieval
    s = p.scores(QueryBatch(["parlament sprejel zakon reforma", "zmaga na tekmi gol igrišče"]))
    assert s.shape == (2, 3)
    assert p.decide(s)[:, :2].tolist() == [[True, False], [False, True]]
    assert not p.decide(s)[:, 2].any()  # a label without training articles is never proposed
    assert (p.decide(s) == (s > threshold)).all()


@pytest.mark.parametrize("name", ["svm", "logreg"])
def test_tfidf_baselines_give_the_same_scores_on_every_fit(name, shared_data):
    """liblinear's dual solvers draw their coordinate order from one generator of the process: unseeded (or seeded
    by two fits in threads at once) two fits of the same data gave decision values 3e-5 apart."""
    from newsmon.shared.data import load_corpus

    train = load_corpus(shared_data / "sentinews_sl").split("train")[:300]
    vocab = LabelVocab()
    ts = TrainingSet([a.text for a in train], vocab.encode([tuple(a.labels) for a in train]), vocab)
    queries = QueryBatch([a.text for a in train[:50]])
    first, second = (get_predictor(name).fit(ts).scores(queries) for _ in range(2))
    assert np.abs(first).max() > 0 and np.array_equal(first, second)
