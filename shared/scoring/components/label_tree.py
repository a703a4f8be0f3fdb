"""The label tree: an extreme multi-label classifier over the memory's TF-IDF, covering every label, mixed into the
newsmon scores with weight ``weight``::

    s_l = (1 - weight) * s_l(before) + weight * P_tree(l | article)      for every label the tree returns

It is Omikuji (a maintained Rust implementation of Parabel, Prabhu et al., "Parabel: Partitioned label trees for
extreme classification with application to dynamic search advertising", WWW 2018, and of Bonsai, Khandagale et al.,
"Bonsai: diverse and shallow trees for extreme multi-label classification", Machine Learning 2020), the label trees
of Annif's ``omikuji`` backend: a balanced 2-means hierarchy of the labels (``parabel``) or a shallow 100-way one
(``bonsai``) with linear classifiers at the nodes, trained in seconds to minutes on a CPU for thousands of labels. The
retrieval part follows every moderator's decision at once; the tree is the model of the memory as the calibration saw
it, refitted with each calibration.

Features: the memory's words (the lexical vectors' tokens, hashed: no vocabulary to keep in step), sublinear TF,
smooth IDF of the memory, unit rows; only the columns in at least 2 memory articles. Omikuji's clustering is not
seeded, so two trainings on the same data differ a little: the tree the calibration judged is the one that runs (a
per-record model, stored with the calibration record and loaded by the workers).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.components.base import MemoryArticles, Queries, ScoreComponent, register_component
from newsmon.shared.scoring.retrieval import LabelVocab
from newsmon.shared.terms import term_rows

#: Labels the tree returns per article (beam search width of the tree's levels: ``BEAM``).
TOP = 30
BEAM = 10
#: Folds of the out-of-fold scores of the memory's own articles in calibration.
FOLDS = 5
_TRAIN_LOCK = threading.Lock()


def _hyper(tree: str) -> Any:
    """Omikuji's hyper-parameters of Annif's ``parabel`` and ``bonsai`` configurations."""
    import omikuji  # deferred: the native library loads on first use

    h = omikuji.Model.default_hyper_param()
    if tree == "bonsai":
        h.cluster_balanced, h.cluster_k, h.max_depth = False, 100, 3
    else:
        h.cluster_balanced, h.cluster_k, h.max_depth = True, 2, 20
    h.collapse_every_n_layers = 0
    return h


@dataclass
class TopLabels:
    """The tree's best labels for ``m`` articles: ``labels`` (``m`` lists, best first) and ``scores`` (``(m, n)``
    float32 probabilities, 0 where a row has fewer)."""

    labels: list[list[str]]
    scores: np.ndarray

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
        these = np.zeros((scores.shape[0], len(vocab)), dtype=np.float32)
        for i, row in enumerate(self.labels):
            these[i, [vocab.index[lb] for lb in row]] = self.scores[i, :len(row)]
        before = np.zeros_like(these)
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

    def features(self, texts: Sequence[str]) -> sp.csr_matrix:
        """``(m, V)`` float32 unit rows of sublinear TF times IDF over the kept columns."""
        X = term_rows(list(texts))[:, self.columns]
        Z = sp.csr_matrix(X.multiply(self.idf[None, :]), dtype=np.float32)
        norms = np.sqrt(np.asarray(Z.multiply(Z).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ Z, dtype=np.float32)

    def scores(self, texts: Sequence[str], top: int = TOP) -> TopLabels:
        """The ``top`` labels of each of ``m`` texts with their probabilities."""
        k = min(top, len(self.labels))
        out, labels = np.zeros((len(texts), k), dtype=np.float32), []
        if self.model is None or not len(texts):
            return TopLabels([[] for _ in texts], out)
        Z = self.features(texts)
        for i in range(Z.shape[0]):
            row = Z.getrow(i)
            got = self.model.predict(list(zip(row.indices.tolist(), row.data.tolist())), beam_size=BEAM, top_k=k)
            labels.append([self.labels[j] for j, _p in got])
            out[i, :len(got)] = [p for _j, p in got]
        return TopLabels(labels, out)


def fit_tree(texts: Sequence[str], label_sets: Sequence[Sequence[str]], tree: str) -> LabelTree:
    """Train a ``tree`` (``parabel`` or ``bonsai``) on ``n`` articles and their label sets."""
    import omikuji  # deferred: the native library loads on first use

    labels = sorted({lb for ls in label_sets for lb in ls})
    X = term_rows(list(texts))
    df = np.bincount(X.indices, minlength=X.shape[1])
    columns = np.flatnonzero(df >= 2)
    n = len(texts)
    idf = (1.0 + np.log((1.0 + n) / (1.0 + df[columns]))).astype(np.float32)
    fitted = LabelTree(None, labels, columns, idf)
    if not labels or not len(columns):
        return fitted
    Z = fitted.features(texts)
    index = {lb: j for j, lb in enumerate(labels)}
    with tempfile.TemporaryDirectory(prefix="newsmon-tree-") as tmp:
        path = Path(tmp) / "train.txt"
        with path.open("w", encoding="ascii") as f:
            f.write(f"{n} {len(columns)} {len(labels)}\n")
            for i in range(n):
                row = Z.getrow(i)
                ls = ",".join(str(index[lb]) for lb in sorted(set(label_sets[i])))
                f.write(ls + " " + " ".join(f"{c}:{v:.6f}" for c, v in zip(row.indices, row.data)) + "\n")
        with _quiet_stderr():
            fitted.model = omikuji.Model.train_on_data(str(path), _hyper(tree))
    return fitted


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Omikuji's trainer logs on file descriptor 1 and draws progress bars on 2 whatever the log level: send both
    to /dev/null while it trains (one trainer at a time; other threads' lines of that moment go there too)."""
    with _TRAIN_LOCK:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            yield
        finally:
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)
            os.close(devnull)


