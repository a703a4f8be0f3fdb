"""The tail-support rule: a label carried by at least ``support`` of the first ``neighbours`` neighbours, each at
cosine >= ``similarity``, is proposed whatever its softmax share, so a few confirmed close articles suffice for a
new or rare label (the RAE-XMC paper notes that retrieval hurts the tail and suggests 1-NN there)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule


def tail_support(retrieval: Retrieval, vocab: LabelVocab, support: int, neighbours: int,
                 similarity: float) -> np.ndarray:
    """``(m, L)`` bool: labels carried by at least ``support`` of each query's first ``neighbours`` neighbours
    that have a dense cosine similarity >= ``similarity`` (:attr:`Retrieval.cosine`: after hybrid retrieval's
    fusion the ranking score is not a cosine, and the threshold is one)."""
    n = min(neighbours, retrieval.k)
    close = retrieval.head(n)
    rows = close.label_matrix(vocab)
    L = len(vocab)
    rows = sp.csr_matrix((rows.data, rows.indices, rows.indptr), shape=(rows.shape[0], L))
    ok = (np.nan_to_num(close.cosine, neginf=-1.0) >= similarity).astype(np.float32).reshape(-1)
    m = close.sims.shape[0]
    W = sp.csr_matrix((ok, (np.repeat(np.arange(m), n), np.arange(m * n))), shape=(m, m * n))
    return np.asarray((W @ rows).todense()) >= support


class SupportOptions(Options):
    support: int = Field(3, ge=1, le=100, description="Close neighbours that must carry the label.")
    neighbours: int = Field(5, ge=1, le=200, description="The first neighbours the rule looks at.")
    similarity: float = Field(0.9, ge=-1, le=1, allow_inf_nan=False, description="Their minimum cosine.")


@register_rule
class TailSupport(DecisionRule):
    """Tail support (see the module docstring). Kept by the calibration unless it lowers the objective: it serves
    labels that appear after the calibration, which a leave-one-out over a static corpus cannot show."""

    name = "tail_support"
    Options = SupportOptions
    ORDER = 30
    CALIBRATE_AT = 40
    KEEP = "not_worse"
    GRID = tuple({"support": s, "neighbours": n, "similarity": t}
                 for s, n, t in ((3, 10, 0.88), (3, 5, 0.85), (3, 5, 0.88), (3, 5, 0.9), (2, 3, 0.9), (3, 3, 0.9),
                                 (3, 3, 0.92), (3, 3, 0.94)))

    def apply(self, state: DecisionState, options: SupportOptions) -> None:
        state.propose(tail_support(state.retrieval, state.vocab, options.support, options.neighbours,
                                   options.similarity), self.name)

    def neighbours_needed(self, options: SupportOptions) -> int:
        return options.neighbours
