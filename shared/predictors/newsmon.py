"""The product's predictor, ``newsmon``: what the workers propose (:func:`newsmon.shared.predictors.rules.newsmon_decide`)
with the parameters a calibration chose (:func:`newsmon.shared.predictors.calibrate.calibrate`), as one
:class:`Predictor` so that ``eval`` measures the production path beside the baselines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet, register
from newsmon.shared.predictors.calibrate import GRID_K, LABEL_KEY_GRID, LEXICAL_CANDIDATES, calibrate
from newsmon.shared.predictors.head_model import HeadModel, calibration_head_scores, head_models
from newsmon.shared.predictors.label_keys import LabelHits, LabelKeys
from newsmon.shared.predictors.lexical import TermVectors, fuse
from newsmon.shared.predictors.retrieval import LabelVocab, Retrieval
from newsmon.shared.predictors.rules import neighbours_needed, newsmon_decide


#: Label keys retrieved per calibration article (the most any option of the grid reads).
MAX_LABEL_KEYS = max(n for _, n, _ in LABEL_KEY_GRID)


@register
class NewsmonPredictor(Predictor):
    """What the workers propose: :func:`newsmon_decide` with parameters calibrated by
    :func:`newsmon.shared.predictors.calibrate.calibrate` on the memory (leave-one-out) and the validation
    articles in :meth:`fit` (never the test split), or with the ``params`` given.

    Args:
        params: fixed parameters (a :class:`newsmon.shared.config.RaeSettings` or any object with its fields);
            None = calibrate in :meth:`fit`.
    """

    name = "newsmon"
    display_name = "newsmon"
    needs_retrieval = True
    needs_training_retrieval = True
    needs_validation_retrieval = True

    def __init__(self, params: Any = None) -> None:
        self.fixed = params
        self.chosen: Any = params
        self.calibration: Any = None
        self.vocab = LabelVocab()
        self.terms = TermVectors()
        self.known_labels: frozenset[str] | None = None
        self.label_keys: LabelKeys | None = None
        self.label_counts: dict[str, int] | None = None
        self.head_models: Callable[[float], HeadModel] | None = None  # C -> the head model fitted on the memory

    def fit(self, train: TrainingSet) -> "NewsmonPredictor":
        """Keep the vocabulary and the labels of the memory (the train split: every other label counts as new
        for the new-label rule, as labels confirmed after a calibration do in the workers) and, without fixed
        parameters, calibrate on ``train.retrieval`` (leave-one-out) plus ``train.validation`` (see
        :class:`TrainingSet`)."""
        self.vocab = train.vocab
        Y = sp.csr_matrix(train.labels)
        self.known_labels = frozenset(train.vocab.labels[j] for j in np.unique(Y.indices))
        self.label_counts = {train.vocab.labels[j]: int(c) for j, c in enumerate(np.bincount(Y.indices,
                                                                                           minlength=Y.shape[1])) if c}
        own = _label_sets(train.labels, train.vocab)
        memory_texts = list(train.texts or [])
        if len(memory_texts) == len(own):
            self.head_models = head_models(memory_texts, own)
        if train.vectors is not None:
            self.label_keys = LabelKeys(train.vectors.shape[1]).add(train.vectors, own)
        if self.fixed is None:
            parts, gold, texts = [train.retrieval], list(own), list(train.texts)
            hits = [self.label_keys.top(train.vectors, MAX_LABEL_KEYS, train.vectors, own)] if self.label_keys else []
            if train.validation is not None and train.validation_labels is not None:
                parts.append(train.validation)
                gold += _label_sets(train.validation_labels, train.vocab)
                texts += list(train.validation_texts or [""] * len(train.validation.labels))
                if hits and train.validation_vectors is not None:
                    hits.append(self.label_keys.top(train.validation_vectors, MAX_LABEL_KEYS))
            head = (calibration_head_scores(memory_texts, own, texts[len(own):], fitted=self.head_models)
                    if self.head_models is not None and len(texts) == len(gold) else None)
            self.calibration = calibrate(Retrieval.concat(parts), gold, query_texts=texts, terms=self.terms,
                                         memory_labels=self.known_labels,
                                         label_hits=LabelHits.concat(hits) if len(hits) == len(parts) else None,
                                         label_counts=self.label_counts, head=head)
            self.chosen = self.calibration.params
        return self

    def score_and_decide(self, queries: QueryBatch) -> tuple[np.ndarray, np.ndarray]:
        """``(m, L)`` float32 scores and ``(m, L)`` bool proposals over the training vocabulary."""
        vocab = LabelVocab(self.vocab.labels)
        p = self.chosen
        r = fuse(queries.retrieval, queries.texts, getattr(p, "lexical_weight", 0.0), neighbours_needed(p),
                 self.terms)
        hits = None
        if getattr(p, "label_lambda", 0.0) and self.label_keys is not None and queries.vectors is not None:
            hits = self.label_keys.top(queries.vectors, p.label_keys)
        head = None
        if getattr(p, "head_weight", 0.0) and self.head_models is not None and queries.texts is not None:
            head = self.head_models(p.head_c).scores(queries.texts)
        scores, proposed = newsmon_decide(r, vocab, p, self.known_labels, hits, self.label_counts, head)
        L = len(self.vocab)
        return scores[:, :L], proposed[:, :L]

    def scores(self, queries: QueryBatch) -> np.ndarray:
        return self.score_and_decide(queries)[0]

    def decide(self, scores: np.ndarray) -> np.ndarray:
        """Only the threshold part of the rule (the others need the neighbours: use :meth:`score_and_decide`)."""
        return scores > self.chosen.threshold

    @property
    def params(self) -> dict[str, Any]:
        p = self.chosen
        out = p.as_dict() if hasattr(p, "as_dict") else p.model_dump() if hasattr(p, "model_dump") else {}
        if self.calibration is not None:
            out["calibration"] = {k: round(v, 4) for k, v in self.calibration.figures.items()}
        return out

    def neighbours_needed(self) -> int:
        p = self.fixed
        if p is None:
            return max(max(GRID_K), LEXICAL_CANDIDATES)
        return max(neighbours_needed(p), p.lexical_candidates if p.lexical_weight else 0)

    def lexical_neighbours_needed(self) -> int:
        p = self.fixed
        if p is None:
            return LEXICAL_CANDIDATES
        return p.lexical_candidates if p.lexical_weight else 0


def _label_sets(Y: sp.csr_matrix, vocab: LabelVocab) -> list[tuple[str, ...]]:
    """The label sets of the rows of a 0/1 CSR matrix over ``vocab``."""
    Y = sp.csr_matrix(Y)
    return [tuple(vocab.labels[j] for j in Y.indices[Y.indptr[i]:Y.indptr[i + 1]]) for i in range(Y.shape[0])]
