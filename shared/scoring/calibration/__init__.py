"""Calibration of the scorer: the search (:mod:`.search`), its steps (:mod:`.levers`, :mod:`.thresholds`), the
calibration articles (:mod:`.inputs`) and what it returns (:mod:`.result`)."""

from newsmon.shared.scoring.calibration.inputs import CalibrationSet, calibration_set
from newsmon.shared.scoring.calibration.levers import GRID_K, GRID_THRESHOLD
from newsmon.shared.scoring.calibration.objective import MICRO_AND_SUBSET, Objective
from newsmon.shared.scoring.calibration.result import LEXICAL_CANDIDATES, CalibrationResult
from newsmon.shared.scoring.calibration.search import GRID_LEXICAL, GRID_TAU, OBJECTIVE, calibrate

__all__ = ["CalibrationResult", "CalibrationSet", "GRID_K", "GRID_LEXICAL", "GRID_TAU", "GRID_THRESHOLD",
           "LEXICAL_CANDIDATES", "MICRO_AND_SUBSET", "OBJECTIVE", "Objective", "calibrate", "calibration_set"]
