"""The head model (a logistic regression over words and punctuation per frequent label, mixed into the newsmon
scores): what it learns that words alone miss, its mixing computed by hand, its out-of-fold scores, the label
registry, and the calibration keeping it only where it lifts."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from test_calibration import Params, _r, newsmon_decide

from newsmon.shared.scoring import LabelVocab, MemoryArticles, Queries
from newsmon.shared.scoring.calibration import CalibrationSet, calibrate
from newsmon.shared.scoring.components.head_model import (HeadModel, HeadModelComponent, HeadModelOptions,
                                                          HeadScores, mix_head, out_of_fold)

WORDS = ("vlada banka delnice stavka cena podjetje sindikat plača borza nafta evro odstotek uprava družba "
         "delavci sodišče stečaj minister poslanci trg").split()


def house_style_corpus(n: int, seed: int) -> tuple[list[str], list[tuple[str, ...]]]:
    """``n`` articles over the same words and the same place name; the ``agency`` ones (every other article)
    carry a dateline ("Ljubljana - "), the others name the place without the dash: only punctuation tells them
    apart (as an agency's or an outlet's house style does)."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(n):
        body = " ".join(rng.choice(WORDS, size=40))
        agency = i % 2 == 0
        texts.append(f"Naslov {rng.choice(WORDS)}\nLjubljana {'- ' if agency else ''}{body}")
        labels.append(("agency", "economy") if agency else ("economy", "local"))
    return texts, labels


def test_the_head_model_learns_a_house_style_that_words_alone_miss():
    texts, labels = house_style_corpus(240, seed=1)
    held, held_labels = house_style_corpus(80, seed=2)
    truth = np.array(["agency" in lb for lb in held_labels])
    model = HeadModel(c=10.0).fit(texts, labels)
    assert model.labels == ["agency", "local"]  # "economy" is on every article: nothing to learn
    got = model.scores(held)
    agency = got.probs[:, got.labels.index("agency")]
    assert got.probs.shape == (80, 2) and got.probs.dtype == np.float32
    assert ((agency > 0.5) == truth).mean() >= 0.95
    words = TfidfVectorizer(sublinear_tf=True).fit(texts)  # the word tokens of the TF-IDF baselines
    clf = LogisticRegression(C=10.0).fit(words.transform(texts), ["agency" in lb for lb in labels])
    assert (clf.predict(words.transform(held)) == truth).mean() < 0.75  # words alone: near chance
    assert HeadModel(c=10.0, min_articles=200).fit(texts, labels).labels == []  # 120 articles each: too few
    assert HeadModel().scores(["x"]).probs.shape == (1, 0)  # unfitted: no head labels
    assert model.scores([]).probs.shape == (0, 2) and model.scores([""]).probs.shape == (1, 2)  # nothing, no words
    with pytest.raises(ValueError, match="C must be > 0"):
        HeadModel(c=0.0)


def test_mix_head_weights_the_head_probability_by_beta_by_hand():
    vocab = LabelVocab(["a", "b"])
    scores = np.array([[0.6, 0.2]], dtype=np.float32)
    head = HeadScores(["b", "c"], np.array([[0.9, 0.5]], dtype=np.float32))
    mixed = mix_head(scores, vocab, head, 0.5)
    assert vocab.labels == ["a", "b", "c"]  # a head label no neighbour carries joins the vocabulary
    assert mixed[0].tolist() == pytest.approx([0.6, 0.55, 0.25])  # a untouched; b (0.2 + 0.9) / 2; c (0 + 0.5) / 2
    assert mix_head(scores, LabelVocab(["a", "b"]), head, 0.0) is scores  # beta 0: off
    assert mix_head(scores, LabelVocab(["a", "b"]), None, 0.5) is scores


def test_the_decision_reads_the_mixed_scores():
    r = _r([[(0.9, ("a",)), (0.9, ("b",))]])  # neighbours: a 0.5, b 0.5
    head = HeadScores(["b"], np.array([[0.1]], dtype=np.float32))
    on = Params(top_k=2, tau=1.0, threshold=0.4, head_weight=0.5)
    vocab = LabelVocab()
    scores, chosen = newsmon_decide(r, vocab, on, head=head)
    assert scores[0, vocab.index["b"]] == pytest.approx(0.3)  # (1 - 0.5) * 0.5 + 0.5 * 0.1
    assert [vocab.labels[j] for j in np.flatnonzero(chosen[0])] == ["a"]
    off = newsmon_decide(r, LabelVocab(), Params(top_k=2, tau=1.0, threshold=0.4), head=head)[1]
    assert off[0].tolist() == [True, True]  # no head model among the components: the neighbours alone


