"""The knowledge memory's engines, registered by name (:data:`ENGINES`, a :class:`~newsmon.schemas.registry.Registry`)
and chosen by the setting ``memory.engine`` (:func:`engine_of`):

* ``edge``: the embedded Qdrant engine (``qdrant-edge``, :class:`~.edge.EdgeMemory`) in this process, one directory
  per collection under ``memory.path``. One process holds a collection (its lock), so both worker roles share a
  process. Calibration records and stored models are files beside the memory (readable while the workers hold
  its lock). The process keeps the HNSW index (:class:`LocalIndex`: :mod:`.maintain` rebuilds it when due).
* ``server``: a Qdrant server at ``memory.url`` (``qdrant-client``, :class:`~.server.QdrantServerMemory`), one
  client per router for all its collections. Calibration records and stored models are collections of their own,
  so every replica reads the same ones. The server indexes by itself.

``memory.engine`` unset: ``server`` when ``memory.url`` is set, else ``edge``
(:meth:`~newsmon.shared.config.MemorySettings.engine_name`), as before the setting existed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from newsmon.schemas.registry import Registry
from newsmon.shared.config import Settings, redact_url, reveal
from newsmon.shared.memory.base import KnowledgeMemory
from newsmon.shared.memory.edge import EdgeMemory
from newsmon.shared.memory.index_build import IndexParams
from newsmon.shared.memory.server import QdrantServerMemory, connect, server_call

__all__ = ["ENGINES", "LocalIndex", "MemoryEngine", "drop_collection", "engine_of", "open_memory", "open_records"]


@runtime_checkable
class LocalIndex(Protocol):
    """A memory whose HNSW index the process that holds it keeps (the embedded engine's): a running worker
    rebuilds it when due (:class:`~.maintain.IndexMaintainer`), ``newsmon memory index`` builds it offline. A
    Qdrant server indexes by itself: its memories have none of this."""

    collection: str
    index: IndexParams

    def index_status(self) -> dict: ...

    def needs_index(self) -> bool: ...

    def rebuild_index(self, timeout_s: float = ...) -> dict: ...

    def optimize(self) -> bool: ...


@dataclass(frozen=True)
class MemoryEngine:
    """One engine of the knowledge memory (see the module docstring).

    Attributes:
        name: the registry name, the value of ``memory.engine``.
        open: ``(settings, collection, dim, client, index) -> KnowledgeMemory``: the collection, created when
            missing (``client``: the router's, from :attr:`connect`, or None: the memory opens its own if it needs
            one and closes it with itself; ``index``: its HNSW parameters, None for the defaults).
        collections: ``(settings, client) -> names``: every collection stored (any prefix), opening none.
        location: ``settings -> str``: where the memory is (the server's URL, the resolved directory), one key per
            memory (a process's routers, an import's progress file).
        describe: ``settings -> str``: where the memory is, in words, safe to show (no credentials).
        connect: ``settings -> client``: one client for all the collections of a router (closed with it); None
            for an engine without one.
        shared_records: calibration records and stored models are collections of the engine (:func:`open_records`:
            every replica reads the same) instead of files beside the memory.
        keeps_index: the process that holds a memory keeps its index (its memories are :class:`LocalIndex`);
            False: the engine indexes by itself.
        drop: ``(settings, collection, dim, client) -> bool``: delete a collection of ``dim``-d vectors and its
            points for good (True: it was there); None for an engine that cannot (:func:`drop_collection` refuses).
    """

    name: str
    open: Callable[[Settings, str, int, Any, IndexParams | None], KnowledgeMemory]
    collections: Callable[[Settings, Any], list[str]]
    location: Callable[[Settings], str]
    describe: Callable[[Settings], str]
    connect: Callable[[Settings], Any] | None = None
    shared_records: bool = False
    keeps_index: bool = False
    drop: Callable[[Settings, str, int, Any], bool] | None = None


#: The registered memory engines: ``edge`` and ``server``.
ENGINES: Registry[MemoryEngine] = Registry("memory engine")


def engine_of(settings: Settings) -> MemoryEngine:
    """The engine ``settings`` name (``memory.engine``; unset: ``server`` with a ``memory.url``, else ``edge``).

    Raises:
        ValueError: an engine name that is not registered (the message names the setting and the registered
            engines).
    """
    name = settings.memory.engine_name()
    engine = ENGINES.find(name)
    if engine is None:
        raise ValueError(f"NEWSMON_MEMORY__ENGINE={name}: unknown memory engine; registered: {', '.join(ENGINES)}")
    return engine


def open_memory(settings: Settings, collection: str, dim: int, client: Any = None,
                index: IndexParams | None = None) -> KnowledgeMemory:
    """The knowledge memory of one collection, in the engine ``settings`` name (:func:`engine_of`).

    Raises:
        MemoryLockedError: embedded store already open elsewhere.
        MemoryUnavailableError: server unreachable (transient).
        ValueError: bad arguments, an unknown engine or an incompatible existing collection.
    """
    return engine_of(settings).open(settings, collection, dim, client, index)


def open_records(settings: Settings, collection: str, client: Any = None) -> KnowledgeMemory | None:
    """The collection ``collection`` (1-d vectors; the records in the payload) where the engine keeps what every
    replica must read the same (calibration records, stored models), or None for an engine that keeps them as
    files beside the memory (``shared_records`` False)."""
    engine = engine_of(settings)
    return engine.open(settings, collection, 1, client, None) if engine.shared_records else None


def drop_collection(settings: Settings, collection: str, dim: int, client: Any = None) -> bool:
    """Delete ``collection`` (its ``dim``-d points, vectors and index) from the engine ``settings`` name, for good;
    nothing to do when it is not there. Used for what no reader serves: a refused candidate's copy of the memory.

    Returns:
        whether it was there.

    Raises:
        MemoryLockedError: the embedded collection is open in another process (nothing is deleted).
        MemoryUnavailableError: server unreachable (transient).
        ValueError: an engine that cannot drop a collection.
    """
    engine = engine_of(settings)
    if engine.drop is None:
        raise ValueError(f"the memory engine {engine.name!r} cannot drop a collection")
    return engine.drop(settings, collection, dim, client)


# -- the embedded engine ----------------------------------------------------------------------------------------
def _edge_open(settings: Settings, collection: str, dim: int, client: Any, index: IndexParams | None
               ) -> KnowledgeMemory:
    return EdgeMemory(settings.memory_path, collection, dim, index, settings.memory.read_ahead_mb)


def _edge_collections(settings: Settings, client: Any) -> list[str]:
    root = Path(settings.memory_path)
    return [p.name for p in root.iterdir() if p.is_dir()] if root.exists() else []


def _edge_drop(settings: Settings, collection: str, dim: int, client: Any) -> bool:
    directory = Path(settings.memory_path) / collection
    if not directory.is_dir():
        return False
    EdgeMemory(settings.memory_path, collection, dim).close()  # its lock: refused while another process holds it
    shutil.rmtree(directory)
    return True


def _edge_location(settings: Settings) -> str:
    return str(Path(settings.memory_path).resolve())


ENGINES.add("edge", MemoryEngine(
    "edge", _edge_open, _edge_collections, _edge_location, lambda s: str(Path(s.memory_path).expanduser()),
    keeps_index=True, drop=_edge_drop))


# -- a Qdrant server -----------------------------------------------------------------------------------------------
def _server_connect(settings: Settings) -> Any:
    url = reveal(settings.memory.url)
    if not url:
        raise ValueError("the server engine needs NEWSMON_MEMORY__URL (the Qdrant server's URL)")
    return connect(url, reveal(settings.memory.api_key))


def _server_open(settings: Settings, collection: str, dim: int, client: Any, index: IndexParams | None
                 ) -> KnowledgeMemory:
    if client is not None:
        return QdrantServerMemory(client, collection, dim, index=index)
    own = _server_connect(settings)
    try:
        return QdrantServerMemory(own, collection, dim, close_client=True, index=index)
    except BaseException:
        own.close()
        raise


def _server_collections(settings: Settings, client: Any) -> list[str]:
    own = client is None
    client = _server_connect(settings) if own else client
    try:
        with server_call("list collections"):
            return [c.name for c in client.get_collections().collections]
    finally:
        if own:
            client.close()


def _server_drop(settings: Settings, collection: str, dim: int, client: Any) -> bool:
    own = client is None
    client = _server_connect(settings) if own else client
    try:
        with server_call("drop a collection"):
            if not client.collection_exists(collection):
                return False
            client.delete_collection(collection)
            return True
    finally:
        if own:
            client.close()


ENGINES.add("server", MemoryEngine(
    "server", _server_open, _server_collections, lambda s: reveal(s.memory.url) or "",
    lambda s: f"the Qdrant server {redact_url(s.memory.url or '')}", connect=_server_connect, shared_records=True,
    drop=_server_drop))
