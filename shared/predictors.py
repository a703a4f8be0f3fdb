"""Label predictors over retrieved neighbours: simplified RAE-XMC, zero-shot 1-NN and ML-KNN.

All three work on a :class:`Retrieval` (the top-K neighbours of a batch of ``m`` articles, with their
similarities and label sets) and return a dense score matrix ``(m, L)`` over a :class:`LabelVocab`; a label
is proposed where its score passes the method's threshold. :func:`explain` turns scores into
:class:`Proposal` objects that carry, per proposed label, the neighbours that produced it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


class LabelVocab:
    """A growing mapping label <-> column index (labels are free strings; new labels appear every week)."""

    def __init__(self, labels: Iterable[str] = ()):
        self.labels: list[str] = []
        self.index: dict[str, int] = {}
        self.extend(labels)

    def extend(self, labels: Iterable[str]) -> None:
        """Add unseen labels at the end (existing columns keep their index)."""
        for lb in labels:
            if lb not in self.index:
                self.index[lb] = len(self.labels)
                self.labels.append(lb)

    def __len__(self) -> int:
        return len(self.labels)

    def encode(self, label_sets: Sequence[Iterable[str]], grow: bool = True) -> sp.csr_matrix:
        """Label sets -> ``(n, L)`` 0/1 CSR matrix (float32). Unknown labels are added when ``grow``,
        ignored otherwise."""
        rows, cols = [], []
        for i, labels in enumerate(label_sets):
            for lb in labels:
                if lb not in self.index:
                    if not grow:
                        continue
                    self.extend([lb])
                rows.append(i)
                cols.append(self.index[lb])
        data = np.ones(len(rows), dtype=np.float32)
        m = sp.csr_matrix((data, (rows, cols)), shape=(len(label_sets), len(self)), dtype=np.float32)
        m.sum_duplicates()
        m.data[:] = 1.0
        return m


@dataclass
class Retrieval:
    """The top-K neighbours of ``m`` query articles.

    Attributes:
        ids: ``(m, K)`` object array of neighbour article ids (``""`` where fewer than K were found).
        sims: ``(m, K)`` float32 cosine similarities, descending per row (``-inf`` where missing).
        labels: ``m`` lists of ``K`` label tuples (empty tuple where missing).
    """

    ids: np.ndarray
    sims: np.ndarray
    labels: list[list[tuple[str, ...]]]

    @classmethod
    def from_neighbours(cls, neighbours: Sequence[Sequence], top_k: int | None = None) -> "Retrieval":
        """Build from the memory's search result: ``m`` lists of objects with ``article_id``,
        ``similarity`` and ``labels`` (e.g. :class:`shared.memory.Neighbour`), each sorted by similarity."""
        k = top_k or max((len(n) for n in neighbours), default=0)
        m = len(neighbours)
        ids = np.full((m, k), "", dtype=object)
        sims = np.full((m, k), -np.inf, dtype=np.float32)
        labels: list[list[tuple[str, ...]]] = []
        for i, row in enumerate(neighbours):
            row = list(row)[:k]
            for j, nb in enumerate(row):
                ids[i, j] = nb.article_id
                sims[i, j] = nb.similarity
            labels.append([tuple(nb.labels) for nb in row] + [()] * (k - len(row)))
        return cls(ids, sims, labels)

    @property
    def k(self) -> int:
        return self.sims.shape[1]

    def label_matrix(self, vocab: LabelVocab) -> sp.csr_matrix:
        """``(m * K, L)`` CSR 0/1 label rows of the neighbours (row ``i * K + j`` = neighbour j of query i)."""
        flat = [labels for row in self.labels for labels in row]
        return vocab.encode(flat)

    def head(self, k: int) -> "Retrieval":
        """The first ``k`` neighbours of each query."""
        return Retrieval(self.ids[:, :k], self.sims[:, :k], [row[:k] for row in self.labels])


def _neighbour_weights(sims: np.ndarray, k: int, tau: float) -> np.ndarray:
    """Row-wise ``softmax(s / tau)`` over the first ``k`` similarities, ``(m, k)`` float64 (missing -> 0)."""
    s = sims[:, :k].astype(np.float64) / tau
    finite = np.isfinite(s)
    s = np.where(finite, s, -np.inf)
    mx = np.max(np.where(finite, s, -1e300), axis=1, keepdims=True)
    e = np.where(finite, np.exp(s - mx), 0.0)
    z = e.sum(axis=1, keepdims=True)
    return np.divide(e, z, out=np.zeros_like(e), where=z > 0)


def _aggregate(weights: np.ndarray, label_rows: sp.csr_matrix, K: int, n_labels: int) -> np.ndarray:
    """``sum_j weights[i, j] * Y[i*K + j]`` for every query i -> ``(m, L)`` float32 (one sparse product)."""
    m, k = weights.shape
    rows = np.repeat(np.arange(m), k)
    cols = (np.arange(m)[:, None] * K + np.arange(k)[None, :]).reshape(-1)
    W = sp.csr_matrix((weights.reshape(-1), (rows, cols)), shape=(m, label_rows.shape[0]))
    Y = label_rows
    if Y.shape[1] < n_labels:
        Y = sp.csr_matrix((Y.data, Y.indices, Y.indptr), shape=(Y.shape[0], n_labels))
    return np.asarray((W @ Y).todense(), dtype=np.float32)


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
    K = sims.shape[1]
    if k < 1 or tau <= 0:
        raise ValueError(f"need k >= 1 and tau > 0, got k={k}, tau={tau}")
    if label_rows.shape[0] != sims.shape[0] * K:
        raise ValueError(f"label_rows has {label_rows.shape[0]} rows, expected {sims.shape[0] * K}")
    k = min(k, K)
    w = _neighbour_weights(sims, k, tau) * lam
    return _aggregate(w, label_rows, K, n_labels or label_rows.shape[1])


def one_nn_scores(sims: np.ndarray, label_rows: sp.csr_matrix, n_labels: int | None = None) -> np.ndarray:
    """Zero-shot 1-NN: the nearest neighbour's labels, scored by its similarity ``(m, L)`` float32.

    A label is proposed when its score is > 0 (the neighbour's similarity; cosine of real text is > 0).
    """
    K = sims.shape[1]
    w = np.where(np.isfinite(sims[:, :1]), np.maximum(sims[:, :1], 1e-6), 0.0)
    return _aggregate(w, label_rows, K, n_labels or label_rows.shape[1])


def neighbour_counts(label_rows: sp.csr_matrix, m: int, K: int, k: int, n_labels: int) -> np.ndarray:
    """``C[i, l]`` = how many of query i's first ``k`` neighbours carry label l, ``(m, L)`` int32."""
    w = np.ones((m, min(k, K)))
    return np.rint(_aggregate(w, label_rows, K, n_labels)).astype(np.int32)


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

    def fit(self, Y_train: sp.csr_matrix, counts_train: np.ndarray) -> "MLKNN":
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


@dataclass
class LabelScore:
    """One proposed label with its score and the neighbours (article id, cosine similarity) behind it."""

    label: str
    score: float
    neighbours: list[tuple[str, float]]


@dataclass
class Proposal:
    """The labels proposed for one article, best first."""

    labels: list[LabelScore]

    @property
    def label_set(self) -> set[str]:
        return {x.label for x in self.labels}


def explain(retrieval: Retrieval, scores: np.ndarray, vocab: LabelVocab, threshold: float,
            k: int | None = None, max_neighbours: int = 5) -> list[Proposal]:
    """Turn ``(m, L)`` scores into :class:`Proposal` objects: labels with ``score > threshold``, each with
    up to ``max_neighbours`` of the first ``k`` neighbours that carry it (most similar first)."""
    k = k or retrieval.k
    out = []
    for i in range(scores.shape[0]):
        cols = np.flatnonzero(scores[i] > threshold)
        cols = cols[np.argsort(-scores[i, cols], kind="stable")]
        items = []
        for c in cols:
            lb = vocab.labels[c]
            support = [(str(retrieval.ids[i, j]), float(retrieval.sims[i, j])) for j in range(min(k, retrieval.k))
                       if lb in retrieval.labels[i][j]][:max_neighbours]
            items.append(LabelScore(lb, float(scores[i, c]), support))
        out.append(Proposal(items))
    return out
