"""A partitioned label tree, Parabel (Prabhu et al., "Parabel: Partitioned label trees for extreme classification
with application to dynamic search advertising", WWW 2018), deterministic: the same articles and labels give the
same tree, byte for byte, whatever the thread count and the run.

The method is Omikuji's (the Rust implementation behind Annif's ``omikuji`` backend), with its defaults: each
label is the l2-normalised sum of its articles' unit feature rows; the labels are split by balanced spherical 2-means
(a cluster of at least :data:`BRANCH_LABELS` labels is split again, to depth :data:`MAX_DEPTH`); every node has one
linear classifier per child (an article goes down to a child when it carries one of the child's labels) and every
leaf one per label, each trained on the articles that reach the node: L2-regularised squared hinge loss, the dual
coordinate descent of liblinear (Hsieh et al., ICML 2008; scikit-learn's ``LinearSVC``, C = 1, eps = 0.1, 20
iterations, a bias feature), weights of magnitude <= 0.1 dropped. A label's score is ``exp`` of the sum of
``-max(0, 1 - w.x)^2`` along its path, found by a beam search of width :data:`BEAM`, averaged over :data:`TREES`
trees. Omikuji draws its 2-means start and its solver's order from an unseeded generator, so two trainings differ;
here the start is drawn from ``numpy.random.default_rng(tree)`` and the solver's order from a fixed seed, and every
sort that can meet a tie is stable (ties by position: labels in sorted order, articles in the order given).

Cost (``n`` articles, ``L`` labels, ``t`` stored terms per article): training is about ``TREES * log2(L / 100)``
passes of liblinear over the articles (each article reaches the nodes of its labels) plus one classifier per label
over its leaf's articles; prediction computes every classifier's value in one sparse product (the weights are
sparse) and the beam search reads ``BEAM`` nodes per level from it. The model is a sparse
matrix of the kept weights (``(V + 1, outputs)``) and a few integer arrays per tree: independent of ``n``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

#: A label cluster of at least this many labels is split again (Omikuji's ``min_branch_size``).
BRANCH_LABELS = 100
MAX_DEPTH = 20
#: Trees averaged (Omikuji averages 3; one tree scored within 0.3 micro-F1 of three on both corpora at a third of
#: the cost: docs' measurements), beam width of the search (Annif's default).
TREES = 1
BEAM = 10
#: Articles whose classifier values are computed at once (:meth:`Forest._outputs`): 256 x the outputs in float32
#: (about 13 MB at 12,000 labels).
PREDICT_CHUNK = 256
#: The linear classifiers: C, stopping tolerance, iterations, and the magnitude at or below which a weight is dropped.
C, EPS, MAX_ITER, WEIGHT_THRESHOLD = 1.0, 0.1, 20, 0.1
#: 2-means stops when the mean similarity of the labels to their centroid rises by less than this.
CLUSTER_EPS = 1e-4


@dataclass
class Forest:
    """Trained trees over ``n_labels`` labels and ``n_features`` features, flat (nodes numbered in depth-first
    order, all trees together).

    Attributes:
        weights: ``(n_features + 1, outputs)`` float32 CSC, the kept weights (the last row: the bias); node ``j``'s
            classifiers are the columns ``out_ptr[j]:out_ptr[j + 1]``, one per child of a branch, one per label of
            a leaf.
        children: the child nodes of branch ``j`` at ``children[child_ptr[j]:child_ptr[j + 1]]`` (none for a leaf);
        labels: the labels of leaf ``j`` at ``labels[label_ptr[j]:label_ptr[j + 1]]`` (none for a branch);
        roots: each tree's root node.
    """

    weights: sp.csc_matrix
    out_ptr: np.ndarray
    child_ptr: np.ndarray
    children: np.ndarray
    label_ptr: np.ndarray
    labels: np.ndarray
    roots: np.ndarray
    n_labels: int
    n_features: int
    #: :attr:`weights` as CSR, made on first use by :meth:`_outputs` (not part of the model's arrays).
    _csr: sp.csr_matrix | None = field(default=None, init=False, repr=False, compare=False)

    def arrays(self) -> dict[str, np.ndarray]:
        """The forest as named arrays (what :meth:`from_arrays` reads back)."""
        w = self.weights
        return {"w_data": w.data, "w_indices": w.indices, "w_indptr": w.indptr, "out_ptr": self.out_ptr,
                "child_ptr": self.child_ptr, "children": self.children, "label_ptr": self.label_ptr,
                "labels": self.labels, "roots": self.roots, "shape": np.array([self.n_labels, self.n_features])}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> Forest:
        """The forest of :meth:`arrays`."""
        n_labels, n_features = (int(x) for x in a["shape"])
        w = sp.csc_matrix((a["w_data"], a["w_indices"], a["w_indptr"]), shape=(n_features + 1, int(a["out_ptr"][-1])))
        return cls(w, a["out_ptr"], a["child_ptr"], a["children"], a["label_ptr"], a["labels"], a["roots"], n_labels,
                   n_features)

    def predict(self, X: sp.csr_matrix, top: int, beam: int = BEAM) -> tuple[np.ndarray, np.ndarray]:
        """Each of ``m`` articles' best ``top`` labels: (``(m, top)`` int64 label indices, -1 where fewer;
        ``(m, top)`` float32 scores in [0, 1], best first, equal scores by label index).

        Args:
            X: ``(m, n_features)`` unit rows of the articles' features."""
        m = X.shape[0]
        Xb = sp.hstack([X, np.ones((m, 1), dtype=np.float32)], format="csr", dtype=np.float32)
        total = np.zeros((m, self.n_labels), dtype=np.float64)
        for lo in range(0, m, PREDICT_CHUNK):
            S = self._outputs(Xb[lo:lo + PREDICT_CHUNK])
            for root in self.roots:
                for i, j, p in self._tree(S, int(root), beam):
                    total[lo + i, j] += p
        total /= max(len(self.roots), 1)
        k = min(top, self.n_labels)
        order = np.argsort(-total, axis=1, kind="stable")[:, :k]
        scores = np.take_along_axis(total, order, axis=1).astype(np.float32)
        return np.where(scores > 0, order, -1), scores

    def _outputs(self, Xb: sp.csr_matrix) -> np.ndarray:
        """``(m, outputs)`` float32 ``w.x`` of every classifier of the forest for ``m`` articles (``Xb``: their rows
        with the bias feature): one sparse product instead of one per node the beam search visits (about 170 for a
        batch of 16 at 12,000 labels). Each value is the one a product of the node's columns gives, bit for bit: a
        value sums the article's features in the order its row stores them, whatever the other columns.

        Cost: the products of the articles' stored terms with the weights' rows (the weights are sparse: ``|w| >
        0.1`` kept), and ``m * outputs`` float32 (:data:`PREDICT_CHUNK` articles at a time)."""
        if self._csr is None:
            self._csr = self.weights.tocsr()
        return np.asarray((Xb @ self._csr).todense(), dtype=np.float32)

    def _tree(self, S: np.ndarray, root: int, beam: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """One tree's beam search over the classifiers' values ``S`` (:meth:`_outputs`): per leaf reached,
        (articles, labels, ``exp`` of the path's score)."""
        m = S.shape[0]
        frontier = {root: (np.arange(m), np.zeros(m))}  # node -> (articles in its beam, their path scores)
        out = []
        while frontier:
            grown: dict[int, tuple[list, list]] = {}
            for node, (rows, base) in sorted(frontier.items()):
                log_p = base[:, None] + self._log_scores(S, rows, node)
                a, b = self.child_ptr[node], self.child_ptr[node + 1]
                if a == b:  # a leaf: its labels
                    lo, hi = self.label_ptr[node], self.label_ptr[node + 1]
                    out.append((np.repeat(rows, hi - lo), np.tile(self.labels[lo:hi], len(rows)),
                                np.exp(log_p).ravel()))
                    continue
                for c, child in enumerate(self.children[a:b]):
                    got = grown.setdefault(int(child), ([], []))
                    got[0].append(rows)
                    got[1].append(log_p[:, c])
            frontier = self._keep_best({n: (np.concatenate(r), np.concatenate(s)) for n, (r, s) in grown.items()},
                                       beam)
        return out

    def _log_scores(self, S: np.ndarray, rows: np.ndarray, node: int) -> np.ndarray:
        """``(len(rows), outputs of node)`` float64 ``-max(0, 1 - w.x)^2`` of the node's classifiers, their values
        ``w.x`` read from ``S`` (:meth:`_outputs`)."""
        s = S[rows, self.out_ptr[node]:self.out_ptr[node + 1]].astype(np.float64)
        return -np.square(np.maximum(0.0, 1.0 - s))

    @staticmethod
    def _keep_best(frontier: dict[int, tuple[np.ndarray, np.ndarray]], beam: int
                   ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Each article's ``beam`` best nodes of the next level (equal scores: the lower node)."""
        if not frontier:
            return {}
        nodes = np.concatenate([np.full(len(r), n) for n, (r, _s) in frontier.items()])
        rows = np.concatenate([r for r, _s in frontier.values()])
        scores = np.concatenate([s for _r, s in frontier.values()])
        order = np.lexsort((nodes, -scores, rows))
        rows, nodes, scores = rows[order], nodes[order], scores[order]
        first = np.searchsorted(rows, rows, side="left")
        keep = (np.arange(len(rows)) - first) < beam
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for n in np.unique(nodes[keep]):
            sel = keep & (nodes == n)
            out[int(n)] = (rows[sel], scores[sel])
        return out


def train_forest(X: sp.csr_matrix, label_sets: Sequence[Sequence[int]], n_labels: int, trees: int = TREES
                 ) -> Forest:
    """Train :data:`TREES` trees on ``n`` articles: ``X`` ``(n, V)`` unit feature rows, ``label_sets`` their label
    indices (each in ``range(n_labels)``; every label on at least one article).

    Raises:
        ValueError: no article or no label."""
    if X.shape[0] == 0 or n_labels == 0:
        raise ValueError("a label tree needs articles and labels")
    n, V = X.shape
    rows = np.repeat(np.arange(n), [len(s) for s in label_sets])
    cols = np.fromiter((j for s in label_sets for j in s), dtype=np.int64, count=len(rows))
    Y = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n, n_labels))
    Y.data[:] = 1.0  # an article listing a label twice carries it once
    R = _unit_rows(sp.csr_matrix(Y.T @ X, dtype=np.float64))  # each label: its articles' normalised sum
    builder = _Builder(sp.hstack([X, np.ones((n, 1), dtype=np.float32)], format="csr", dtype=np.float64), Y, R)
    roots = [builder.node(np.arange(n_labels), np.arange(n), 1, np.random.default_rng(t)) for t in range(trees)]
    return builder.forest(roots, n_labels, V)


