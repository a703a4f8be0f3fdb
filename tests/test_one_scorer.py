"""One assembly: for the same memory and articles, what the classifier worker proposes (its article pipeline,
the stages the worker runs per batch) and what ``eval``'s ``newsmon`` row measures are the same scores and the same
decisions: both are the scorer (:class:`newsmon.shared.scoring.Scorer`) with the same parameters. And ``newsmon
suggest``, ``POST /v1/suggest`` (the API's service) and the worker give the same proposal for the same article under
the same label registry (a KwE rule, a rename): all three run the worker's stages. Real Slovene news, the real
e5-small weights, the real embedded Qdrant engine. On each of the three paths the scorer returns one proposal type,
:class:`~newsmon.schemas.Proposal`, and every proposal produced is made of one (:meth:`LabelProposal.of
<newsmon.schemas.LabelProposal.of>`)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from confluent_kafka import Message

from newsmon.demo import article_event
from newsmon.schemas import LabelProposal, Proposal
from newsmon.shared.classifier import MemorySamples
from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.evaluation.neighbours import retrieve_neighbours
from newsmon.shared.evaluation.run import label_matrices
from newsmon.shared.predictors import NewsmonPredictor, QueryBatch, TrainingSet
from newsmon.shared.scoring import Scorer
from newsmon.shared.scoring.models import ModelCache
from newsmon.shared.scoring.records import CalibrationRecord, record_id
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.pipeline import ArticlePipeline

RULE = "client:one-scorer-rule"


@dataclass
class _NoFitting:
    """The classifier's memory source (:class:`~newsmon.shared.scoring.models.MemorySource`), but reading the memory
    to fit a model fails the test: the worker must load the models stored with the record."""

    samples: MemorySamples

    def articles(self, lang: str):
        pytest.fail("the worker fitted a model from the memory instead of loading it")

    def collection(self, lang: str) -> str:
        return self.samples.collection(lang)

    def stored_models(self, record: str):
        return self.samples.stored_models(record)


class _OneType:
    """Watches the one proposal type: the types of what the scorer returns (:meth:`Scorer.propose`) and of what each
    produced :class:`LabelProposal` is made of (:meth:`LabelProposal.of`), in this process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.returned: list[type] = []
        self.wired: list[type] = []
        propose, of = Scorer.propose, LabelProposal.of.__func__

        def spy_propose(scorer, *args, **kwargs):
            out = propose(scorer, *args, **kwargs)
            self.returned += [type(p) for p in out]
            return out

        def spy_of(cls, proposal, **kwargs):
            self.wired.append(type(proposal))
            return of(cls, proposal, **kwargs)

        monkeypatch.setattr(Scorer, "propose", spy_propose)
        monkeypatch.setattr(LabelProposal, "of", classmethod(spy_of))

    def check(self, scored: int, produced: int) -> None:
        """``scored`` proposals came from the scorer and ``produced`` LabelProposals were made, all of the one
        type, since the last check."""
        assert self.returned == [Proposal] * scored and self.wired == [Proposal] * produced
        self.returned, self.wired = [], []


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


def test_the_worker_proposes_what_the_eval_row_measures(memory_classifier, splits, newsmon_home, monkeypatch):
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
    judged = p.models.cache
    stored = ModelCache(record_id(record))
    stored.models, stored.counts = dict(judged.models), p.models.memory.label_counts()
    record.models = clf.model_store.write(stored)
    clf.calibrations.write(record)
    clf.models.source = _NoFitting(clf.samples)
    pipeline = ArticlePipeline(clf.settings, clf, NearDuplicateIndex(), LabelRegistry())
    events = [article_event(a) for a in test]
    assert [e.text for e in events] == [a.text for a in test]
    now = int(time.time() * 1000)
    msgs = [Message(topic="articles", partition=0, offset=i, key=e.kafka_key(), value=e.to_bytes(),
                    timestamp=(1, now)) for i, e in enumerate(events)]
    batch, rejected = pipeline.validate(msgs)
    assert not rejected
    one = _OneType(monkeypatch)
    pipeline.propose(batch)
    assert all(type(it.proposal) is Proposal for it in batch.items)
    proposals = {m.key().decode(): lp for m, lp in pipeline.emit(batch)}
    one.check(len(batch.fresh), len(test))
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
    _suggest_api_and_worker_alike(clf, train, test, newsmon_home, one)


