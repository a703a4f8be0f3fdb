"""One interface for every label predictor, in the manner of Annif's backends.

A predictor is fitted on a :class:`TrainingSet` (the labelled articles: texts, ``(n, L)`` labels, the label
vocabulary and, for methods that need it, each training article's leave-one-out neighbours) and scores a
:class:`QueryBatch` (texts, languages, embeddings and the top-K neighbours from the knowledge memory), so
neighbour-based and text-based methods share one signature:

    predictor = get_predictor("rae", top_k=50, tau=0.04)
    predictor.fit(train)
    scores = predictor.scores(queries)      # (m, L) float32
    proposed = predictor.decide(scores)     # (m, L) bool

A new method is one module with a :class:`Predictor` subclass decorated with :func:`register`, imported in
``newsmon/shared/predictors/__init__.py``, plus one test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from newsmon.schemas.registry import Registry
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval


@dataclass
class TrainingSet:
    """The labelled articles a predictor learns from (the knowledge memory in the evaluation).

    Attributes:
        texts: ``n`` article texts.
        labels: ``(n, L)`` 0/1 CSR matrix over ``vocab`` (``L = len(vocab)``).
        vocab: the label vocabulary; its columns are the columns of every score matrix.
        retrieval: each training article's top-K neighbours among the *other* training articles
            (leave-one-out), for methods with ``needs_training_retrieval`` (ML-KNN, newsmon); else None.
        validation / validation_labels / validation_texts: the validation articles' top-K neighbours, their
            ``(n_val, L)`` 0/1 labels and their texts, for methods with ``needs_validation_retrieval`` (newsmon calibrates on them); else None.
        vectors / validation_vectors: ``(n, d)`` / ``(n_val, d)`` float32 embeddings of the training (memory) and
            validation articles when the evaluation embedded them (newsmon's label keys); else None.
        ids / validation_ids: the articles' ids (a calibration orders its articles by them); None when unknown.
    """

    texts: Sequence[str]
    labels: sp.csr_matrix
    vocab: LabelVocab
    retrieval: Retrieval | None = None
    validation: Retrieval | None = None
    validation_labels: sp.csr_matrix | None = None
    validation_texts: Sequence[str] | None = None
    vectors: np.ndarray | None = None
    validation_vectors: np.ndarray | None = None
    ids: Sequence[str] | None = None
    validation_ids: Sequence[str] | None = None


@dataclass
class QueryBatch:
    """The articles to score.

    Attributes:
        texts: ``m`` article texts.
        langs: ``m`` ISO 639-1 codes (None: unknown).
        vectors: ``(m, d)`` float32 embeddings, or None for text-only methods.
        retrieval: the top-K labelled neighbours of each article from the knowledge memory, or None.
    """

    texts: Sequence[str]
    langs: Sequence[str | None] = field(default_factory=list)
    vectors: np.ndarray | None = None
    retrieval: Retrieval | None = None

    def __len__(self) -> int:
        return len(self.texts)


class Predictor(ABC):
    """A label predictor: ``fit`` on a training set, ``scores`` a query batch, ``decide`` by its own rule.

    Class attributes:
        name: the registry name (``newsmon eval --methods``).
        display_name: the name in reports.
        needs_retrieval: ``scores`` reads ``QueryBatch.retrieval``.
        needs_training_retrieval: ``fit`` reads ``TrainingSet.retrieval`` (leave-one-out neighbours).
        needs_validation_retrieval: ``fit`` reads ``TrainingSet.validation`` (calibration).
        tunable: :meth:`tune` searches the method's parameters on a validation batch.
    """

    name: ClassVar[str] = ""
    display_name: ClassVar[str] = ""
    needs_retrieval: ClassVar[bool] = False
    needs_training_retrieval: ClassVar[bool] = False
    needs_validation_retrieval: ClassVar[bool] = False
    tunable: ClassVar[bool] = False

    @abstractmethod
    def fit(self, train: TrainingSet) -> Predictor:
        """Learn from ``train``; returns self. Methods without training keep the vocabulary only."""

    @abstractmethod
    def scores(self, queries: QueryBatch) -> np.ndarray:
        """``(m, L)`` float32 scores over the training vocabulary (``L = len(train.vocab)``)."""

    @abstractmethod
    def decide(self, scores: np.ndarray) -> np.ndarray:
        """The method's decision rule: ``(m, L)`` bool, True where a label is proposed."""

    def predict(self, queries: QueryBatch) -> np.ndarray:
        """``(m, L)`` bool proposals (:meth:`score_and_decide`)."""
        return self.score_and_decide(queries)[1]

    def score_and_decide(self, queries: QueryBatch) -> tuple[np.ndarray, np.ndarray]:
        """``(m, L)`` float32 scores and ``(m, L)`` bool proposals: ``decide(scores(queries))`` unless the
        method's rule needs more than the scores (newsmon's label-set vote reads the neighbours)."""
        s = self.scores(queries)
        return s, self.decide(s)

    @property
    def params(self) -> dict[str, Any]:
        """The parameters worth reporting (empty when the method has none)."""
        return {}

    def usage(self) -> dict[str, float] | None:
        """What the method's own processes used, for a method that runs outside this process (a peer):
        ``{"wall_s": seconds, "peak_rss_mib": MiB, "cpu_s": seconds}``; None (the default) when it runs in this process, whose
        wall time and peak memory the evaluation measures itself."""
        return None

    def neighbours_needed(self) -> int:
        """How many neighbours per query ``scores`` reads (0 for text-only methods)."""
        return 0

    def lexical_neighbours_needed(self) -> int:
        """How many lexical neighbours per query join the dense ones (hybrid search; 0: dense only). The
        retrieval stays sorted by cosine, so its first ``neighbours_needed()`` columns are the dense top-k."""
        return 0

    @classmethod
    def from_settings(cls, settings: Any, **params: Any) -> Predictor:
        """A predictor with its parameters from ``settings`` (a :class:`newsmon.shared.config.Settings`;
        only RAE-XMC reads it, from ``settings.scoring``), overridden by ``params``."""
        return cls(**params)

    def tune(self, validation: QueryBatch, Y_val: sp.csr_matrix, n_trials: int, **study: Any
             ) -> tuple[Predictor, dict[str, Any]]:
        """A copy with parameters tuned on ``validation`` (``(n, L)`` gold ``Y_val``) and what the search
        found (reported as the tuned method's params). Only methods with ``tunable = True`` implement it.

        Raises:
            NotImplementedError: the method has nothing to tune.
        """
        raise NotImplementedError(f"{self.name} has no tuning")


#: The registered predictor classes (``newsmon eval --methods`` names them): ``@register`` registers one under
#: ``cls.name`` (ValueError for no name, one that is not snake case or one taken by another class), ``available()``
#: lists their names in registration order, ``predictor_class(name)`` finds one (KeyError for an unknown name,
#: listing the available ones).
PREDICTORS: Registry[type[Predictor]] = Registry("predictor", listing="available")
register = PREDICTORS.register
available = PREDICTORS.names
predictor_class = PREDICTORS.get


def get_predictor(name: str, **params: Any) -> Predictor:
    """A new, unfitted predictor ``name`` with ``params`` (its constructor's keyword arguments).

    Raises:
        KeyError: unknown name. TypeError: a parameter the method does not take.
    """
    return predictor_class(name)(**params)
