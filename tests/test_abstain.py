"""Abstention (:mod:`newsmon.shared.scoring.rules.abstain`): an article with too few real words, or farther from
the memory than the calibration saw, gets no label from retrieval and the reason, instead of the majority label
(1 MB of the letter ``a`` was proposed ``gospodarstvo``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring import LabelVocab, Retrieval, decide, explain
from newsmon.shared.scoring.calibration import CalibrationSet, calibrate
from newsmon.shared.scoring.rules.abstain import real_words


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _r(rows) -> Retrieval:
    return Retrieval.from_neighbours([[Hit(f"n{j}", s, lb) for j, (s, lb) in enumerate(row)] for row in rows])


def test_real_words_are_runs_of_two_to_thirty_letters():
    assert real_words("a" * 1_000_000) == 0  # one run of a million letters is no word
    assert real_words("Vlada je sprejela proračun, vlada 2024!") == 4  # vlada, je, sprejela, proračun
    assert real_words("x y z 123 ___ ... <p></p>") == 0  # single letters, digits, punctuation, markup
    assert real_words("aa " * 10) == 1 and real_words("\u200b" * 1000 + "beseda") == 1
    assert real_words(" ".join(f"be{chr(97 + i % 26)}{chr(97 + i // 26)}seda" for i in range(100)), enough=5) == 5


def test_too_few_words_abstains_with_the_reason_and_keeps_the_candidates():
    r = _r([[(0.9, ("gospodarstvo",)), (0.9, ("gospodarstvo",)), (0.9, ("ekonomija",))]] * 3)
    params = ScoringParams(top_k=3, tau=1.0, threshold=0.3)  # the defaults' rules: threshold, too_few_words
    texts = ["a" * 1_000_000, "Vlada je sprejela proračun za prihodnje leto.", "12 345 678 ... !!"]
    vocab = LabelVocab()
    d = decide(r, vocab, params, texts=texts, reasons=True)
    assert d.proposed.sum(axis=1).tolist() == [0, 2, 0]
    assert d.abstained[0] == "too few real words (0 < 2)" and d.abstained[1] is None
    assert d.abstained[2] == "too few real words (0 < 2)"
    first, second, _ = explain(r, d, vocab, candidates=5)
    assert first.labels == [] and first.abstained.startswith("too few real words")
    assert [x.label for x in first.candidates] == ["gospodarstvo", "ekonomija"]  # still shown to a moderator
    assert {x.label for x in second.labels} == {"gospodarstvo", "ekonomija"} and second.abstained is None


def test_far_from_memory_is_calibrated_to_cut_only_what_the_calibration_never_saw():
    rows, gold = [], []
    for i in range(40):
        lb = ("a",) if i % 2 else ("b",)
        rows.append([(0.8 + 0.002 * (i % 10), lb)] * 5)
        gold.append(lb)
    result = calibrate(CalibrationSet(_r(rows), gold), rules=("far_from_memory",), replay=False)
    step = result.steps[-1]
    assert step["step"] == "+ far_from_memory" and step["kept"]
    cut = result.params.rule("far_from_memory").similarity
    assert 0.79 <= cut <= 0.8  # at most the cosine of every calibration article's nearest memory article
    far = decide(_r([[(0.3, ("a",))] * 5, [(0.85, ("a",))] * 5]), LabelVocab(), result.params,
                 texts=["Vlada je sprejela proračun", "Vlada je sprejela proračun"], reasons=True)
    assert far.abstained[0].startswith("the nearest memory article is too far (cosine 0.300 <")
    assert far.proposed.sum(axis=1).tolist() == [0, 1] and far.abstained[1] is None


def test_the_nearest_memory_article_is_the_highest_cosine_also_after_fusion():
    from newsmon.shared.scoring.rules.abstain import nearest_cosine

    cos = np.array([[0.5, 0.9, 0.7], [-np.inf, -np.inf, -np.inf]], dtype=np.float32)  # fused order, then none
    assert nearest_cosine(cos).tolist() == pytest.approx([0.9, -1.0])
    assert nearest_cosine(np.zeros((2, 0), dtype=np.float32)).tolist() == [-1.0, -1.0]
