"""The classifier service object: the encoder, the knowledge memory (one collection per language and model
version), the calibration records and the scorer (:class:`newsmon.shared.scoring.Scorer`) wired to them. Used by
the CLI (``memory build``, ``suggest``, ``tune``), the HTTP API and the classifier worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from tqdm import tqdm

from newsmon.shared.encoder_adapter import read_adapter
from newsmon.schemas import Proposal
from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.config import Settings
from newsmon.shared.data import Article
from newsmon.shared.encoder import Encoder, encoder_identity, resolve_model
from newsmon.shared.languages import detect
from newsmon.shared.memory import KnowledgeMemory, MemoryRouter, SearchFilter, shared_router
# TEXT_PAYLOAD_CHARS: kept importable from here (the stream's pending points and eval cut their texts to it)
from newsmon.shared.memory.common import TEXT_PAYLOAD_CHARS as TEXT_PAYLOAD_CHARS
from newsmon.shared.memory.common import article_payload
from newsmon.shared.promotion import effective_encoder_settings
from newsmon.shared.scoring import CANDIDATES, MemoryArticles, MemoryModels, Resolved, Retrieval, Scorer
from newsmon.shared.scoring.lexical import TermVectors
from newsmon.shared.scoring.models import ModelCache
from newsmon.shared.scoring.records import (CalibrationRecord, CalibrationStore, ScratchCalibrations,
                                            effective_scoring, record_id)
from newsmon.shared.scoring.stored import ModelStore

Relabel = Callable[[tuple[str, ...]], tuple[str, ...]]

log = structlog.get_logger(__name__)


@dataclass
class BuildReport:
    """What ``memory build`` did: articles upserted per language, seconds spent embedding and upserting."""

    upserted: dict[str, int]
    embed_s: float
    upsert_s: float


def model_identity(settings: Settings) -> tuple[str, int]:
    """(model version, embedding dimension) of the encoder in production (the promoted one, else
    ``encoder.model``, under the effective ``encoder.runtime``) without loading its weights; a local checkpoint's
    ``config.json`` is read directly (no transformers, no torch: ``memory stats`` and the memory updater stay
    light). An adapter model's version is its base encoder's plus the adapter's suffix, as ``Encoder.model_id``."""
    enc = effective_encoder_settings(settings)
    path = resolve_model(enc.model, settings.home)
    adapter = read_adapter(path)
    suffix = ""
    if adapter is not None:
        path, suffix = resolve_model(adapter.base_model, settings.home), adapter.suffix
    config = Path(path) / "config.json"
    if config.is_file():
        return encoder_identity(path, enc) + suffix, int(json.loads(config.read_text())["hidden_size"])
    from transformers import AutoConfig  # deferred: transformers takes seconds to import (a hub id)

    return encoder_identity(path, enc) + suffix, int(AutoConfig.from_pretrained(path).hidden_size)


def scoring_by_language(settings: Settings) -> dict[str, dict]:
    """The scoring each language memory of the production model version runs with, without loading a model or
    opening a memory (``newsmon settings``): per language its collection, where the parameters come from
    (``calibration``, ``calibration+settings``, ``settings``, ``defaults``), the record's id, the parameters and
    the record's selection report (each lever tried: kept or not, why, its lift with its interval).
    A language too small to stand alone is scored with the record of the largest memory searched with it
    (:meth:`Classifier.resolved`), which this does not count."""
    from newsmon.shared.memory import stored_collections
    from newsmon.shared.memory.base import collection_name

    try:
        names = stored_collections(settings)
    except Exception as exc:  # noqa: BLE001 - a server that does not answer: say so, show the rest of the settings
        return {"unavailable": f"the knowledge memory ({settings.memory_mode()}) did not answer: {type(exc).__name__}"}
    if not names:
        return {}
    version, _dim = model_identity(settings)
    prefix = settings.memory.collection_prefix
    store = CalibrationStore(settings)
    out = {}
    try:
        for name in names:
            lang = name[len(prefix) + 1:].split("_", 1)[0]
            if collection_name(prefix, lang, version) != name:
                continue  # another model version's collection
            record = store.read(name)
            params, source = effective_scoring(settings, record)
            out[lang] = {"collection": name, "source": source, "calibration": record_id(record) if record else None,
                         "scoring": params.model_dump(mode="json"),
                         "selection": record.selection if record else None}
    finally:
        store.close()
    return out


