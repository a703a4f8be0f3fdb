"""Calibration of the scorer: the search (:mod:`.search`), the run its levers' hooks see (:mod:`.run`), which
levers it keeps and why (:mod:`.selection`), the calibration articles (:mod:`.inputs`) and what it returns
(:mod:`.result`)."""

from newsmon.shared.scoring.calibration.inputs import CalibrationSet, allowed_components, calibration_set
from newsmon.shared.scoring.calibration.result import LEXICAL_CANDIDATES, CalibrationResult
from newsmon.shared.scoring.calibration.run import GRID_THRESHOLD, CalibrationRun
from newsmon.shared.scoring.calibration.search import GRID_K, GRID_LEXICAL, GRID_TAU, OBJECTIVE, calibrate
from newsmon.shared.scoring.objective import MICRO_AND_SUBSET, Objective

__all__ = ["allowed_components", "CalibrationResult", "CalibrationRun", "CalibrationSet", "GRID_K", "GRID_LEXICAL",
           "GRID_TAU", "GRID_THRESHOLD", "LEXICAL_CANDIDATES", "MICRO_AND_SUBSET", "OBJECTIVE", "Objective",
           "calibrate", "calibration_set"]
