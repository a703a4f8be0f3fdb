"""Simplified RAE-XMC, the base of every newsmon score: ``p = softmax(s / tau) . Y`` over the top-k retrieved
neighbours (RAE-XMC eq. 8; Chien et al., "Retrieval-augmented extreme multi-label classification"). The score
components (:mod:`newsmon.shared.scoring.components`) are mixed into it; the research baseline ``rae`` of
``eval`` (:mod:`newsmon.shared.predictors.rae`) calls the same functions.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from newsmon.shared.scoring.retrieval import aggregate, aggregate_sparse


def neighbour_weights(sims: np.ndarray, k: int, tau: float) -> np.ndarray:
    """Row-wise ``softmax(s / tau)`` over the first ``k`` similarities, ``(m, k)`` float64 (missing -> 0)."""
    s = sims[:, :k].astype(np.float64) / tau
    finite = np.isfinite(s)
    s = np.where(finite, s, -np.inf)
    mx = np.max(np.where(finite, s, -1e300), axis=1, keepdims=True)
    e = np.where(finite, np.exp(s - mx), 0.0)
    z = e.sum(axis=1, keepdims=True)
    return np.divide(e, z, out=np.zeros_like(e), where=z > 0)


def rae_xmc_scores(sims: np.ndarray, label_rows: sp.csr_matrix, k: int = 50, tau: float = 0.04,
                   lam: float = 1.0, n_labels: int | None = None) -> np.ndarray:
    """Simplified RAE-XMC label scores: ``p = softmax(s / tau) . (lambda * Y)`` (RAE-XMC eq. 8).

    Args:
        sims: ``(m, K)`` similarities of each query's top-K neighbours, descending (``-inf`` = missing).
        label_rows: ``(m * K, L)`` 0/1 label rows of those neighbours (:meth:`Retrieval.label_matrix`).
        k: neighbours used (``k <= K``); tau: softmax temperature; lam: lambda, the weight of Y.
        n_labels: number of columns of the output (default ``L``).

    Returns:
        ``(m, L)`` float32 scores; with ``lam = 1`` each is in [0, 1] (the softmax weight of the neighbours
        carrying the label). A query without neighbours scores 0 everywhere.

    Raises:
        ValueError: ``k < 1``, ``tau <= 0`` or shapes that do not fit.
    """
    w = _checked_weights(sims, label_rows, k, tau, lam)
    return aggregate(w, label_rows, sims.shape[1], n_labels or label_rows.shape[1])


def rae_xmc_scores_sparse(sims: np.ndarray, label_rows: sp.csr_matrix, k: int = 50, tau: float = 0.04,
                          lam: float = 1.0, n_labels: int | None = None) -> sp.csr_matrix:
    """:func:`rae_xmc_scores` as an ``(m, n_labels)`` float32 CSR matrix (the scores a query's first ``k``
    neighbours give; ``.toarray()`` is :func:`rae_xmc_scores`, bit for bit), for the calibration's grid, whose
    threshold sweep reads the stored scores only.

    Raises:
        ValueError: as :func:`rae_xmc_scores`."""
    w = _checked_weights(sims, label_rows, k, tau, lam)
    return aggregate_sparse(w, label_rows, sims.shape[1], n_labels or label_rows.shape[1])


def _checked_weights(sims: np.ndarray, label_rows: sp.csr_matrix, k: int, tau: float, lam: float) -> np.ndarray:
    """``(m, K)`` neighbour weights ``lambda * softmax(s / tau)`` over each query's first ``min(k, K)`` neighbours,
    after checking the arguments (the errors of :func:`rae_xmc_scores`)."""
    K = sims.shape[1]
    if k < 1 or tau <= 0:
        raise ValueError(f"need k >= 1 and tau > 0, got k={k}, tau={tau}")
    if label_rows.shape[0] != sims.shape[0] * K:
        raise ValueError(f"label_rows has {label_rows.shape[0]} rows, expected {sims.shape[0] * K}")
    return neighbour_weights(sims, min(k, K), tau) * lam
