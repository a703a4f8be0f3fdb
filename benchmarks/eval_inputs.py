"""What ``eval``'s ``newsmon`` row is calibrated and scored on, rebuilt for the benchmarks that study the
calibration (``label_count_rule.py``, ``calibration_surface.py``): the train split as the knowledge memory, its
articles scored leave-one-out plus the validation split as the calibration articles, the test split as queries,
all with hybrid search as the workers search (:func:`new_label_replay.neighbours`), and the label keys and label
counts of the train memory. Embeddings come from the encoder's cache under NEWSMON_HOME when it has them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from new_label_replay import neighbours
from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.encoder import Encoder
from newsmon.shared.predictors import LabelVocab, Retrieval
from newsmon.shared.predictors.calibrate import GRID_K, LEXICAL_CANDIDATES, RULE_GRID, CalibrationResult, calibrate
from newsmon.shared.predictors.head_model import HeadModel, HeadScores, calibration_head_scores, head_models
from newsmon.shared.predictors.label_keys import LabelHits, LabelKeys
from newsmon.shared.predictors.lexical import TermVectors, fuse
from newsmon.shared.predictors.newsmon import MAX_LABEL_KEYS
from newsmon.shared.predictors.rules import neighbours_needed


@dataclass
class EvalInputs:
    """The calibration articles (``cal_*``: train leave-one-out, then validation) and the test articles
    (``test_*``) with their dense top-N neighbours in the train memory (N = the calibration's widest need).

    Attributes:
        cal_retrieval / test_retrieval: neighbours; cal_texts / test_texts: the articles' texts;
        cal_gold / test_gold: their label sets; cal_hits: the calibration articles' nearest label keys
        (leave-one-out for train); n_validation: how many of the calibration articles (the last ones) are the
        validation split's; keys: the train memory's label keys (``keys.top`` for the test queries);
        test_vectors: ``(m, d)`` float32 query embeddings of the test articles; known: the train memory's labels;
        counts: memory articles per label; terms: the term-vector cache the lexical fusion shares;
        cal_head: the calibration articles' head-model probabilities for a given C (out of fold for train);
        head_model: the head model fitted on the train memory for a given C (the test articles' model).
    """

    cal_retrieval: Retrieval
    cal_texts: list[str]
    cal_gold: list[tuple[str, ...]]
    cal_hits: LabelHits
    n_validation: int
    test_retrieval: Retrieval
    test_texts: list[str]
    test_gold: list[tuple[str, ...]]
    test_vectors: np.ndarray
    keys: LabelKeys
    known: set[str]
    counts: dict[str, int]
    terms: TermVectors
    cal_head: Callable[[float], HeadScores]
    head_model: Callable[[float], HeadModel]

    def heads(self, p: Any) -> tuple[HeadScores | None, HeadScores | None]:
        """The calibration and test articles' head-model probabilities under ``p`` (None when it has none)."""
        if not p.head_weight:
            return None, None
        return self.cal_head(p.head_c), self.head_model(p.head_c).scores(self.test_texts)

    def calibrate(self, rules: tuple[str, ...] = tuple(RULE_GRID)) -> CalibrationResult:
        """The calibration of eval's ``newsmon`` row on these articles, with every lever's inputs (as
        :class:`newsmon.shared.predictors.newsmon.NewsmonPredictor` gives them), trying the decision ``rules``."""
        return calibrate(self.cal_retrieval, self.cal_gold, rules=rules, query_texts=self.cal_texts, terms=self.terms,
                         memory_labels=self.known, label_hits=self.cal_hits, label_counts=self.counts,
                         head=self.cal_head)

    def scored_with(self, p: Any) -> tuple[Retrieval, Retrieval, LabelHits | None, LabelHits | None]:
        """What calibrated parameters ``p`` score: the calibration and test articles' neighbours fused with the
        lexical weight (as the workers fuse them) and their label keys (None when ``p`` has none)."""
        r_cal = fuse(self.cal_retrieval, self.cal_texts, p.lexical_weight, max(GRID_K), self.terms)
        r_te = fuse(self.test_retrieval, self.test_texts, p.lexical_weight, neighbours_needed(p), self.terms)
        if not p.label_lambda:
            return r_cal, r_te, None, None
        return r_cal, r_te, self.cal_hits, self.keys.top(self.test_vectors, p.label_keys)

    def gold_matrices(self) -> tuple[LabelVocab, np.ndarray, np.ndarray]:
        """The vocabulary (the memory's labels first, then the others) and the ``(n, L)`` / ``(m, L)`` bool gold
        of the calibration and test articles over it."""
        vocab = LabelVocab(sorted(self.known))
        Y = [vocab.encode(g) for g in (self.cal_gold, self.test_gold)]
        L = len(vocab)
        return vocab, *(pad(np.asarray(y.todense()).astype(bool), L) for y in Y)


def pad(a: np.ndarray, L: int) -> np.ndarray:
    """``a`` ``(m, *)`` cut or padded with False / 0 to ``L`` columns."""
    return a[:, :L] if a.shape[1] >= L else np.pad(a, ((0, 0), (0, L - a.shape[1])))


def build(data: str, max_chunks: int | None = None) -> EvalInputs:
    """Embed the corpus at ``data`` (both roles) and build :class:`EvalInputs`; ``max_chunks`` overrides the
    encoder's setting (long articles in windows, :mod:`newsmon.shared.long_text`)."""
    s = Settings()
    if max_chunks is not None:
        s.encoder.max_chunks = max_chunks
    arts = [a for a in load_corpus(data).articles if a.labels]
    ids, texts, labels = [a.id for a in arts], [a.text for a in arts], [tuple(a.labels) for a in arts]
    enc = Encoder(s.encoder, s.home)
    P, Q = enc.encode(texts, role="passage"), enc.encode(texts, role="query")
    enc.close()
    split = np.array([a.split for a in arts])
    tr, va, te = (np.flatnonzero(split == x) for x in ("train", "validation", "test"))
    n = max(max(GRID_K), LEXICAL_CANDIDATES)
    own = [labels[i] for i in tr]
    memory_texts = [texts[i] for i in tr]
    fitted = head_models(memory_texts, own)  # the test articles' model and the validation articles' alike
    keys = LabelKeys(P.shape[1]).add(P[tr], own)
    return EvalInputs(
        cal_retrieval=Retrieval.concat([neighbours(Q, P, ids, texts, labels, tr, tr, n, True),
                                        neighbours(Q, P, ids, texts, labels, va, tr, n, False)]),
        cal_texts=[texts[i] for i in tr] + [texts[i] for i in va], cal_gold=own + [labels[i] for i in va],
        cal_hits=LabelHits.concat([keys.top(Q[tr], MAX_LABEL_KEYS, P[tr], own), keys.top(Q[va], MAX_LABEL_KEYS)]),
        n_validation=len(va), test_retrieval=neighbours(Q, P, ids, texts, labels, te, tr, n, False),
        test_texts=[texts[i] for i in te], test_gold=[labels[i] for i in te], test_vectors=Q[te], keys=keys,
        known={lb for i in tr for lb in labels[i]}, counts=keys.label_counts(), terms=TermVectors(),
        cal_head=calibration_head_scores(memory_texts, own, [texts[i] for i in va], fitted=fitted), head_model=fitted)