class MemoryNeighbours:
    """The scorer's neighbour source (:class:`~newsmon.shared.scoring.scorer.NeighbourSource`): the language
    memories of one model version, searched routed by language.

    Args:
        settings: ``memory.min_language_articles`` (read at each call); router: the memories.
    """

    def __init__(self, settings: Settings, router: MemoryRouter) -> None:
        self.settings = settings
        self.router = router

    def search(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int, exclude: Sequence[str] = (),
               texts: Sequence[str] | None = None, lexical_k: int = 0,
               keep: Callable[[Retrieval], Retrieval] | None = None) -> tuple[Retrieval, list[tuple[str, ...]]]:
        """Top-``top_k`` labelled neighbours of ``(m, d)`` float32 query vectors, routed by language
        (:meth:`MemoryRouter.search_languages`: a language's own memory, merged with the other languages' while it
        holds fewer than ``memory.min_language_articles`` labelled articles), and per query the names of the
        collections searched; with ``texts`` and ``lexical_k`` hybrid (``top_k + lexical_k`` candidates). ``keep``:
        what the caller keeps of the candidates (the scorer's fusion: 50 of 200), whose payloads alone are then read
        (:meth:`Retrieval.with_articles`; the engine reads a point's whole payload, text included)."""
        flt = SearchFilter(labelled=True, exclude_ids=tuple(exclude))
        rows, searched = self.router.search_languages(vectors, langs, top_k, flt,
                                                      self.settings.memory.min_language_articles, texts, lexical_k,
                                                      payloads=keep is None)
        found = Retrieval.from_neighbours(rows, top_k + (lexical_k if texts is not None else 0))
        return (found if keep is None else keep(found).with_articles(self.router.points)), searched

    def carriers(self, vectors: np.ndarray, langs: Sequence[str | None], label: str, n: int,
                 exclude: Sequence[str] = ()) -> list[list]:
        """Per ``(m, d)`` query vector, the ``n`` closest labelled memory articles that carry ``label``
        (:class:`~newsmon.shared.memory.Neighbour`, most similar first), routed by language as :meth:`search`: the
        evidence of a label no neighbour carries (the scorer's :data:`~newsmon.shared.scoring.scorer.CARRIERS`)."""
        flt = SearchFilter(labelled=True, labels=(label,), exclude_ids=tuple(exclude))
        return self.router.search_languages(vectors, langs, n, flt, self.settings.memory.min_language_articles)[0]


