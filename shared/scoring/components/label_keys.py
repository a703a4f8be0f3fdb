"""RAE-XMC's label keys: the knowledge memory holds, beside its articles (keys: their embeddings, values: their
label rows ``Y``), one key per label with the value ``lambda * e_l`` (RAE-XMC's knowledge memory: keys ``K = [X; Z_L]``, values
``V = [Y; lambda I]``). The paper embeds the label's text; client topics are codes and keyword expressions, so a
label's key here is its *prototype*: the L2-normalised sum of the embeddings of the memory articles that carry
it. lambda then has a role of its own (the weight of the label keys against the neighbours), unlike in the
simplified formula where it only rescales the threshold.

Scores (:class:`LabelKeysComponent`, mixed into the RAE-XMC scores): ``p = (softmax(s / tau) . Y + lambda *
softmax(c / tau_L)) / (1 + lambda)`` where ``s`` are the top-k neighbours' ranking scores and ``c`` the cosines
of the ``label_keys`` nearest label keys (two softmaxes: the neighbours' fused ranking score and a key's cosine
are on different scales).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.arrays import load_arrays, save_arrays
from newsmon.shared.scoring.components.base import MemoryArticles, Queries, ScoreComponent, register_component
from newsmon.shared.scoring.rae_xmc import neighbour_weights
from newsmon.shared.scoring.retrieval import LabelVocab

#: Queries per matrix product in :meth:`LabelKeys.top` (bounds the ``(chunk, L)`` similarity block).
CHUNK = 1024


@dataclass
class LabelHits:
    """The nearest label keys of ``m`` queries: ``labels`` (``m`` lists of labels, nearest first) and ``cosines``
    (``(m, n)`` float32, descending; ``-inf`` where a query has fewer keys)."""

    labels: list[list[str]]
    cosines: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[LabelHits]) -> LabelHits:
        """The queries of ``parts`` in order, cut to the smallest ``n``."""
        n = min(p.cosines.shape[1] for p in parts)
        return cls([row[:n] for p in parts for row in p.labels], np.vstack([p.cosines[:, :n] for p in parts]))

    def relabel(self, fn: Callable[[tuple[str, ...]], tuple[str, ...]]) -> LabelHits:
        """The hits with each label mapped through ``fn`` (a label tuple -> label tuple function: the label
        registry's renames; a label mapped to nothing, i.e. retired, is dropped with its cosine)."""
        labels, cos = [], np.full_like(self.cosines, -np.inf)
        for i, row in enumerate(self.labels):
            kept = [(x, c) for lb, c in zip(row, self.cosines[i]) for x in fn((lb,))][:self.cosines.shape[1]]
            labels.append([x for x, _ in kept])
            cos[i, :len(kept)] = [c for _, c in kept]
        return LabelHits(labels, cos)


class LabelKeys:
    """Label prototypes of a knowledge memory: per label the sum of its articles' embeddings and their count.

    Args:
        dim: embedding dimension ``d``.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.labels: list[str] = []
        self.index: dict[str, int] = {}
        self._sums: list[np.ndarray] = []
        self.counts: list[int] = []
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None  # (L, d) float32 sums and their squared norms

    def add(self, vectors: np.ndarray, label_sets: Iterable[Sequence[str]]) -> LabelKeys:
        """Add ``(n, d)`` float32 article embeddings with their label sets (unlabelled articles add nothing).

        Raises:
            ValueError: vectors of another dimension.
        """
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        self._matrix = None
        for v, labels in zip(vectors, label_sets):
            for lb in labels:
                if lb not in self.index:
                    self.index[lb] = len(self.labels)
                    self.labels.append(lb)
                    self._sums.append(np.zeros(self.dim, dtype=np.float64))
                    self.counts.append(0)
                self._sums[self.index[lb]] += v
                self.counts[self.index[lb]] += 1
        return self

    def __len__(self) -> int:
        return len(self.labels)

    def label_counts(self) -> dict[str, int]:
        """Memory articles per label (the frequency buckets of ``bucket_thresholds``)."""
        return dict(zip(self.labels, self.counts))

    def top(self, queries: np.ndarray, n: int, own_vectors: np.ndarray | None = None,
            own_labels: Sequence[Sequence[str]] | None = None) -> LabelHits:
        """The ``n`` label keys nearest to each of ``(m, d)`` query embeddings (cosine to the normalised sum).

        Args:
            own_vectors / own_labels: for queries that are memory articles themselves (leave-one-out), their own
                ``(m, d)`` stored embedding and labels, taken out of their labels' keys first (a label carried
                by that article alone then has no key for it).
        """
        queries = np.asarray(queries, dtype=np.float32).reshape(-1, self.dim)
        m, L = len(queries), len(self.labels)
        n = min(n, L)
        cos = np.full((m, n), -np.inf, dtype=np.float32)
        labels: list[list[str]] = [[] for _ in range(m)]
        if n == 0:
            return LabelHits(labels, cos)
        if self._matrix is None:
            S = np.stack(self._sums).astype(np.float32)
            self._matrix = (S, (S * S).sum(axis=1))
        S, sq = self._matrix
        for start in range(0, m, CHUNK):
            q = queries[start:start + CHUNK]
            dots = q @ S.T
            norms = np.repeat(np.sqrt(sq)[None, :], len(q), axis=0)
            if own_vectors is not None and own_labels is not None:
                for i in range(len(q)):
                    x = own_vectors[start + i]
                    for lb in own_labels[start + i]:
                        j = self.index.get(lb)
                        if j is not None:
                            dots[i, j] -= float(q[i] @ x)
                            norms[i, j] = np.sqrt(max(sq[j] - 2.0 * float(S[j] @ x) + float(x @ x), 0.0))
            sims = np.divide(dots, norms, out=np.full_like(dots, -np.inf), where=norms > 1e-6)
            part = np.argpartition(-sims, n - 1, axis=1)[:, :n]
            order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1, kind="stable")
            best = np.take_along_axis(part, order, axis=1)
            cos[start:start + len(q)] = np.take_along_axis(sims, best, axis=1)
            for i, row in enumerate(best):
                labels[start + i] = [self.labels[j] for j in row]
        return LabelHits(labels, cos)


def key_scores(hits: LabelHits, n: int, tau: float, index: dict[str, int], n_labels: int) -> np.ndarray:
    """``(m, n_labels)`` float32 ``softmax(c / tau)`` over each query's ``n`` nearest label keys, placed at the
    labels' columns (``index``: label -> column; labels missing from it are skipped)."""
    m = hits.cosines.shape[0]
    n = min(n, hits.cosines.shape[1])
    out = np.zeros((m, n_labels), dtype=np.float32)
    if n == 0:
        return out
    w = neighbour_weights(hits.cosines, n, tau)
    for i, row in enumerate(hits.labels):
        for j, lb in enumerate(row[:n]):
            col = index.get(lb)
            if col is not None and w[i, j] > 0:
                out[i, col] += w[i, j]
    return out


