"""One tuner, one gate: the rollout gate judges the calibrated ``newsmon`` row and nothing else, the nightly chain has
no Optuna stage, and an older ``promoted.json`` (``rae`` parameters, no calibration records) is still read.

The rows are eval-report rows (figures in [0, 1]) shaped as :func:`newsmon.training_jobs.gate.calibrated_row` and
``eval`` give them; the real runs of the gate (calibration, scorer, promotion, workers) are in test_adapter.py and
test_training.py."""

from __future__ import annotations

import ast
import inspect

import pytest

from newsmon.shared.promotion import promoted_calibration
from newsmon.training_jobs.gate import GATED, judge

PRODUCTION = {"newsmon": {"uF1": 0.445, "Acc": 0.496, "n_articles": 300},
              "rae": {"uF1": 0.300, "Acc": 0.250, "n_articles": 300}}


def test_a_rising_rae_row_does_not_promote_a_falling_calibrated_row():
    # the measurement: the adapter lifted the neighbours, the calibrated row fell from 44.5 / 49.6
    candidate = {"newsmon": {"uF1": 0.337, "Acc": 0.286}, "rae": {"uF1": 0.380, "Acc": 0.330}}
    promoted, reason = judge(PRODUCTION, candidate, tolerance=0.005)
    assert not promoted
    assert reason == ("refused: calibrated newsmon uF1 33.7 < current 44.5 - tolerance 0.5, "
                      "calibrated newsmon Acc 28.6 < current 49.6 - tolerance 0.5")


def test_a_falling_rae_row_does_not_refuse_a_rising_calibrated_row():
    candidate = {"newsmon": {"uF1": 0.470, "Acc": 0.500}, "rae": {"uF1": 0.100, "Acc": 0.050}}
    promoted, reason = judge(PRODUCTION, candidate, tolerance=0.005)
    assert promoted
    assert reason == "promoted: calibrated newsmon uF1 47.0 vs 44.5, Acc 50.0 vs 49.6 (tolerance 0.5)"


def test_the_tolerance_and_each_figure():
    # within the tolerance: promoted; one figure beyond it: refused, and only that figure is named
    assert judge(PRODUCTION, {"newsmon": {"uF1": 0.441, "Acc": 0.492}}, tolerance=0.005)[0]
    promoted, reason = judge(PRODUCTION, {"newsmon": {"uF1": 0.600, "Acc": 0.490}}, tolerance=0.005)
    assert not promoted and "Acc 49.0 < current 49.6" in reason and "uF1" not in reason


def test_no_calibrated_row_is_an_error_not_a_decision():
    with pytest.raises(ValueError, match="no calibrated newsmon row"):
        judge(PRODUCTION, {"rae": {"uF1": 0.9, "Acc": 0.9}}, tolerance=0.005)
    with pytest.raises(ValueError, match="current model has no calibrated newsmon row"):
        judge({"rae": PRODUCTION["rae"]}, PRODUCTION, tolerance=0.005)
    with pytest.raises(ValueError, match="uF1 and Acc"):
        judge(PRODUCTION, {"newsmon": {"uF1": 0.9}}, tolerance=0.005)


def _imported(module) -> set[str]:
    """Every module name ``module``'s source imports (deferred imports inside functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_nightly_chain_has_no_optuna_stage():
    """The chain's modules import neither Optuna nor ``eval``'s runner (the Optuna study of ``rae`` is
    ``train tune``'s, outside the chain); the run's report has no tuning stage. ``run_nightly`` running with Optuna
    unimportable is in test_adapter.py."""
    from newsmon.training_jobs import gate, nightly, rollout
    from newsmon.training_jobs.nightly import NightlyReport

    for module in (nightly, rollout, gate):
        imported = _imported(module)
        assert "optuna" not in imported and "newsmon.shared.evaluation" not in imported, module.__name__
        assert "newsmon.training_jobs.rae_study" not in imported, module.__name__
    assert "tuning" not in NightlyReport.__dataclass_fields__
    assert "trials" not in inspect.signature(nightly.run_nightly).parameters
    assert "candidate_rae" not in inspect.signature(rollout.rollout).parameters
    assert GATED == "newsmon"


def test_promoted_json_names_records_and_an_older_one_is_still_read():
    new = {"model_path": "/m/candidate", "model_version": "e5+adapter-1", "gate": "newsmon",
           "calibration": {"en": "newsmon_en_e5+adapter-1@0123456789ab"}}
    assert promoted_calibration(new) == {"en": "newsmon_en_e5+adapter-1@0123456789ab"}
    older = {"model_path": "/m/candidate", "model_version": "e5-ft", "rae": {"top_k": 20, "tau": 0.05}}
    assert promoted_calibration(older) == {} and promoted_calibration(None) == {}


@pytest.mark.parametrize("refused", [True, False])
def test_the_rollout_deletes_what_no_reader_serves_and_keeps_what_is_served(tmp_path, refused):
    """A refused candidate's copy of the memory, its record and its models go; production's collection, served
    record and its models stay; the models of production's recalibration go unless it is the served record."""
    import numpy as np

    from newsmon.shared.config import Settings
    from newsmon.shared.memory import MemoryRouter
    from newsmon.shared.memory.router import stored_collections
    from newsmon.shared.scoring.models import ModelCache
    from newsmon.shared.scoring.records import CalibrationRecord, CalibrationStore, record_id
    from newsmon.shared.scoring.stored import ModelStore
    from newsmon.training_jobs.rollout import discard_unserved

    s = Settings(home=tmp_path)
    names = {}
    for version in ("prod1", "cand1"):
        router = MemoryRouter(s, version, 4)
        router.memory("en").upsert(["a"], np.ones((1, 4), dtype=np.float32), [["x"]])
        names[version] = router.collection("en")
        router.close()
    store, models = CalibrationStore(s), ModelStore(s)

    def record(collection: str, k: int) -> str:  # a record of ``collection`` with its stored models; its id
        rec = CalibrationRecord(collection=collection, language="en", model_version=collection.rsplit("_", 1)[-1],
                                params={"top_k": k}, objective="micro_f1 + subset_accuracy")
        cache = ModelCache(record_id(rec))
        cache.counts = {"x": 1}
        rec.models = models.write(cache)
        store.write(rec)
        return record_id(rec)

    recalibrated = record(names["prod1"], 20)  # the gate's recalibration of production (its models were written)
    served = record(names["prod1"], 10)  # written last: what production serves
    candidate = record(names["cand1"], 30)
    cand_settings = s.model_copy(deep=True)
    gone = discard_unserved(s, {"records": {"en": recalibrated}},
                            (cand_settings, {"model_version": "cand1", "dim": 4}) if refused else None)
    fresh = CalibrationStore(s, ttl_s=0)
    assert record_id(fresh.read(names["prod1"])) == served and models.read(served) is not None  # served: kept
    assert models.read(recalibrated) is None and gone["models"] == [recalibrated]
    assert names["prod1"] in stored_collections(s)
    if refused:
        assert names["cand1"] not in stored_collections(s) and gone["collections"] == [names["cand1"]]
        assert fresh.read(names["cand1"]) is None and models.read(candidate) is None
    else:  # promoted: the candidate is what is served now
        assert names["cand1"] in stored_collections(s) and models.read(candidate) is not None
    # production's recalibration that is the served record (same inputs, same id) keeps its models
    assert discard_unserved(s, {"records": {"en": served}}, None)["models"] == []
    assert models.read(served) is not None