def _matching_word(texts: list[str]) -> str:
    """A word (6 letters or more) that 2 to 6 of ``texts`` hold, the most frequent such, ties by the word."""
    counts = Counter(w for t in texts for w in set(re.findall(r"[^\W\d_]{6,}", t.lower())))
    return min((w for w, n in counts.items() if 2 <= n <= 6), key=lambda w: (-counts[w], w))


def _wire(proposal) -> dict:
    """A proposal as compared across paths: all but its revision (each kept proposal of an article is the next
    one), its timings and when it was produced."""
    return proposal.model_dump(mode="json", exclude={"revision", "timings", "produced_at"})


def _suggest_api_and_worker_alike(clf, train, test, newsmon_home, one: _OneType):
    """The same articles through the worker's pipeline, the API's suggest and ``newsmon suggest`` (its typer app,
    reading the registry the embedded memory updater keeps in ``<home>/state/labels.json`` and the memory, the
    calibration record and its stored models from disk): the same proposals, the registry's rule and rename
    applied by all three, each made of the scorer's one proposal type (``one``)."""
    from typer.testing import CliRunner

    from newsmon.api.service import build_service
    from newsmon.cli import app
    from newsmon.schemas import LabelDefinition, parse_event
    from newsmon.shared.encoder import resolve_model
    from newsmon.workers.proposing import open_label_registry

    word = _matching_word([a.text for a in test])
    old = Counter(lb for a in train for lb in a.labels).most_common(1)[0][0]
    registry = open_label_registry(clf.settings)  # the file registry of the home: what `newsmon suggest` reads
    registry.define(RULE, LabelDefinition(kwes=[word]))
    registry.rename(old, f"{old}-renamed")
    events = [json.loads(article_event(a).to_bytes()) for a in test]
    pipeline = ArticlePipeline(clf.settings, clf, NearDuplicateIndex(), registry)
    now = int(time.time() * 1000)
    batch, rejected = pipeline.validate([Message(topic="articles", partition=0, offset=i, value=json.dumps(e).encode(),
                                                 timestamp=(1, now)) for i, e in enumerate(events)])
    assert not rejected
    pipeline.propose(batch)
    worker = {lp.article_id: lp for _m, lp in pipeline.emit(batch)}
    one.check(len(batch.fresh), len(test))
    svc = build_service(clf.settings, clf, registry, NearDuplicateIndex())
    try:
        api = {lp.article_id: lp for lp in svc.suggest(events)}
    finally:
        svc.producer.flush(0)
    one.check(len(batch.fresh), len(test))  # the same articles, none a near-copy of a decided one
    assert [_wire(api[a.id]) for a in test] == [_wire(worker[a.id]) for a in test]
    ruled = [a for a in test if any(x.label == RULE for x in worker[a.id].labels)]
    assert ruled and all(x.source == "rule" and word in x.rule.matched[0].lower() for a in ruled
                         for x in worker[a.id].labels if x.label == RULE)
    named = {x.label for lp in worker.values() for x in [*lp.labels, *lp.candidates]}
    assert old not in named and f"{old}-renamed" in named
    # newsmon suggest: its own process's settings from the environment, the same home, memory and model
    home = clf.settings.home
    (home / "models").mkdir(parents=True, exist_ok=True)
    (newsmon_home / "models" / "onnx").mkdir(parents=True, exist_ok=True)
    if not (home / "models" / "onnx").exists():
        (home / "models" / "onnx").symlink_to(newsmon_home / "models" / "onnx", target_is_directory=True)
    env = {"NEWSMON_HOME": str(home), "NEWSMON_MEMORY__PATH": str(clf.settings.memory.path),
           "NEWSMON_ENCODER__MODEL": resolve_model(clf.settings.encoder.model, newsmon_home)}
    renamed = next(a for a in test if any(x.label == f"{old}-renamed" for x in [*worker[a.id].labels,
                                                                             *worker[a.id].candidates]))
    picked = list(dict.fromkeys([*ruled[:2], renamed, test[0]]))
    clf.router.close()  # the embedded engine: one open handle per memory; the CLI opens its own
    for a in picked:
        res = CliRunner().invoke(app, ["suggest", a.text, "--lang", a.lang, "--id", a.id, "--json"], env=env)
        assert res.exit_code == 0, res.output
        (got,) = json.loads(res.stdout)
        cli = parse_event(LabelProposal, json.dumps(got).encode("utf-8"))
        assert _wire(cli) == _wire(worker[a.id]), a.id
        one.check(1, 1)