#: Label keys retrieved per article: the most any option of the calibration's grid reads (an option asking for more
#: gets more).
MAX_LABEL_KEYS = 10


class LabelKeysOptions(Options):
    """The label keys' options: ``p = (neighbours' score + weight * label keys' score) / (1 + weight)``."""

    weight: float = Field(0.5, gt=0, le=10, allow_inf_nan=False, description="lambda: the weight of the label "
                          "keys against the neighbours.")
    keys: int = Field(10, ge=1, le=1000, description="Nearest label keys in the label keys' softmax.")
    tau: float = Field(0.01, gt=0, allow_inf_nan=False, description="Temperature of the softmax over the label "
                       "keys' cosines.")


@register_component
class LabelKeysComponent(ScoreComponent):
    """RAE-XMC's label part of the memory (see the module docstring); its model is the memory's
    :class:`LabelKeys`."""

    name = "label_keys"
    Options = LabelKeysOptions
    NEEDS = ("vectors",)
    GRID = tuple({"weight": lam, "keys": n, "tau": t}
                 for lam, n, t in itertools.product((0.1, 0.25, 0.5, 1.0), (3, 10), (0.01, 0.02, 0.05)))

    def fit(self, memory: MemoryArticles, options: Any) -> LabelKeys:
        return LabelKeys(memory.vectors.shape[1]).add(memory.vectors, memory.labels)

    def evidence(self, model: LabelKeys, queries: Queries, options: LabelKeysOptions) -> LabelHits:
        return model.top(queries.vectors, max(options.keys, MAX_LABEL_KEYS))

    def held_out_evidence(self, model: LabelKeys, memory: MemoryArticles, options: LabelKeysOptions) -> LabelHits:
        return model.top(memory.vectors, max(options.keys, MAX_LABEL_KEYS), memory.vectors, memory.labels)

    def concat(self, parts: Sequence[LabelHits]) -> LabelHits:
        return LabelHits.concat(parts)

    def relabel(self, evidence: LabelHits, fn: Callable[[tuple[str, ...]], tuple[str, ...]]) -> LabelHits:
        return evidence.relabel(fn)

    def labels(self, evidence: LabelHits, options: LabelKeysOptions) -> list[str]:
        return [lb for row in evidence.labels for lb in row]

    def save(self, model: LabelKeys, folder: Path) -> None:
        sums = np.stack(model._sums) if model._sums else np.zeros((0, model.dim))
        save_arrays(folder / "label_keys.npz", labels=np.array(model.labels, dtype=str), sums=sums,
                 counts=np.array(model.counts, dtype=np.int64), dim=np.array(model.dim))

    def load(self, folder: Path) -> LabelKeys:
        z = load_arrays(folder / "label_keys.npz")
        keys = LabelKeys(int(z["dim"]))
        keys.labels = [str(x) for x in z["labels"]]
        keys.index = {lb: j for j, lb in enumerate(keys.labels)}
        keys._sums = list(z["sums"].astype(np.float64))
        keys.counts = [int(c) for c in z["counts"]]
        return keys

    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: LabelHits, options: LabelKeysOptions
            ) -> np.ndarray:
        L = len(vocab)
        keys = key_scores(evidence, options.keys, options.tau, vocab.index, L)
        return (scores + options.weight * keys) / (1 + options.weight)
