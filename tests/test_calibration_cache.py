"""Calibrations cached by what they depend on (issue 28 item 3): an unchanged memory is not calibrated again,
neither in the same memory (`memory build --calibrate` run twice) nor in a memory rebuilt from the same articles
(the demo's, every run); a changed memory, validation split, setting or code has other inputs, so no earlier
calibration is found for it. Real weights, the real embedded engine, a real slice of sentinews_sl; one real
calibration (the rest reuse it, or only compute the inputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from newsmon.shared.classifier import Classifier
from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.memory import MemoryRouter
from newsmon.shared.scoring.records import record_id
from newsmon.training_jobs import calibration_cache
from newsmon.training_jobs.calibrate_memory import calibrate_memory
from newsmon.training_jobs.calibration_cache import calibration_inputs


@pytest.fixture
def corpus(sentinews_slice):
    return load_corpus(sentinews_slice)


def _classifier(home, memory, encoder) -> Classifier:
    s = Settings(home=home)
    s.memory.path = memory
    return Classifier(s, encoder=encoder, router=MemoryRouter(s, encoder.model_id, encoder.dim))


def test_an_unchanged_memory_reuses_its_calibration_and_a_changed_one_does_not(corpus, encoder, tmp_path,
                                                                               monkeypatch):
    train, val = corpus.split("train"), corpus.split("validation")
    home = tmp_path / "home"
    first = _classifier(home, tmp_path / "memory-a", encoder)
    try:
        first.add_articles(train)
        [made] = calibrate_memory(first, val, written_by="memory build").values()
        assert not made.reused and made.record.inputs and made.steps
        # the same memory again (`memory build --calibrate` twice): its own record, with the cached ablation
        [again] = calibrate_memory(first, val, written_by="memory build").values()
        steps = [st["step"] for st in made.steps]
        assert again.reused and again.record == made.record and [st["step"] for st in again.steps] == steps
        assert again.seconds < made.seconds
    finally:
        first.router.close()
    # a memory rebuilt from the same articles (the demo's): its record folder is new and empty; the home's cache
    # gives the calibration with its stored models, and proposals are scored with it
    second = _classifier(home, tmp_path / "memory-b", encoder)
    try:
        second.add_articles(train)
        assert not (tmp_path / "memory-b" / "calibration").exists()
        [got] = calibrate_memory(second, val, written_by="demo").values()
        assert got.reused and got.record.inputs == made.record.inputs and [st["step"] for st in got.steps] == steps
        assert got.record.params == made.record.params and got.record.figures == made.record.figures
        stored = second.calibrations.read(second.collection("sl"))
        assert stored is not None and stored.inputs == made.record.inputs
        proposal = second.propose([val[0].text], ["sl"])[0][0]
        assert proposal.scoring.calibration == record_id(stored) and proposal.scoring.source == "calibration"
        # what it depends on: another validation split, another setting, other code, a grown memory each give
        # other inputs, for which neither the record nor the cache has a calibration
        inputs = made.record.inputs
        changed = {"validation": calibration_inputs(second, "sl", val[:-1])}
        second.settings.calibration.macro_f1 = 1.0
        changed["settings"] = calibration_inputs(second, "sl", val)
        second.settings.calibration.macro_f1 = 0.0
        # how an adapted model is calibrated is no input of a model without an adapter (production stays reusable)
        second.settings.calibration.adapted_memory_articles = True
        assert calibration_inputs(second, "sl", val) == inputs
        second.settings.calibration.adapted_memory_articles = False
        with monkeypatch.context() as m:
            m.setattr(calibration_cache, "code_digest", lambda: "another version of the scoring code")
            changed["code"] = calibration_inputs(second, "sl", val)
        assert calibration_inputs(second, "sl", val) == inputs  # nothing changed: the same inputs
        second.add_articles(val[:1])
        changed["memory"] = calibration_inputs(second, "sl", val)
        assert inputs not in changed.values() and len(set(changed.values())) == 4, changed
        for other in changed.values():
            assert calibration_cache.current(second, "sl", other) is None
            assert calibration_cache.restore(second, "sl", other) is None
    finally:
        second.router.close()


def test_the_code_digest_covers_the_scoring_package_source():
    import newsmon.shared.scoring as scoring

    digest = calibration_cache.code_digest()
    assert len(digest) == 64 and digest == calibration_cache.code_digest()
    assert (Path(scoring.__file__).parent / "scorer.py").exists()  # a file it hashes
