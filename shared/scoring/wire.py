"""The scorer's proposals in their one type: an :class:`~newsmon.shared.scoring.retrieval.Explained` (the scorer's
working form, with the evidence's provenance) as the :class:`~newsmon.schemas.Proposal` that
:meth:`Scorer.propose <newsmon.shared.scoring.scorer.Scorer.propose>` returns and every path passes on to the wire
(the classifier worker, ``POST /v1/suggest``, ``newsmon suggest``, the demo, the gate)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from newsmon.schemas import NeighbourRef, Proposal, ProposedLabel, ScoringInfo
from newsmon.shared.scoring.retrieval import Explained, LabelScore


def proposed_labels(items: Sequence[LabelScore]) -> list[ProposedLabel]:
    """Scored labels as the wire's :class:`~newsmon.schemas.ProposedLabel` (``source = "retrieval"``): each
    with its supporting neighbours, their similarity clipped to [-1, 1] and their titles, the decision rule that
    proposed it, its own threshold and why, in words (its ``reason``)."""
    return [ProposedLabel(label=x.label, score=float(x.score), decided_by=x.decided_by, threshold=x.threshold,
                          reason=x.reason,
                          neighbours=[NeighbourRef(article_id=a, similarity=_clipped(sim), title=title)
                                      for (a, sim), title in zip(x.neighbours,
                                                                 [*x.titles, *[None] * len(x.neighbours)])])
            for x in items]


def _clipped(sim: float) -> float:
    """``sim`` clipped to [-1, 1] (``np.clip`` of a scalar, without its cost: a cosine is nearly always in range;
    NaN stays NaN, which the wire refuses)."""
    return float(sim) if -1.0 <= sim <= 1.0 else float(np.clip(sim, -1, 1))


def to_proposal(e: Explained, searched: tuple[str, ...], scoring: ScoringInfo) -> Proposal:
    """The :class:`~newsmon.schemas.Proposal` of one article: ``e``'s labels, candidates and abstention, the
    collections searched and the parameters it was scored with (``scoring``: :meth:`Resolved.wire
    <newsmon.shared.scoring.scorer.Resolved.wire>`)."""
    return Proposal(labels=proposed_labels(e.labels), candidates=proposed_labels(e.candidates), scoring=scoring,
                    abstained=e.abstained, searched=searched)
