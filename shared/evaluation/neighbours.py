"""The evaluation's knowledge memory: embed the splits, load the train split into a temporary embedded
memory (one collection per language) and retrieve each article's top-K labelled neighbours."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from newsmon.shared.config import Settings
from newsmon.shared.data import Article
from newsmon.shared.encoder import Encoder
from newsmon.shared.memory import EdgeMemory, SearchFilter, collection_name
from newsmon.shared.predictors import Retrieval


@dataclass
class Neighbours:
    """Embeddings and retrievals of the three splits.

    Attributes:
        train_vecs / test_vecs / val_vecs: ``(n, d)`` float32 embeddings (passage role for train, query role
            for test and validation).
        test / validation: top-K labelled train neighbours of each test / validation article (validation only
            when asked for).
        train_loo: each train article's top neighbours among the *other* train articles (leave-one-out), when
            asked for.
    """

    train_vecs: np.ndarray
    test_vecs: np.ndarray
    val_vecs: np.ndarray
    test: Retrieval
    validation: Retrieval | None
    train_loo: Retrieval | None


def search_by_language(memories: dict, vectors: np.ndarray, langs: Sequence[str], top_k: int,
                       exclude_self: Sequence[str] | None = None) -> Retrieval:
    """Search each article's language collection; ``exclude_self`` drops the query's own id (leave-one-out)."""
    k = top_k + (1 if exclude_self is not None else 0)
    rows: list = [None] * len(langs)
    for lang in sorted(set(langs)):
        idx = [i for i, lg in enumerate(langs) if lg == lang]
        if lang not in memories:
            for i in idx:
                rows[i] = []
            continue
        hits = memories[lang].search(vectors[idx], k, SearchFilter(labelled=True))
        for i, h in zip(idx, hits):
            if exclude_self is not None:
                h = [n for n in h if n.article_id != exclude_self[i]][:top_k]
            rows[i] = h
    return Retrieval.from_neighbours(rows, top_k)


def embed_splits(settings: Settings, train: Sequence[Article], test: Sequence[Article], val: Sequence[Article],
                 progress: bool, report: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, int]:
    """Embed the splits with ``settings.encoder`` (not the promoted model: the evaluated one); records the
    encoder and the timings in ``report``. Returns (train, test, validation vectors, model id, dimension)."""
    t0 = time.perf_counter()
    enc = Encoder(settings.encoder, settings.home)
    report["timings"]["encoder_load_s"] = time.perf_counter() - t0
    report["encoder"] = {"model": enc.model_id, "pooling": enc.settings.pooling,
                         "max_length": enc.max_length, "device": enc.device}
    t0 = time.perf_counter()
    try:
        train_vecs = enc.encode([a.text for a in train], role="passage", progress=progress)
        q_vecs = enc.encode([a.text for a in list(test) + list(val)], role="query", progress=progress)
    finally:
        enc.close()
    report["timings"]["embed_s"] = time.perf_counter() - t0
    return train_vecs, q_vecs[:len(test)], q_vecs[len(test):], enc.model_id, enc.dim


def retrieve_neighbours(settings: Settings, train: Sequence[Article], test: Sequence[Article],
                        val: Sequence[Article], top_k: int, with_validation: bool, loo_k: int | None,
                        progress: bool, report: dict) -> Neighbours:
    """Embed, build the temporary memory from ``train`` and retrieve ``top_k`` neighbours for test (and
    validation when ``with_validation``), plus ``loo_k`` leave-one-out neighbours of train when given.
    Timings go to ``report["timings"]``."""
    train_vecs, test_vecs, val_vecs, model_id, dim = embed_splits(settings, train, test, val, progress, report)
    timings = report["timings"]
    with tempfile.TemporaryDirectory(prefix="newsmon-eval-") as tmp:
        t0 = time.perf_counter()
        memories = {}
        try:
            for lang in sorted({a.lang for a in train}):
                idx = [i for i, a in enumerate(train) if a.lang == lang]
                mem = memories[lang] = EdgeMemory(tmp, collection_name("eval", lang, model_id), dim)
                mem.upsert([train[i].id for i in idx], train_vecs[idx], [train[i].labels for i in idx],
                           [{"lang": lang} for _ in idx])
            timings["memory_build_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            test_r = search_by_language(memories, test_vecs, [a.lang for a in test], top_k)
            val_r = search_by_language(memories, val_vecs, [a.lang for a in val], top_k) if with_validation else None
            loo_r = search_by_language(memories, train_vecs, [a.lang for a in train], loo_k,
                                       exclude_self=[a.id for a in train]) if loo_k else None
            timings["search_s"] = time.perf_counter() - t0
        finally:
            for mem in memories.values():
                mem.close()
    queries = len(test) + (len(val) if with_validation else 0) + (len(train) if loo_r is not None else 0)
    timings["search_ms_per_query"] = 1000 * timings["search_s"] / max(1, queries)
    return Neighbours(train_vecs, test_vecs, val_vecs, test_r, val_r, loo_r)
