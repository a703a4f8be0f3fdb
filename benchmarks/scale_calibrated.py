"""The calibrated record at archive size (issue 38 item 4): a calibration record shaped like the ones the shared
corpora's calibrations keep, with every score component and stacking on, built for the scale benchmark's memory
(:mod:`scale`, its ``calibrated`` step) and written with its stored models as the calibration job writes them
(:func:`newsmon.training_jobs.calibration._write_record`), so the scorer serves it as a worker would: the record's
parameters, the models loaded from the model store (never fitted by the scorer: stacking's ``fit`` raises).

What the corpora's calibrations keep (records ``eval.sentinews_sl/20261203T103944Z`` and
``eval.reuters21578_en/20261203T103049Z``): the lexical fusion re-ranking the dense top 200 (the lexical search
refused on both), bucket thresholds (sentinews_sl), the components ``label_keys`` (reuters21578_en), ``head_model``,
``label_tree`` (reuters21578_en), ``label_names`` and ``stacking`` (20 candidates, 500 trees), and the rules
threshold, new-label support, floor, too-few-words and far-from-memory. :func:`calibrated_params` forces the union
of them on (plus the tail-support rule the benchmark's uncalibrated record has), with the benchmark's k, tau and
lexical weight, so that the two records differ by the levers only. Not on: per-label thresholds, and the rules that
decide in place of the thresholds (label-set vote, label count), which no corpus keeps.

The models (:func:`fit_calibrated`): each component's model fitted on a sample of the memory's labelled articles
(:meth:`~newsmon.shared.classifier.MemorySamples.memory_articles`, at most ``sample`` of them: what the calibration
job and a worker fit on, ``calibration.max_memory_articles``); stacking's fusion model trained on ``train`` held-out
articles of the generator (the calibration's validation articles: neighbours in the whole memory, the components'
evidence from the models of the sample), scored through the scorer's own functions (search, fusion, components'
evidence, :func:`~newsmon.shared.scoring.decision.scores_and_context`), with
:func:`~newsmon.shared.scoring.components.stacking.fit_model` on every candidate pair (no cross-fitting: the record
stores the model fitted on all of them, and the benchmark measures its cost, not its lift).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

LANG = "sl"

#: The score components the corpora's calibrations keep, with their kept options (reuters21578_en's where both
#: keep one), in the order they are mixed in; stacking last.
COMPONENTS = ({"name": "label_keys", "options": {"weight": 0.5, "keys": 10, "tau": 0.01}},
              {"name": "head_model", "options": {"weight": 0.5, "c": 100.0}},
              {"name": "label_tree", "options": {"weight": 0.5}},
              {"name": "label_names", "options": {"weight": 0.6, "unsure_below": 0.4}},
              {"name": "stacking", "options": {"candidates": 20, "iterations": 500}})
#: The decision rules kept by the corpora's calibrations (and tail support), with their kept options.
RULES = ({"name": "threshold", "options": {}},
         {"name": "tail_support", "options": {"support": 3, "neighbours": 5, "similarity": 0.9}},
         {"name": "new_label_support", "options": {"support": 2, "neighbours": 50, "similarity": 0.8}},
         {"name": "floor", "options": {"score": 0.0}},
         {"name": "too_few_words", "options": {"min_words": 2}},
         {"name": "far_from_memory", "options": {"similarity": 0.838}})


def calibrated_params(base: dict, lexical_search: bool = False) -> dict:
    """The calibrated record's parameters: ``base`` (the benchmark's uncalibrated record, :func:`scale.record_params`:
    k, tau, threshold, bucket thresholds, lexical weight and candidates) with every lever of :data:`COMPONENTS` and
    :data:`RULES` on; the lexical search off (as both corpora's calibrations keep it) unless ``lexical_search``."""
    from newsmon.schemas.scoring import ScoringParams

    p = ScoringParams.model_validate({**base, "components": list(COMPONENTS), "rules": list(RULES),
                                      "lexical_search": lexical_search})
    return p.model_dump(mode="json")


def fit_calibrated(clf: Any, params: dict, counts: dict[str, int], train_texts: list[str],
                   train_vectors: np.ndarray, train_labels: list[list[str]], sample: int) -> tuple[dict, dict]:
    """The models of ``params``' components for ``clf``'s ``sl`` memory (see the module docstring).

    Args:
        clf: the classifier (memory router) of the memory; params: :func:`calibrated_params`' output;
        counts: the memory's labelled articles per label (the record's stored counts);
        train_texts / train_vectors / train_labels: ``n`` held-out labelled articles (texts, ``(n, d)`` float32
            vectors, label sets) that stacking's model is trained on; sample: memory articles the other
            components' models are fitted on.

    Returns:
        (the models by (component, model key), what was fitted and how long each part took).

    Raises:
        ValueError: ``params`` has no stacking component, or the memory holds no labelled article.
    """
    from newsmon.schemas.scoring import ScoringParams
    from newsmon.shared.scoring import Queries, get_component
    from newsmon.shared.scoring.calibration.run import gold_matrix
    from newsmon.shared.scoring.components.stacking import fit_model
    from newsmon.shared.scoring.decision import neighbours_needed, retrieval_size, scores_and_context
    from newsmon.shared.scoring.lexical import fuse
    from newsmon.shared.scoring.retrieval import LabelVocab

    p = ScoringParams.model_validate(params)
    if not p.components or p.components[-1].name != "stacking":
        raise ValueError("the calibrated record stacks its components last: no stacking component in params")
    info: dict[str, Any] = {"seconds": {}}
    t0 = time.perf_counter()
    memory = clf.samples.memory_articles(LANG, sample)
    if not len(memory):
        raise ValueError("no labelled article in the memory")
    info["sample"] = {"articles": len(memory), "of": memory.total or len(memory)}
    info["seconds"]["read sample"] = round(time.perf_counter() - t0, 1)
    models: dict[tuple, Any] = {}
    queries = Queries(list(train_texts), np.asarray(train_vectors, dtype=np.float32))
    evidence = {}
    for spec in p.components[:-1]:
        comp, opts = get_component(spec.name), spec.parsed()
        t0 = time.perf_counter()
        model = models[(spec.name, comp.model_key(opts))] = comp.fit(memory, opts)
        info["seconds"][f"fit {spec.name}"] = round(time.perf_counter() - t0, 1)
        evidence[spec.name] = comp.evidence(model, queries, opts)
    # the training articles' neighbours as the scorer finds them (Scorer._group): search, then the fusion
    t0 = time.perf_counter()
    n, lexical_k = retrieval_size(p)
    r = clf.search(queries.vectors, [LANG] * len(train_texts), n, (), queries.texts if lexical_k else None,
                   lexical_k)[0]
    r = fuse(r, queries.texts, p.lexical_weight, neighbours_needed(p), clf.scorer.terms)
    info["seconds"]["search training articles"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    before = p.model_copy(update={"components": p.components[:-1]})
    vocab = LabelVocab()
    scores, context = scores_and_context(r, vocab, before, evidence, counts, context=True)
    L = scores.shape[1]
    Y = gold_matrix(train_labels, vocab)[:, :L]
    spec = p.components[-1]
    comp, opts = get_component(spec.name), spec.parsed()
    rows, cols, X, names = comp.pairs(scores, LabelVocab(vocab.labels[:L]), context, opts)
    y = Y[rows, cols].astype(bool)
    models[(spec.name, comp.model_key(opts))] = fit_model(X, y, names, opts.iterations)
    info["seconds"]["fit stacking"] = round(time.perf_counter() - t0, 1)
    info["stacking"] = {"articles": len(train_texts), "pairs": int(len(rows)), "positive": int(y.sum()),
                        "features": int(X.shape[1]), "components_read": names}
    return models, info


def write_calibrated_record(clf: Any, params: dict, models: dict[tuple, Any], counts: dict[str, int],
                            fit_on: dict, written_by: str = "scale calibrated") -> tuple[Any, Any]:
    """Store the record of ``params`` for the ``sl`` collection after its ``models`` and ``counts``, through the
    classifier's own stores as the calibration job does in process (the record is then the collection's current
    one: a worker serves a record's stored models only while it is). Returns (the
    :class:`~newsmon.shared.scoring.records.CalibrationRecord`, the :class:`~newsmon.shared.scoring.Resolved` a
    worker reads for it: parameters, record id, the record's labels, source ``calibration``)."""
    from newsmon.shared.scoring import Resolved
    from newsmon.shared.scoring.models import ModelCache
    from newsmon.shared.scoring.records import CalibrationRecord, record_id

    record = CalibrationRecord(collection=clf.collection(LANG), language=LANG, model_version=clf.model_version,
                               params=params, objective="micro_f1 + subset_accuracy", fit_on=fit_on,
                               written_by=written_by, labels=sorted(counts))
    cache = ModelCache(record_id(record))
    cache.models.update(models)
    cache.counts = dict(counts)
    record.models = clf.model_store.write(cache)
    clf.calibrations.write(record)
    return record, Resolved(record.scoring(), record_id(record), record.known_labels, "calibration")
