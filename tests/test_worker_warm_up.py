"""A started worker loads what its first batch would load on its way (each language memory's calibration record and
its score components' models, then the freeze of what the process holds) before its first consume: at a million
points that first batch cost about 640 ms against about 210 warm (``benchmarks/scale_restart.py``)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
from test_stored_models import _VectorsGiven

from newsmon.shared.config import Settings
from newsmon.shared.scoring.records import CalibrationRecord, record_id
from newsmon.workers.base import BatchWorker
from newsmon.workers.classifier_worker import ClassifierWorker


def test_a_worker_warms_up_before_it_creates_its_consumer(tmp_path):
    order: list[str] = []

    class Worker(BatchWorker):
        name = "w"

        def warm_up(self) -> None:
            order.append("warm up")

        def _new_consumer(self):
            order.append("consumer")
            raise RuntimeError("no broker here")

    with pytest.raises(RuntimeError, match="no broker"):
        Worker(Settings(home=tmp_path), "group", ["topic"]).run(threading.Event())
    assert order == ["warm up", "consumer"]


def test_the_classifier_loads_each_language_records_models_and_survives_one_that_fails(tmp_path, monkeypatch):
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.memory import MemoryRouter

    s = Settings(home=tmp_path / "home")
    s.memory.path = tmp_path / "memory"
    enc = _VectorsGiven()
    clf = Classifier(s, encoder=enc, router=MemoryRouter(s, enc.model_id, enc.dim))
    try:
        rng = np.random.default_rng(5)
        for lang in ("hr", "sl"):
            clf.memory(lang).upsert([f"{lang}-{i}" for i in range(40)],
                                    rng.standard_normal((40, enc.dim)).astype(np.float32),
                                    [["vreme"] if i % 2 else ["politika"] for i in range(40)],
                                    [{"lang": lang, "text": f"novica {i} o vremenu"} for i in range(40)])
        record = CalibrationRecord(collection=clf.collection("sl"), language="sl", model_version=enc.model_id,
                                   params={"components": [{"name": "label_keys", "options": {"weight": 0.5}}]},
                                   objective="o")
        clf.calibrations.write(record)
        real = clf.scorer.warm_up

        def hr_fails(lang):
            if lang == "hr":
                raise ValueError("an unreadable record")
            return real(lang)

        monkeypatch.setattr(clf.scorer, "warm_up", hr_fails)
        worker = object.__new__(ClassifierWorker)  # the method alone: no broker, no near-duplicate index
        worker.pipeline = SimpleNamespace(classifier=clf)
        worker.warm_up()  # hr's failure is logged and left to its first batch; sl is loaded
        sl = clf.models._caches.get("sl")
        assert sl is not None and sl.record == record_id(clf.calibrations.read(clf.collection("sl")))
        assert any(name == "label_keys" for name, _key in sl.models) and "hr" not in clf.models._caches

        def unreachable(refresh: bool = False):
            raise ConnectionError("the Qdrant server does not answer")

        monkeypatch.setattr(clf.router, "languages", unreachable)
        worker.warm_up()  # logged and left to the first batch: the worker does not exit for it
    finally:
        clf.close()
