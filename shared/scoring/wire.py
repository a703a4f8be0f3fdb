"""Proposals on the wire: a :class:`~newsmon.shared.scoring.retrieval.Proposal` as the parts of a
:class:`~newsmon.schemas.LabelProposal` (labels, candidates, scoring, abstention), the one conversion every path
that produces proposals uses (the classifier worker, ``POST /v1/suggest``, ``newsmon suggest``, the demo)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from newsmon.schemas import NeighbourRef, ProposedLabel
from newsmon.shared.scoring.retrieval import LabelScore, Proposal


def proposed_labels(items: Sequence[LabelScore]) -> list[ProposedLabel]:
    """Scored labels as the wire's :class:`~newsmon.schemas.ProposedLabel` (``source = "retrieval"``): each
    with its supporting neighbours, their similarity clipped to [-1, 1] and their titles, the decision rule that
    proposed it, its own threshold and why, in words (its ``reason``)."""
    return [ProposedLabel(label=x.label, score=float(x.score), decided_by=x.decided_by, threshold=x.threshold,
                          reason=x.reason,
                          neighbours=[NeighbourRef(article_id=a, similarity=float(np.clip(sim, -1, 1)), title=title)
                                      for (a, sim), title in zip(x.neighbours,
                                                                 [*x.titles, *[None] * len(x.neighbours)])])
            for x in items]


def proposal_fields(p: Proposal) -> dict[str, Any]:
    """The :class:`~newsmon.schemas.LabelProposal` fields a scored proposal fills: ``labels``, ``candidates``,
    ``scoring`` (the parameters and where they came from) and ``abstained``."""
    return {"labels": proposed_labels(p.labels), "candidates": proposed_labels(p.candidates),
            "scoring": p.resolved.wire() if p.resolved is not None else None, "abstained": p.abstained}
