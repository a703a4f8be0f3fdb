"""Stacking: a learned fusion of the scores, fitted by the calibration on its own articles. Where the components
before it are mixed by fixed weights (one weight per component for every label and article), stacking learns how far
to trust each of them from what else is known of the label and the article::

    s_l = P(l is right | x_l)      for each article's ``candidates`` best labels (0 for the others)

``x_l`` (:data:`FEATURES`, then two columns per component mixed in before it): the weighted score so far, its rank in
the article, the article's best and second-best score, the neighbours' RAE-XMC score alone, each earlier
component's own score (its ``mix`` on zeros: ``weight * P``, a monotone rescaling a tree model ignores) and that
score over the article's best by that component, the label's
memory articles (``ln(1 + count)``), the article's most similar neighbour (dense cosine), and of the article's first
k neighbours those that carry the label (how many, the best cosine among them) and their mean label-set size (with
the rank: whether the article wants this many labels, the RCut of Yang 2001 learned). A label's name is not a
feature: the model is one for every label, so a label created after the calibration is scored by the same rules.

It is stacked generalisation (Wolpert, "Stacked generalization", Neural Networks 5(2), 1992): the fusion model is
fitted on scores its inputs gave to articles they were not fitted on (the calibration articles: the memory's own
articles scored leave-one-out / out of fold, then the validation articles), with scikit-learn's histogram
gradient-boosted trees (Ke et al., "LightGBM", NeurIPS 2017; deterministic: no early stopping, a fixed seed). Annif's
``nn_ensemble`` backend is the same idea with a neural network over its sources' scores. The calibration judges it
cross-fitted (each article scored by a model fitted without its fold, :data:`FOLDS` folds by position) and, when it
lifts, stores the model fitted on all its articles with the record; the workers load it, never fit it (its training
data is the calibration's, not the memory's: :meth:`StackingComponent.fit` raises).

Cost: features for ``m * candidates`` (article, label) pairs per batch, and one pass of the earlier components' mix
at a time (a ``(m, L)`` float32 array) to read their own scores; the model is a few hundred small trees whatever the
memory's size.
"""

from __future__ import annotations

import functools
import hashlib
import io
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
from pydantic import Field
from sklearn.ensemble import HistGradientBoostingClassifier
from threadpoolctl import ThreadpoolController, threadpool_limits

from newsmon.schemas.scoring import Options
from newsmon.shared.heap import trim_heap
from newsmon.shared.parallel import run_jobs
from newsmon.shared.scoring.components.base import (
    MemoryArticles,
    MixContext,
    Queries,
    ScoreComponent,
    register_component,
)
from newsmon.shared.scoring.retrieval import LabelVocab

#: Folds of the calibration's cross-fitting.
FOLDS = 5
#: The features every model reads, before two columns per earlier component (its own score, over its best).
FEATURES = ("score", "rank", "article_best", "article_second", "neighbours", "label_articles", "nearest",
            "carrier_cosine", "carriers", "neighbour_set_size")


@dataclass
class StackingModel:
    """A fitted fusion model: ``components`` (the names of the components it read, in order) and the classifier
    (None: one class only in its training pairs; ``constant`` is then every pair's probability)."""

    components: list[str]
    classifier: Any
    constant: float = 0.0
    #: Read only the classifier's first ``iterations`` trees (None: all): a calibration fold's model fitted once for
    #: the grid's most iterations stands for the options with fewer (boosting without early stopping or sampling
    #: fits its first ``n`` trees exactly as a model of ``n`` trees; tested).
    iterations: int | None = None

    def probabilities(self, X: np.ndarray) -> np.ndarray:
        """``(p,)`` float32 probabilities of ``(p, f)`` features."""
        if self.classifier is None:
            return np.full(X.shape[0], self.constant, dtype=np.float32)
        with one_prediction_thread():
            if self.iterations is not None and self.iterations < self.classifier.n_iter_:
                return staged(self.classifier, X, (self.iterations,))[0]
            return self.classifier.predict_proba(X)[:, 1].astype(np.float32)


