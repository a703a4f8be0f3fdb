"""What ``eval``'s ``newsmon`` row is calibrated and scored on, rebuilt for the benchmarks that study the
calibration (``long_articles.py``): the train split as the knowledge memory, its articles scored leave-one-out plus
the validation split as the calibration articles, the test split as queries, all with hybrid search as the workers
search (:func:`new_label_replay.neighbours`), scored by the product's scorer. Embeddings come from the encoder's
cache under NEWSMON_HOME when it has them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from new_label_replay import neighbours
from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.encoder import Encoder
from newsmon.shared.scoring import (FittedModels, LabelVocab, MemoryArticles, OneRecord, Queries, Resolved, Retrieval,
                                    Scorer, decide, get_component)
from newsmon.shared.scoring.calibration import (GRID_K, LEXICAL_CANDIDATES, CalibrationResult, CalibrationSet,
                                                calibrate, calibration_set)
from newsmon.shared.scoring.lexical import TermVectors, fuse


@dataclass
class EvalInputs:
    """The train split as the knowledge memory, the calibration articles (train leave-one-out, then validation)
    and the test articles, with their hybrid top-N neighbours in the train memory (N = the calibration's widest
    need), scored by the product's scorer.

    Attributes:
        memory: the train split (passage embeddings, texts, labels); cal: the calibration articles
        (:class:`CalibrationSet`); n_validation: how many of them (the last ones) are the validation split's;
        test_texts / test_vectors / test_retrieval / test_gold: the test articles, their query embeddings,
        neighbours and label sets; known: the memory's labels; terms: the term-vector cache of the fusion.
    """

    memory: MemoryArticles
    cal: CalibrationSet
    n_validation: int
    test_texts: list[str]
    test_vectors: np.ndarray
    test_retrieval: Retrieval
    test_gold: list[tuple[str, ...]]
    known: set[str]
    terms: TermVectors

    def calibrate(self, rules: tuple[str, ...] | None = None) -> CalibrationResult:
        """The calibration of eval's ``newsmon`` row on these articles (trying the decision ``rules``; default:
        every registered rule)."""
        return calibrate(self.cal, self.terms, rules)

    def proposals(self, p: ScoringParams, vocab: LabelVocab) -> tuple[np.ndarray, np.ndarray]:
        """``(n, L)`` / ``(m, L)`` bool proposals of ``p`` on the calibration articles (the memory's own held out,
        as the calibration scores them) and on the test articles (the scorer, as ``eval``), over ``vocab``."""
        L = len(vocab)
        r_cal = fuse(self.cal.retrieval, self.cal.texts, p.lexical_weight, max(GRID_K), self.terms)
        evidence = {s.name: self.cal.evidence(get_component(s.name), s.parsed()) for s in p.components}
        P_cal = decide(r_cal, LabelVocab(vocab.labels), p, evidence, self.cal.label_counts).proposed
        res = Resolved(p, "eval", frozenset(self.known), "calibration")
        _, P_te = Scorer(OneRecord(res, FittedModels(self.memory, self.cal.models)), terms=self.terms).matrix(
            self.test_texts, [None] * len(self.test_texts), self.test_vectors, self.test_retrieval, res, vocab)
        return pad(P_cal, L), P_te

    def gold_matrices(self) -> tuple[LabelVocab, np.ndarray, np.ndarray]:
        """The vocabulary (the memory's labels first, then the others) and the ``(n, L)`` / ``(m, L)`` bool gold
        of the calibration and test articles over it."""
        vocab = LabelVocab(sorted(self.known))
        Y = [vocab.encode(g) for g in (self.cal.gold, self.test_gold)]
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
    memory = MemoryArticles(P[tr], [texts[i] for i in tr], [labels[i] for i in tr])
    cal = calibration_set(memory, neighbours(Q, P, ids, texts, labels, tr, tr, n, True),
                          neighbours(Q, P, ids, texts, labels, va, tr, n, False), [labels[i] for i in va],
                          Queries([texts[i] for i in va], Q[va]))
    return EvalInputs(memory, cal, len(va), [texts[i] for i in te], Q[te],
                      neighbours(Q, P, ids, texts, labels, te, tr, n, False), [labels[i] for i in te],
                      {lb for i in tr for lb in labels[i]}, TermVectors())