class MemoryRecords:
    """The scorer's record source (:class:`~newsmon.shared.scoring.scorer.RecordSource`): each language's
    calibration record (the one stored under its collection), the settings over it, and the score components'
    models of the memory it calibrates.

    Args:
        settings: ``scoring`` (fields set explicitly replace the record's), ``memory.min_language_articles``;
        router: the language memories (their collections and sizes); calibrations: the records;
        models: the components' models per memory and record.
    """

    def __init__(self, settings: Settings, router: MemoryRouter, calibrations: CalibrationStore,
                 models: MemoryModels) -> None:
        self.settings = settings
        self.router = router
        self.calibrations = calibrations
        self.memory_models = models

    def models(self, lang: str | None, record: str | None, params: ScoringParams, counts: bool
               ) -> tuple[dict[str, Any], dict[str, int] | None]:
        """:meth:`MemoryModels.get <newsmon.shared.scoring.models.MemoryModels.get>`."""
        return self.memory_models.get(lang, record, params, counts)

    def resolved(self, lang: str | None) -> Resolved:
        """The scoring parameters of articles in ``lang``: the calibration record of that language's collection
        (``newsmon tune``), every field set explicitly in ``settings.scoring`` taking precedence
        (:func:`newsmon.shared.scoring.records.effective_scoring`). A language searched cross-lingually (no memory
        of its own, or one below ``memory.min_language_articles``) without a record takes the record of the
        largest memory searched with it, and says so; otherwise, without a record, the defaults and why."""
        if lang is None:
            return Resolved(self.settings.scoring, None, None, "defaults", "the article has no language and the "
                            "knowledge memory none to detect it from")
        collection = self.router.collection(lang)
        record, note = self.calibrations.read(collection), None
        if record is None and len(self.router.languages()) > 1 and self._cross_lingual(lang):
            record = self._largest_record(lang)
            if record is not None:
                note = (f"no calibration record for {collection} (searched cross-lingually): the record of "
                        f"{record.collection}, the largest memory searched")
        params, source = effective_scoring(self.settings, record)
        if record is None:
            return Resolved(params, None, None, source, f"no calibration record for {collection}: run `newsmon "
                            "tune` or `newsmon memory build --calibrate`")
        if source == "calibration+settings":
            note = "; ".join(x for x in (note, "fields set in the settings replace the record's") if x)
        return Resolved(params, record_id(record), record.known_labels, source, note, record.language)

    def _cross_lingual(self, lang: str) -> bool:
        """Whether ``lang``'s articles are searched in the other languages' memories too."""
        if lang not in self.router.languages():
            return True
        return self.router.labelled_count(lang) < self.settings.memory.min_language_articles

    def _largest_record(self, lang: str) -> CalibrationRecord | None:
        """The calibration record of the language memory (other than ``lang``) with the most labelled articles,
        among those that have one."""
        sizes = sorted(((self.router.labelled_count(x), x) for x in self.router.languages() if x != lang), reverse=True)
        for _n, other in sizes:
            record = self.calibrations.read(self.router.collection(other))
            if record is not None:
                return record
        return None


@dataclass
class MemorySamples:
    """The score components' source of memory articles and stored models
    (:class:`~newsmon.shared.scoring.models.MemorySource`, what :class:`~newsmon.shared.scoring.models.MemoryModels`
    reads): the language memories' labelled articles, bounded as the calibration job bounds them, and the models
    stored with a calibration record.

    Attributes:
        settings: ``calibration.max_memory_articles`` (read at each call); router: the memories; calibrations: the
            records; store: the models stored with them.
    """

    settings: Settings
    router: MemoryRouter
    calibrations: CalibrationStore
    store: ModelStore

    def collection(self, lang: str) -> str:
        """The collection name of ``lang`` for the router's model version."""
        return self.router.collection(lang)

    def articles(self, lang: str) -> MemoryArticles:
        """:meth:`memory_articles` bounded as the calibration job bounds them
        (``settings.calibration.max_memory_articles``): what a worker fits a record's missing models on, so a
        record without stored models costs a bounded read, not one proportional to the memory."""
        return self.memory_articles(lang, self.settings.calibration.max_memory_articles)

    def stored_models(self, record: str) -> ModelCache | None:
        """The models stored with calibration record ``record`` (None when the record names none)."""
        rec = self.calibrations.read(record.rsplit("@", 1)[0])
        if rec is None or record_id(rec) != record or rec.models is None:
            return None
        return self.store.read(record, rec.models)

    def memory_articles(self, lang: str, limit: int | None = None) -> MemoryArticles:
        """The labelled articles of ``lang``'s memory, what the score components' per-memory models are fitted
        on: one scroll (stored vectors, texts, labels, ids), stopped after ``limit`` articles (None: all; the
        sample is the first in the engine's scroll order), ordered by article id
        (:meth:`~newsmon.shared.scoring.MemoryArticles.by_id`). A sample carries the memory's labelled count as
        ``total`` (an indexed count)."""
        memory = self.router.memory(lang, create=False)
        vectors, texts, labels, ids = [], [], [], []
        for p in memory.scroll(SearchFilter(labelled=True), with_vectors=True):
            vectors.append(p.vector)
            texts.append(str(p.payload.get("text") or ""))
            labels.append(tuple(p.labels))
            ids.append(p.article_id)
            if limit is not None and len(ids) >= limit:
                break
        vecs = np.stack(vectors).astype(np.float32) if vectors else np.zeros((0, self.router.dim), np.float32)
        total = memory.count(SearchFilter(labelled=True)) if limit is not None and len(ids) >= limit else None
        return MemoryArticles(vecs, texts, labels, ids, total).by_id()[1]


