"""The scale benchmark's calibrated record (issue 38 item 4, ``benchmarks/scale_calibrated.py``) is applied: on a
tiny archive imported through the product's path, the record with every lever and stacking is written with its
models, and a batch scored with it goes through the stored stacking model (each proposed label's score is one of
the probabilities the model returned), while the uncalibrated record never calls it; the benchmark's ``calibrated``
step measures both variants from the same memory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import scale  # noqa: E402
import scale_calibrated  # noqa: E402

from newsmon.schemas.scoring import ScoringParams  # noqa: E402
from newsmon.shared.classifier import Classifier  # noqa: E402
from newsmon.shared.config import Settings  # noqa: E402
from newsmon.shared.memory import MemoryRouter  # noqa: E402
from newsmon.shared.scoring import Resolved  # noqa: E402
from newsmon.shared.scoring.components import stacking  # noqa: E402

LANG = scale_calibrated.LANG
SIZE, DIM, VERSION = 3000, 32, "scale-test-model@0"


def _sentences() -> list[list[str]]:
    """Source articles for the generator's texts: 300 articles of 4-9 sentences over a vocabulary of 400 words."""
    rng = np.random.default_rng(11)
    words = [f"beseda{i}" for i in range(400)]
    return [[" ".join(rng.choice(words, size=int(rng.integers(5, 12)))).capitalize() + "."
             for _ in range(int(rng.integers(4, 10)))] for _ in range(300)]


@pytest.fixture
def tiny(tmp_path):
    """(classifier without an encoder on a 3,000-point memory imported from a Parquet archive, generator, label
    counts, the benchmark's uncalibrated record parameters)."""
    s = Settings(home=tmp_path / "home")
    s.memory.path = tmp_path / "memory"
    gen = scale.Archive(_sentences(), seed=5, dim=DIM, topics=6, subtopics=30, labels=40, text_chars=2000)
    archive = tmp_path / "archive.parquet"
    scale.write_archive(archive, gen, SIZE, VERSION)
    router = MemoryRouter(s, VERSION, DIM)
    report = scale.import_function()(str(archive), router, model_version=VERSION, restart=True)
    assert report.imported == SIZE
    clf = Classifier(s, encoder=scale.NoEncoder(VERSION, DIM), router=router)
    try:
        yield clf, gen, scale.label_counts(archive, gen, SIZE), scale.record_params(10, 0.2, 50)
    finally:
        clf.close()


def test_the_calibrated_record_scores_through_the_stored_stacking_model(tiny, monkeypatch):
    clf, gen, counts, params = tiny
    cal_params = scale_calibrated.calibrated_params(params)
    assert [c["name"] for c in cal_params["components"]][-1] == "stacking" and not cal_params["lexical_search"]
    train = gen.extra(300, "stacking")
    models, info = scale_calibrated.fit_calibrated(clf, cal_params, counts, train.texts, train.vectors,
                                                   train.labels, sample=1000)
    assert info["sample"]["articles"] == 1000 and info["stacking"]["pairs"] > 0
    assert 0 < info["stacking"]["positive"] < info["stacking"]["pairs"]
    _record, resolved = scale_calibrated.write_calibrated_record(clf, cal_params, models, counts, {"test": True})
    fitted = models[("stacking", (20, 500))]
    assert fitted.classifier is not None

    calls: list[tuple[stacking.StackingModel, np.ndarray, np.ndarray]] = []
    real = stacking.StackingModel.probabilities

    def recorded(self, X):
        p = real(self, X)
        calls.append((self, X, p))
        return p

    monkeypatch.setattr(stacking.StackingModel, "probabilities", recorded)
    queries = gen.queries(16)
    props = clf.scorer.propose(queries.texts, [LANG] * 16, queries.vectors, resolved=resolved)
    assert calls, "the stacking model was not called on the scoring path"
    model, X, p = calls[-1]
    assert model is not fitted  # the record's stored model, read back from the model store
    assert model.components == ["label_keys", "head_model", "label_tree", "label_names"]
    assert X.shape == (len(p), len(stacking.FEATURES) + 2 * 4) and len(p) > 0
    returned = set(np.concatenate([c[2] for c in calls]).tolist())
    scored = [x.score for pr in props for x in pr.labels + pr.candidates]
    assert scored and all(np.float32(s).item() in returned for s in scored)
    assert all(pr.scoring.calibration == resolved.record for pr in props)

    calls.clear()
    plain = Resolved(ScoringParams.model_validate(params), resolved.record, None, "calibration")
    clf.scorer.propose(queries.texts, [LANG] * 16, queries.vectors, resolved=plain)
    assert not calls  # the uncalibrated record stacks nothing


def test_the_benchmark_step_measures_both_records_in_one_run(tiny):
    clf, gen, counts, params = tiny
    args = argparse.Namespace(calibrated_train=100, calibrated_sample=500, calibrated_rounds=2,
                              calibrated_lexical_search=True, batch=8)
    out = scale.measure_calibrated(clf, gen.queries(16), gen, params, None, counts, args)
    v = out["variants"]
    assert set(v) == {"uncalibrated", "uncalibrated_without_lexical_search", "calibrated",
                      "calibrated_with_lexical_search"}
    assert all(x["batches"] == 2 * 2 for x in v.values())  # 2 rounds of the 2 batches of 8
    assert out["calibrated_alone"]["batches"] == 2 * 2  # then the calibrated record alone, as a worker serves it
    assert 0 < out["calibrated_alone"]["retrieve_p99_ms"] <= out["calibrated_alone"]["max_ms"]
    assert out["calibrated_alone_repeated"]["batches"] == 2 * 2  # and the rounds' articles again, in turn
    assert out["params"]["components"][-1]["name"] == "stacking"
    assert out["record"].startswith(clf.collection(LANG) + "@")
    assert set(out["ratios"]) == {"calibrated / uncalibrated p50_ms", "calibrated / uncalibrated p99_ms",
                                  "calibrated / uncalibrated_without_lexical_search p50_ms",
                                  "calibrated / uncalibrated_without_lexical_search p99_ms"}


def test_the_record_served_alone_is_measured_on_articles_no_earlier_batch_scored(tiny, monkeypatch):
    """A worker never scores the same article twice: the target's figure (``calibrated_alone``) must not come from
    articles whose neighbours the memory's caches have already served (the alternating rounds' articles)."""
    clf, gen, counts, params = tiny
    args = argparse.Namespace(calibrated_train=100, calibrated_sample=500, calibrated_rounds=2,
                              calibrated_lexical_search=False, batch=8)
    seen: list[set[str]] = []
    real = scale.score_batches

    def recorded(clf_, queries, warm, batch, n, resolved=None):
        seen.append(set(queries.ids))
        return real(clf_, queries, warm, batch, n, resolved)

    monkeypatch.setattr(scale, "score_batches", recorded)
    out = scale.measure_calibrated(clf, gen.queries(16), gen, params, None, counts, args)
    alternating = set().union(*seen[:2 * 3])  # 2 rounds of the 3 variants
    fresh = seen[2 * 3::2]  # then per round: the unseen articles, then the rounds' articles again
    assert len(fresh) == 2 and all(len(f) == 16 for f in fresh)
    assert not fresh[0] & alternating and not fresh[1] & alternating and not fresh[0] & fresh[1]
    assert all(s == alternating for s in seen[2 * 3 + 1::2])
    assert out["calibrated_alone"]["batches"] == out["calibrated_alone_repeated"]["batches"] == 2 * 2
