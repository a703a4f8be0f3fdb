"""The threshold rule: propose a label whose score is above its threshold (``ScoringParams.threshold``; one per
label-frequency bucket with ``bucket_thresholds``; a label's own from ``label_thresholds``, SCut in Yang, "A study
of thresholding strategies for text categorization", SIGIR 2001). The usual first rule; the calibration chooses
the thresholds themselves (base grid, bucket and per-label steps), so the rule has no options of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.retrieval import LabelVocab
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule

#: Label-frequency buckets of ``bucket_thresholds``: a label carried by <= 10 memory articles (rare, and every label
#: new since the calibration), 11-99, 100-499, >= 500 (frequent); the edges are the field's rare / frequent cuts.
BUCKET_EDGES = (10, 99, 499)


def column_thresholds(vocab: LabelVocab, params: Any, label_counts: Mapping[str, int] | None) -> np.ndarray:
    """``(L,)`` float64 threshold of each label of ``vocab``: ``params.bucket_thresholds[b]`` for the label's
    frequency bucket b (:data:`BUCKET_EDGES`, from ``label_counts``: memory articles per label, 0 when missing)
    when both are given, else ``params.threshold``; then ``params.label_thresholds`` ({label: threshold}, when
    given) for the labels it names."""
    buckets = getattr(params, "bucket_thresholds", None)
    if not buckets or label_counts is None:
        out = np.full(len(vocab), params.threshold, dtype=np.float64)
    else:
        counts = np.array([label_counts.get(lb, 0) for lb in vocab.labels])
        out = np.asarray(buckets, dtype=np.float64)[np.searchsorted(BUCKET_EDGES, counts, side="left")]
    for lb, t in (getattr(params, "label_thresholds", None) or {}).items():
        if lb in vocab.index:
            out[vocab.index[lb]] = t
    return out


@register_rule
class Threshold(DecisionRule):
    """``score > threshold`` per label (:func:`column_thresholds`)."""

    name = "threshold"
    Options = Options
    ORDER = 0
    CALIBRATE_AT = 0

    def apply(self, state: DecisionState, options: Options) -> None:
        state.thresholds = column_thresholds(state.vocab, state.params, state.label_counts)
        state.propose(state.scores > state.thresholds[None, :], self.name)
