"""Where the scorer gets the score components' per-memory models (:class:`ModelCache`): fitted on a knowledge
memory's labelled articles once per calibration record and memory, and kept until another record is read (the
models follow each calibration; the neighbours carry every later decision at once).

* :class:`FittedModels`: the articles are in memory already (``eval``: the train split is the memory);
* :class:`MemoryModels`: the articles are read from a language memory by one scroll, on first use under a
  record (the workers, ``suggest``, the API), from a :class:`MemorySource` (the live one:
  :class:`newsmon.shared.classifier.MemorySamples`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

import structlog

from newsmon.schemas.scoring import ScoringCore
from newsmon.shared.heap import freeze_long_lived
from newsmon.shared.scoring.components import MemoryArticles, get_component

log = structlog.get_logger(__name__)


class ModelCache:
    """The models of one memory under one record, by (component, model key), and its label counts."""

    def __init__(self, record: str | None) -> None:
        self.record = record
        self.models: dict[tuple[str, tuple], Any] = {}
        self.counts: dict[str, int] | None = None

    def missing(self, params: ScoringCore, counts: bool) -> list[tuple[str, Any]]:
        """The (component, options) of ``params`` without a model yet (and a ``("", None)`` when the label counts
        are wanted and missing)."""
        out = [(s.name, s.parsed()) for s in params.components
               if (s.name, get_component(s.name).model_key(s.parsed())) not in self.models]
        return out + ([("", None)] if counts and self.counts is None else [])

    def fill(self, memory: MemoryArticles, missing: list[tuple[str, Any]]) -> dict[str, Any]:
        """Fit the missing models on ``memory``; returns what to log."""
        for name, opts in missing:
            if not name:
                self.counts = memory.label_counts()
                continue
            comp = get_component(name)
            self.models[(name, comp.model_key(opts))] = comp.fit(memory, opts)
        return {"articles": len(memory), "of": memory.total or len(memory),
                "fitted": [n or "label counts" for n, _ in missing]}

    def get(self, params: ScoringCore) -> dict[str, Any]:
        """The models of ``params``' components, by component name."""
        return {s.name: self.models[(s.name, get_component(s.name).model_key(s.parsed()))] for s in params.components}


class FittedModels:
    """Models of one memory whose labelled articles are at hand (every language and record alike).

    Args:
        memory: the articles (``eval``: the train split, with its embeddings and texts).
        models: models already fitted on ``memory``, by (component, model key) (``eval``: the calibration's, the
            ones it judged), used instead of fitting them again.
    """

    def __init__(self, memory: MemoryArticles, models: dict[tuple[str, tuple], Any] | None = None) -> None:
        self.memory = memory
        self._cache = ModelCache(None)
        self._cache.models.update(models or {})

    @property
    def cache(self) -> ModelCache:
        """The models fitted (or given) so far and the label counts once computed."""
        return self._cache

    def get(self, lang: str | None, record: str | None, params: ScoringCore, counts: bool
            ) -> tuple[dict[str, Any], dict[str, int] | None]:
        """(the models of ``params``' components by name, the memory's label counts when ``counts``)."""
        missing = self._cache.missing(params, counts)
        if missing:
            self._cache.fill(self.memory, missing)
        return self._cache.get(params), self._cache.counts if counts else None


class MemorySource(Protocol):
    """What :class:`MemoryModels` reads: a language memory's labelled articles, its name, and the models stored with
    a calibration record (the live one: :class:`newsmon.shared.classifier.MemorySamples`)."""

    def articles(self, lang: str) -> MemoryArticles:
        """The labelled articles of ``lang``'s memory that its missing models are fitted on (a bounded sample)."""

    def collection(self, lang: str) -> str:
        """The collection name of ``lang``'s memory (for the log lines)."""

    def stored_models(self, record: str) -> ModelCache | None:
        """The models stored with calibration record ``record`` (None: none stored)."""


class MemoryModels:
    """Models of each language memory under a calibration record: the ones stored with the record
    (:meth:`MemorySource.stored_models`, :class:`newsmon.shared.scoring.stored.ModelStore`), else, for a record
    without them (older records, or components the settings add), fitted from the memory's labelled articles
    (:meth:`MemorySource.articles`: one scroll for every model missing; the live source bounds it to the
    calibration's sample size, so it never grows with the memory), and said so. Kept until another record is asked
    for. Whenever the models change, what the process holds is frozen out of the cyclic collector
    (:func:`newsmon.shared.heap.freeze_long_lived`). Thread-safe.

    Args:
        source: the memories' articles, names and stored models (:class:`MemorySource`).
    """

    def __init__(self, source: MemorySource) -> None:
        self.source = source
        self._caches: dict[str | None, ModelCache] = {}
        self._lock = threading.Lock()

    def get(self, lang: str | None, record: str | None, params: ScoringCore, counts: bool
            ) -> tuple[dict[str, Any], dict[str, int] | None]:
        """As :meth:`FittedModels.get`, for ``lang``'s memory under ``record``.

        Raises:
            ValueError: models are needed for articles without a language.
        """
        with self._lock:
            cache, loaded = self._caches.get(lang), False
            if cache is None or cache.record != record:
                cache = self._caches[lang] = self._load(lang, record)
                loaded = True
            missing = cache.missing(params, counts)
            if missing:
                if lang is None:
                    raise ValueError("score components need a language memory; the article has no language")
                t0 = time.perf_counter()
                fields = cache.fill(self.source.articles(lang), missing)
                log.warning("per-record models fitted from the memory (not stored with the record)",
                            collection=self.source.collection(lang), record=record, **fields,
                            seconds=round(time.perf_counter() - t0, 2))
            if loaded or missing:  # the process's long-lived state changed: out of the cyclic collector's walks
                freeze_long_lived(f"models of record {record}")
            return cache.get(params), cache.counts if counts else None

    def _load(self, lang: str | None, record: str | None) -> ModelCache:
        """The models stored with ``record`` (an empty cache when none are)."""
        if record is None:
            return ModelCache(record)
        t0 = time.perf_counter()
        found = self.source.stored_models(record)
        if found is None:
            return ModelCache(record)
        log.info("per-record models loaded", collection=self.source.collection(lang) if lang else None, record=record,
                 models=[n for n, _k in found.models], seconds=round(time.perf_counter() - t0, 2))
        return found