def staged(classifier: Any, X: np.ndarray, iterations: Sequence[int]) -> list[np.ndarray]:
    """``(p,)`` float32 probabilities of ``(p, f)`` features by the classifier's first ``n`` trees, for each ``n`` of
    ``iterations`` (each <= its trees), from one pass over its trees (scikit-learn's ``staged_predict_proba``)."""
    want, out = {int(n): i for i, n in enumerate(iterations)}, [np.zeros(0, np.float32)] * len(iterations)
    if not want or X.shape[0] == 0:
        return [np.zeros(X.shape[0], np.float32) for _ in iterations]
    for n, proba in enumerate(classifier.staged_predict_proba(X), start=1):
        if n in want:
            for i in (i for i, m in enumerate(iterations) if m == n):
                out[i] = proba[:, 1].astype(np.float32)
        if n >= max(want):
            break
    return out


@dataclass
class StackingEvidence:
    """The fusion models to apply: one for every article (``fold`` None), or, in calibration, article ``i`` scored
    by ``models[fold[i]]`` (a model fitted without it). ``scored``: the calibration's pairs ``(rows, cols)`` and
    their ``(p,)`` float32 cross-fitted probabilities, computed once by :meth:`StackingComponent.cross_fit`; a
    later mix of the same scores (every later calibration step) reads them instead of predicting again."""

    models: list[StackingModel]
    fold: np.ndarray | None = None
    scored: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def fit_model(X: np.ndarray, y: np.ndarray, components: list[str], iterations: int) -> StackingModel:
    """The fusion model of ``(p, f)`` features and ``(p,)`` bool targets."""
    if y.all() or not y.any():
        return StackingModel(components, None, float(y.mean()) if len(y) else 0.0)
    clf = HistGradientBoostingClassifier(max_iter=iterations, learning_rate=0.05, max_leaf_nodes=31,
                                         min_samples_leaf=20, l2_regularization=1.0, early_stopping=False,
                                         random_state=0)
    with one_thread():
        return StackingModel(components, clf.fit(X, y))


class DeferredStackingModel(StackingModel):
    """:func:`fit_model` of ``(p, f)`` features and ``(p,)`` bool targets, fitted at the first read of its
    ``classifier`` or ``constant`` (its probabilities, its :meth:`StackingComponent.save`): the calibration makes
    the model fitted on all its articles for every option it tries, and only the option it keeps is ever read (the
    record stores it); the others are never fitted. Once fitted it is the model :func:`fit_model` gives."""

    def __init__(self, X: np.ndarray, y: np.ndarray, components: list[str], iterations: int) -> None:
        self.components, self.iterations = components, None
        self._inputs: tuple[np.ndarray, np.ndarray, int] | None = (X, y, iterations)
        self._fitted: StackingModel | None = None

    def _model(self) -> StackingModel:
        if self._fitted is None:
            assert self._inputs is not None  # dropped once fitted
            X, y, iterations = self._inputs
            self._fitted, self._inputs = fit_model(X, y, self.components, iterations), None
        return self._fitted

    @property
    def fitted(self) -> bool:
        """Whether the model has been fitted (read) yet."""
        return self._fitted is not None

    @property  # type: ignore[override,misc]
    def classifier(self) -> Any:
        return self._model().classifier

    @property  # type: ignore[override,misc]
    def constant(self) -> float:  # type: ignore[override]
        return self._model().constant


