"""The label tree: an extreme multi-label classifier over the memory's TF-IDF, covering every label, mixed into the
newsmon scores with weight ``weight``::

    s_l = (1 - weight) * s_l(before) + weight * P_tree(l | article)      for every label the tree returns

It is Parabel (Prabhu et al., "Parabel: Partitioned label trees for extreme classification with application to
dynamic search advertising", WWW 2018), the label trees of Annif's ``omikuji`` backend, as
:mod:`newsmon.shared.scoring.components.parabel` implements it: deterministic (Omikuji's own training draws from an
unseeded generator, so two calibrations on the same data differed), and as accurate as Omikuji's on both corpora
(the docs' measurements). The retrieval part follows every moderator's decision at once; the tree is the model of
the memory as the calibration saw it, refitted with each calibration and stored with its record.

Features: the memory's words (the lexical vectors' tokens, hashed: no vocabulary to keep in step), sublinear TF,
smooth IDF of the memory, unit rows; only the columns in at least 2 memory articles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.heap import trim_heap
from newsmon.shared.scoring.arrays import load_arrays, save_arrays
from newsmon.shared.scoring.components.base import MemoryArticles, Queries, ScoreComponent, register_component
from newsmon.shared.scoring.components.parabel import BEAM, Forest, train_forest
from newsmon.shared.scoring.retrieval import LabelVocab
from newsmon.shared.terms import term_rows

#: Labels the tree returns per article (beam search width of the tree's levels: ``BEAM``).
TOP = 30
#: Folds of the out-of-fold scores of the memory's own articles in calibration.
FOLDS = 5


@dataclass
class TopLabels:
    """The tree's best labels for ``m`` articles: ``labels`` (``m`` lists, best first) and ``scores`` (``(m, n)``
    float32 probabilities, 0 where a row has fewer)."""

    labels: list[list[str]]
    scores: np.ndarray
    _dense: tuple[tuple[str, ...], np.ndarray] | None = field(default=None, repr=False, compare=False)

    @staticmethod
    def concat(parts: Sequence[TopLabels]) -> TopLabels:
        """The rows of ``parts`` in order (widened to the widest)."""
        n = max((p.scores.shape[1] for p in parts), default=0)
        rows = [np.pad(p.scores, ((0, 0), (0, n - p.scores.shape[1]))) for p in parts]
        return TopLabels([r for p in parts for r in p.labels], np.vstack(rows) if rows else np.zeros((0, 0), np.float32))

    def relabel(self, fn: Callable[[tuple[str, ...]], tuple[str, ...]]) -> TopLabels:
        """Under the label registry's names: a renamed label keeps its score, two merged the higher, a retired label
        goes."""
        labels, scores = [], np.zeros_like(self.scores)
        for i, row in enumerate(self.labels):
            best: dict[str, float] = {}
            for lb, p in zip(row, self.scores[i]):
                for x in fn((lb,)):
                    best[x] = max(best.get(x, 0.0), float(p))
            labels.append(list(best))
            scores[i, :len(best)] = list(best.values())
        return TopLabels(labels, scores)

    def dense(self, scores: np.ndarray, vocab: LabelVocab) -> tuple[np.ndarray, np.ndarray]:
        """``(before, these)``: the ``(m, L)`` float32 ``scores`` widened to the vocabulary grown by these labels,
        and these labels' scores over the same columns (0 where a row does not have a label)."""
        vocab.extend(lb for row in self.labels for lb in row)
        key = tuple(vocab.labels)
        if self._dense is None or self._dense[0] != key:  # a calibration mixes the same evidence per option
            these = np.zeros((len(self.labels), len(vocab)), dtype=np.float32)
            for i, row in enumerate(self.labels):
                these[i, [vocab.index[lb] for lb in row]] = self.scores[i, :len(row)]
            these.setflags(write=False)  # shared by every caller with this vocabulary
            self._dense = (key, these)
        these = self._dense[1]
        before = np.zeros((scores.shape[0], len(vocab)), dtype=np.float32)
        before[:, :scores.shape[1]] = scores
        return before, these


