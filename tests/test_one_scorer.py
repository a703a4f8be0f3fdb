"""One assembly: for the same memory and articles, what the classifier worker proposes (its article pipeline,
the stages the worker runs per batch) and what ``eval``'s ``newsmon`` row measures are the same scores and the same
decisions: both are the scorer (:class:`newsmon.shared.scoring.Scorer`) with the same parameters. Real Slovene
news, the real e5-small weights, the real embedded Qdrant engine."""

from __future__ import annotations

import time

import numpy as np
import pytest
from confluent_kafka import Message

from newsmon.demo import article_event
from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.evaluation.neighbours import retrieve_neighbours
from newsmon.shared.evaluation.run import label_matrices
from newsmon.shared.predictors import NewsmonPredictor, QueryBatch, TrainingSet
from newsmon.shared.scoring.models import ModelCache
from newsmon.shared.scoring.records import CalibrationRecord, record_id
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.pipeline import ArticlePipeline


@pytest.fixture(scope="module")
def splits(shared_data):
    corpus = load_corpus(shared_data / "sentinews_sl")
    return corpus.split("train")[:160], corpus.split("validation")[:30], corpus.split("test")[:24]


def _eval_row(settings: Settings, train, val, test) -> tuple[NewsmonPredictor, np.ndarray, np.ndarray, list]:
    """What ``eval`` does for its ``newsmon`` row (:func:`newsmon.shared.evaluation.run.run_eval`): the train split
    as the memory, calibrated on it (leave-one-out) and the validation split, the test split scored."""
    labels = label_matrices(train, val, test)
    p = NewsmonPredictor()
    nb = retrieve_neighbours(settings, train, test, val, p.neighbours_needed(), True, p.neighbours_needed(), False,
                             {"timings": {}}, p.lexical_neighbours_needed())
    train_set = TrainingSet([a.text for a in train], labels.train, labels.vocab, nb.train_loo, nb.validation,
                            labels.val, [a.text for a in val], nb.train_vecs, nb.val_vecs)
    p.fit(train_set)
    S, P = p.score_and_decide(QueryBatch([a.text for a in test], [a.lang for a in test], nb.test_vecs, nb.test))
    return p, S, P, labels.vocab.labels


def test_the_worker_proposes_what_the_eval_row_measures(memory_classifier, splits, newsmon_home):
    train, val, test = splits
    clf = memory_classifier
    p, S, P, vocab = _eval_row(clf.settings.model_copy(update={"home": newsmon_home}), train, val, test)
    params = p.resolved.params
    assert params.components or len(params.rules) > 1, "the calibration kept no lever: the test would show little"
    # the worker's memory: the same train articles; the calibration record: what eval's calibration chose, with
    # the models it judged (as the calibration job stores them)
    clf.add_articles(train)
    record = CalibrationRecord(collection=clf.collection("sl"), language="sl", model_version=clf.model_version,
                               params=params.model_dump(mode="json"), objective="micro_f1 + subset_accuracy",
                               labels=sorted(p.resolved.known_labels))
    judged = p.scorer.models.cache
    stored = ModelCache(record_id(record))
    stored.models, stored.counts = dict(judged.models), p.scorer.models.memory.label_counts()
    record.models = clf.model_store.write(stored)
    clf.calibrations.write(record)
    clf.models.articles = lambda lang: pytest.fail("the worker fitted a model from the memory instead of loading it")
    pipeline = ArticlePipeline(clf.settings, clf, NearDuplicateIndex(), LabelRegistry())
    events = [article_event(a) for a in test]
    assert [e.text for e in events] == [a.text for a in test]
    now = int(time.time() * 1000)
    msgs = [Message(topic="articles", partition=0, offset=i, key=e.kafka_key(), value=e.to_bytes(),
                    timestamp=(1, now)) for i, e in enumerate(events)]
    batch, rejected = pipeline.validate(msgs)
    assert not rejected
    pipeline.propose(batch)
    proposals = {m.key().decode(): lp for m, lp in pipeline.emit(batch)}
    col = {lb: j for j, lb in enumerate(vocab)}
    compared = 0
    for i, a in enumerate(test):
        lp = proposals[a.id]
        if lp.scoring is None:  # a near-copy of a decided article: its decided labels (none here: nobody decided)
            continue
        assert lp.scoring.calibration is not None and lp.scoring.rules == params.to_wire().rules
        assert {x.label for x in lp.labels} == {vocab[j] for j in np.flatnonzero(P[i])}, a.id
        for x in [*lp.labels, *lp.candidates]:
            assert x.score == float(S[i, col[x.label]]), (a.id, x.label)
        compared += 1
    assert compared >= 20
