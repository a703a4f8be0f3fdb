"""Abstention: propose nothing from retrieval, and say why, rather than the memory's majority label, for an
article the neighbours cannot speak for (issue: 1 MB of one letter was proposed the corpus's most frequent label).

* ``too_few_words``: the text has fewer distinct real words than ``min_words`` (a real word: 2 to 30 letters;
  numbers, punctuation, markup and runs of one letter longer than any word are not words). On in the defaults.
* ``far_from_memory``: the nearest memory article's cosine is below ``similarity``. Calibrated on the calibration
  articles (the largest cut that does not lower the objective, from the cosines they have to their nearest memory
  article), so it abstains only for articles farther from the memory than what the calibration saw scored well.

Both run last (a label rule of the label registry may still propose a label for the article afterwards: its
keyword Boolean expression matched the text).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule

#: A word: a run of letters (no digit, no underscore); linear-time (one character class, no backtracking).
_LETTERS = re.compile(r"[^\W\d_]+")
WORD_MIN, WORD_MAX = 2, 30


def real_words(text: str, enough: int | None = None) -> int:
    """The number of distinct real words of ``text`` (lower-cased runs of 2 to 30 letters), counting stops at
    ``enough`` (None: all). Linear in the length of the text."""
    seen: set[str] = set()
    for m in _LETTERS.finditer(text):
        if WORD_MIN <= m.end() - m.start() <= WORD_MAX:
            seen.add(m.group().lower())
            if enough is not None and len(seen) >= enough:
                break
    return len(seen)


def _abstain(state: DecisionState, rows: np.ndarray, reasons: list[str]) -> None:
    """Clear the proposals of ``rows`` and record why."""
    state.proposed[rows] = False
    if state.why is not None:
        state.why[rows] = -1
    for i, why in zip(rows, reasons):
        state.abstained[i] = why


class WordsOptions(Options):
    min_words: int = Field(2, ge=1, le=1000, description="The fewest distinct real words an article must have.")


@register_rule
class TooFewWords(DecisionRule):
    """Abstain on an article with too few real words (see the module docstring)."""

    name = "too_few_words"
    Options = WordsOptions
    ORDER = 90

    def apply(self, state: DecisionState, options: WordsOptions) -> None:
        if state.texts is None:
            return
        counts = [real_words(t, options.min_words) for t in state.texts]
        rows = np.array([i for i, n in enumerate(counts) if n < options.min_words], dtype=int)
        _abstain(state, rows, [f"too few real words ({counts[i]} < {options.min_words})" for i in rows])


def nearest_cosine(cosines: np.ndarray) -> np.ndarray:
    """``(m,)`` float64: each article's highest neighbour cosine (``(m, K)`` dense cosines; after hybrid retrieval's
    fusion the first neighbour need not be the nearest), -1 without neighbours."""
    if cosines.shape[1] == 0:
        return np.full(cosines.shape[0], -1.0)
    return np.nan_to_num(cosines.astype(np.float64), neginf=-1.0).max(axis=1)


class DistanceOptions(Options):
    similarity: float = Field(0.7, ge=-1, le=1, allow_inf_nan=False, description="The lowest cosine of the "
                              "nearest memory article.")


@register_rule
class FarFromMemory(DecisionRule):
    """Abstain on an article farther from the memory than ``similarity`` (see the module docstring); kept by the
    calibration unless it lowers the objective."""

    name = "far_from_memory"
    Options = DistanceOptions
    ORDER = 91
    CALIBRATE_AT = 70
    KEEP = "not_worse"

    def apply(self, state: DecisionState, options: DistanceOptions) -> None:
        nearest = nearest_cosine(state.retrieval.cosine)
        rows = np.flatnonzero(nearest < options.similarity)
        _abstain(state, rows, [f"the nearest memory article is too far (cosine {nearest[i]:.3f} < "
                               f"{options.similarity:g})" for i in rows])

    def grid(self, calibration: Any = None) -> list[Any]:
        """Cuts from the calibration articles' cosines to their nearest memory article, strictest first: its
        5 %, 2 %, 1 % and 0.5 % quantiles and just below its minimum (which abstains on none of them)."""
        if calibration is None or calibration.retrieval.k == 0:
            return []
        nearest = nearest_cosine(calibration.retrieval.cosine)
        cuts = [float(np.quantile(nearest, q)) for q in (0.05, 0.02, 0.01, 0.005)] + [float(nearest.min()) - 0.005]
        # rounded down to 3 decimals: an article at the quantile itself is not cut (float32 cosines)
        return [DistanceOptions(similarity=max(-1.0, math.floor(c * 1000) / 1000)) for c in sorted(set(cuts),
                                                                                                   reverse=True)]
