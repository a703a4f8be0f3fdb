"""The label-set vote: the neighbours vote, with their softmax weights, for their *exact* label sets; when the
winning set holds at least ``share`` of the weight it is proposed as a whole, replacing the article's other
proposals (a kNN over label powersets, which targets subset accuracy)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.rae_xmc import neighbour_weights
from newsmon.shared.scoring.retrieval import Retrieval
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule


def set_vote(retrieval: Retrieval, k: int, tau: float) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """The label-set vote: per query, the exact label set with the largest summed softmax weight among its
    first ``k`` neighbours (weights ``softmax(s / tau)``), and that weight.

    Returns:
        (``m`` winning label sets (sorted tuples; ``()`` without neighbours), ``(m,)`` float64 weights in [0, 1]).
    """
    w = neighbour_weights(retrieval.sims, min(k, retrieval.k), tau)
    sets, weights = [], np.zeros(len(w))
    for i, row in enumerate(retrieval.labels):
        acc: dict[tuple[str, ...], float] = {}
        for j, labels in enumerate(row[:k]):
            if w[i, j] > 0 and labels:
                key = tuple(sorted(labels))
                acc[key] = acc.get(key, 0.0) + w[i, j]
        best = max(acc.items(), key=lambda kv: (kv[1], -len(kv[0])), default=((), 0.0))
        sets.append(best[0])
        weights[i] = best[1]
    return sets, weights


class SetVoteOptions(Options):
    share: float = Field(0.45, gt=0, le=1, allow_inf_nan=False, description="The share of the softmax weight the "
                         "winning label set must hold.")


@register_rule
class SetVote(DecisionRule):
    """The label-set vote (see the module docstring)."""

    name = "set_vote"
    Options = SetVoteOptions
    ORDER = 20
    CALIBRATE_AT = 20
    GRID = tuple({"share": v} for v in (0.25, 0.35, 0.45, 0.55, 0.65))

    def apply(self, state: DecisionState, options: SetVoteOptions) -> None:
        sets, weights = set_vote(state.retrieval, state.params.top_k, state.params.tau)
        rows = np.flatnonzero(weights >= options.share)
        chosen = np.zeros((len(rows), state.proposed.shape[1]), dtype=bool)
        for r, i in enumerate(rows):
            chosen[r, [state.vocab.index[lb] for lb in sets[i]]] = True
        state.replace_rows(rows, chosen, self.name)