class TopLabelsComponent(ScoreComponent):
    """A component whose evidence is :class:`TopLabels` (each article's labels with a score): stacking, renaming
    and the labels it brings, shared."""

    def concat(self, parts: Sequence[TopLabels]) -> TopLabels:
        return TopLabels.concat(parts)

    def relabel(self, evidence: TopLabels, fn: Callable[[tuple[str, ...]], tuple[str, ...]]) -> TopLabels:
        return evidence.relabel(fn)

    def labels(self, evidence: TopLabels, options: Any) -> list[str]:
        return [lb for row in evidence.labels for lb in row]


@dataclass
class LabelTree:
    """A trained tree over ``labels`` with its feature space (``columns`` of the hashed terms, their ``idf``)."""

    model: Any
    labels: list[str]
    columns: np.ndarray
    idf: np.ndarray

    def features(self, texts: Sequence[str], rows: sp.csr_matrix | None = None) -> sp.csr_matrix:
        """``(m, V)`` float32 unit rows of sublinear TF times IDF over the kept columns (``rows``: the texts'
        :func:`~newsmon.shared.terms.term_rows` when already at hand)."""
        X = (rows if rows is not None else term_rows(list(texts)))[:, self.columns]
        Z = sp.csr_matrix(X.multiply(self.idf[None, :]), dtype=np.float32)
        norms = np.sqrt(np.asarray(Z.multiply(Z).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ Z, dtype=np.float32)

    def scores(self, texts: Sequence[str], top: int = TOP, rows: sp.csr_matrix | None = None) -> TopLabels:
        """The ``top`` labels of each of ``m`` texts with their probabilities (``rows``: their term rows when
        already at hand)."""
        k = min(top, len(self.labels))
        if self.model is None or not len(texts):
            return TopLabels([[] for _ in texts], np.zeros((len(texts), k), dtype=np.float32))
        index, scores = self.model.predict(self.features(texts, rows), k, BEAM)
        return TopLabels([[self.labels[j] for j in row if j >= 0] for row in index], scores)


def fit_tree(texts: Sequence[str], label_sets: Sequence[Sequence[str]], rows: sp.csr_matrix | None = None
             ) -> LabelTree:
    """Train the tree on ``n`` articles and their label sets (:func:`~.parabel.train_forest`); ``rows``: the
    texts' term rows when already at hand (tokenised once either way)."""
    labels = sorted({lb for ls in label_sets for lb in ls})
    X = rows if rows is not None else term_rows(list(texts))
    df = np.bincount(X.indices, minlength=X.shape[1])
    columns = np.flatnonzero(df >= 2)
    n = len(texts)
    idf = (1.0 + np.log((1.0 + n) / (1.0 + df[columns]))).astype(np.float32)
    fitted = LabelTree(None, labels, columns, idf)
    if not labels or not len(columns):
        return fitted
    index = {lb: j for j, lb in enumerate(labels)}
    fitted.model = train_forest(fitted.features(texts, X), [sorted({index[lb] for lb in ls}) for ls in label_sets],
                                len(labels))
    return fitted


def out_of_fold(texts: Sequence[str], label_sets: Sequence[Sequence[str]], folds: int = FOLDS) -> TopLabels:
    """The tree's best labels for ``n`` memory articles, each from a tree trained without its fold (by position
    modulo ``folds``). The texts are tokenised once (each fold's tree reads the same rows of them)."""
    X = term_rows(list(texts))
    fold = np.arange(len(texts)) % folds
    splits = iter([(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(folds)
                   if (fold == f).any() and (fold != f).any()])  # the folds top_labels_out_of_fold fits, in order

    def fit_and_score(t: list[str], ls: list[Sequence[str]], held: list[str]) -> TopLabels:
        rest_i, held_i = next(splits)
        return fit_tree(t, ls, X[rest_i]).scores(held, rows=X[held_i])

    return top_labels_out_of_fold(texts, label_sets, fit_and_score, folds)


def top_labels_out_of_fold(texts: Sequence[str], label_sets: Sequence[Sequence[str]],
                           fit_and_score: Callable[[list[str], list[Sequence[str]], list[str]], TopLabels],
                           folds: int = FOLDS) -> TopLabels:
    """The :class:`TopLabels` of ``n`` memory articles, each fold's (by position modulo ``folds``) from
    ``fit_and_score(the other folds' texts, their label sets, this fold's texts)``: a model that never saw the
    article, so its scores for the article's own labels and for the others come from the same counts (a model
    that takes the article out of its counts gives its own labels values of their own, which a stacked model
    learns to read)."""
    labels: list[list[str]] = [[] for _ in texts]
    got_fold: list[tuple[np.ndarray, TopLabels]] = []
    fold = np.arange(len(texts)) % folds
    for f in range(folds):
        held, rest = np.flatnonzero(fold == f), np.flatnonzero(fold != f)
        if not len(held) or not len(rest):
            continue
        got_fold.append((held, fit_and_score([texts[i] for i in rest], [label_sets[i] for i in rest],
                                             [texts[i] for i in held])))
        trim_heap()  # the fold's model freed (newsmon.shared.heap.trim_heap)
    width = max((got.scores.shape[1] for _h, got in got_fold), default=0)
    scores = np.zeros((len(texts), width), dtype=np.float32)
    for held, got in got_fold:
        for r, i in enumerate(held):
            labels[i] = got.labels[r]
            scores[i, :got.scores.shape[1]] = got.scores[r]
    return TopLabels(labels, scores)


class LabelTreeOptions(Options):
    """The label tree's options."""

    weight: float = Field(0.5, gt=0, le=1, allow_inf_nan=False, description="The tree's weight in the mix.")


@register_component
class LabelTreeComponent(TopLabelsComponent):
    """The label tree (see the module docstring); its model is a :class:`LabelTree` trained on the memory's stored
    texts."""

    name = "label_tree"
    Options = LabelTreeOptions
    NEEDS = ("texts",)
    GRID = tuple({"weight": w} for w in (0.25, 0.5, 0.75, 1.0))

    def fit(self, memory: MemoryArticles, options: LabelTreeOptions) -> LabelTree:
        return fit_tree(memory.texts, memory.labels)

    def evidence(self, model: LabelTree, queries: Queries, options: Any) -> TopLabels:
        return model.scores(queries.texts)

    def held_out_evidence(self, model: LabelTree, memory: MemoryArticles, options: LabelTreeOptions) -> TopLabels:
        return out_of_fold(memory.texts, memory.labels)

    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: TopLabels, options: LabelTreeOptions
            ) -> np.ndarray:
        """``(1 - weight) * s + weight * P`` for every label; a label the tree did not return for an article has
        ``P = 0`` there (the tree's beam search ranked it below its top)."""
        before, tree = evidence.dense(scores, vocab)
        return (1.0 - options.weight) * before + options.weight * tree

    def save(self, model: LabelTree, folder: Path) -> None:
        forest = model.model.arrays() if model.model is not None else {}
        save_arrays(folder / "label_tree.npz", labels=np.array(model.labels, dtype=str), columns=model.columns,
                    idf=model.idf, **{f"forest_{k}": v for k, v in forest.items()})

    def load(self, folder: Path) -> LabelTree:
        """Raises:
            ValueError: a tree stored by an earlier version (an Omikuji model): calibrate again."""
        z = load_arrays(folder / "label_tree.npz")
        if (folder / "omikuji").exists():
            raise ValueError("the stored label tree is an Omikuji model of an earlier version: calibrate again")
        forest = {k[len("forest_"):]: v for k, v in z.items() if k.startswith("forest_")}
        return LabelTree(Forest.from_arrays(forest) if forest else None, [str(x) for x in z["labels"]],
                         z["columns"], z["idf"])
