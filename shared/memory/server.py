"""The knowledge memory in a Qdrant server collection, through ``qdrant-client``.

Also works with the client's local mode (``QdrantClient(":memory:")`` or ``QdrantClient(path=...)``), which
the tests use. qdrant-client is imported where it is used: it takes 1-2 s to import and only server mode
needs it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import structlog

from newsmon.shared.memory.base import (LEXICAL_VECTOR, PAYLOAD_INDEXES, SEARCH_PAYLOAD_EXCLUDED, KnowledgeMemoryError,
                                        MemoryUnavailableError, check_dim)
from newsmon.shared.memory.common import TIE_MARGIN, PointRow, QdrantAdapter, split_hybrid, with_cosines
from newsmon.shared.memory.index_build import IndexParams

log = structlog.get_logger(__name__)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from qdrant_client import QdrantClient

_TRANSIENT_HTTP = frozenset({408, 429, 502, 503, 504})


def connect(url: str, api_key: str | None) -> QdrantClient:
    """A client of the Qdrant server at ``url`` (one per process or router; close it when done)."""
    from qdrant_client import QdrantClient  # deferred: 1-2 s import, server mode only

    return QdrantClient(url=url, api_key=api_key or None)


def _transient(exc: BaseException, what: str) -> MemoryUnavailableError | None:
    """Map a qdrant-client exception raised by operation ``what`` to
    :class:`MemoryUnavailableError` if it is transient, else ``None``."""
    from qdrant_client.http.exceptions import (ResponseHandlingException,  # deferred: server mode only
                                               UnexpectedResponse)

    try:
        from qdrant_client.common.client_exceptions import ResourceExhaustedResponse  # deferred: newer clients only
    except ImportError:  # pragma: no cover - older clients
        ResourceExhaustedResponse = ()  # type: ignore[assignment,misc]

    if ResourceExhaustedResponse and isinstance(exc, ResourceExhaustedResponse):
        return MemoryUnavailableError(f"{what}: Qdrant is rate limiting: {exc}", getattr(exc, "retry_after_s", None))
    if isinstance(exc, UnexpectedResponse) and exc.status_code in _TRANSIENT_HTTP:
        retry = exc.headers.get("Retry-After") if exc.headers is not None else None
        try:
            retry_s = float(retry) if retry is not None else None
        except ValueError:
            retry_s = None
        return MemoryUnavailableError(f"{what}: Qdrant server answered HTTP {exc.status_code}: {exc}", retry_s)
    if isinstance(exc, ResponseHandlingException):
        source = getattr(exc, "source", None)
        if isinstance(source, (httpx.TransportError, OSError)):
            return MemoryUnavailableError(f"{what}: Qdrant server unreachable: {source!r}")
        return None
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
        return MemoryUnavailableError(f"{what}: Qdrant server unreachable: {exc!r}")
    return _transient_grpc(exc, what)


def _transient_grpc(exc: BaseException, what: str) -> MemoryUnavailableError | None:
    try:
        import grpc  # deferred: optional, only with a gRPC client
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.RESOURCE_EXHAUSTED):
            return MemoryUnavailableError(f"{what}: Qdrant server unavailable (gRPC {code.name}): {exc}")
    return None


@contextmanager
def server_call(what: str) -> Iterator[None]:
    """Run a qdrant-client call; its transient errors become :class:`MemoryUnavailableError`."""
    try:
        yield
    except KnowledgeMemoryError:
        raise
    except Exception as exc:
        mapped = _transient(exc, what)
        if mapped is None:
            raise
        raise mapped from exc


class QdrantServerMemory(QdrantAdapter):
    """Knowledge memory in a Qdrant server collection, through ``qdrant-client``.

    Creates the collection (cosine distance, ``dim``) and the payload indexes
    if missing; an existing collection must match. Works with any
    :class:`qdrant_client.QdrantClient`, including local mode (where payload
    indexes have no effect, and their warning is silenced). Writes wait for
    the server to apply them, so they are visible to the next read.

    Args:
        client: a connected client.
        collection: collection name.
        dim: embedding dimension ``d``, ``>= 1``.
        close_client: close ``client`` in :meth:`close` (default: the caller
            owns it, e.g. a :class:`~newsmon.shared.memory.MemoryRouter` that shares one client between
            its collections).

    Raises:
        MemoryUnavailableError: the server is unreachable or overloaded
            (transient; retry). Also raised by every method.
        ValueError: bad arguments, or the existing collection has another
            size / distance / uses named vectors.
    """

    def __init__(self, client: QdrantClient, collection: str, dim: int, *, close_client: bool = False,
                 index: IndexParams | None = None) -> None:
        from qdrant_client import models  # deferred: 1-2 s import, server mode only

        if not isinstance(collection, str) or not collection:
            raise ValueError(f"collection must be a non-empty str, got {collection!r}")
        self._m = models
        self.collection = collection
        self.dim = check_dim(dim)
        self.index = index if index is not None else IndexParams()
        self._client = client
        self._close_client = close_client
        self._ensure_collection()

    @property
    def _handle(self) -> Any:  # the engine handle of QdrantAdapter is the client
        return getattr(self, "_client", None)

    def _ensure_collection(self) -> None:
        from qdrant_client.http.exceptions import UnexpectedResponse  # deferred: server mode only

        m = self._m
        with server_call(f"open collection {self.collection!r}"):
            if not self._live.collection_exists(self.collection):
                try:
                    ix = self.index
                    quant = (m.ScalarQuantization(scalar=m.ScalarQuantizationConfig(
                        type=m.ScalarType.INT8, quantile=0.99, always_ram=True)) if ix.quantization == "int8" else None)
                    self._live.create_collection(
                        self.collection, vectors_config=m.VectorParams(size=self.dim, distance=m.Distance.COSINE),
                        sparse_vectors_config={LEXICAL_VECTOR: m.SparseVectorParams(modifier=m.Modifier.IDF)},
                        hnsw_config=m.HnswConfigDiff(m=ix.m, ef_construct=ix.ef_construct, payload_m=0),
                        quantization_config=quant,
                        # the server indexes a segment in the background once it holds this many KB of vectors
                        optimizers_config=m.OptimizersConfigDiff(indexing_threshold=max(1, ix.min_points * self.dim
                                                                                        * 4 // 1024)))
                except UnexpectedResponse as exc:  # 409: another worker created it meanwhile
                    if exc.status_code != 409:
                        raise
            info = self._live.get_collection(self.collection)
        params = info.config.params.vectors
        if not isinstance(params, m.VectorParams):
            raise ValueError(
                f"collection {self.collection!r} uses named vectors ({params!r}); expected one unnamed vector")
        if params.size != self.dim or params.distance != m.Distance.COSINE:
            raise ValueError(
                f"collection {self.collection!r} has size={params.size}, distance={params.distance}; "
                f"expected size={self.dim}, distance=Cosine")
        self.lexical = LEXICAL_VECTOR in (info.config.params.sparse_vectors or {}) or self._add_lexical()
        kinds = {"keyword": m.PayloadSchemaType.KEYWORD, "integer": m.PayloadSchemaType.INTEGER}
        existing = set(info.payload_schema or {})
        for name, kind in PAYLOAD_INDEXES.items():
            if name in existing:
                continue
            with server_call(f"create payload index {name!r}"), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
                self._live.create_payload_index(self.collection, name, field_schema=kinds[kind], wait=True)

    def _add_lexical(self) -> bool:
        """Add the lexical sparse vector to a collection made before it existed (its points stay dense-only until
        they are written again); False where the engine refuses (qdrant-client's local mode), logged."""
        m = self._m
        try:
            with server_call(f"add the lexical vector to {self.collection!r}"):
                self._live.update_collection(self.collection, sparse_vectors_config={
                    LEXICAL_VECTOR: m.SparseVectorParams(modifier=m.Modifier.IDF)})
            return True
        except MemoryUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - hybrid search is an improvement, the dense search still works
            log.warning("collection without the lexical vector: dense search only", collection=self.collection,
                        reason=str(exc))
            return False

    # -- engine primitives (see QdrantAdapter) ------------------------------------------------------------
    def _guard(self, what: str):
        return server_call(what)

    def _match(self, key: str, value: str) -> Any:
        return self._m.FieldCondition(key=key, match=self._m.MatchValue(value=value))

    def _match_any(self, key: str, values: list[str]) -> Any:
        return self._m.FieldCondition(key=key, match=self._m.MatchAny(any=values))

    def _range(self, key: str, gte: float | None = None, lt: float | None = None) -> Any:
        bounds = {k: v for k, v in (("gte", gte), ("lt", lt)) if v is not None}
        return self._m.FieldCondition(key=key, range=self._m.Range(**bounds))

    def _has_id(self, pids: list[str]) -> Any:
        return self._m.HasIdCondition(has_id=pids)

    def _make_filter(self, must: list, must_not: list) -> Any:
        return self._m.Filter(must=must, must_not=must_not)

    def _write(self, points: Sequence[PointRow]) -> None:
        m = self._m
        structs = [m.PointStruct(id=pid, payload=pl, vector=vec if terms is None else
                                 {"": vec, LEXICAL_VECTOR: m.SparseVector(indices=terms[0], values=terms[1])})
                   for pid, vec, pl, terms in points]
        self._live.upsert(self.collection, points=structs, wait=True)

    def _delete(self, pids: Sequence[str]) -> None:
        self._live.delete(self.collection, points_selector=self._m.PointIdsList(points=list(pids)), wait=True)

    def _set_payloads(self, items: Sequence[tuple[str, dict]]) -> None:
        m = self._m
        ops = [m.SetPayloadOperation(set_payload=m.SetPayload(payload=fields, points=[pid])) for pid, fields in items]
        self._live.batch_update_points(self.collection, update_operations=ops, wait=True)

    def _hit_payload(self) -> Any:
        """The payload a search's hits carry: every field but the text."""
        return self._m.PayloadSelectorExclude(exclude=list(SEARCH_PAYLOAD_EXCLUDED))

    def _retrieve(self, pids: Sequence[str], with_vectors: bool, with_text: bool = True) -> list:
        payload = True if with_text else self._hit_payload()
        return self._live.retrieve(self.collection, ids=list(pids), with_payload=payload, with_vectors=with_vectors)

    def _query(self, queries: np.ndarray, k: int, flt: Any, sparse: Any = None, lexical_k: int = 0,
               exact: bool = False, payloads: bool = True) -> list[list]:
        """See :meth:`QdrantAdapter._query`: as the embedded engine answers it (the dense top-``k`` and the lexical
        top-``lexical_k`` as two requests of one batch, each cut with its ties settled by article id, then the
        lexical hits the dense ones lack scored by an exact dense search of their ids), so both engines answer a
        hybrid search alike."""
        m = self._m
        quant = (m.QuantizationSearchParams(rescore=True, oversampling=2.0)
                 if self.index.quantization == "int8" and not exact else None)
        params = m.SearchParams(hnsw_ef=max(self.index.ef, k + TIE_MARGIN), exact=exact, quantization=quant)
        with_vector = [LEXICAL_VECTOR] if self.lexical else False  # the lexical fusion reads the stored terms
        payload = self._hit_payload() if payloads else False
        requests = []
        hybrid = [sparse is not None and bool(lexical_k) and sparse[i] is not None for i in range(len(queries))]
        for i, q in enumerate(queries):
            requests.append(m.QueryRequest(query=q.tolist(), limit=k + TIE_MARGIN, filter=flt, with_payload=payload,
                                           params=params, with_vector=with_vector))
            if hybrid[i]:
                lexical = m.SparseVector(indices=sparse[i][0], values=sparse[i][1])
                requests.append(m.QueryRequest(query=lexical, using=LEXICAL_VECTOR, limit=lexical_k + TIE_MARGIN,
                                               filter=flt, with_payload=payload, with_vector=with_vector))
        answers = [r.points for r in self._live.query_batch_points(self.collection, requests=requests)] \
            if requests else []
        out, extra = split_hybrid(answers if payloads else self._tied_payloads(answers), hybrid, k, lexical_k)
        if extra:
            scored = self._live.query_batch_points(self.collection, requests=[
                m.QueryRequest(query=queries[i].tolist(), limit=len(hits),
                               filter=m.Filter(must=[m.HasIdCondition(has_id=[h.id for h in hits])]),
                               params=m.SearchParams(exact=True), with_payload=False, with_vector=False)
                for i, hits in extra.items()])
            for (i, hits), got in zip(extra.items(), scored, strict=True):
                out[i] += with_cosines(hits, got.points)
        return out

    def _count(self, flt: Any) -> int:
        return self._live.count(self.collection, count_filter=flt, exact=True).count

    def _scroll_page(self, flt: Any, limit: int, offset: Any, with_vectors: bool) -> tuple[list, Any]:
        return self._live.scroll(self.collection, scroll_filter=flt, limit=limit, offset=offset,
                                 with_payload=True, with_vectors=with_vectors)

    def close(self) -> None:
        """Close the client if this memory owns it (``close_client=True``). Idempotent."""
        client, self._client = getattr(self, "_client", None), None
        if client is not None and self._close_client:
            client.close()

    def __repr__(self) -> str:
        return f"QdrantServerMemory(collection={self.collection!r}, dim={self.dim})"
