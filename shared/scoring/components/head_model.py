"""The head model: one logistic regression per head label (a label on ``HEAD_MIN_ARTICLES`` or more memory
articles) over the TF-IDF of the article's words *and punctuation marks*, whose probability is mixed into the
``newsmon`` score of that label with weight ``head_weight`` (beta)::

    s_l = (1 - beta) * s_l(RAE-XMC, label keys) + beta * P(l | article)      for head labels l

The retrieval part scores by the neighbours, so it serves every label at once and follows every moderator's
decision; for a label with hundreds of examples a discriminative model reads what the neighbours' vote blurs.
A weighted average of two predictors' scores is Annif's ``ensemble`` backend (Suominen et al., *Annif: DIY
automated subject indexing using multiple algorithms*, LIBER Quarterly 29(1), 2019); one-vs-rest TF-IDF
logistic regression is the field's standard linear text classifier (the baselines of ``eval``).

Punctuation marks are tokens because a news agency's or an outlet's house style is in them: a dateline
("Ljubljana - "), the quotation marks, "(STA)". Which outlet and section wrote an article says much about its
editors' keywords and about the client topics of a monitoring service (the sports pages, stock reports, press
releases), and the words alone lose it; the head model learns it from the articles (what it reads on the
corpora: the docs' "Method and calibration" and measurements).

Features are hashed (no vocabulary to ship), restricted to the hashed columns that occur in at least 2 training
articles; TF is sublinear, IDF smooth (scikit-learn's ``1 + ln((1 + n) / (1 + df))``), rows unit length.
Fitting is deterministic (``liblinear`` with a fixed seed, BLAS on one thread: :func:`one_blas_thread`), so a worker
that fits the model from its memory under a calibration record gets the model the calibration chose, whatever its
thread count.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from pydantic import Field
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from newsmon.schemas.scoring import Options
from newsmon.shared.heap import trim_heap
from newsmon.shared.parallel import run_jobs
from newsmon.shared.scoring.arrays import load_arrays, save_arrays
from newsmon.shared.scoring.components.base import MemoryArticles, Queries, ScoreComponent, register_component
from newsmon.shared.scoring.retrieval import LabelVocab
from newsmon.shared.terms import hashing_vectorizer, term_rows

#: A head label has at least this many memory articles (the "100-499" and ">= 500" frequency buckets).
HEAD_MIN_ARTICLES = 100
#: Words and single punctuation marks (lower-cased).
TOKEN_PATTERN = r"(?u)\w+|[^\w\s]"
#: Folds of the out-of-fold probabilities of the memory's own articles in calibration.
FOLDS = 5

_VECTORIZER = hashing_vectorizer(TOKEN_PATTERN)


def one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread. liblinear's trust-region Newton solver (the logistic
    regressions) sums its dot products and norms with BLAS, which splits a long vector (more than 10,000
    columns: the head model of reuters21578_en has 16,000) across its threads and adds the parts: the model depended
    on the machine's thread count (coefficients 1 ulp apart with 1 and 2 threads), and on a busy machine most of a
    fit was spent waiting for the second thread (6x slower than one thread beside other jobs)."""
    return threadpool_limits(limits=1, user_api="blas")


def style_rows(texts: Sequence[str]) -> sp.csr_matrix:
    """``(n, 2^20)`` float32 CSR of sublinear term frequencies ``1 + ln(tf)`` of words and punctuation marks
    (:func:`newsmon.shared.terms.term_rows` with this module's tokens)."""
    return term_rows(texts, _VECTORIZER)


