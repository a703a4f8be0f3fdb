"""Zero-shot 1-NN: the nearest labelled neighbour's labels, scored by its cosine similarity."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet, register
from newsmon.shared.scoring.retrieval import LabelVocab, aggregate


def one_nn_scores(sims: np.ndarray, label_rows: sp.csr_matrix, n_labels: int | None = None) -> np.ndarray:
    """Zero-shot 1-NN: the nearest neighbour's labels, scored by its similarity ``(m, L)`` float32.

    A label is proposed when its score is > 0 (the neighbour's similarity; cosine of real text is > 0).
    """
    K = sims.shape[1]
    w = np.where(np.isfinite(sims[:, :1]), np.maximum(sims[:, :1], 1e-6), 0.0)
    return aggregate(w, label_rows, K, n_labels or label_rows.shape[1])


@register
class OneNnPredictor(Predictor):
    """Zero-shot 1-NN over retrieved neighbours: :func:`one_nn_scores`, proposed where the score is > 0."""

    name = "zshot"
    display_name = "zero-shot 1-NN"
    needs_retrieval = True

    def __init__(self) -> None:
        self.vocab = LabelVocab()

    def fit(self, train: TrainingSet) -> OneNnPredictor:
        """Keep the vocabulary (no training)."""
        self.vocab = train.vocab
        return self

    def scores(self, queries: QueryBatch) -> np.ndarray:
        r = queries.retrieval
        return one_nn_scores(r.sims, r.label_matrix(self.vocab), len(self.vocab))

    def decide(self, scores: np.ndarray) -> np.ndarray:
        return scores > 0

    def neighbours_needed(self) -> int:
        return 1
