"""Calibrate the knowledge memory: choose the ``newsmon`` predictor's parameters per language memory and write
a calibration record that the workers, ``suggest`` and ``eval`` read (:mod:`newsmon.shared.calibration`).

Calibration articles: every labelled article of the language's memory scored leave-one-out (its neighbours among
the *other* memory articles, retrieved through the production routing), plus the corpus's validation split
when one is given. Never the test split. An adapted model (:mod:`newsmon.shared.adapter`) is calibrated on the
validation split alone when there is one: its adapter was trained on the memory's own articles, so their
leave-one-out neighbourhoods flatter it (on sentinews_sl the leave-one-out calibration chose k = 5 and lost 8.9
points of test micro-F1; on validation alone it is not worse than the base model). Run by ``newsmon tune``, ``newsmon memory build --calibrate``, the
nightly job after a promotion, and the demo before it streams.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import structlog

from newsmon.shared.calibration import CalibrationRecord
from newsmon.shared.classifier import Classifier
from newsmon.shared.data import Article
from newsmon.shared.evaluation.neighbours import search_by_language
from newsmon.shared.memory import SearchFilter
from newsmon.shared.predictors import Retrieval
from newsmon.shared.predictors.calibrate import GRID_K, LEXICAL_CANDIDATES, OBJECTIVE, CalibrationResult, calibrate
from newsmon.shared.predictors.head_model import calibration_head_scores
from newsmon.shared.predictors.label_keys import LabelHits, LabelKeys
from newsmon.shared.predictors.newsmon import MAX_LABEL_KEYS

log = structlog.get_logger(__name__)


@dataclass
class LanguageCalibration:
    """What :func:`calibrate_memory` wrote for one language: the record, the ablation steps and seconds."""

    record: CalibrationRecord
    steps: list[dict]
    seconds: float


def _leave_one_out(clf: Classifier, lang: str, k: int, limit: int | None
                   ) -> tuple[Retrieval, list[tuple], list[str], np.ndarray]:
    """The labelled memory articles of ``lang`` (at most ``limit``, in scroll order) with their top-``k``
    neighbours among the others (production routing), their label sets, their stored texts and their ``(n, d)``
    float32 stored embeddings."""
    points = []
    for p in clf.memory(lang).scroll(SearchFilter(labelled=True), with_vectors=True):
        points.append(p)
        if limit is not None and len(points) >= limit:
            break
    if not points:
        empty = Retrieval(np.empty((0, k), dtype=object), np.empty((0, k), dtype=np.float32), [])
        return empty, [], [], np.empty((0, clf.encoder.dim), dtype=np.float32)
    vecs = np.stack([p.vector for p in points]).astype(np.float32)
    texts = [str(p.payload.get("text") or "") for p in points]
    loo = search_by_language(clf.router, vecs, [lang] * len(points), k, clf.settings.memory.min_language_articles,
                             exclude_self=[p.article_id for p in points], texts=texts,
                             lexical_k=LEXICAL_CANDIDATES)
    return loo, [tuple(p.labels) for p in points], texts, vecs


def _write_record(clf: Classifier, lang: str, result: CalibrationResult, fit_on: dict, written_by: str
                  ) -> CalibrationRecord:
    """Store the calibration record of ``lang``'s collection (what ``result`` chose, fitted on ``fit_on``)."""
    record = CalibrationRecord(collection=clf.collection(lang), language=lang, model_version=clf.model_version,
                               params=result.params.as_dict(), objective=OBJECTIVE, figures=result.figures,
                               fit_on=fit_on, written_by=written_by, labels=result.known_labels)
    clf.calibrations.write(record)
    return record


def calibrate_memory(clf: Classifier, validation: Sequence[Article] = (), written_by: str = "tune",
                     corpus: str | None = None, max_memory_articles: int | None = 20_000
                     ) -> dict[str, LanguageCalibration]:
    """Calibrate every language memory of ``clf``'s model version and store the records.

    Args:
        clf: the classifier (encoder, memory router, calibration store) of the model version to calibrate.
        validation: labelled articles that are not in the memory (the corpus's validation split); each is
            used for its own language.
        written_by: recorded in the record (``tune``, ``memory build``, ``nightly``, ``demo``).
        corpus: the corpus path, recorded; max_memory_articles: cap on leave-one-out articles per language.

    Returns:
        per language, the record written and the ablation steps.

    Raises:
        ValueError: no language memory holds labelled articles.
    """
    k = max(max(GRID_K), LEXICAL_CANDIDATES)
    adapted = getattr(clf.encoder, "adapter", None) is not None  # see the module docstring
    out: dict[str, LanguageCalibration] = {}
    for lang in clf.languages():
        t0 = time.perf_counter()
        loo, gold, texts, mem_vecs = _leave_one_out(clf, lang, k, max_memory_articles)
        if not gold:
            continue
        parts, n_val = [loo], 0
        memory_labels = {lb for labels in gold for lb in labels} | {lb for row in loo.labels for x in row for lb in x}
        keys = LabelKeys(clf.encoder.dim).add(mem_vecs, gold)  # as the workers build them (Classifier.label_keys)
        counts = keys.label_counts()
        hits = [keys.top(mem_vecs, MAX_LABEL_KEYS, mem_vecs, gold)]
        val = [a for a in validation if a.lang == lang and a.labels]
        memory = (list(texts), list(gold))  # the head model is fitted on the whole memory, as the workers fit it
        if adapted and val:
            loo, parts, gold, texts, hits = Retrieval(loo.ids[:0], loo.sims[:0], []), [], [], [], []
        if val:
            vecs = clf.encoder.encode([a.text for a in val], role="query")
            parts.append(clf.retrieve_routed(vecs, [lang] * len(val), k, (), [a.text for a in val],
                                             LEXICAL_CANDIDATES)[0])
            hits.append(keys.top(vecs, MAX_LABEL_KEYS))
            gold = gold + [tuple(a.labels) for a in val]
            texts = texts + [a.text for a in val]
            n_val = len(val)
        head = calibration_head_scores(*memory, [a.text for a in val], include_memory=len(loo.labels) > 0)
        result = calibrate(Retrieval.concat(parts), gold, query_texts=texts, terms=clf.terms,
                           memory_labels=memory_labels, label_hits=LabelHits.concat(hits), label_counts=counts,
                           head=head)
        record = _write_record(clf, lang, result, {"memory_articles_leave_one_out": len(loo.labels),
                                                   "validation_articles": n_val, "corpus": corpus}, written_by)
        out[lang] = LanguageCalibration(record, result.steps, time.perf_counter() - t0)
        log.info("calibrated", collection=record.collection, params=record.params,
                 micro_f1=round(result.figures["micro_f1"], 4),
                 subset_accuracy=round(result.figures["subset_accuracy"], 4), seconds=round(out[lang].seconds, 1))
    if not out:
        raise ValueError("nothing to calibrate: no language memory holds labelled articles (run `newsmon memory "
                         "build` first)")
    return out
