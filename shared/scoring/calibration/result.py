"""What a calibration returns (:func:`newsmon.shared.scoring.calibration.calibrate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from newsmon.schemas.scoring import ScoringParams

#: Hybrid retrieval's candidates: the dense top-N united with the lexical top-N of the knowledge memory.
LEXICAL_CANDIDATES = 200


@dataclass
class CalibrationResult:
    """What :func:`~newsmon.shared.scoring.calibration.calibrate` chose and why.

    Attributes:
        params: the chosen parameters; figures: their ``micro_f1``, ``subset_accuracy``, ``objective``,
        ``objective_lo`` / ``objective_hi`` (bootstrap 90 %) and ``n`` on the calibration articles;
        steps: the ablation, one entry per step (``step``, ``params``, ``micro_f1``, ``subset_accuracy``,
        ``objective``, ``kept``; the new-label step adds its replay's figures); known_labels: the labels of the
        memory it was fitted on (sorted), the calibration record's ``labels``.
    """

    params: ScoringParams
    figures: dict[str, float]
    steps: list[dict[str, Any]] = field(default_factory=list)
    known_labels: list[str] = field(default_factory=list)
