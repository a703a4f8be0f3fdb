"""Knowledge memory: a vector store of labelled news articles (RAE-XMC's "memory").

Every stored point is one article: a dense embedding (cosine distance), the article's label set and a
free-form JSON payload. The retrieval-augmented predictor searches it for the nearest labelled neighbours of
a new article and votes their labels; pending (not yet labelled) articles are kept in the same collection with
an empty label set and become useful once labelled via :meth:`KnowledgeMemory.set_labels`.

* :mod:`.base` -- the interface (:class:`KnowledgeMemory`), value types, errors, names and argument checks;
* :mod:`.common` -- what both adapters do the same way (:class:`~.common.QdrantAdapter`);
* :mod:`.edge` -- :class:`EdgeMemory`, the embedded default: Qdrant's own engine in-process
  (``qdrant-edge-py``), persistent in ``path/collection``, one open handle per directory
  (a second open raises :class:`MemoryLockedError`);
* :mod:`.server` -- :class:`QdrantServerMemory`, a Qdrant server through ``qdrant-client`` (also its local
  mode, which the tests use);
* :mod:`.engines` -- the engines registered by name (``edge``, ``server``) and chosen by ``memory.engine``
  (:func:`engine_of`), :func:`open_memory` (one collection in that engine), :func:`open_records` (where records
  every replica reads live), :class:`LocalIndex` (the capability of a memory whose index its process keeps);
* :mod:`.router` -- :class:`MemoryRouter` (one collection per language and model version; the search routed by
  language);
* :mod:`.versions` -- points between model versions: :func:`copy_missing` and :func:`catch_up` (the newer
  decision always wins), :func:`replaced_router`.
"""

from newsmon.shared.memory.base import (ARTICLE_NAMESPACE, KnowledgeMemory, KnowledgeMemoryError,
                                        MemoryLockedError, MemoryPoint, MemoryUnavailableError, Neighbour,
                                        SearchFilter, collection_name, point_id)
from newsmon.shared.memory.edge import EdgeMemory
from newsmon.shared.memory.engines import ENGINES, LocalIndex, MemoryEngine, engine_of, open_memory, open_records
from newsmon.shared.memory.router import (MemoryRouter, UnknownLanguageError, close_all_routers, shared_router,
                                          stored_collections)
from newsmon.shared.memory.server import QdrantServerMemory
from newsmon.shared.memory.versions import catch_up, copy_missing, decision_time, replaced_router

__all__ = ["ARTICLE_NAMESPACE", "ENGINES", "EdgeMemory", "KnowledgeMemory", "KnowledgeMemoryError", "LocalIndex",
           "MemoryEngine", "MemoryLockedError", "MemoryPoint", "MemoryRouter", "MemoryUnavailableError", "Neighbour",
           "QdrantServerMemory", "SearchFilter", "UnknownLanguageError", "catch_up", "close_all_routers",
           "collection_name", "copy_missing", "decision_time", "engine_of", "open_memory", "open_records", "point_id",
           "replaced_router", "shared_router", "stored_collections"]
