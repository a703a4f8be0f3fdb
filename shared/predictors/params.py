"""The ``newsmon`` predictor's parameters as the calibration chooses them, and what a calibration returns
(:mod:`newsmon.shared.predictors.calibrate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Hybrid retrieval's candidates: the dense top-N united with the lexical top-N of the knowledge memory.
LEXICAL_CANDIDATES = 200


@dataclass
class Params:
    """The ``newsmon`` predictor's parameters (the fields of :class:`newsmon.shared.config.RaeSettings`)."""

    top_k: int = 50
    tau: float = 0.04
    threshold: float = 0.5
    floor: float | None = None
    set_vote: float | None = None
    label_count: float | None = None
    tail_support: int = 0
    tail_neighbours: int = 5
    tail_similarity: float = 0.9
    lexical_weight: float = 0.0
    lexical_candidates: int = LEXICAL_CANDIDATES
    new_label_support: int = 0
    new_label_neighbours: int = 20
    new_label_similarity: float = 0.8
    label_lambda: float = 0.0
    label_keys: int = 10
    label_tau: float = 0.01
    head_weight: float = 0.0
    head_c: float = 10.0
    bucket_thresholds: tuple[float, float, float, float] | None = None
    label_thresholds: dict[str, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (JSON-able: tuples as lists, so a stored record reads back equal)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


@dataclass
class CalibrationResult:
    """What :func:`calibrate` chose and why.

    Attributes:
        params: the chosen parameters; figures: their ``micro_f1``, ``subset_accuracy``, ``objective``,
        ``objective_lo`` / ``objective_hi`` (bootstrap 90 %) and ``n`` on the calibration articles;
        steps: the ablation, one entry per step (``step``, ``params``, ``micro_f1``, ``subset_accuracy``,
        ``objective``, ``kept``; the new-label step adds its replay's figures); known_labels: the labels of the
        memory it was fitted on (sorted), the calibration record's ``labels``.
    """

    params: Params
    figures: dict[str, float]
    steps: list[dict[str, Any]] = field(default_factory=list)
    known_labels: list[str] = field(default_factory=list)