def _digest(a: np.ndarray) -> str:
    """A content hash of an array (its dtype, shape and bytes)."""
    h = hashlib.sha256(f"{a.dtype}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def one_thread() -> Any:
    """A context in which scikit-learn's trees use one OpenMP thread: the same model and probabilities whatever
    the machine's thread count, and no team of threads spinning for each small tree on a busy machine (a batch of 16
    at 12,000 labels: 24 ms on one thread, 230-650 ms with a team of two beside other work)."""
    return threadpool_limits(limits=1, user_api="openmp")


_OPENMP: list = []  # the controller of the process's OpenMP runtimes, made at the first prediction


def one_prediction_thread() -> Any:
    """:func:`one_thread` for a fitted model's predictions, through one ``ThreadpoolController`` made at the first:
    ``threadpool_limits`` reads the process's loaded libraries (``/proc/self/maps``) on every call, 3 ms of a batch
    of 16. The OpenMP runtime of scikit-learn's trees is loaded by then (a fitted model predicts), and a tree's
    prediction of a row is the same on any number of threads; the fits keep :func:`one_thread`."""
    if not _OPENMP:
        _OPENMP.append(ThreadpoolController().select(user_api="openmp"))
    return _OPENMP[0].limit(limits=1)


class StackingOptions(Options):
    """Stacking's options."""

    candidates: int = Field(20, ge=1, le=200, description="Labels per article the fusion model scores (the best by "
                            "the weighted score so far); the others get 0.")
    iterations: int = Field(200, ge=10, le=2000, description="Boosting iterations (trees) of the fusion model.")


@register_component
class StackingComponent(ScoreComponent):
    """Stacking (see the module docstring)."""

    name = "stacking"
    Options = StackingOptions
    GRID = ({"candidates": 20, "iterations": 200}, {"candidates": 20, "iterations": 500})
    READS_CONTEXT = True
    FITTED_BY_CALIBRATION = True

    def model_key(self, options: StackingOptions) -> tuple:
        return (options.candidates, options.iterations)

    def fit(self, memory: MemoryArticles, options: Any) -> StackingModel:
        """Raises:
            ValueError: always: the fusion model is fitted by the calibration on its articles' scores and stored
                with its record (a record that names it without its stored model cannot be served)."""
        raise ValueError("the stacking model is fitted by the calibration on its articles and stored with the "
                         "calibration record; it cannot be fitted from the memory: calibrate again")

    def evidence(self, model: StackingModel, queries: Queries, options: Any) -> StackingEvidence:
        return StackingEvidence([model])

    def held_out_evidence(self, model: Any, memory: MemoryArticles, options: Any) -> StackingEvidence:
        """Raises:
            ValueError: always: the calibration cross-fits this component instead (:meth:`cross_fit`)."""
        raise ValueError("stacking is cross-fitted by the calibration, not held out of the memory")

    def concat(self, parts: Sequence[StackingEvidence]) -> StackingEvidence:
        """Raises:
            ValueError: parts with different models (only one model's evidence can be stacked)."""
        if any(p.fold is not None or p.models != parts[0].models for p in parts):
            raise ValueError("only evidence of one stacking model can be concatenated")
        return parts[0]

    def relabel(self, evidence: StackingEvidence, fn: Callable[[tuple[str, ...]], tuple[str, ...]]
                ) -> StackingEvidence:
        return evidence  # reads no label name

    def labels(self, evidence: Any, options: Any) -> list[str]:
        return []

    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: Any, options: Any) -> np.ndarray:
        """Raises:
            ValueError: always: stacking reads the other components (:meth:`mix_in_context`)."""
        raise ValueError("stacking needs the mix context (mix_in_context)")

    @staticmethod
    def candidate_pairs(scores: np.ndarray, options: StackingOptions
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each article's best ``candidates`` labels with a score > 0: (``rows``, ``cols``, their ``rank`` in the
        article, the ``(m, c)`` best scores in order). Of labels with equal scores, the lower column comes first
        (the stated rule for a tie at the cut: a full stable sort, never ``argpartition``'s order)."""
        m, L = scores.shape
        c = min(options.candidates, L)
        if not m or not c:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty, np.zeros((m, 0), np.float32)
        if c < L:
            top = np.argpartition(-scores, c - 1, axis=1)[:, :c]
            cut = np.take_along_axis(scores, top, axis=1).min(axis=1)  # each article's c-th best score
            for i in np.flatnonzero(((scores >= cut[:, None]).sum(axis=1) > c) & (cut > 0)):  # a tie at the cut
                top[i] = np.argsort(-scores[i], kind="stable")[:c]
        else:
            top = np.tile(np.arange(L), (m, 1))
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.lexsort((top, -top_scores), axis=1)  # best first, equal scores by column
        top, top_scores = np.take_along_axis(top, order, axis=1), np.take_along_axis(top_scores, order, axis=1)
        rows, rank = np.nonzero(top_scores > 0)
        return rows, top[rows, rank], rank, top_scores

    def pairs(self, scores: np.ndarray, vocab: LabelVocab, context: MixContext, options: StackingOptions
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """The ``p`` (article, label) pairs the model scores (:meth:`candidate_pairs`): (``rows``, ``cols``,
        ``(p, f)`` float32 features, the earlier components' names)."""
        m, L = scores.shape
        rows, cols, rank, top_scores = self.candidate_pairs(scores, options)
        c = top_scores.shape[1]
        if not m or not c:
            return (rows, cols, np.zeros((0, len(FEATURES) + 2 * len(context.steps)), np.float32),
                    [s[0].name for s in context.steps])
        best = top_scores[:, 0]
        second = top_scores[:, 1] if c > 1 else np.zeros(m, np.float32)
        counts = context.counts or {}
        label_articles = np.log1p(np.array([counts.get(lb, 0) for lb in vocab.labels[:L]], dtype=np.float32))
        nearest = context.nearest if context.nearest is not None else np.zeros(m, np.float32)
        names, own = context.own_scores(vocab, rows, cols)
        carried = np.zeros((len(rows), 2), dtype=np.float32)
        if context.carriers is not None:
            labels = vocab.labels
            for p, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
                carried[p] = context.carriers[i].get(labels[j], (0.0, 0))
        set_size = context.set_size if context.set_size is not None else np.zeros(m, np.float32)
        base = np.stack([scores[rows, cols], rank.astype(np.float32), best[rows], second[rows],
                         context.rae[rows, cols], label_articles[cols], nearest[rows], carried[:, 0], carried[:, 1],
                         set_size[rows]], axis=1).astype(np.float32)
        return rows, cols, np.hstack([base, own]), names

    def mix_in_context(self, scores: np.ndarray, vocab: LabelVocab, evidence: StackingEvidence,
                       options: StackingOptions, context: MixContext) -> np.ndarray:
        """``(m, L)`` float32: each article's candidates scored by the fusion model, 0 elsewhere.

        Raises:
            ValueError: the model read other components than those mixed in before it, or the folds do not match
                the articles."""
        out = np.zeros_like(scores)
        if evidence.scored is not None:  # the calibration's own pairs, scored once (cross_fit)
            rows, cols, rank, _top = self.candidate_pairs(scores, options)
            if np.array_equal(rows, evidence.scored[0]) and np.array_equal(cols, evidence.scored[1]):
                out[rows, cols] = evidence.scored[2]
                return out
        rows, cols, X, names = self.pairs(scores, vocab, context, options)
        for model in evidence.models:
            if model.components != names:
                raise ValueError(f"the stacking model read the components {model.components}, these scores mix "
                                 f"{names}: calibrate again")
        if evidence.fold is None:
            out[rows, cols] = evidence.models[0].probabilities(X)
            return out
        if len(evidence.fold) != scores.shape[0]:
            raise ValueError(f"cross-fitted stacking evidence for {len(evidence.fold)} articles, scores for "
                             f"{scores.shape[0]}")
        for f, model in enumerate(evidence.models):
            sel = evidence.fold[rows] == f
            out[rows[sel], cols[sel]] = model.probabilities(X[sel])
        return out

    def cross_fit(self, scores: np.ndarray, vocab: LabelVocab, context: MixContext, options: StackingOptions,
                  gold: np.ndarray, folds: int = FOLDS) -> tuple[StackingEvidence, StackingModel]:
        """For the calibration: (the cross-fitted evidence of its ``m`` articles, each article's pairs scored by a
        model fitted on the other folds' pairs; the model fitted on all of them, which the record stores, fitted when
        it is first read: :class:`DeferredStackingModel`).

        Args:
            scores: ``(m, L)`` the weighted scores so far; gold: ``(m, >= L)`` bool gold labels over the same
                columns."""
        rows, cols, X, names = self.pairs(scores, vocab, context, options)
        y = gold[rows, cols].astype(bool)
        fold = np.arange(scores.shape[0]) % folds
        folded = self._folds(X, y, fold[rows], names, options, folds)
        models, probs = [], np.zeros(len(rows), dtype=np.float32)
        for f, (model, held_probs) in enumerate(folded):
            models.append(StackingModel(model.components, model.classifier, model.constant, options.iterations))
            probs[fold[rows] == f] = held_probs[options.iterations]
        return (StackingEvidence(models, fold, (rows, cols, probs)),
                DeferredStackingModel(X, y, names, options.iterations))

    def _folds(self, X: np.ndarray, y: np.ndarray, fold: np.ndarray, names: list[str], options: StackingOptions,
               folds: int) -> list[tuple[StackingModel, dict[int, np.ndarray]]]:
        """Per fold, its model fitted on the other folds' pairs with the most iterations :attr:`GRID` tries for
        these candidates, and its held-out pairs' probabilities at each of the grid's iteration counts: the
        calibration's options that differ only in iterations cost one cross-fit, not one each. The last pairs'
        folds are kept (one entry: the options of one calibration step are tried one after the other)."""
        counts = sorted({int(g["iterations"]) for g in self.GRID if g.get("candidates") == options.candidates}
                        | {options.iterations})
        key = (options.candidates, tuple(counts), folds, X.shape, _digest(X), _digest(y), _digest(fold),
               tuple(names))
        cached = getattr(self, "_folded", None)
        if cached is not None and cached[0] == key:
            return cached[1]

        def one_fold(f: int) -> tuple[StackingModel, dict[int, np.ndarray]]:
            train, held = fold != f, fold == f
            model = fit_model(X[train], y[train], names, counts[-1])
            if model.classifier is None:
                probs = {n: model.probabilities(X[held]) for n in counts}
            else:
                with one_thread():
                    probs = dict(zip(counts, staged(model.classifier, X[held], counts), strict=True))
            trim_heap()  # the fold's training copies freed (newsmon.shared.heap.trim_heap)
            return model, probs

        # the folds side by side (newsmon.shared.parallel: each fit on one thread, the same models as in turn)
        out = run_jobs([functools.partial(one_fold, f) for f in range(folds)])
        self._folded = (key, out)
        return out

    def save(self, model: StackingModel, folder: Path) -> None:
        buf = io.BytesIO()
        pickle.dump({"sklearn": sklearn.__version__, "features": list(FEATURES), "components": model.components,
                     "constant": model.constant, "classifier": model.classifier}, buf, protocol=5)
        (folder / "stacking.pkl").write_bytes(buf.getvalue())

    def load(self, folder: Path) -> StackingModel:
        """The model :meth:`save` wrote (a pickle of the calibration's own artefact store, never of untrusted input).

        Raises:
            ValueError: written by another scikit-learn version (its trees may not read back the same), or over other
                features than this version computes."""
        with (folder / "stacking.pkl").open("rb") as f:
            z = pickle.load(f)  # noqa: S301 - the record store's own artefact
        if z["sklearn"] != sklearn.__version__:
            raise ValueError(f"the stacking model was written by scikit-learn {z['sklearn']}, this is "
                             f"{sklearn.__version__}: calibrate again")
        if z.get("features") != list(FEATURES):
            raise ValueError(f"the stacking model reads the features {z.get('features')}, this version computes "
                             f"{list(FEATURES)}: calibrate again")
        return StackingModel(list(z["components"]), z["classifier"], float(z["constant"]))
