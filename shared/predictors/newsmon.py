"""The product's predictor, ``newsmon``, for ``eval``: a thin adapter of the scorer
(:class:`newsmon.shared.scoring.Scorer`, what the workers propose with) to the :class:`Predictor` interface, with the
parameters a calibration chose on the train split (the memory, scored leave-one-out) and the validation split
(:func:`newsmon.shared.scoring.calibration.calibrate`), so that ``eval`` measures the production path beside the
baselines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.heap import trim_heap
from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet, register
from newsmon.shared.scoring import FittedModels, LabelVocab, MemoryArticles, OneRecord, Queries, Resolved, Scorer
from newsmon.shared.scoring.calibration import (
    GRID_K,
    LEXICAL_CANDIDATES,
    Objective,
    allowed_components,
    calibrate,
    calibration_set,
)
from newsmon.shared.scoring.decision import retrieval_size
from newsmon.shared.scoring.lexical import TermVectors

#: The record id ``eval``'s proposals name: the calibration made in the run.
EVAL_RECORD = "eval"


@register
class NewsmonPredictor(Predictor):
    """What the workers propose (the scorer) with parameters calibrated in :meth:`fit` (never on the test split),
    or with the ``params`` given.

    Args:
        params: fixed parameters; None = calibrate in :meth:`fit`.
    """

    name = "newsmon"
    display_name = "newsmon"
    needs_retrieval = True
    needs_training_retrieval = True
    needs_validation_retrieval = True

    def __init__(self, params: ScoringParams | None = None, objective: Objective | None = None,
                 components: Sequence[str] | None = None, hybrid: bool = True) -> None:
        self.fixed = params
        self.objective = objective or Objective()
        #: The components the calibration may try (``calibration.components``; None: every registered one).
        self.components, self.hybrid = allowed_components(components), hybrid  # and whether it tries hybrid retrieval
        self.calibration: Any = None
        self.vocab = LabelVocab()
        self.terms = TermVectors()
        self.resolved: Resolved | None = None
        self.models: FittedModels | None = None  # the memory's models (the calibration's, the ones it judged)
        self.scorer: Scorer | None = None

    def fit(self, train: TrainingSet) -> NewsmonPredictor:
        """The memory is the train split (its labels are the known ones: every other label counts as new for the
        new-label rule, as labels confirmed after a calibration do in the workers); without fixed parameters,
        calibrate on its articles scored leave-one-out (``train.retrieval``) plus ``train.validation``."""
        self.vocab = train.vocab
        own = _label_sets(train.labels, train.vocab)
        texts = list(train.texts or [])
        memory = MemoryArticles(train.vectors, texts if len(texts) == len(own) else [""] * len(own), own,
                                list(train.ids) if train.ids is not None else None)
        params, judged = self.fixed, {}
        if params is None:
            val = train.validation
            val_gold = _label_sets(train.validation_labels, train.vocab) if val is not None else []
            queries = Queries(list(train.validation_texts or [""] * len(val_gold)), train.validation_vectors)
            cal = calibration_set(memory, train.retrieval, val, val_gold, queries, validation_ids=train.validation_ids)
            cal.objective, cal.only, cal.hybrid = self.objective, self.components, self.hybrid
            self.calibration = calibrate(cal, self.terms)
            params, judged = self.calibration.params, cal.models  # the models the calibration judged run
            memory = cal.memory or memory  # in id order: the models not judged are fitted as the calibration's were
            del cal  # its articles' neighbours (a copy of train.retrieval's and the validation's), before scoring
            trim_heap()
        known = frozenset(lb for labels in own for lb in labels)
        self.resolved = Resolved(params, EVAL_RECORD, known, "calibration" if self.fixed is None else "settings")
        self.models = FittedModels(memory, judged)
        self.scorer = Scorer(OneRecord(self.resolved, self.models), None, self.terms)
        return self

    @classmethod
    def from_settings(cls, settings: Any, **params: Any) -> NewsmonPredictor:
        """Calibrated in :meth:`fit` with the objective, components and hybrid retrieval of ``settings.calibration``."""
        c = settings.calibration
        return cls(objective=Objective.from_settings(settings), components=c.components, hybrid=c.hybrid, **params)

    def with_params(self, params: ScoringParams) -> NewsmonPredictor:
        """A fitted copy scoring with ``params`` (the same memory, models and known labels: an ablation row)."""
        out = NewsmonPredictor(params)
        out.vocab, out.terms, out.models = self.vocab, self.terms, self.models
        out.resolved = Resolved(params, EVAL_RECORD, self.resolved.known_labels, "settings")
        out.scorer = Scorer(OneRecord(out.resolved, self.models), None, self.terms)
        return out

    def score_and_decide(self, queries: QueryBatch) -> tuple[np.ndarray, np.ndarray]:
        """``(m, L)`` float32 scores and ``(m, L)`` bool proposals over the training vocabulary."""
        langs = list(queries.langs) or [None] * len(queries)
        return self.scorer.matrix(queries.texts, langs, queries.vectors, queries.retrieval, self.resolved,
                                  LabelVocab(self.vocab.labels))

    def scores(self, queries: QueryBatch) -> np.ndarray:
        return self.score_and_decide(queries)[0]

    def decide(self, scores: np.ndarray) -> np.ndarray:
        """Only the threshold part of the rules (the others need the neighbours: use :meth:`score_and_decide`)."""
        return scores > self.resolved.params.threshold

    @property
    def params(self) -> dict[str, Any]:
        out = self.resolved.params.model_dump(mode="json") if self.resolved is not None else {}
        if self.calibration is not None:
            out["calibration"] = {k: round(v, 4) for k, v in self.calibration.figures.items()}
        return out

    def neighbours_needed(self) -> int:
        p = self.fixed
        if p is None:
            return max(max(GRID_K), LEXICAL_CANDIDATES)
        return retrieval_size(p)[0]

    def lexical_neighbours_needed(self) -> int:
        p = self.fixed
        if p is None:
            return LEXICAL_CANDIDATES
        return retrieval_size(p)[1]


def _label_sets(Y: sp.csr_matrix, vocab: LabelVocab) -> list[tuple[str, ...]]:
    """The label sets of the rows of a 0/1 CSR matrix over ``vocab``."""
    Y = sp.csr_matrix(Y)
    return [tuple(vocab.labels[j] for j in Y.indices[Y.indptr[i]:Y.indptr[i + 1]]) for i in range(Y.shape[0])]