def test_out_of_fold_scores_come_from_models_fitted_without_the_article():
    texts, labels = house_style_corpus(250, seed=3)
    oof = out_of_fold(texts, labels, c=10.0, folds=5)
    assert oof.labels == ["agency", "local"] and oof.probs.shape == (250, 2)
    rest = [i for i in range(250) if i % 5 != 0]
    fold0 = HeadModel(10.0, min_articles=80).fit([texts[i] for i in rest], [labels[i] for i in rest])
    held = fold0.scores([texts[i] for i in range(0, 250, 5)])
    assert np.allclose(oof.probs[::5], held.probs, atol=1e-6)
    full = HeadModel(10.0).fit(texts, labels).scores(texts[:5]).probs
    assert not np.allclose(oof.probs[:5], full)  # not the model that saw them
    memory, opts = MemoryArticles(None, texts[:200], labels[:200]), HeadModelOptions(c=10.0, weight=0.5)
    cal = CalibrationSet(_r([[(0.9, ("x",))]] * 250), list(labels), memory=memory, held_out=200,
                         validation=Queries(texts[200:]))
    both = cal.evidence(HeadModelComponent(), opts)
    assert both.probs.shape == (250, 2) and cal.evidence(HeadModelComponent(), opts) is both  # each C once
    assert cal.evidence(HeadModelComponent(), HeadModelOptions(c=10.0, weight=1.0)) is both  # beta: the same model
    alone = CalibrationSet(_r([[(0.9, ("x",))]] * 50), list(labels[200:]), memory=memory,
                           validation=Queries(texts[200:])).evidence(HeadModelComponent(), opts)
    assert np.allclose(alone.probs, both.probs[200:])  # validation alone: the model fitted on the whole memory


def test_head_scores_follow_the_label_registry():
    s = HeadScores(["a", "b", "c"], np.array([[0.2, 0.7, 0.4]], dtype=np.float32))
    renamed = s.relabel(lambda t: tuple({"a": "z", "c": "b"}.get(x, x) for x in t if x != "retired"))
    assert renamed.labels == ["b", "z"] and renamed.probs[0].tolist() == pytest.approx([0.7, 0.2])  # c merged: max
    gone = s.relabel(lambda t: tuple(x for x in t if x != "b"))
    assert gone.labels == ["a", "c"]
    both = HeadScores.concat([HeadScores(["a"], np.array([[0.5]], np.float32)),
                              HeadScores(["b"], np.array([[0.25]], np.float32))])
    assert both.labels == ["a", "b"] and both.probs.tolist() == [[0.5, 0.0], [0.0, 0.25]]


def test_calibration_keeps_the_head_model_only_where_it_lifts():
    rows = [[(0.9, ("x",)), (0.9, ("y",))]] * 40  # the neighbours cannot tell x from y
    gold = [("x",), ("y",)] * 20
    good = HeadScores(["x", "y"], np.array([[0.9, 0.1], [0.1, 0.9]] * 20, dtype=np.float32))
    cal = calibrate(CalibrationSet(_r(rows), gold, given={"head_model": lambda o: good}), rules=(), replay=False)
    step = next(s for s in cal.steps if s["step"] == "+ head_model")
    assert step["kept"] and step["lift_interval"][0] > 0
    assert cal.params.component("head_model").weight > 0 and cal.figures["subset_accuracy"] == 1.0
    noise = HeadScores(["x", "y"], np.full((40, 2), 0.5, dtype=np.float32))
    cal = calibrate(CalibrationSet(_r(rows), gold, given={"head_model": lambda o: noise}), rules=(), replay=False)
    assert not next(s for s in cal.steps if s["step"] == "+ head_model")["kept"] and cal.params.components == []


def test_term_rows_of_no_texts_are_empty_for_words_and_for_punctuation():
    """The one sublinear-TF hashing path (:func:`newsmon.shared.terms.term_rows`) serves the lexical vectors and
    the head model; no texts give ``(0, 2^20)`` rows for both (the hashing vectorizer alone raises
    StopIteration), and the head model's tokens add the punctuation marks the words drop."""
    from newsmon.shared.scoring.components.head_model import style_rows
    from newsmon.shared.terms import N_FEATURES, sparse_terms, term_rows

    assert term_rows([]).shape == style_rows([]).shape == (0, N_FEATURES) and sparse_terms([]) == []
    assert term_rows(["Ljubljana - banka"]).nnz == 2 and style_rows(["Ljubljana - banka"]).nnz == 3
