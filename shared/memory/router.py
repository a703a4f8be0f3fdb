"""The knowledge memories of one model version (one collection per language), shared per process, and the
copy of points between model versions.

In server mode a router holds one ``QdrantClient`` for all its collections and for listing them. The list of
language collections is cached: :meth:`MemoryRouter.new_batch` marks it stale, and the next
:meth:`MemoryRouter.languages` call lists the collections again, so a worker lists them at most once per batch.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from newsmon.shared.config import Settings
from newsmon.shared.memory.base import KnowledgeMemory, MemoryPoint, SearchFilter, collection_name
from newsmon.shared.memory.edge import EdgeMemory
from newsmon.shared.memory.server import QdrantServerMemory, connect, server_call


def open_memory(*, url: str | None, api_key: str | None, path: str | Path, collection: str, dim: int,
                client: Any = None) -> KnowledgeMemory:
    """Open the knowledge memory for one collection.

    With ``url`` (non-empty): :class:`QdrantServerMemory` over ``client`` when given (the caller keeps and
    closes it), else over a new ``QdrantClient(url=url, api_key=api_key)`` closed with the memory. Without:
    :class:`EdgeMemory` in ``path/collection``.

    Raises:
        MemoryLockedError: embedded store already open elsewhere.
        MemoryUnavailableError: server unreachable (transient).
        ValueError: bad arguments or an incompatible existing collection.
    """
    if not url:
        return EdgeMemory(path, collection, dim)
    if client is not None:
        return QdrantServerMemory(client, collection, dim)
    own = connect(url, api_key)
    try:
        return QdrantServerMemory(own, collection, dim, close_client=True)
    except BaseException:
        own.close()
        raise


class MemoryRouter:
    """The knowledge memories of one model version: one collection per language, opened on first use.

    The memory of language ``lang`` is the collection ``<prefix>_<lang>_<model version>`` (embedded engine
    under ``settings.memory_path`` or the Qdrant server at ``settings.memory.url``, through one client).
    ``write_lock`` serialises read-modify-write updates of points between the workers of this process.
    """

    def __init__(self, settings: Settings, model_version: str, dim: int):
        self.settings = settings
        self.model_version = model_version
        self.dim = dim
        self._memories: dict[str, KnowledgeMemory] = {}
        self._open_lock = threading.Lock()
        self.write_lock = threading.RLock()
        self.closed = False
        self._client: Any = None
        self._listed: list[str] | None = None  # languages found by the last listing; None: list on next use

    def collection(self, lang: str) -> str:
        """The collection name of ``lang`` for this model version."""
        return collection_name(self.settings.memory.collection_prefix, lang, self.model_version)

    def server_client(self) -> Any:
        """The one ``QdrantClient`` of this router (server mode only), created on first use; closed with it."""
        if self._client is None:
            self._client = connect(self.settings.memory.url, self.settings.memory.api_key)
        return self._client

    def memory(self, lang: str) -> KnowledgeMemory:
        """The knowledge memory of one language (opened, and created when missing, on first use)."""
        with self._open_lock:
            if lang not in self._memories:
                m = self.settings.memory
                client = self.server_client() if m.url else None
                self._memories[lang] = open_memory(url=m.url, api_key=m.api_key, path=self.settings.memory_path,
                                                   collection=self.collection(lang), dim=self.dim, client=client)
            return self._memories[lang]

    def new_batch(self) -> None:
        """Mark the cached list of language collections stale (called once per batch by the workers)."""
        self._listed = None

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
        if self.settings.memory.url:
            with server_call("list collections"):
                names = [c.name for c in self.server_client().get_collections().collections]
        else:
            root = Path(self.settings.memory_path)
            names = [p.name for p in root.iterdir() if p.is_dir()] if root.exists() else []
        pat = re.compile(rf"^{re.escape(prefix)}_([a-z]{{2}}){re.escape(suffix)}$")
        return sorted({m.group(1) for n in names if (m := pat.match(n))})

    def has_labelled(self, lang: str) -> bool:
        """Whether the collection of ``lang`` holds at least one labelled article (one exact count)."""
        return self.memory(lang).count(SearchFilter(labelled=True)) > 0

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
            for aid, point in zip(todo, self.memory(lang).get(todo, with_vectors=with_vectors)):
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
    key = (settings.memory.url or str(Path(settings.memory_path).resolve()), settings.memory.collection_prefix,
           model_version)
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


def copy_missing(old_router: MemoryRouter, new_router: MemoryRouter, encoder: Any, batch: int = 64,
                 progress: bool = False) -> dict[str, int]:
    """Re-embed (from the text kept in each payload) and upsert every point of ``old_router``'s collections
    that ``new_router``'s lack; labels, payload and status are kept. Points already copied whose labels or
    decision changed since are relabelled (their vector kept). Returns points copied per language, and
    ``<lang>:relabelled`` / ``<lang>:no_text`` counts; points without a stored text are skipped.

    ``encoder``: anything with ``encode(texts, role="passage") -> (n, d) float32`` (the new model's encoder).
    """
    counts: dict[str, int] = {}
    for lang in old_router.languages(refresh=True):
        old, new = old_router.memory(lang), new_router.memory(lang)
        bar = tqdm(total=old.count(), desc=f"re-embedding memory [{lang}]", unit="art", disable=not progress)
        buf: list[MemoryPoint] = []
        for point in old.scroll():
            bar.update(1)
            if not point.payload.get("text"):
                counts[f"{lang}:no_text"] = counts.get(f"{lang}:no_text", 0) + 1
                continue
            buf.append(point)
            if len(buf) >= batch:
                _copy_batch(buf, new, encoder, lang, counts)
                buf = []
        _copy_batch(buf, new, encoder, lang, counts)
        bar.close()
    return counts


def _copy_batch(buf: list[MemoryPoint], new: KnowledgeMemory, encoder: Any, lang: str, counts: dict) -> None:
    """Copy one batch of old points into ``new``: re-embed the missing ones, relabel the stale ones."""
    if not buf:
        return
    exists = new.get([p.article_id for p in buf], with_vectors=True)
    todo = [p for p, e in zip(buf, exists) if e is None]
    if todo:
        vecs = encoder.encode([p.payload["text"] for p in todo], role="passage")
        new.upsert([p.article_id for p in todo], vecs, [p.labels for p in todo], [p.payload for p in todo])
        counts[lang] = counts.get(lang, 0) + len(todo)
    # decisions applied to the old collection after the new one was filled: carry the labels over
    stale = [(p, e) for p, e in zip(buf, exists) if e is not None and
             (e.labels != p.labels or e.payload.get("decided_at") != p.payload.get("decided_at"))]
    if stale:
        new.upsert([p.article_id for p, _ in stale], np.stack([e.vector for _, e in stale]),
                   [p.labels for p, _ in stale], [p.payload for p, _ in stale])
        counts[f"{lang}:relabelled"] = counts.get(f"{lang}:relabelled", 0) + len(stale)