@dataclass
class HeadScores:
    """The head model's probabilities for ``m`` articles: ``probs`` ``(m, H)`` float32 over ``labels`` (H)."""

    labels: list[str]
    probs: np.ndarray

    @staticmethod
    def concat(parts: Sequence[HeadScores]) -> HeadScores:
        """Rows of ``parts`` stacked, over the union of their labels (0 where a part has no model for a label).

        Raises:
            ValueError: no parts.
        """
        if not parts:
            raise ValueError("nothing to concatenate")
        labels = sorted({lb for p in parts for lb in p.labels})
        col = {lb: j for j, lb in enumerate(labels)}
        out = np.zeros((sum(p.probs.shape[0] for p in parts), len(labels)), dtype=np.float32)
        row = 0
        for p in parts:
            out[row:row + p.probs.shape[0], [col[lb] for lb in p.labels]] = p.probs
            row += p.probs.shape[0]
        return HeadScores(labels, out)

    def relabel(self, fn: Callable[[tuple[str, ...]], tuple[str, ...]]) -> HeadScores:
        """The scores under the label registry's names (``fn`` maps a label tuple to its current names): a
        renamed label keeps its model, two merged labels the higher probability, a retired label goes."""
        names: dict[str, np.ndarray] = {}
        for j, lb in enumerate(self.labels):
            for x in fn((lb,)):
                names[x] = np.maximum(names[x], self.probs[:, j]) if x in names else self.probs[:, j]
        labels = sorted(names)
        probs = np.stack([names[x] for x in labels], axis=1) if labels else np.zeros((self.probs.shape[0], 0))
        return HeadScores(labels, probs.astype(np.float32))


