"""Simplified RAE-XMC, the base of every newsmon score: ``p = softmax(s / tau) . Y`` over the top-k retrieved
neighbours (RAE-XMC eq. 8; Chien et al., "Retrieval-augmented extreme multi-label classification"). The score
components (:mod:`newsmon.shared.scoring.components`) are mixed into it; the research baseline ``rae`` of
``eval`` (:mod:`newsmon.shared.predictors.rae`) calls the same functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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


def rae_xmc_scores_over_taus(sims: np.ndarray, label_rows: sp.csr_matrix, k: int, taus: Sequence[float],
                             n_labels: int | None = None) -> Iterator[sp.csr_matrix]:
    """:func:`rae_xmc_scores_sparse` (``lam`` 1) for each of ``taus`` in turn, the same CSR matrices bit for bit
    (entries, their order in a row, values), for the calibration's grid: which labels a query's first ``k``
    neighbours carry does not depend on tau, so the product's structure is found once and each tau costs one
    weighted count of the neighbours' labels.

    How it matches scipy's product ``W @ Y`` (``sparsetools`` ``csr_matmat``): per query, each label's sum is
    accumulated over the neighbours in their order (here ``np.bincount`` over the (query, neighbour, label)
    triplets in that order: the same additions from 0.0), a row's entries come in the reverse order of their first
    appearance, and the entries whose sum is 0 (every carrier's weight underflowed) are left out.
    Cost per tau: ``O(m k l)`` for ``l`` labels per neighbour, plus one ``O(m k l log(m k l))`` sort per call.

    Raises:
        ValueError: as :func:`rae_xmc_scores`."""
    L = max(n_labels or 0, label_rows.shape[1])  # as aggregate_sparse widens, never cuts
    K = sims.shape[1]
    taus = list(taus)
    if not taus:
        return
    _checked_weights(sims, label_rows, k, taus[0], 1.0)
    kk = min(k, K)
    m = sims.shape[0]
    slot = (np.arange(m)[:, None] * K + np.arange(kk)[None, :]).reshape(-1)  # label rows of the first k
    lens = (label_rows.indptr[slot + 1] - label_rows.indptr[slot]).astype(np.int64)
    starts = np.repeat(label_rows.indptr[slot].astype(np.int64) - np.cumsum(lens) + lens, lens)
    labels = label_rows.indices[starts + np.arange(int(lens.sum()), dtype=np.int64)].astype(np.int64)
    weight_at = np.repeat(np.arange(m * kk, dtype=np.int64), lens)  # each triplet's neighbour, as w.ravel() reads
    row = weight_at // kk
    keys, first, entry = np.unique(row * L + labels, return_index=True, return_inverse=True)
    ordered = np.lexsort((-first, keys // L))  # per query, the reverse order of first appearance
    position = np.empty(len(keys), dtype=np.int64)
    position[ordered] = np.arange(len(keys))
    at = position[entry.reshape(-1)]
    rows_sorted, cols_sorted = (keys // L)[ordered], (keys % L)[ordered]
    for tau in taus:
        w = _checked_weights(sims, label_rows, k, tau, 1.0)
        data = np.bincount(at, weights=w.reshape(-1)[weight_at], minlength=len(keys))
        kept = data != 0
        indptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows_sorted[kept], minlength=m), out=indptr[1:])
        yield sp.csr_matrix((data[kept].astype(np.float32), cols_sorted[kept], indptr), shape=(m, L))
