"""The floor rule: an article no earlier rule proposed anything for gets its best label when that label's score
reaches ``score`` (an article always close to its neighbours gets at least one label)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule


class FloorOptions(Options):
    score: float = Field(0.1, ge=0, le=1, allow_inf_nan=False, description="The best label's lowest score.")


@register_rule
class Floor(DecisionRule):
    """The floor (see the module docstring)."""

    name = "floor"
    Options = FloorOptions
    ORDER = 50
    CALIBRATE_AT = 10
    GRID = tuple({"score": f} for f in (0.0, 0.1, 0.2, 0.3))

    def apply(self, state: DecisionState, options: FloorOptions) -> None:
        m = state.scores.shape[0]
        if state.scores.shape[1] == 0:
            return
        empty = ~state.proposed.any(axis=1)
        best = state.scores.argmax(axis=1)
        hit = np.flatnonzero(empty & (state.scores[np.arange(m), best] >= options.score))
        extra = np.zeros_like(state.proposed)
        extra[hit, best[hit]] = True
        state.propose(extra, self.name)