class HeadModel:
    """One-vs-rest logistic regression for the head labels (see the module docstring).

    Args:
        c: inverse regularisation strength ``C`` of each logistic regression (> 0).
        min_articles: a label needs this many training articles to get a model.

    Raises:
        ValueError: ``c <= 0``.
    """

    def __init__(self, c: float = 10.0, min_articles: int = HEAD_MIN_ARTICLES) -> None:
        if not c > 0:
            raise ValueError(f"the head model's C must be > 0, got {c}")
        self.c, self.min_articles = float(c), int(min_articles)
        self.labels: list[str] = []
        self.columns = np.zeros(0, dtype=np.int64)  # the hashed columns kept, sorted
        self.idf = np.zeros(0, dtype=np.float32)
        self.coef = np.zeros((0, 0), dtype=np.float32)  # (H, V)
        self.intercept = np.zeros(0, dtype=np.float32)

    def fit(self, texts: Sequence[str], label_sets: Sequence[Sequence[str]], rows: sp.csr_matrix | None = None
            ) -> HeadModel:
        """Fit on ``n`` articles and their label sets; a label on every article (or on too few) gets no model.
        ``rows``: the texts' :func:`style_rows` when already at hand (the same rows it computes). Returns self."""
        counts: dict[str, int] = {}
        for labels in label_sets:
            for lb in set(labels):
                counts[lb] = counts.get(lb, 0) + 1
        n = len(texts)
        self.labels = sorted(lb for lb, c in counts.items() if self.min_articles <= c < n)
        if not self.labels:
            return self
        X = rows if rows is not None else style_rows(texts)
        df = np.bincount(X.indices, minlength=X.shape[1])
        self.columns = np.flatnonzero(df >= 2)
        self.idf = (1.0 + np.log((1.0 + n) / (1.0 + df[self.columns]))).astype(np.float32)
        Z = self._weighted(X[:, self.columns])
        coef, icpt = [], []
        with one_blas_thread():
            for lb in self.labels:
                y = np.fromiter((lb in labels for labels in label_sets), dtype=bool, count=n)
                m = LogisticRegression(C=self.c, solver="liblinear", random_state=0).fit(Z, y)
                coef.append(m.coef_[0])
                icpt.append(m.intercept_[0])
        self.coef = np.asarray(coef, dtype=np.float32)
        self.intercept = np.asarray(icpt, dtype=np.float32)
        return self

    def _weighted(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """Rows of kept columns times IDF, unit length."""
        Z = sp.csr_matrix(X.multiply(self.idf[None, :]), dtype=np.float32)
        norms = np.sqrt(np.asarray(Z.multiply(Z).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ Z, dtype=np.float32)

    def scores(self, texts: Sequence[str], rows: sp.csr_matrix | None = None) -> HeadScores:
        """:class:`HeadScores` ``(m, H)`` of ``m`` texts: each head label's probability ``sigmoid(w . x + b)``
        (``rows``: the texts' :func:`style_rows` when already at hand)."""
        if not self.labels:
            return HeadScores([], np.zeros((len(texts), 0), dtype=np.float32))
        Z = self._weighted((rows if rows is not None else style_rows(texts))[:, self.columns])
        logits = np.asarray(Z @ self.coef.T) + self.intercept[None, :]
        return HeadScores(list(self.labels), (1.0 / (1.0 + np.exp(-logits))).astype(np.float32))


def out_of_fold(texts: Sequence[str], label_sets: Sequence[Sequence[str]], c: float,
                folds: int = FOLDS, full: HeadModel | None = None) -> HeadScores:
    """The head model's probabilities for ``n`` memory articles, each from a model fitted without its fold
    (``folds`` folds by position modulo ``folds``: the calibration's counterpart of leave-one-out). The labels are
    those of the model fitted on all ``n`` (what the workers fit; ``full`` when already fitted); a fold's model
    that lacks one gives it 0. The texts are tokenised once (each fold's rows are the same rows of them)."""
    full = full if full is not None else HeadModel(c).fit(texts, label_sets)
    out = np.zeros((len(texts), len(full.labels)), dtype=np.float32)
    if not full.labels:  # no fold model can have a label the full model lacks
        return HeadScores([], out)
    X = style_rows(texts)
    fold = np.arange(len(texts)) % folds

    def one_fold(f: int) -> None:
        held, rest = np.flatnonzero(fold == f), np.flatnonzero(fold != f)
        if not len(held):
            return
        part = HeadModel(c, max(1, full.min_articles * (folds - 1) // folds)).fit(
            [texts[i] for i in rest], [label_sets[i] for i in rest], X[rest]).scores([texts[i] for i in held],
                                                                                      X[held])
        cols = {lb: j for j, lb in enumerate(part.labels)}
        for j, lb in enumerate(full.labels):
            if lb in cols:
                out[held, j] = part.probs[:, cols[lb]]  # each fold writes its own rows only
        del part
        trim_heap()  # the fold's model freed (newsmon.shared.heap.trim_heap)

    # the folds side by side (newsmon.shared.parallel: liblinear on one BLAS thread, the same models as in turn)
    run_jobs([functools.partial(one_fold, f) for f in range(folds)])
    return HeadScores(list(full.labels), out)


def head_models(texts: Sequence[str], label_sets: Sequence[Sequence[str]]) -> Callable[[float], HeadModel]:
    """A function of ``C`` giving the head model fitted on ``texts`` and their label sets, each ``C`` fitted once
    (the memory's model: what the workers fit, and what scores the validation and test articles offline)."""
    return functools.lru_cache(maxsize=None)(lambda c: HeadModel(c).fit(texts, label_sets))


def calibration_head_scores(memory_texts: Sequence[str], memory_labels: Sequence[Sequence[str]],
                            other_texts: Sequence[str] = (), include_memory: bool = True,
                            fitted: Callable[[float], HeadModel] | None = None) -> Callable[[float], HeadScores]:
    """For calibration: a function of ``C`` giving the head probabilities of the calibration articles, the
    memory's own ``n`` articles first (:func:`out_of_fold`; left out with ``include_memory=False``, when the
    calibration articles are the validation articles alone), then ``other_texts`` (the validation articles,
    scored by a model fitted on the whole memory: ``fitted``'s, :func:`head_models` of the memory when not given,
    so a caller that also scores test articles fits it once). Each ``C`` is computed once."""
    fitted = fitted if fitted is not None else head_models(memory_texts, memory_labels)

    @functools.cache
    def at(c: float) -> HeadScores:
        full = fitted(c)
        parts = [out_of_fold(memory_texts, memory_labels, c, full=full)] if include_memory and len(memory_texts) else []
        if len(other_texts):
            parts.append(full.scores(other_texts))
        return HeadScores.concat(parts) if parts else HeadScores([], np.zeros((0, 0), dtype=np.float32))

    return at


def mix_head(scores: np.ndarray, vocab: LabelVocab, head: HeadScores | None, weight: float) -> np.ndarray:
    """``(m, L)`` scores with the head model mixed in: ``(1 - weight) * s + weight * P`` in the head labels'
    columns (the vocabulary grows by a head label no neighbour carries; ``scores`` is padded to it), unchanged
    when ``head`` is None or ``weight`` is 0 (Annif's ensemble, a weighted average of two predictors' scores)."""
    if head is None or not weight or not head.labels:
        return scores
    vocab.extend(head.labels)
    L = len(vocab)
    out = np.zeros((scores.shape[0], L), dtype=np.float32)
    out[:, :scores.shape[1]] = scores
    cols = [vocab.index[lb] for lb in head.labels]
    out[:, cols] = (1.0 - weight) * out[:, cols] + weight * head.probs
    return out


class HeadModelOptions(Options):
    """The head model's options: a head label's score = ``(1 - weight) * score + weight * P(label | article)``."""

    weight: float = Field(0.5, gt=0, le=1, allow_inf_nan=False, description="beta: the head model's weight.")
    c: float = Field(10.0, gt=0, allow_inf_nan=False, description="Inverse regularisation C of each logistic "
                     "regression.")


@register_component
class HeadModelComponent(ScoreComponent):
    """The head model (see the module docstring); its model is a :class:`HeadModel` fitted on the memory's stored
    texts, one per C."""

    name = "head_model"
    Options = HeadModelOptions
    NEEDS = ("texts",)
    GRID = tuple({"c": c, "weight": beta} for c, beta in itertools.product((1.0, 10.0, 100.0), (0.25, 0.5, 0.75, 1.0)))

    def model_key(self, options: HeadModelOptions) -> tuple:
        return (options.c,)

    def fit(self, memory: MemoryArticles, options: HeadModelOptions) -> HeadModel:
        return HeadModel(options.c).fit(memory.texts, memory.labels)

    def evidence(self, model: HeadModel, queries: Queries, options: Any) -> HeadScores:
        return model.scores(queries.texts)

    def held_out_evidence(self, model: HeadModel, memory: MemoryArticles, options: HeadModelOptions) -> HeadScores:
        return out_of_fold(memory.texts, memory.labels, options.c, full=model)

    def concat(self, parts: Sequence[HeadScores]) -> HeadScores:
        return HeadScores.concat(parts)

    def relabel(self, evidence: HeadScores, fn: Callable[[tuple[str, ...]], tuple[str, ...]]) -> HeadScores:
        return evidence.relabel(fn)

    def labels(self, evidence: HeadScores, options: Any) -> list[str]:
        return list(evidence.labels)

    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: HeadScores, options: HeadModelOptions
            ) -> np.ndarray:
        return mix_head(scores, vocab, evidence, options.weight)

    def save(self, model: HeadModel, folder: Path) -> None:
        save_arrays(folder / "head_model.npz", labels=np.array(model.labels, dtype=str), columns=model.columns,
                 idf=model.idf, coef=model.coef, intercept=model.intercept,
                 c=np.array(model.c), min_articles=np.array(model.min_articles))

    def load(self, folder: Path) -> HeadModel:
        z = load_arrays(folder / "head_model.npz")
        model = HeadModel(float(z["c"]), int(z["min_articles"]))
        model.labels = [str(x) for x in z["labels"]]
        model.columns, model.idf, model.coef, model.intercept = z["columns"], z["idf"], z["coef"], z["intercept"]
        return model
