"""The knowledge memories of one model version (one collection per language), shared per process, and the
search routed by language (:meth:`MemoryRouter.search_languages`, used by the live classifier and by eval).

A router opens its collections in the engine of ``memory.engine`` (:mod:`.engines`); with a server it holds one
``QdrantClient`` for all its collections and for listing them. The list of language collections is cached:
:meth:`MemoryRouter.new_batch` marks it stale, and the next :meth:`MemoryRouter.languages` call lists the
collections again, so a worker lists them at most once per batch. Only ISO 639-1 codes name a collection:
:meth:`MemoryRouter.memory` refuses any other code, so a bad code never creates one. Only the paths that write a
memory's articles (``memory build``, ``memory import``, eval's own memories, a promotion's new version) create a
collection; every other path opens a language's collection with ``create=False`` and gets
:class:`UnknownLanguageError`, naming the languages there are, when it has none.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from newsmon.schemas.base import check_language_code
from newsmon.shared.config import Settings
from newsmon.shared.memory.base import (
    KnowledgeMemory,
    MemoryPoint,
    Neighbour,
    SearchFilter,
    collection_name,
)
from newsmon.shared.memory.engines import engine_of


class UnknownLanguageError(ValueError):
    """A language the knowledge memory has no collection for, on a path that never creates one (a proposal, a
    count, an index build): ``lang``, and ``known``, the languages there are (sorted; empty for an empty memory)."""

    def __init__(self, lang: str, known: Sequence[str]):
        self.lang, self.known = lang, tuple(known)
        if self.known:
            there = f"the memory has {', '.join(self.known)}: send one of them, leave the language out to have it " \
                    "detected among them"
        else:
            there = "the memory is empty: build it first (`newsmon memory build --data PATH --calibrate`)"
        super().__init__(f"no knowledge memory for language {lang!r}: {there}, or build a {lang!r} memory from "
                         f"labelled {lang!r} articles (`newsmon memory build` or `newsmon memory import`)")


def stored_collections(settings: Settings, client: Any = None) -> list[str]:
    """Names of every collection of the knowledge memory that starts with ``<collection_prefix>_`` (any
    language and model version), sorted; opens nothing. With a server engine through ``client`` (default: a client
    of its own, closed afterwards).

    Raises:
        MemoryUnavailableError: the server did not answer (transient).
        ValueError: an unknown ``memory.engine``.
    """
    names = engine_of(settings).collections(settings, client)
    return sorted(n for n in names if n.startswith(f"{settings.memory.collection_prefix}_"))


class MemoryRouter:
    """The knowledge memories of one model version: one collection per language, opened on first use.

    The memory of language ``lang`` is the collection ``<prefix>_<lang>_<model version>`` in the engine of
    ``memory.engine`` (:func:`~.engines.engine_of`: the embedded engine under ``settings.memory_path``, or the
    Qdrant server at ``settings.memory.url`` through one client).
    ``write_lock`` serialises read-modify-write updates of points between the workers of this process.
    """

    def __init__(self, settings: Settings, model_version: str, dim: int):
        self.settings = settings
        self.engine = engine_of(settings)
        self.model_version = model_version
        self.dim = dim
        self._memories: dict[str, KnowledgeMemory] = {}
        self._open_lock = threading.Lock()
        self.write_lock = threading.RLock()
        self.closed = False
        self._client: Any = None
        self._listed: list[str] | None = None  # languages found by the last listing; None: list on next use
        self._counts: dict[str, int] = {}  # labelled articles per language, counted in this batch
        self._standing: set[str] = set()  # languages seen with enough labelled articles to be searched alone

    def collection(self, lang: str) -> str:
        """The collection name of ``lang`` for this model version."""
        return collection_name(self.settings.memory.collection_prefix, lang, self.model_version)

    def client(self) -> Any:
        """The one client of this router's engine (a ``QdrantClient`` of the server engine), created on first use
        and closed with the router; None for an engine without one (the embedded engine)."""
        if self._client is None and self.engine.connect is not None:
            self._client = self.engine.connect(self.settings)
        return self._client

    def memory(self, lang: str, create: bool = True) -> KnowledgeMemory:
        """The knowledge memory of one language (opened on first use; created when missing only with ``create``,
        which only the paths that write a memory's articles ask for).

        Raises:
            ValueError: ``lang`` is not an ISO 639-1 code (nothing is created).
            UnknownLanguageError: ``create`` is false and ``lang`` has no collection (nothing is created).
        """
        check_language_code(lang)
        if not create and lang not in self._memories:
            self.check_language(lang)
        with self._open_lock:
            if lang not in self._memories:
                self._memories[lang] = self.engine.open(self.settings, self.collection(lang), self.dim,
                                                        self.client(), self.settings.memory.index.params())
            return self._memories[lang]

    def check_language(self, lang: str) -> None:
        """Refuse a language without a collection of this model version: the cached listing, listed again once
        when it lacks ``lang`` (another process may have built it since).

        Raises:
            UnknownLanguageError: no collection for ``lang`` (nothing is created).
        """
        if lang not in self.languages() and lang not in self.languages(refresh=True):
            raise UnknownLanguageError(lang, self.languages())

    def opened(self) -> list[KnowledgeMemory]:
        """The memories opened so far (one per language)."""
        with self._open_lock:
            return list(self._memories.values())

    def new_batch(self) -> None:
        """Mark the cached list of language collections and the labelled counts stale (called once per batch by
        the workers)."""
        self._listed = None
        self._counts = {}

    def languages(self, refresh: bool = False) -> list[str]:
        """Languages that have a collection of this model version (cached until :meth:`new_batch`)."""
        listed = self._listed
        if listed is None or refresh:
            listed = self._listed = self._list_languages()
        with self._open_lock:
            opened = set(self._memories)
        return sorted(set(listed) | opened)

    def _list_languages(self) -> list[str]:
        prefix = self.settings.memory.collection_prefix
        suffix = self.collection("xx")[len(f"{prefix}_xx"):]
        names = stored_collections(self.settings, self.client())
        pat = re.compile(rf"^{re.escape(prefix)}_([a-z]{{2}}){re.escape(suffix)}$")
        return sorted({m.group(1) for n in names if (m := pat.match(n)) and _is_language(m.group(1))})

    def has_labelled(self, lang: str) -> bool:
        """Whether the collection of ``lang`` holds at least one labelled article (one exact count)."""
        return self.memory(lang, create=False).count(SearchFilter(labelled=True)) > 0

    def labelled_count(self, lang: str) -> int:
        """Labelled articles in the collection of ``lang`` (one exact count, cached until :meth:`new_batch`)."""
        if lang not in self._counts:
            self._counts[lang] = self.memory(lang, create=False).count(SearchFilter(labelled=True))
        return self._counts[lang]

    # -- the search routed by language --------------------------------------------------------------------
    def search_languages(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int, flt: SearchFilter,
                         min_articles: int, texts: Sequence[str] | None = None, lexical_k: int = 0,
                         payloads: bool = True) -> tuple[list[list[Neighbour]], list[tuple[str, ...]]]:
        """Top-k neighbours of ``(m, d)`` query vectors, each searched in its language's memory; returns per
        query the hits (best first by cosine, at most ``top_k + lexical_k``) and the names of the collections
        searched. With ``texts`` and ``lexical_k > 0`` the search is hybrid (:meth:`KnowledgeMemory.search`: the
        dense top-``top_k`` united with the lexical top-``lexical_k``). Without ``payloads`` the hits are read later,
        those kept only (:meth:`points`).

        A language whose memory holds at least ``min_articles`` labelled articles is searched alone. Below
        that (a new language), or without a collection (or ``lang`` None), the hits of every other language's
        collection are merged with its own by similarity (cross-lingual retrieval), so that its few articles
        compete with the rest of the memory instead of filling the top-k alone (with one neighbour, RAE-XMC
        gives its labels p = 1.0 whatever the similarity). One batched search per language of the batch and
        per other language when merging; a count only for a language whose search found fewer than
        ``min_articles`` hits (until it reaches ``min_articles``). No collection is created.
        """
        existing = self.languages()
        limit = top_k + (lexical_k if texts is not None else 0)

        def search(lang: str, idx: list[int]) -> list[list[Neighbour]]:
            return self.memory(lang, create=False).search(
                vectors[idx], top_k, flt, [texts[i] for i in idx] if texts is not None else None,
                lexical_k if texts is not None else 0, payloads=payloads)

        rows: list[list[Neighbour]] = [[] for _ in langs]
        searched: list[tuple[str, ...]] = [() for _ in langs]
        for lang in sorted({lg or "" for lg in langs}):
            idx = [i for i, lg in enumerate(langs) if (lg or "") == lang]
            own = search(lang, idx) if lang in existing else None
            names = (self.collection(lang),) if own is not None else ()
            hits = own
            if own is None or not self._stands_alone(lang, own, min_articles):
                others = [lg for lg in existing if lg != lang]
                hits = [list(h) for h in own] if own is not None else [[] for _ in idx]
                for other in others:
                    for pos, extra in enumerate(search(other, idx)):
                        hits[pos].extend(extra)
                names += tuple(self.collection(lg) for lg in others)
            for pos, i in enumerate(idx):
                rows[i] = sorted(hits[pos], key=lambda n: -n.similarity)[:limit]
                searched[i] = names
        return rows, searched

    def points(self, points: Sequence[tuple[str, str]]) -> dict[tuple[str, str], MemoryPoint]:
        """The stored articles of hits searched without their payloads (:attr:`Neighbour.point`: ``(collection,
        point id)``), one read per collection (:meth:`KnowledgeMemory.points`); a point deleted since, or of a
        collection this router has not opened, is missing."""
        by_name = {m.collection: m for m in self.opened()}
        wanted: dict[str, list[str]] = {}
        for name, pid in points:
            wanted.setdefault(name, []).append(pid)
        out: dict[tuple[str, str], MemoryPoint] = {}
        for name, pids in wanted.items():
            memory = by_name.get(name)
            if memory is not None:
                out.update(((name, pid), p) for pid, p in memory.points(pids).items())
        return out

    def _stands_alone(self, lang: str, own: list[list[Neighbour]], min_articles: int) -> bool:
        """Whether ``lang``'s memory holds at least ``min_articles`` labelled articles: its search found that
        many, or an exact count says so (remembered once reached)."""
        if max((len(h) for h in own), default=0) >= min_articles or lang in self._standing:
            return True
        if self.labelled_count(lang) >= min_articles:
            self._standing.add(lang)
            return True
        return False

    def find(self, article_id: str, with_vectors: bool = False) -> tuple[str, MemoryPoint] | None:
        """``(lang, MemoryPoint)`` of an article in any language collection, or None."""
        return self.find_many([article_id], with_vectors).get(article_id)

    def find_many(self, article_ids: Sequence[str], with_vectors: bool = False) -> dict[str, tuple[str, MemoryPoint]]:
        """``{article_id: (lang, MemoryPoint)}`` of the articles found in any language collection (the first
        language in sorted order wins); one ``get`` per language for all of them."""
        found: dict[str, tuple[str, MemoryPoint]] = {}
        todo = list(dict.fromkeys(article_ids))
        for lang in self.languages():
            if not todo:
                break
            for aid, point in zip(todo, self.memory(lang, create=False).get(todo, with_vectors=with_vectors)):
                if point is not None:
                    found[aid] = (lang, point)
            todo = [aid for aid in todo if aid not in found]
        return found

    def close(self) -> None:
        """Close every memory and the server client. The router is unusable afterwards."""
        with self._open_lock:
            for m in self._memories.values():
                m.close()
            self._memories.clear()
            client, self._client = self._client, None
            if client is not None:
                client.close()
            self.closed = True


_ROUTERS: dict[tuple, MemoryRouter] = {}
_ROUTERS_LOCK = threading.Lock()


def shared_router(settings: Settings, model_version: str, dim: int) -> MemoryRouter:
    """One :class:`MemoryRouter` per memory location and model version in this process: the embedded engine
    allows one open handle per collection directory, so workers of one process must share it."""
    key = (engine_of(settings).location(settings), settings.memory.collection_prefix, model_version)
    with _ROUTERS_LOCK:
        router = _ROUTERS.get(key)
        if router is None or router.closed:
            router = _ROUTERS[key] = MemoryRouter(settings, model_version, dim)
        return router


def close_all_routers() -> None:
    """Close every router of this process (runtime shutdown)."""
    with _ROUTERS_LOCK:
        for router in _ROUTERS.values():
            router.close()
        _ROUTERS.clear()


def _is_language(code: str) -> bool:
    try:
        check_language_code(code)
        return True
    except ValueError:  # a collection from before codes were checked (e.g. xx): never listed
        return False
