"""The nightly job on a real slice of reuters21578_en, on CPU: real hard negatives, a few fine-tuning steps, the
rollout gate both ways (on the calibrated newsmon rows), and the offline Optuna study of the rae baseline (`train
tune`, not a stage of the chain) in SQLite and in the real PostgreSQL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest

from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.encoder import resolve_model
from newsmon.shared.memory import SearchFilter


@pytest.fixture(scope="module")
def reuters_slice(shared_data, tmp_path_factory):
    rows = [json.loads(x) for x in (shared_data / "reuters21578_en" / "articles.jsonl").read_text().splitlines()]
    picked = [r for r in rows if r["split"] == "train"][:160] + [r for r in rows if r["split"] == "validation"][:40] \
        + [r for r in rows if r["split"] == "test"][:60]
    path = tmp_path_factory.mktemp("reuters") / "articles.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return load_corpus(path)


@pytest.fixture
def train_settings(newsmon_home, tmp_path) -> Settings:
    s = Settings(home=tmp_path / "home")
    s.encoder.model = resolve_model(s.encoder.model, newsmon_home)  # the imported e5-small, shared
    s.encoder.max_length = 64
    t = s.training
    t.top, t.n_neg = 100, 7
    t.query_max_len = t.passage_max_len = 64
    t.batch_size, t.train_group_size = 4, 4
    return s


def test_hard_negatives_are_real(train_settings, reuters_slice, tmp_path):
    from newsmon.training_jobs.nightly import mine

    out = tmp_path / "hn.jsonl"
    report = mine(train_settings, reuters_slice, out)
    labels = {a.id: set(a.labels) for a in reuters_slice.articles}
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert report["queries_written"] == len(records) > 100
    assert report["queries_written"] + report["without_positive"] + report["without_negative"] == report["articles"]
    for r in records:
        q = labels[r["query_id"]]
        assert q & labels[r["pos_id"]], r["query_id"]
        assert all(not (q & labels[n]) for n in r["neg_ids"])
        assert 1 <= len(r["neg"]) <= 7 and r["query_id"] != r["pos_id"]
    assert report["negatives_max"] <= 7 and len(report["data_sha256"]) == 64


def test_rae_study_in_sqlite_and_postgresql(train_settings, reuters_slice):
    from newsmon.training_jobs.rae_study import optuna_storage, tune

    s = train_settings
    best = tune(s, reuters_slice, s.encoder.model, trials=4)  # SQLite (default)
    assert 1 <= best["top_k"] <= 100 and best["trials"] == 4
    assert len(optuna.load_study(study_name=best["study"], storage=optuna_storage(s)).trials) == 4
    s_pg = s.model_copy(deep=True)  # the real PostgreSQL on loopback
    s_pg.training.optuna_storage = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
    best_pg = tune(s_pg, reuters_slice, s.encoder.model, trials=3)
    name, pg = best_pg["study"], optuna_storage(s_pg)
    assert name.startswith(f"newsmon-rae-{Path(s.encoder.model).name}-")
    assert len(optuna.load_study(study_name=name, storage=pg).trials) == 3
    optuna.delete_study(study_name=name, storage=pg)
    assert best_pg["storage"].endswith("/test")


def test_finetune_and_rollout_gate_both_ways(train_settings, reuters_topics, tmp_path, monkeypatch):
    from newsmon.shared.classifier import Classifier
    from newsmon.training_jobs.finetune import finetune
    from newsmon.training_jobs.nightly import mine
    from newsmon.training_jobs.rollout import degrade, read_promoted, rollout

    s = train_settings
    # production before the job: a knowledge memory built with the current model
    clf = Classifier(s)
    clf.add_articles(reuters_topics.split("train")[:50])
    current_version = clf.model_version
    clf.close()

    # mining from the knowledge memory itself: its labelled points, their stored vectors, no re-embedding
    mem_rep = mine(s, None, tmp_path / "hn-memory.jsonl", source="memory")
    assert mem_rep["articles"] == 50 and mem_rep["queries_written"] > 0
    labels = {a.id: set(a.labels) for a in reuters_topics.articles}
    for line in (tmp_path / "hn-memory.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert labels[r["query_id"]] & labels[r["pos_id"]]
        assert all(not (labels[r["query_id"]] & labels[n]) for n in r["neg_ids"])

    hn = tmp_path / "hn.jsonl"
    rep = mine(s, reuters_topics, hn)
    cand = finetune(s, s.encoder.model, hn, tmp_path / "candidate", rep["data_sha256"], rep, max_steps=3)
    manifest = json.loads((cand / "newsmon_model.json").read_text())
    assert manifest["training_data_sha256"] == rep["data_sha256"]
    assert manifest["hyperparameters"]["in_batch_negatives"] is False
    assert manifest["hyperparameters"]["max_steps"] == 3

    # the rows judge the encoder: dense retrieval alone (no score component, no hybrid retrieval: the label tree,
    # the head model and the lexical similarity read the text alone and, on these six topics, score a degraded
    # encoder's row as high as production's: 63.0 against 59.0, 56.7 against 54.2 micro-F1 on 6 December)
    s.calibration.components, s.calibration.hybrid = [], False
    # gate, refused: a deliberately degraded model (its calibrated newsmon row falls); production untouched
    bad = degrade(str(cand), tmp_path / "degraded", noise=3.0, blind=True)  # chance neighbours: clearly worse
    from newsmon.shared.scoring.records import CalibrationStore, ScratchCalibrations

    served_writes, write = [], CalibrationStore.write  # every write into a store the workers read, while judging

    def spy(self, record):
        if not isinstance(self, ScratchCalibrations):
            served_writes.append(record.collection)
        return write(self, record)

    with monkeypatch.context() as m:
        m.setattr(CalibrationStore, "write", spy)
        d = rollout(s, str(bad), reuters_topics)
    assert not d.promoted and d.reason.startswith("refused: calibrated newsmon"), d.reason
    # refused for a figure that fell beyond the tolerance (its reason names it)
    fell = [m for m in ("uF1", "Acc") if d.candidate[m] < d.current[m] - s.training.tolerance]
    assert "uF1" in fell and all(f"calibrated newsmon {m} " in d.reason for m in fell), (d.reason, d.candidate,
                                                                                        d.current)
    assert read_promoted(s) is None
    after = Classifier(s)
    assert after.model_version == current_version and after.memory("en").count() == 50
    assert served_writes and after.collection("en") not in served_writes  # not even while it was measured
    # judging production calibrated it beside the candidate, but what production serves is left as it was (it
    # had no calibration record: it has none after the refusal)
    assert d.current["records"]["en"] and after.calibrations.read(after.collection("en")) is None
    assert after.resolved("en").record is None
    # what no reader serves is gone: the refused candidate's copy of the memory, its record and its stored models
    from newsmon.shared.memory.router import stored_collections
    from newsmon.shared.scoring.stored import ModelStore

    refused_record = d.candidate["records"]["en"]
    refused_collection = refused_record.rsplit("@", 1)[0]
    assert refused_collection != after.collection("en") and after.collection("en") in stored_collections(s)
    assert refused_collection not in stored_collections(s)
    assert after.calibrations.read(refused_collection) is None
    assert ModelStore(s).read(refused_record) is None and ModelStore(s).read(d.current["records"]["en"]) is None
    after.close()

    # gate, promoted: the fine-tuned candidate (a few CPU steps: not worse within the tolerance), named with the
    # calibration record its row was measured with
    s.training.tolerance = 0.07  # two articles of 30 (3 CPU steps moved subset accuracy 60.0 -> 53.3 on 6 December)
    d = rollout(s, str(cand), reuters_topics)
    assert d.promoted, d.reason
    rec = read_promoted(s)
    assert rec["model_path"] == str(cand) and rec["model_version"] == d.candidate["model_version"]
    assert d.reembedded == {"en": 50} and rec["vectors"] == "re-embedded"
    assert rec["calibration"] == d.candidate["records"] == {"en": d.candidate["scored_with"][0]}
    promoted = Classifier(s)  # new encoders follow the promotion, and its collection is filled and calibrated
    assert promoted.model_version == rec["model_version"] != current_version
    assert promoted.memory("en").count(SearchFilter(labelled=True)) == 50
    assert promoted.resolved("en").record == rec["calibration"]["en"]
    kept = promoted.calibrations.read(promoted.collection("en"))  # the promoted record's models were not discarded
    assert kept.models is None or promoted.samples.stored_models(rec["calibration"]["en"]) is not None
    promoted.close()
    log = [json.loads(x) for x in (Path(s.home) / "models" / "rollouts.jsonl").read_text().splitlines()]
    assert [x["promoted"] for x in log] == [False, True]
    shutil.rmtree(tmp_path / "degraded", ignore_errors=True)
