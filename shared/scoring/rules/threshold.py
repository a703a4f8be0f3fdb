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
from newsmon.shared.scoring.rules.threshold_search import bucket_ascent, choose_label_thresholds, cross_fitted_buckets

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
    APPLIES_THRESHOLDS = True

    def apply(self, state: DecisionState, options: Options) -> None:
        state.thresholds = column_thresholds(state.vocab, state.params, state.label_counts)
        state.propose(state.scores > state.thresholds[None, :], self.name)

    def calibrate(self, run: Any) -> None:
        """One threshold per label-frequency bucket (:data:`BUCKET_EDGES`, by coordinate ascent from the threshold
        over ``run.THRESHOLDS``, two rounds), then a threshold of its own for each label on at least
        :data:`~.threshold_search.LABEL_THRESHOLD_MIN` memory articles; each judged on proposals cross-fitted in two
        halves (fitted on one, judged on the other: :func:`~.threshold_search.cross_fitted_buckets`,
        :func:`~.threshold_search.choose_label_thresholds`) and, when kept, fitted on all the articles. Both on the
        scores so far (thresholds change no score). Without label counts: no step."""
        counts = run.cal.label_counts
        if counts is None:
            return
        S, labels = run.scores(), run.labels[:run.L]
        bucket = np.searchsorted(BUCKET_EDGES, [counts.get(lb, 0) for lb in labels], side="left")
        start = run.params.threshold
        chosen, _ = bucket_ascent(S, run.Y, bucket, start, run.THRESHOLDS, judge=run.judge)
        trial = run.with_fields(bucket_thresholds=tuple(chosen))
        run.offer("+ bucket thresholds", trial, run.decide(trial, scores=S),
                  judged=cross_fitted_buckets(S, run.Y, bucket, start, run.THRESHOLDS, run.judge))
        base = column_thresholds(LabelVocab(labels), run.params, counts)
        got = choose_label_thresholds(S, run.Y, base, labels, counts, run.THRESHOLDS, run.judge)
        trial = run.with_fields(label_thresholds=got.thresholds)
        if got.thresholds and got.crossed_proposals is not None:
            run.offer("+ label thresholds", trial, run.decide(trial, scores=S), judged=got.crossed_proposals,
                      labels=got.labels)
        else:
            run.record("+ label thresholds", trial, run.parts, False, why="no frequent label moves its threshold",
                       labels=got.labels)