def _unit_rows(M: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(M.multiply(M).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ M)


class _Builder:
    """Grows the trees depth first, numbering the nodes as it goes (:class:`Forest`'s layout)."""

    def __init__(self, Xb: sp.csr_matrix, Y: sp.csr_matrix, R: sp.csr_matrix) -> None:
        self.Xb, self.Y, self.R = Xb, Y, R
        self.blocks: list[sp.csc_matrix] = []
        self.kids: list[list[int]] = []
        self.leaf_labels: list[np.ndarray] = []

    def node(self, labels: np.ndarray, articles: np.ndarray, depth: int, rng: np.random.Generator) -> int:
        """Grow the node of ``labels`` trained on ``articles`` (indices); returns its number."""
        me = len(self.blocks)
        self.blocks.append(sp.csc_matrix((self.Xb.shape[1], 0), dtype=np.float32))
        self.kids.append([])
        self.leaf_labels.append(np.zeros(0, dtype=np.int64))
        clusters = split(self.R[labels], rng) if depth < MAX_DEPTH and len(labels) >= BRANCH_LABELS else None
        held = sp.csc_matrix(self.Y[articles][:, labels])  # (articles, labels): who carries what, in this node
        if clusters is None:  # a leaf: one classifier per label
            self.leaf_labels[me] = labels
            self.blocks[me] = self._train(articles, [held.indices[held.indptr[j]:held.indptr[j + 1]]
                                                     for j in range(len(labels))])
            return me
        reach = [np.flatnonzero(np.asarray(held[:, c].sum(axis=1)).ravel() > 0) for c in clusters]
        self.blocks[me] = self._train(articles, reach)
        self.kids[me] = [self.node(labels[c], articles[r], depth + 1, rng) for c, r in zip(clusters, reach,
                                                                                            strict=True)]
        return me

    def _train(self, articles: np.ndarray, positives: Sequence[np.ndarray]) -> sp.csc_matrix:
        """``(V + 1, len(positives))`` float32 CSC: one classifier per positive set over ``articles``, weights of
        magnitude <= :data:`WEIGHT_THRESHOLD` dropped."""
        X = self.Xb[articles]
        cols = []
        for pos in positives:
            y = np.zeros(len(articles), dtype=np.int8)
            y[pos] = 1
            if y.all():  # every article reaching the node goes on: a constant classifier (the bias) says so
                w = np.zeros(X.shape[1])
                w[-1] = 1.0
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    w = LinearSVC(C=C, loss="squared_hinge", dual=True, tol=EPS, max_iter=MAX_ITER,
                                  fit_intercept=False, random_state=0).fit(X, y).coef_.ravel()
            w = np.where(np.abs(w) > WEIGHT_THRESHOLD, w, 0.0)
            cols.append(sp.csc_matrix(w.astype(np.float32)[:, None]))
        return sp.hstack(cols, format="csc", dtype=np.float32) if cols else sp.csc_matrix((X.shape[1], 0))

    def forest(self, roots: list[int], n_labels: int, n_features: int) -> Forest:
        sizes = [b.shape[1] for b in self.blocks]
        return Forest(sp.hstack(self.blocks, format="csc", dtype=np.float32),
                      np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                      np.concatenate([[0], np.cumsum([len(k) for k in self.kids])]).astype(np.int64),
                      np.array([c for k in self.kids for c in k], dtype=np.int64),
                      np.concatenate([[0], np.cumsum([len(x) for x in self.leaf_labels])]).astype(np.int64),
                      np.concatenate(self.leaf_labels).astype(np.int64) if self.leaf_labels else np.zeros(0, np.int64),
                      np.array(roots, dtype=np.int64), n_labels, n_features)


def split(R: sp.csr_matrix, rng: np.random.Generator, max_iter: int = 100) -> list[np.ndarray] | None:
    """Balanced spherical 2-means of ``L`` unit label rows: two halves (positions into ``R``; the first holds
    ``ceil(L / 2)``), or None when the labels cannot be told apart (all rows alike). The start: two labels drawn by
    ``rng``; each round the labels are sorted by how much closer they are to the first centroid than to the second
    (stable: equal differences by position) and cut in the middle, until the mean similarity to the own centroid rises
    by less than :data:`CLUSTER_EPS`."""
    L = R.shape[0]
    if L < 2:
        return None
    C_ = np.asarray(R[np.sort(rng.choice(L, 2, replace=False))].todense(), dtype=np.float64).T  # (V, 2)
    half = (L + 1) // 2
    first = np.zeros(L, dtype=bool)
    before = -2.0
    for _ in range(max_iter):
        S = np.asarray(R @ C_)  # (L, 2) cosines
        order = np.argsort(S[:, 1] - S[:, 0], kind="stable")
        first = np.zeros(L, dtype=bool)
        first[order[:half]] = True
        mean = (S[first, 0].sum() + S[~first, 1].sum()) / L
        if mean - before < CLUSTER_EPS:
            break
        before = mean
        for c, sel in enumerate((first, ~first)):
            v = np.asarray(R[sel].sum(axis=0)).ravel()
            norm = float(np.sqrt((v * v).sum()))  # numpy's own pairwise sum: the same on any BLAS thread count
            C_[:, c] = v / norm if norm > 0 else v
    parts = [np.flatnonzero(first), np.flatnonzero(~first)]
    return parts if all(len(p) for p in parts) else None