def out_of_fold(texts: Sequence[str], label_sets: Sequence[Sequence[str]], tree: str, folds: int = FOLDS
                ) -> TopLabels:
    """The tree's best labels for ``n`` memory articles, each from a tree trained without its fold (by position
    modulo ``folds``)."""
    labels: list[list[str]] = [[] for _ in texts]
    scores = np.zeros((len(texts), TOP), dtype=np.float32)
    fold = np.arange(len(texts)) % folds
    for f in range(folds):
        held, rest = np.flatnonzero(fold == f), np.flatnonzero(fold != f)
        if not len(held) or not len(rest):
            continue
        got = fit_tree([texts[i] for i in rest], [label_sets[i] for i in rest], tree).scores(
            [texts[i] for i in held])
        for r, i in enumerate(held):
            labels[i] = got.labels[r]
            scores[i, :got.scores.shape[1]] = got.scores[r]
    return TopLabels(labels, scores)


class LabelTreeOptions(Options):
    """The label tree's options."""

    weight: float = Field(0.5, gt=0, le=1, allow_inf_nan=False, description="The tree's weight in the mix.")
    tree: Literal["parabel", "bonsai"] = Field("parabel", description="Parabel (balanced binary label tree) or "
                                               "Bonsai (shallow, 100-way).")


@register_component
class LabelTreeComponent(TopLabelsComponent):
    """The label tree (see the module docstring); its model is a :class:`LabelTree` trained on the memory's stored
    texts."""

    name = "label_tree"
    Options = LabelTreeOptions
    NEEDS = ("texts",)
    GRID = tuple({"tree": t, "weight": w} for t, w in itertools.product(("parabel", "bonsai"), (0.25, 0.5, 0.75, 1.0)))

    def model_key(self, options: LabelTreeOptions) -> tuple:
        return (options.tree,)

    def fit(self, memory: MemoryArticles, options: LabelTreeOptions) -> LabelTree:
        return fit_tree(memory.texts, memory.labels, options.tree)

    def evidence(self, model: LabelTree, queries: Queries, options: Any) -> TopLabels:
        return model.scores(queries.texts)

    def held_out_evidence(self, model: LabelTree, memory: MemoryArticles, options: LabelTreeOptions) -> TopLabels:
        return out_of_fold(memory.texts, memory.labels, options.tree)

    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: TopLabels, options: LabelTreeOptions
            ) -> np.ndarray:
        """``(1 - weight) * s + weight * P`` for every label; a label the tree did not return for an article has
        ``P = 0`` there (the tree's beam search ranked it below its top)."""
        before, tree = evidence.dense(scores, vocab)
        return (1.0 - options.weight) * before + options.weight * tree

    def save(self, model: LabelTree, folder: Path) -> None:
        np.savez(folder / "label_tree.npz", labels=np.array(model.labels, dtype=str), columns=model.columns,
                 idf=model.idf)
        if model.model is not None:
            (folder / "omikuji").mkdir()
            model.model.save(str(folder / "omikuji"))

    def load(self, folder: Path) -> LabelTree:
        import omikuji  # deferred: the native library loads on first use

        with np.load(folder / "label_tree.npz", allow_pickle=False) as z:
            labels, columns, idf = [str(x) for x in z["labels"]], z["columns"], z["idf"]
        model = omikuji.Model.load(str(folder / "omikuji")) if (folder / "omikuji").is_dir() else None
        return LabelTree(model, labels, columns, idf)
