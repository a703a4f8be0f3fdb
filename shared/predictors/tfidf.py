"""The baselines media-monitoring teams run today: TF-IDF + one-vs-all linear models (scikit-learn).

As in the RAE-XMC paper's comparison: word uni- and bigram TF-IDF (sublinear tf), one binary classifier per
label (``OneVsRestClassifier``) with ``LinearSVC`` (proposed where the decision value > 0) or
``LogisticRegression`` (proposed where the probability > 0.5). Registered as ``svm`` and ``logreg``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet, register

@dataclass
class TfidfOneVsAll:
    """TF-IDF + one-vs-all ``svm`` (LinearSVC, C=1) or ``logreg`` (LogisticRegression, liblinear dual, C=10).

    Labels seen in no training article cannot be predicted (their columns score -1e9 / 0).
    """

    kind: Literal["svm", "logreg"] = "svm"
    max_features: int = 200_000

    def fit(self, texts: Sequence[str], Y: sp.csr_matrix) -> TfidfOneVsAll:
        """Fit on ``n`` texts and their ``(n, L)`` 0/1 labels.

        Raises:
            ValueError: the labels leave nothing to learn (every article carries each label, or none carries
                one); the message says why.
        """
        # deferred: scikit-learn is slow to import; the live classifier imports this module only to register it
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.svm import LinearSVC

        # float64, as liblinear computes: sklearn 1.9's LogisticRegression hands float32 input to liblinear as it
        # is, and on reuters21578_en that path failed inside the full eval ("indices array has fewer than nnz
        # elements", once a glibc "double free" abort); LinearSVC always converted to float64 and never failed
        self.vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2,
                                          max_features=self.max_features, dtype=np.float64)
        X = self.vectorizer.fit_transform(texts)
        Yd = sp.csr_matrix(Y, dtype=np.int64)  # not int8: OneVsRestClassifier mis-fits int8 indicators
        self.n_labels = Yd.shape[1]
        self.columns = np.flatnonzero(np.asarray(Yd.sum(axis=0)).ravel() > 0)  # a classifier needs >= 1 positive
        # Same inputs, same model: liblinear's dual solvers visit the coordinates in a random order drawn from one
        # generator shared by the whole process, seeded by each fit (random_state; unseeded, two fits of the same
        # data differed by 3e-5 in their decision values). The labels are fitted one after the other: in threads
        # two fits reseed and draw from that one generator at once.
        if self.kind == "svm":
            base = LinearSVC(C=1.0, random_state=0)
        else:
            base = LogisticRegression(C=10.0, solver="liblinear", dual=True, max_iter=200,  # dual: 10x faster here
                                      random_state=0)
        Ysub = Yd[:, self.columns]
        if Ysub.shape[1] == 0 or (np.asarray(Ysub.sum(axis=0)).ravel() == Ysub.shape[0]).all():
            raise ValueError("cannot be fitted: every training article carries each label, so a one-vs-rest "
                             "classifier has no negative example (one class only)" if Ysub.shape[1] else
                             "cannot be fitted: no training article carries a label")
        if Ysub.shape[1] == 1:  # one label: a binary target (sklearn refuses a one-column sparse indicator)
            Ysub = Ysub.toarray().ravel()
        self.model = OneVsRestClassifier(base).fit(X, Ysub)
        return self

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """``(m, L)`` float32: decision values (svm) or probabilities (logreg); unseen labels -1e9 / 0."""
        X = self.vectorizer.transform(texts)
        fill = -1e9 if self.kind == "svm" else 0.0
        out = np.full((X.shape[0], self.n_labels), fill, dtype=np.float32)
        if self.kind == "svm":
            out[:, self.columns] = self.model.decision_function(X)
        else:
            out[:, self.columns] = self.model.predict_proba(X)
        return out

    @property
    def threshold(self) -> float:
        """Decision threshold on :meth:`scores`."""
        return 0.0 if self.kind == "svm" else 0.5


class _TfidfPredictor(Predictor):
    """TF-IDF + one-vs-all linear model on the article texts (no embeddings, no memory)."""

    kind: Literal["svm", "logreg"] = "svm"

    def __init__(self, max_features: int = 200_000) -> None:
        self.model = TfidfOneVsAll(kind=self.kind, max_features=max_features)

    def fit(self, train: TrainingSet) -> _TfidfPredictor:
        """One binary classifier per label with at least one training article."""
        self.model.fit(list(train.texts), train.labels)
        return self

    def scores(self, queries: QueryBatch) -> np.ndarray:
        return self.model.scores(list(queries.texts))

    def decide(self, scores: np.ndarray) -> np.ndarray:
        return scores > self.model.threshold


@register
class TfidfSvmPredictor(_TfidfPredictor):
    """TF-IDF + one-vs-all LinearSVC; proposed where the decision value is > 0."""

    name = "svm"
    display_name = "TF-IDF + SVM"
    kind = "svm"


@register
class TfidfLogRegPredictor(_TfidfPredictor):
    """TF-IDF + one-vs-all logistic regression; proposed where the probability is > 0.5."""

    name = "logreg"
    display_name = "TF-IDF + LogReg"
    kind = "logreg"
