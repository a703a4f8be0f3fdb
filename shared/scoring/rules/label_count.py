"""The label-count rule: each article gets its n best labels whose score reaches ``minimum``, n the
softmax-weighted mean label count of its k neighbours, rounded; it replaces the thresholds' decision (the RCut
strategy with a rank predicted per article: Yang, "A study of thresholding strategies for text categorization",
SIGIR 2001, section 2.1)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.rae_xmc import neighbour_weights
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule


def mean_label_count(retrieval: Retrieval, k: int, tau: float, label_rows: sp.csr_matrix | None = None
                     ) -> np.ndarray:
    """``(m,)`` float64: ``sum_j w_j |Y_j| / sum_j w_j`` over each query's first ``k`` neighbours, with the softmax
    weights ``w = softmax(s / tau)`` (RAE-XMC eq. 8's) and ``|Y_j|`` the neighbour's number of labels, read from
    ``label_rows`` (``(m * K, L)``, :meth:`Retrieval.label_matrix`; built here when None); 0 without neighbours."""
    w = neighbour_weights(retrieval.sims, min(k, retrieval.k), tau)
    rows = retrieval.label_matrix(LabelVocab()) if label_rows is None else label_rows
    sizes = np.diff(rows.indptr).reshape(len(w), retrieval.k)[:, :w.shape[1]]
    return (w * sizes).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-12)


def predicted_label_count(retrieval: Retrieval, k: int, tau: float, label_rows: sp.csr_matrix | None = None
                          ) -> np.ndarray:
    """``(m,)`` int: each query's predicted label count, :func:`mean_label_count` rounded, halves up."""
    return np.floor(mean_label_count(retrieval, k, tau, label_rows) + 0.5).astype(int)


def best_labels(scores: np.ndarray, n: np.ndarray, minimum: float) -> np.ndarray:
    """``(m, L)`` bool: each row's ``n[i]`` highest ``scores`` ``(m, L)`` that reach ``minimum`` (ties: the lower
    column first)."""
    rank = np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1, kind="stable")
    return (rank < n[:, None]) & (scores >= minimum)


class LabelCountOptions(Options):
    minimum: float = Field(0.25, ge=0, le=1, allow_inf_nan=False, description="The lowest score a label among "
                           "the article's n best may have.")


@register_rule
class LabelCount(DecisionRule):
    """The n best labels (see the module docstring); the labels' thresholds become ``minimum``."""

    name = "label_count"
    Options = LabelCountOptions
    ORDER = 10
    CALIBRATE_AT = 30
    REPLACES_THRESHOLDS = True
    GRID = tuple({"minimum": c} for c in (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5))

    def apply(self, state: DecisionState, options: LabelCountOptions) -> None:
        p = state.params
        n = predicted_label_count(state.retrieval, p.top_k, p.tau, state.retrieval.label_matrix(state.vocab))
        state.thresholds = np.full(len(state.vocab), options.minimum, dtype=np.float64)
        state.replace_rows(np.arange(state.scores.shape[0]), best_labels(state.scores, n, options.minimum), self.name)
