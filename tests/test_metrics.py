"""Metrics against scikit-learn and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, ndcg_score, precision_score, recall_score

from newsmon.shared.metrics import (
    classification_metrics,
    evaluate,
    f1_by_frequency,
    label_groups,
    precision_at_k,
    recall_at_k,
)


@pytest.fixture
def random_case():
    rng = np.random.default_rng(7)
    Y = rng.random((60, 12)) < 0.2
    Z = Y ^ (rng.random((60, 12)) < 0.1)
    Y[:, 11] = False
    Z[:, 11] = False  # a label that occurs nowhere: left out of the macro average
    return Y, Z


def test_micro_macro_and_subset_accuracy_match_sklearn(random_case):
    Y, Z = random_case
    m = classification_metrics(Y, Z)
    assert m["uF1"] == pytest.approx(f1_score(Y, Z, average="micro"))
    assert m["uP"] == pytest.approx(precision_score(Y, Z, average="micro"))
    assert m["uR"] == pytest.approx(recall_score(Y, Z, average="micro"))
    used = list(range(11))
    assert m["F1"] == pytest.approx(f1_score(Y, Z, average="macro", labels=used, zero_division=0))
    assert m["P"] == pytest.approx(precision_score(Y, Z, average="macro", labels=used, zero_division=0))
    assert m["R"] == pytest.approx(recall_score(Y, Z, average="macro", labels=used, zero_division=0))
    assert m["Acc"] == pytest.approx(accuracy_score(Y, Z))
    assert m["n_labels"] == 11


def test_groups_restrict_columns_and_articles():
    counts = np.array([600, 3, 50, 0])
    g = label_groups(counts)
    assert list(g["frequent"]) == [0] and list(g["rare"]) == [1, 3]
    Y = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]])
    Z = np.array([[1, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]])
    rare = classification_metrics(Y, Z, g["rare"])
    # rare columns 1 and 3; articles with a gold rare label: 0 (correct: {1}) and 2 (missed {3})
    assert rare["n_articles"] == 2 and rare["Acc"] == pytest.approx(0.5)
    assert rare["uP"] == pytest.approx(1.0) and rare["uR"] == pytest.approx(0.5)


def test_precision_at_k_and_ndcg():
    Y = np.array([[1, 0, 1, 0], [0, 1, 0, 0]])
    S = np.array([[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.9, 0.3]])
    assert precision_at_k(Y, S, 1) == pytest.approx((1 + 0) / 2)
    assert precision_at_k(Y, S, 3) == pytest.approx((2 / 3 + 1 / 3) / 2)
    rep = evaluate(Y, S > 0.5, S, np.array([600, 5, 5, 5]))
    assert rep["ranking"]["nDCG@5"] == pytest.approx(ndcg_score(Y, S, k=5))
    assert rep["all"]["Acc"] == 0.0


def test_recall_at_k_counts_the_gold_labels_among_the_candidates_shown():
    Y = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])  # the third article has no gold label: left out
    S = np.array([[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.9, 0.3], [0.5, 0.5, 0.5, 0.5]])
    assert recall_at_k(Y, S, 1) == pytest.approx((1 / 2 + 0) / 2)
    assert recall_at_k(Y, S, 2) == pytest.approx((1 / 2 + 0) / 2)
    assert recall_at_k(Y, S, 3) == pytest.approx((2 / 2 + 1) / 2)
    assert np.isnan(recall_at_k(np.zeros((2, 3)), np.ones((2, 3)), 2))
    assert evaluate(Y, S > 0.5, S, np.array([600, 5, 5, 5]))["ranking"]["R@10"] == pytest.approx(1.0)


def test_f1_by_frequency_buckets(random_case):
    Y, Z = random_case
    counts = np.array([0, 1, 2, 5, 8, 20, 60, 200, 500, 3, 4, 0])
    rows = f1_by_frequency(Y, Z, counts)
    assert [r["bucket"] for r in rows] == ["0-1", "2-5", "6-10", "11-50", "51-100", "101-499", "≥500"]
    cols = [0, 1]  # the "0-1" bucket; column 11 occurs nowhere
    assert rows[0]["F1"] == pytest.approx(f1_score(Y, Z, average="macro", labels=cols, zero_division=0))
    assert rows[-1]["n_labels"] == 1  # exactly 500 occurrences is frequent


def test_single_label_group_is_not_scored_as_binary():
    # one label column: gold 3 positives, predicted 2 of them plus 2 false positives
    Y = np.array([[1], [1], [1], [0], [0], [0]])
    Z = np.array([[1], [1], [0], [1], [1], [0]])
    m = classification_metrics(Y, Z, np.array([0]))
    assert m["uP"] == pytest.approx(2 / 4) and m["uR"] == pytest.approx(2 / 3)
    assert m["uF1"] == pytest.approx(2 * 2 / (2 * 2 + 2 + 1))
    assert m["F1"] == pytest.approx(m["uF1"]) and m["P"] == pytest.approx(0.5)
    # group accuracy over the articles with a gold label in the group: 2 of 3 exact
    assert m["Acc"] == pytest.approx(2 / 3)
