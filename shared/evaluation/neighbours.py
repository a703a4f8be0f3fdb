"""The evaluation's knowledge memory: embed the splits, load the train split into a temporary embedded
memory (one collection per language) and retrieve each article's top-K labelled neighbours through the live
classifier's routing (:meth:`MemoryRouter.search_languages`: a language without enough memory of its own is
searched cross-lingually), so the offline figures and the rollout gate measure what runs."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from newsmon.shared.classifier import TEXT_PAYLOAD_CHARS
from newsmon.shared.config import Settings
from newsmon.shared.data import Article
from newsmon.shared.encoder import Encoder
from newsmon.shared.memory import MemoryRouter, SearchFilter
from newsmon.shared.scoring.retrieval import Retrieval


#: Queries per search in :func:`search_by_language` (their hits, with texts, are turned into arrays per chunk).
SEARCH_CHUNK = 512


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


def search_by_language(router: MemoryRouter, vectors: np.ndarray, langs: Sequence[str], top_k: int,
                       min_articles: int, exclude_self: Sequence[str] | None = None,
                       texts: Sequence[str] | None = None, lexical_k: int = 0) -> Retrieval:
    """Top-``top_k`` labelled neighbours of ``(m, d)`` vectors routed by language as in production (see
    :meth:`MemoryRouter.search_languages`; hybrid with the query ``texts`` and ``lexical_k > 0``: up to
    ``top_k + lexical_k`` candidates); ``exclude_self`` drops the query's own id (leave-one-out)."""
    extra = 1 if exclude_self is not None else 0
    lex = lexical_k + extra if texts is not None and lexical_k else 0
    n = top_k + (lexical_k if lex else 0)
    parts: list[Retrieval] = []
    shared: dict[tuple, tuple] = {}  # each memory article's payload held once across the chunks
    for start in range(0, max(len(vectors), 1), SEARCH_CHUNK):  # bounded: hits carry their articles' texts
        end = start + SEARCH_CHUNK
        rows, _searched = router.search_languages(vectors[start:end], langs[start:end], top_k + extra,
                                                  SearchFilter(labelled=True), min_articles,
                                                  texts[start:end] if texts is not None else None, lex)
        if exclude_self is not None:
            rows = [[nb for nb in h if nb.article_id != exclude_self[start + i]][:n] for i, h in enumerate(rows)]
        parts.append(Retrieval.from_neighbours(rows, n, shared))
    return Retrieval.concat(parts)


def embed_splits(settings: Settings, train: Sequence[Article], test: Sequence[Article], val: Sequence[Article],
                 progress: bool, report: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, int]:
    """Embed the splits with ``settings.encoder`` (not the promoted model: the evaluated one); records the
    encoder and the timings in ``report``. Returns (train, test, validation vectors, model id, dimension).

    The encoder is lazy: where every text's vector is in the embedding cache, neither the model nor its tokenizer is
    loaded (nor transformers and torch imported), so the rows measured after it in this process do not hold them
    (about 1 GB of resident memory for multilingual-e5-small on ONNX Runtime int8)."""
    t0 = time.perf_counter()
    enc = Encoder(settings.encoder, settings.home, lazy=True)
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
                        progress: bool, report: dict, lexical_k: int = 0) -> Neighbours:
    """Embed, build the temporary memory from ``train`` and retrieve ``top_k`` neighbours for test (and
    validation when ``with_validation``), plus ``loo_k`` leave-one-out neighbours of train when given; with
    ``lexical_k > 0`` every search is hybrid as in production (the dense top-k united with the lexical
    top-``lexical_k``, sorted by cosine, so the first ``top_k`` are still the dense top-k).
    Timings go to ``report["timings"]``."""
    train_vecs, test_vecs, val_vecs, model_id, dim = embed_splits(settings, train, test, val, progress, report)
    timings = report["timings"]
    n_min = settings.memory.min_language_articles
    with tempfile.TemporaryDirectory(prefix="newsmon-eval-") as tmp:
        t0 = time.perf_counter()
        router = MemoryRouter(_eval_memory_settings(settings, tmp), model_id, dim)
        try:
            for lang in sorted({a.lang for a in train}):
                idx = [i for i, a in enumerate(train) if a.lang == lang]
                router.memory(lang).upsert([train[i].id for i in idx], train_vecs[idx],
                                           [train[i].labels for i in idx],
                                           [{"lang": lang, "text": train[i].text[:TEXT_PAYLOAD_CHARS]} for i in idx])
            timings["memory_build_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            def texts(arts: Sequence[Article]) -> list[str] | None:
                return [a.text for a in arts] if lexical_k else None

            test_r = search_by_language(router, test_vecs, [a.lang for a in test], top_k, n_min,
                                        texts=texts(test), lexical_k=lexical_k)
            val_r = search_by_language(router, val_vecs, [a.lang for a in val], top_k, n_min, texts=texts(val),
                                       lexical_k=lexical_k) if with_validation else None
            loo_r = search_by_language(router, train_vecs, [a.lang for a in train], loo_k, n_min,
                                       exclude_self=[a.id for a in train], texts=texts(train),
                                       lexical_k=lexical_k) if loo_k else None
            timings["search_s"] = time.perf_counter() - t0
        finally:
            router.close()
    queries = len(test) + (len(val) if with_validation else 0) + (len(train) if loo_r is not None else 0)
    timings["search_ms_per_query"] = 1000 * timings["search_s"] / max(1, queries)
    return Neighbours(train_vecs, test_vecs, val_vecs, test_r, val_r, loo_r)


def _eval_memory_settings(settings: Settings, directory: str) -> Settings:
    """``settings`` with the memory in ``directory`` (embedded engine, collections ``eval_<lang>_<model>``)."""
    s = settings.model_copy(deep=True)
    s.memory = settings.memory.model_copy(update={"url": None, "api_key": None, "path": Path(directory),
                                                  "collection_prefix": "eval"})
    return s