class Classifier:
    """Proposes labels for articles from the knowledge memory: its :attr:`scorer` is given the language memories'
    search (:attr:`neighbours`, a :class:`MemoryNeighbours`) and each language's parameters and models
    (:attr:`records`, a :class:`MemoryRecords`: the calibration records; the components' models loaded or fitted
    under each, :attr:`models`, from the memories' samples and the stored models, :attr:`samples`, a
    :class:`MemorySamples`).

    Args:
        settings: encoder, memory and scoring settings.
        encoder: an already loaded :class:`newsmon.shared.encoder.Encoder` (default: load the production one).
        router: the memories of the encoder's model version (default: this process's shared router).
        scratch_calibrations: keep the calibration records this classifier writes to itself
            (:class:`~newsmon.shared.scoring.records.ScratchCalibrations`: it reads the served records, and the
            workers never see what it writes), as the gate does when it recalibrates production.

    The memory of language ``lang`` is the collection ``<prefix>_<lang>_<model version>`` (embedded engine
    under ``settings.memory_path`` or the Qdrant server at ``settings.memory.url``). An article whose language
    memory holds fewer than ``memory.min_language_articles`` labelled articles is searched in every collection
    of this model version, the hits merged by similarity (cross-lingual retrieval; see
    :meth:`MemoryRouter.search_languages`).
    """

    def __init__(self, settings: Settings, encoder: Encoder | None = None, router: MemoryRouter | None = None,
                 scratch_calibrations: bool = False):
        self.settings = settings
        self.owns_encoder = encoder is None  # a given encoder is the caller's to close
        self.encoder = encoder or Encoder(effective_encoder_settings(settings), settings.home)
        self.model_version = self.encoder.model_id
        self.router = router or shared_router(settings, self.model_version, self.encoder.dim)
        self.terms = TermVectors()  # hybrid retrieval's term vectors of memory articles, by id
        self._served_calibrations = CalibrationStore(settings, self.router.client())
        self.calibrations: CalibrationStore = (ScratchCalibrations(self._served_calibrations) if scratch_calibrations
                                               else self._served_calibrations)
        self.model_store = ModelStore(settings, self.router.client())
        self.samples = MemorySamples(settings, self.router, self.calibrations, self.model_store)
        self.models = MemoryModels(self.samples)
        self.records = MemoryRecords(settings, self.router, self.calibrations, self.models)
        self.neighbours = MemoryNeighbours(settings, self.router)
        self.scorer = Scorer(self.records, self.neighbours, self.terms)

    # -- memory -------------------------------------------------------------------------------------
    def collection(self, lang: str) -> str:
        """The collection name of ``lang`` for this model version."""
        return self.router.collection(lang)

    def memory(self, lang: str, create: bool = True) -> KnowledgeMemory:
        """The knowledge memory of one language (opened on first use; created when missing only with ``create``:
        :meth:`MemoryRouter.memory`)."""
        return self.router.memory(lang, create)

    def languages(self) -> list[str]:
        """Languages that have a collection of this model version."""
        return self.router.languages()

    def add_articles(self, articles: Sequence[Article], progress: bool = False, batch: int = 64) -> BuildReport:
        """Embed (``passage`` role) and upsert labelled articles into their language's memory.

        Idempotent: an article id already present is overwritten with the new vector, labels and payload.
        """
        done: dict[str, int] = {}
        embed_s = upsert_s = 0.0
        bar = tqdm(total=len(articles), desc="memory build", unit="art", disable=not progress)
        for start in range(0, len(articles), batch):
            chunk = list(articles[start:start + batch])
            t0 = time.perf_counter()
            vecs = self.encoder.encode([a.text for a in chunk], role="passage")
            embed_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            for lang in sorted({a.lang for a in chunk}):
                idx = [i for i, a in enumerate(chunk) if a.lang == lang]
                self.memory(lang).upsert(
                    [chunk[i].id for i in idx], vecs[idx], [chunk[i].labels for i in idx],
                    [article_payload(lang, chunk[i].title, chunk[i].source, chunk[i].text) for i in idx])
                done[lang] = done.get(lang, 0) + len(idx)
            upsert_s += time.perf_counter() - t0
            bar.update(len(chunk))
        bar.close()
        return BuildReport(done, embed_s, upsert_s)

    def search(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int, exclude: Sequence[str] = (),
               texts: Sequence[str] | None = None, lexical_k: int = 0,
               keep: Callable[[Retrieval], Retrieval] | None = None) -> tuple[Retrieval, list[tuple[str, ...]]]:
        """:meth:`MemoryNeighbours.search` (the scorer's neighbour source)."""
        return self.neighbours.search(vectors, langs, top_k, exclude, texts, lexical_k, keep)

    def carriers(self, vectors: np.ndarray, langs: Sequence[str | None], label: str, n: int,
                 exclude: Sequence[str] = ()) -> list[list]:
        """:meth:`MemoryNeighbours.carriers`."""
        return self.neighbours.carriers(vectors, langs, label, n, exclude)

    def retrieve(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int,
                 exclude: Sequence[str] = ()) -> Retrieval:
        """The dense neighbours of :meth:`search`."""
        return self.search(vectors, langs, top_k, exclude)[0]

    def resolved(self, lang: str | None) -> Resolved:
        """The scoring parameters of articles in ``lang`` (:meth:`MemoryRecords.resolved`)."""
        return self.records.resolved(lang)

    def language_of(self, texts: Sequence[str], langs: Sequence[str | None] | None = None) -> list[str | None]:
        """Each article's language: the given one, else the memory's only language, else the language detected
        among the memory's languages (:func:`newsmon.shared.languages.detect`); None when the memory is empty."""
        langs = list(langs) if langs is not None else [None] * len(texts)
        if all(lang is not None for lang in langs):
            return langs
        known = self.languages()
        if len(known) <= 1:
            return [lang if lang is not None else (known[0] if known else None) for lang in langs]
        return [lang if lang is not None else detect(text, known) for text, lang in zip(texts, langs)]

    def propose(self, texts: Sequence[str], langs: Sequence[str | None] | None = None,
                vectors: np.ndarray | None = None, exclude: Sequence[str] = (), relabel: Relabel | None = None,
                candidates: int = CANDIDATES, resolved: Resolved | None = None) -> tuple[list[Proposal], np.ndarray]:
        """Label proposals for ``m`` articles by the scorer (:class:`newsmon.shared.scoring.Scorer`), with each
        language's calibrated parameters (:meth:`resolved`).

        Args:
            texts: article texts; langs: ISO 639-1 per article (None: :meth:`language_of`);
            vectors: ``(m, d)`` float32 embeddings when already computed (``query`` role);
            exclude: article ids never used as neighbours; relabel: the label registry's names; candidates: how
            many of the best labels not proposed each proposal keeps; resolved: parameters for every article
            instead of each language's.

        Returns:
            (the :class:`~newsmon.schemas.Proposal` of each article, with the collections ``searched`` and the
            parameters it was scored with, ``scoring``; the ``(m, d)`` float32 query embeddings).
        """
        langs = self.language_of(texts, langs)
        if vectors is None:
            vectors = self.encoder.encode(list(texts), role="query")
        props = self.scorer.propose(texts, langs, vectors, exclude, relabel, candidates, resolved=resolved)
        return props, vectors

    def close(self) -> None:
        """Close the memories and the embedding cache."""
        self.router.close()
        self._served_calibrations.close()
        self.model_store.close()
        self.encoder.close()

