"""ML-KNN (Zhang & Zhou 2007, "ML-KNN: A lazy learning approach to multi-label learning") over the
retrieved neighbours."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet, register
from newsmon.shared.scoring.retrieval import LabelVocab, aggregate


def neighbour_counts(label_rows: sp.csr_matrix, m: int, K: int, k: int, n_labels: int) -> np.ndarray:
    """``C[i, l]`` = how many of query i's first ``k`` neighbours carry label l, ``(m, L)`` int32."""
    w = np.ones((m, min(k, K)))
    return np.rint(aggregate(w, label_rows, K, n_labels)).astype(np.int32)


@dataclass
class MLKNN:
    """ML-KNN (Zhang & Zhou 2007, "ML-KNN: A lazy learning approach to multi-label learning").

    For each label l: prior ``P(H1_l) = (s + n_l) / (2 s + n)`` and likelihoods
    ``P(E_j | H1_l) = (s + c1[j]) / (s (k + 1) + sum c1)`` (and likewise ``c0`` for ``H0``), where ``c1[j]``
    counts training articles carrying l that have exactly j of their k nearest neighbours (themselves
    excluded) carrying l. The posterior ``P(H1_l | E_C)`` is the score; a label is proposed when it is > 0.5.

    Attributes after :meth:`fit`: ``prior1`` ``(L,)``, ``like1`` / ``like0`` ``(k + 1, L)`` float64.
    """

    k: int = 10
    s: float = 1.0
    prior1: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    like1: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    like0: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]

    def fit(self, Y_train: sp.csr_matrix, counts_train: np.ndarray) -> MLKNN:
        """Estimate priors and likelihoods.

        Args:
            Y_train: ``(n, L)`` 0/1 labels of the training (memory) articles.
            counts_train: ``(n, L)`` ints, :func:`neighbour_counts` of each training article over its k
                nearest *other* training articles (leave-one-out).
        """
        Y = np.asarray(Y_train.todense() if sp.issparse(Y_train) else Y_train) > 0
        n, L = Y.shape
        k, s = self.k, self.s
        self.prior1 = (s + Y.sum(axis=0)) / (2 * s + n)
        C = np.clip(counts_train, 0, k)
        c1 = np.zeros((k + 1, L))
        c0 = np.zeros((k + 1, L))
        for j in range(k + 1):
            hit = C == j
            c1[j] = (hit & Y).sum(axis=0)
            c0[j] = (hit & ~Y).sum(axis=0)
        self.like1 = (s + c1) / (s * (k + 1) + c1.sum(axis=0, keepdims=True))
        self.like0 = (s + c0) / (s * (k + 1) + c0.sum(axis=0, keepdims=True))
        return self

    def predict_proba(self, counts: np.ndarray) -> np.ndarray:
        """Posterior ``P(H1_l | E_C)`` for ``(m, L)`` neighbour counts -> ``(m, L)`` float32.

        Labels beyond the fitted L (never seen in training) score 0.
        """
        if self.prior1 is None:
            raise RuntimeError("MLKNN.fit() first")
        L = self.prior1.shape[0]
        C = np.clip(counts[:, :L], 0, self.k)
        cols = np.arange(L)[None, :]
        a = self.prior1[None, :] * self.like1[C, cols]
        b = (1 - self.prior1)[None, :] * self.like0[C, cols]
        p = np.zeros(counts.shape, dtype=np.float32)
        p[:, :L] = a / (a + b)
        return p


@register
class MlKnnPredictor(Predictor):
    """ML-KNN over retrieved neighbours (:class:`MLKNN`): posterior ``P(H1_l | E_C)``, proposed where > 0.5.

    Fitting reads each training article's leave-one-out neighbours (``TrainingSet.retrieval``).

    Args:
        k: neighbours counted; s: Laplace smoothing.
    """

    name = "mlknn"
    display_name = "ML-KNN"
    needs_retrieval = True
    needs_training_retrieval = True

    def __init__(self, k: int = 10, s: float = 1.0) -> None:
        self.model = MLKNN(k=k, s=s)
        self.vocab = LabelVocab()

    def fit(self, train: TrainingSet) -> MlKnnPredictor:
        """Priors and likelihoods from the training articles' labels and leave-one-out neighbour counts.

        Raises:
            ValueError: ``train.retrieval`` is missing.
        """
        if train.retrieval is None:
            raise ValueError("ML-KNN needs the training articles' leave-one-out neighbours (TrainingSet.retrieval)")
        self.vocab = train.vocab
        k, n = self.model.k, train.labels.shape[0]
        r = train.retrieval
        counts = neighbour_counts(r.label_matrix(self.vocab), n, r.k, k, len(self.vocab))
        self.model.fit(train.labels, counts)
        return self

    def scores(self, queries: QueryBatch) -> np.ndarray:
        r = queries.retrieval
        counts = neighbour_counts(r.label_matrix(self.vocab), len(queries), r.k, self.model.k, len(self.vocab))
        return self.model.predict_proba(counts)

    def decide(self, scores: np.ndarray) -> np.ndarray:
        return scores > 0.5

    @property
    def params(self) -> dict[str, Any]:
        return {"k": self.model.k, "s": self.model.s}

    def neighbours_needed(self) -> int:
        return self.model.k
