"""Calibrate the knowledge memory: choose the scorer's parameters per language memory and write a calibration
record that the workers, ``suggest`` and ``eval`` read (:mod:`newsmon.shared.scoring.records`).

Calibration articles (:func:`newsmon.shared.scoring.calibration.calibration_set`): every labelled article of the
language's memory scored leave-one-out (its neighbours among the *other* memory articles, retrieved through the
production routing), plus the corpus's validation split when one is given. Never the test split. An adapted model
(:mod:`newsmon.shared.encoder_adapter`) is calibrated on the validation split alone when there is one: its adapter was
trained on the memory's own articles, so their leave-one-out neighbourhoods flatter it (unless
``calibration.adapted_memory_articles`` is on: then it is calibrated as production is). Run by ``newsmon tune``,
``newsmon memory build --calibrate``, the nightly job (the candidate and the current model, before its gate
compares them: :mod:`newsmon.training_jobs.gate`), and the demo before it streams.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import structlog

from newsmon.shared.classifier import Classifier
from newsmon.training_jobs import calibration_cache
from newsmon.training_jobs.calibration_cache import calibration_inputs
from newsmon.shared.data import Article
from newsmon.shared.evaluation.neighbours import search_by_language
from newsmon.shared.memory import SearchFilter
from newsmon.shared.scoring import MemoryArticles, Queries, Retrieval, get_component
from newsmon.shared.scoring.calibration import (GRID_K, LEXICAL_CANDIDATES, CalibrationResult, CalibrationSet,
                                                Objective, allowed_components, calibrate, calibration_set)
from newsmon.shared.scoring.calibration.selection import report_entry
from newsmon.shared.scoring.models import ModelCache
from newsmon.shared.scoring.records import CalibrationRecord, record_id

log = structlog.get_logger(__name__)


@dataclass
class LanguageCalibration:
    """What :func:`calibrate_memory` wrote for one language: the record, the ablation steps and seconds."""

    record: CalibrationRecord
    steps: list[dict]
    seconds: float
    reused: bool = False  # an earlier calibration of the same inputs (calibration_cache), not computed again


def _leave_one_out(clf: Classifier, lang: str, k: int, limit: int | None) -> tuple[MemoryArticles, Retrieval]:
    """The labelled memory articles of ``lang`` (at most ``limit``, in scroll order:
    :meth:`~newsmon.shared.classifier.MemorySamples.memory_articles`) with their top-``k`` neighbours among the
    others (production routing, hybrid)."""
    memory = clf.samples.memory_articles(lang, limit)
    ids = memory.ids or []
    if not ids:
        return memory, Retrieval(np.empty((0, k), dtype=object), np.empty((0, k), dtype=np.float32), [])
    loo = search_by_language(clf.router, memory.vectors, [lang] * len(ids), k,
                             clf.settings.memory.min_language_articles, exclude_self=ids, texts=memory.texts,
                             lexical_k=LEXICAL_CANDIDATES)
    return memory, loo


def _write_record(clf: Classifier, lang: str, result: CalibrationResult, cal: CalibrationSet, fit_on: dict,
                  written_by: str, inputs: str | None = None) -> CalibrationRecord:
    """Store the calibration record of ``lang``'s collection (what ``result`` chose, fitted on ``fit_on``) after the
    models it judged (the chosen components' models and the label counts, :mod:`newsmon.shared.scoring.stored`), so
    a worker never reads a record without its models."""
    record = CalibrationRecord(collection=clf.collection(lang), language=lang, model_version=clf.model_version,
                               params=result.params.model_dump(mode="json"), objective=cal.objective.name,
                               figures=result.figures,
                               fit_on=fit_on, written_by=written_by, labels=result.known_labels, inputs=inputs,
                               selection=[report_entry(s) for s in result.steps])
    cache = ModelCache(record_id(record))
    for spec in result.params.components:
        key = (spec.name, get_component(spec.name).model_key(spec.parsed()))
        cache.models[key] = cal.models[key] if key in cal.models else get_component(spec.name).fit(
            cal.memory, spec.parsed())
    cache.counts = cal.label_counts
    record.models = clf.model_store.write(cache)
    clf.calibrations.write(record)
    return record


def label_counts(clf: Classifier, lang: str) -> dict[str, int]:
    """Labelled articles per label in ``lang``'s whole memory (one scroll of the labels)."""
    out: dict[str, int] = {}
    for p in clf.memory(lang).scroll(SearchFilter(labelled=True)):
        for lb in p.labels:
            out[lb] = out.get(lb, 0) + 1
    return out


def calibrate_memory(clf: Classifier, validation: Sequence[Article] = (), written_by: str = "tune",
                     corpus: str | None = None, max_memory_articles: int | None = None, reuse: bool = True
                     ) -> dict[str, LanguageCalibration]:
    """Calibrate every language memory of ``clf``'s model version and store the records; a language whose
    calibration inputs (memory articles, model version, validation articles, settings, code) are those of an
    earlier calibration gets that one instead (:mod:`newsmon.training_jobs.calibration_cache`), unless ``reuse``
    is off.

    Args:
        clf: the classifier (encoder, memory router, calibration store) of the model version to calibrate.
        validation: labelled articles that are not in the memory (the corpus's validation split); each is
            used for its own language.
        written_by: recorded in the record (``tune``, ``memory build``, ``nightly``, ``demo``).
        corpus: the corpus path, recorded; max_memory_articles: cap on leave-one-out articles per language
            (default ``settings.calibration.max_memory_articles``).

    Returns:
        per language, the record written and the ablation steps.

    Raises:
        ValueError: no language memory holds labelled articles.
    """
    max_memory_articles = max_memory_articles or clf.settings.calibration.max_memory_articles
    only = allowed_components(clf.settings.calibration.components)  # an unknown name refused before any work
    # an adapted model is calibrated on the validation articles alone, unless calibration.adapted_memory_articles
    validation_alone = (getattr(clf.encoder, "adapter", None) is not None
                        and not clf.settings.calibration.adapted_memory_articles)
    out: dict[str, LanguageCalibration] = {}
    for lang in clf.languages():
        t0 = time.perf_counter()
        val = [a for a in validation if a.lang == lang and a.labels]
        held_out = not (validation_alone and val)
        inputs = calibration_inputs(clf, lang, val)
        found = _reusable(clf, lang, inputs) if reuse else None
        if found is not None:
            out[lang] = LanguageCalibration(found[0], found[1], time.perf_counter() - t0, reused=True)
            log.info("calibration reused (same inputs)", collection=found[0].collection, inputs=inputs[:12])
            continue
        cal = _calibration_articles(clf, lang, val, held_out, max_memory_articles, only)
        if cal is None:
            continue
        result = calibrate(cal, clf.terms)
        record = _write_record(clf, lang, result, cal, {"memory_articles_leave_one_out": cal.held_out,
                                                        "validation_articles": len(val), "corpus": corpus},
                               written_by, inputs)
        calibration_cache.save(clf, record, result.steps)
        out[lang] = LanguageCalibration(record, result.steps, time.perf_counter() - t0)
        log.info("calibrated", collection=record.collection, params=record.params,
                 micro_f1=round(result.figures["micro_f1"], 4),
                 subset_accuracy=round(result.figures["subset_accuracy"], 4), seconds=round(out[lang].seconds, 1))
    if not out:
        raise ValueError("nothing to calibrate: no language memory holds labelled articles (run `newsmon memory "
                         "build --data PATH --calibrate` first)")
    return out


def _calibration_articles(clf: Classifier, lang: str, val: Sequence[Article], held_out: bool,
                          max_memory_articles: int | None, only: frozenset[str] | None) -> CalibrationSet | None:
    """``lang``'s calibration articles: its memory's own (leave-one-out, up to ``max_memory_articles``) and ``val``
    (``held_out``: with the memory's own; else ``val`` alone), with the settings' objective, the components ``only``
    names and hybrid retrieval or not; None
    when the language memory holds no labelled article."""
    k = max(max(GRID_K), LEXICAL_CANDIDATES)
    memory, loo = _leave_one_out(clf, lang, k, max_memory_articles)
    if not len(memory):
        return None
    val_r, queries = None, None
    if val:
        queries = Queries([a.text for a in val], clf.encoder.encode([a.text for a in val], role="query"))
        val_r = clf.search(queries.vectors, [lang] * len(val), k, (), queries.texts, LEXICAL_CANDIDATES)[0]
    cal = calibration_set(memory, loo, val_r, [a.labels for a in val], queries, held_out=held_out,
                          validation_ids=[a.id for a in val])
    cal.objective = Objective.from_settings(clf.settings)
    cal.only, cal.hybrid = only, clf.settings.calibration.hybrid
    if max_memory_articles is not None and len(memory) >= max_memory_articles:
        cal.label_counts = label_counts(clf, lang)  # a sample of the memory: the buckets count the whole
    return cal


def _reusable(clf: Classifier, lang: str, inputs: str) -> tuple[CalibrationRecord, list[dict]] | None:
    """An earlier calibration of ``inputs`` for ``lang``: its current record, else the home cache's (installed as
    the record); None when there is none."""
    record = calibration_cache.current(clf, lang, inputs)
    if record is not None:
        return record, calibration_cache.steps(clf, inputs)
    return calibration_cache.restore(clf, lang, inputs)
