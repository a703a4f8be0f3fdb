"""RAE-XMC, zero-shot 1-NN and ML-KNN against hand-computed small cases."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.predictors import MLKNN, LabelVocab, Retrieval, neighbour_counts, one_nn_scores, rae_xmc_scores
from newsmon.shared.scoring import decide, explain
from newsmon.shared.scoring.retrieval import TITLE_CHARS, display_title


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _retrieval():
    # query 0: three neighbours; query 1: only two found (third slot missing)
    return Retrieval.from_neighbours([
        [Hit("n1", 0.9, ("a", "b")), Hit("n2", 0.8, ("a",)), Hit("n3", 0.5, ("c",))],
        [Hit("m1", 0.7, ("c",)), Hit("m2", 0.6, ("b", "c"))],
    ], top_k=3)


def test_rae_xmc_matches_hand_computation():
    r = _retrieval()
    vocab = LabelVocab()
    rows = r.label_matrix(vocab)
    tau, lam = 0.1, 1.0
    p = rae_xmc_scores(r.sims, rows, k=3, tau=tau, lam=lam, n_labels=len(vocab))
    e = [math.exp(9.0), math.exp(8.0), math.exp(5.0)]
    w = [x / sum(e) for x in e]
    a, b, c = (vocab.index[x] for x in "abc")
    assert p[0, a] == pytest.approx(w[0] + w[1], rel=1e-6)
    assert p[0, b] == pytest.approx(w[0], rel=1e-6)
    assert p[0, c] == pytest.approx(w[2], rel=1e-5)
    # second query: the missing neighbour has weight 0; softmax over the two found
    e2 = [math.exp(7.0), math.exp(6.0)]
    assert p[1, c] == pytest.approx(1.0, rel=1e-6)
    assert p[1, b] == pytest.approx(e2[1] / sum(e2), rel=1e-6)
    assert p[1, a] == 0.0


def test_rae_xmc_k_lambda_and_threshold():
    r = _retrieval()
    vocab = LabelVocab()
    rows = r.label_matrix(vocab)
    p1 = rae_xmc_scores(r.sims, rows, k=1, tau=0.04, lam=1.0, n_labels=len(vocab))
    assert p1[0, vocab.index["a"]] == pytest.approx(1.0) and p1[0, vocab.index["c"]] == 0.0
    p2 = rae_xmc_scores(r.sims, rows, k=3, tau=0.04, lam=2.0, n_labels=len(vocab))
    p3 = rae_xmc_scores(r.sims, rows, k=3, tau=0.04, lam=1.0, n_labels=len(vocab))
    assert np.allclose(p2, 2 * p3)
    d = decide(r, vocab, ScoringParams(top_k=3, tau=0.04, threshold=0.5))
    assert np.array_equal(d.scores, p3)  # the scorer's base is RAE-XMC
    props = explain(r, d, vocab, k=3)
    assert [x.label for x in props[0].labels] == ["a", "b"]
    assert props[0].labels[0].neighbours == [("n1", pytest.approx(0.9)), ("n2", pytest.approx(0.8))]
    assert props[1].labels[0].label == "c"
    assert props[0].candidates == [] and props[0].labels[0].titles == [None, None]  # hits without payloads
    # the best labels at or below the threshold, best first, with their neighbours; never a label above it
    props = explain(r, d, vocab, k=3, candidates=5)
    assert [x.label for x in props[0].labels] == ["a", "b"] and [x.label for x in props[0].candidates] == ["c"]
    assert props[0].candidates[0].neighbours == [("n3", pytest.approx(0.5))]
    assert [x.label for x in props[1].candidates] == ["b"]  # a (score 0) is no candidate
    with pytest.raises(ValueError):
        rae_xmc_scores(r.sims, rows, k=3, tau=0.0)


@dataclass
class Stored:
    """A memory hit as the search hands it over (what :meth:`Retrieval.from_neighbours` reads)."""

    article_id: str
    similarity: float
    labels: tuple
    payload: dict


def test_neighbour_titles_come_from_the_payload():
    long = "Beseda " * 60
    r = Retrieval.from_neighbours([[Stored("n1", 0.9, ("a",), {"title": "Krka raste"}),
                                    Stored("n2", 0.8, ("a",), {"title": None, "text": "  Brez\nnaslova.  "}),
                                    Stored("n3", 0.7, ("a",), {"title": long})]], top_k=3)
    vocab = LabelVocab()
    d = decide(r, vocab, ScoringParams(top_k=3, tau=0.04, threshold=0.5))
    titles = explain(r, d, vocab, k=3)[0].labels[0].titles
    assert titles[:2] == ["Krka raste", "Brez naslova."]  # no headline: the start of the text
    assert len(titles[2]) <= TITLE_CHARS and titles[2].endswith(" Beseda…")  # cut at a word, never inside one
    assert display_title(None) is None and display_title({"title": " ", "text": ""}) is None


def test_a_retrieval_cuts_only_the_titles_an_explanation_shows(monkeypatch):
    # a search at archive size holds thousands of candidates a batch, of which an explanation shows a few: their
    # titles are cut when shown, not when retrieved (cutting every candidate's cost 20 ms a batch of 16 at 1M points)
    import newsmon.shared.scoring.retrieval as retrieval_module

    cuts = []
    real = retrieval_module.cut_at_word
    monkeypatch.setattr(retrieval_module, "cut_at_word", lambda text, limit: cuts.append(text) or real(text, limit))
    long = "Beseda " * 60
    rows = [[Stored(f"n{i}-{j}", 0.9 - j / 100, ("a",) if j < 2 else ("b",), {"title": f"{long}{i}-{j}"})
             for j in range(50)] for i in range(4)]
    r = Retrieval.from_neighbours(rows, top_k=50)
    assert not cuts and r.titles[0][3] == f"{long}0-3"  # held as stored
    vocab = LabelVocab()
    d = decide(r, vocab, ScoringParams(top_k=50, tau=0.04, threshold=0.01))
    shown = [t for e in explain(r, d, vocab, k=50) for x in e.labels for t in x.titles]
    assert shown and len(cuts) == len(shown) and all(len(t) <= TITLE_CHARS and t.endswith("…") for t in shown)


def test_one_nn_takes_nearest_labels():
    r = _retrieval()
    vocab = LabelVocab()
    s = one_nn_scores(r.sims, r.label_matrix(vocab), len(vocab))
    got = [{vocab.labels[j] for j in np.flatnonzero(row > 0)} for row in s]
    assert got == [{"a", "b"}, {"c"}]


def test_mlknn_matches_hand_computation():
    # 4 training articles, one label "x", k = 1, s = 1.
    # labels: t0 x, t1 x, t2 -, t3 -; nearest other neighbour: t0->t1 (x), t1->t2 (-), t2->t3 (-), t3->t0 (x)
    Y = LabelVocab(["x"]).encode([("x",), ("x",), (), ()])
    C = np.array([[1], [0], [0], [1]])
    m = MLKNN(k=1, s=1.0).fit(Y, C)
    assert m.prior1[0] == pytest.approx((1 + 2) / (2 + 4))
    # H1 articles (t0, t1): counts 1 and 0 -> c1 = [1, 1]; H0 (t2, t3): counts 0 and 1 -> c0 = [1, 1]
    assert m.like1[:, 0] == pytest.approx([(1 + 1) / (2 + 2), (1 + 1) / (2 + 2)])
    # query with one neighbour carrying x: posterior = P1*L1[1] / (P1*L1[1] + P0*L0[1]) = 0.5
    p = m.predict_proba(np.array([[1]]))
    assert p[0, 0] == pytest.approx(0.5)


def test_mlknn_asymmetric_case():
    # labels: t0 x, t1 x, t2 x, t3 -, t4 -; counts (k=2): t0 2, t1 2, t2 1, t3 0, t4 1
    Y = LabelVocab(["x"]).encode([("x",), ("x",), ("x",), (), ()])
    C = np.array([[2], [2], [1], [0], [1]])
    m = MLKNN(k=2, s=1.0).fit(Y, C)
    prior1 = (1 + 3) / (2 + 5)
    like1 = [(1 + 0) / (3 + 3), (1 + 1) / (3 + 3), (1 + 2) / (3 + 3)]
    like0 = [(1 + 1) / (3 + 2), (1 + 1) / (3 + 2), (1 + 0) / (3 + 2)]
    post = [prior1 * like1[j] / (prior1 * like1[j] + (1 - prior1) * like0[j]) for j in range(3)]
    got = m.predict_proba(np.array([[0], [1], [2]]))[:, 0]
    assert got == pytest.approx(post)


def test_neighbour_counts_counts_first_k():
    r = _retrieval()
    vocab = LabelVocab()
    rows = r.label_matrix(vocab)
    c = neighbour_counts(rows, 2, 3, 2, len(vocab))
    assert c[0, vocab.index["a"]] == 2 and c[0, vocab.index["c"]] == 0
    assert c[1, vocab.index["c"]] == 2 and c[1, vocab.index["b"]] == 1
