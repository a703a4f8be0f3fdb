"""Knowledge memory: a vector store of labelled news articles (RAE-XMC's "memory").

Every stored point is one article: a dense embedding (cosine distance), the
article's label set and a free-form JSON payload. The retrieval-augmented
predictor searches it for the nearest labelled neighbours of a new article and
votes their labels; pending (not yet labelled) articles are kept in the same
collection with an empty label set and become useful once labelled via
:meth:`KnowledgeMemory.set_labels`.

One small interface, :class:`KnowledgeMemory`, and two adapters over Qdrant:

* :class:`EdgeMemory` -- the embedded default: Qdrant's own engine in-process
  (``qdrant-edge-py``), persistent in ``path/collection``. Only one
  :class:`EdgeMemory` may hold a directory at a time (a WAL lock); a second
  open, in this or another process, raises :class:`MemoryLockedError`.
* :class:`QdrantServerMemory` -- a Qdrant server through ``qdrant-client``
  (also works with the client's local mode, ``QdrantClient(":memory:")`` or
  ``QdrantClient(path=...)``, which the tests use).

:func:`open_memory` picks one: a server when a URL is given, else the embedded
engine. :func:`collection_name` builds the per-language, per-model-version
collection name.

Storage layout (both adapters, shared so data can move between them):

* point id: ``uuid5(ARTICLE_NAMESPACE, article_id)`` (see :func:`point_id`);
* payload field ``"article_id"`` (str): the original article id;
* payload field ``"labels"`` (list of str): the label set, may be empty;
* payload field ``"n_labels"`` (int): ``len(labels)``, used by the
  ``labelled`` filter;
* every other payload field is the caller's (e.g. ``"lang"``).

Payload indexes: keyword on ``labels``, ``lang`` and ``article_id``, integer
on ``n_labels``.

Vectors are stored unit-normalised by the engine (cosine distance), so the
vector read back by :meth:`KnowledgeMemory.get` is ``v / ||v||``, not the
original ``v``. Similarities are cosine similarities in ``[-1, 1]``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    from qdrant_client import QdrantClient

__all__ = [
    "ARTICLE_NAMESPACE",
    "EdgeMemory",
    "KnowledgeMemory",
    "KnowledgeMemoryError",
    "MemoryLockedError",
    "MemoryPoint",
    "MemoryUnavailableError",
    "Neighbour",
    "QdrantServerMemory",
    "SearchFilter",
    "collection_name",
    "open_memory",
    "point_id",
]

#: Fixed namespace for mapping article ids to Qdrant point ids
#: (``uuid5(NAMESPACE_URL, "newsmon:knowledge-memory")``). Never change it:
#: existing collections would no longer find their points.
ARTICLE_NAMESPACE = uuid.UUID("99c427ca-289a-5471-ac47-5b2101df3024")

#: Payload fields owned by the memory itself; they are stripped from the
#: payloads handed back to callers and may not be set through ``payloads``.
FIELD_ARTICLE_ID = "article_id"
FIELD_LABELS = "labels"
FIELD_N_LABELS = "n_labels"
FIELD_LANG = "lang"
INTERNAL_FIELDS = frozenset({FIELD_ARTICLE_ID, FIELD_LABELS, FIELD_N_LABELS})

#: Points per write request and queries per batched search request.
_WRITE_BATCH = 512
_READ_BATCH = 1024
_QUERY_BATCH = 64

_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_NAME_MAX_LEN = 128


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------


class KnowledgeMemoryError(RuntimeError):
    """Base class of the memory's own errors (argument errors are ValueError/KeyError)."""


class MemoryLockedError(KnowledgeMemoryError):
    """The embedded store's directory is already open (WAL lock held).

    Raised by :class:`EdgeMemory` when another :class:`EdgeMemory` -- in this
    process or another one -- holds the same ``path/collection``. Embedded mode
    needs every worker in one process sharing one instance; for several
    processes run a Qdrant server and use :class:`QdrantServerMemory`.
    """


class MemoryUnavailableError(KnowledgeMemoryError):
    """The Qdrant server could not be reached or is temporarily overloaded.

    Transient: the same call may succeed when retried (connection refused or
    reset, timeouts, HTTP 408/429/502/503/504, gRPC UNAVAILABLE /
    DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED). The original exception is chained
    as ``__cause__``. ``retry_after_s`` is the server's hint in seconds, if any.
    """

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# --------------------------------------------------------------------------
# value types
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Neighbour:
    """One search hit.

    Attributes:
        article_id: the stored article's id.
        similarity: cosine similarity to the query, in ``[-1, 1]``.
        labels: the stored label set (empty for pending articles).
        payload: the caller's payload (internal fields ``article_id``,
            ``labels``, ``n_labels`` removed).
    """

    article_id: str
    similarity: float
    labels: tuple[str, ...]
    payload: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryPoint:
    """One stored article, as read back by :meth:`KnowledgeMemory.get`.

    Attributes:
        article_id: the article's id.
        labels: the stored label set (empty for pending articles).
        payload: the caller's payload (internal fields removed).
        vector: ``(d,) float32`` unit-normalised embedding when requested
            with ``with_vectors=True``, else ``None``.
    """

    article_id: str
    labels: tuple[str, ...]
    payload: dict
    vector: np.ndarray | None = None


@dataclass(frozen=True)
class SearchFilter:
    """Restricts :meth:`KnowledgeMemory.search` and :meth:`KnowledgeMemory.count`.

    All given conditions must hold (AND).

    Attributes:
        lang: only points whose payload ``"lang"`` equals this; ``None``: any.
        labelled: ``True`` (default): only points with at least one label;
            ``False``: only unlabelled ("pending") points; ``None``: both.
        exclude_ids: article ids to leave out (e.g. the query article itself).
    """

    lang: str | None = None
    labelled: bool | None = True
    exclude_ids: tuple[str, ...] = ()


@runtime_checkable
class KnowledgeMemory(Protocol):
    """A vector store of labelled articles, one collection, cosine similarity.

    Attributes:
        collection: the collection's name.
        dim: the embedding dimension ``d``.

    Conventions shared by all methods:

    * ids are arbitrary non-empty ``str`` article ids;
    * vectors are ``(n, d)`` arrays of finite, non-zero real numbers
      (converted to ``float32``); anything else raises ``ValueError``;
    * length mismatches between ids / vectors / labels / payloads raise
      ``ValueError``;
    * ``filter=None`` means no restriction at all (labelled *and* pending
      points); ``SearchFilter()`` means labelled points only;
    * :class:`MemoryUnavailableError` (server adapter only) is transient and
      worth retrying; other engine errors propagate unchanged.
    """

    collection: str
    dim: int

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        labels: Sequence[Sequence[str]],
        payloads: Sequence[dict] | None = None,
    ) -> None:
        """Insert or replace ``n`` articles.

        Args:
            ids: ``n`` distinct article ids.
            vectors: ``(n, d)`` float array (any scale; stored normalised).
            labels: ``n`` label sets (sequences of str; empty = pending).
            payloads: ``n`` JSON-compatible dicts or ``None`` (empty payloads).
                May not contain ``labels`` / ``n_labels``, nor an
                ``article_id`` different from the id.

        An existing article with the same id is replaced entirely (vector,
        labels and payload). Raises ``ValueError`` on bad input.
        """
        ...

    def delete(self, ids: Sequence[str]) -> None:
        """Delete articles by id; unknown ids are ignored."""
        ...

    def set_labels(self, ids: Sequence[str], labels: Sequence[Sequence[str]]) -> None:
        """Replace the label sets of existing articles, keeping vector and payload.

        Raises ``KeyError`` (listing them) if any id is not stored -- nothing
        is changed then -- and ``ValueError`` on a length mismatch.
        """
        ...

    def get(self, ids: Sequence[str], with_vectors: bool = False) -> list[MemoryPoint | None]:
        """Read articles by id: one entry per id, in order, ``None`` where missing.

        With ``with_vectors=True`` each :attr:`MemoryPoint.vector` is the
        stored ``(d,) float32`` unit-normalised vector.
        """
        ...

    def search(
        self, vectors: np.ndarray, top_k: int, filter: SearchFilter | None = None
    ) -> list[list[Neighbour]]:
        """Nearest neighbours by cosine similarity.

        Args:
            vectors: ``(m, d)`` float query array (any scale).
            top_k: hits per query, ``>= 1``.
            filter: restriction on the candidates; ``None``: all points.

        Returns:
            ``m`` lists, each with at most ``top_k`` :class:`Neighbour`
            sorted by similarity, highest first.

        Raises ``ValueError`` on a bad shape or ``top_k < 1``.
        """
        ...

    def scroll(self, filter: SearchFilter | None = None, with_vectors: bool = False,
               batch: int = 256) -> Iterator[MemoryPoint]:
        """Every point matching ``filter`` (all when None), in pages of ``batch``; vectors ``(d,)`` float32."""
        ...

    def count(self, filter: SearchFilter | None = None) -> int:
        """Exact number of stored points matching ``filter`` (``None``: all points)."""
        ...

    def close(self) -> None:
        """Release the store (flushes and unlocks an embedded store). Idempotent."""
        ...


# --------------------------------------------------------------------------
# helpers shared by the adapters
# --------------------------------------------------------------------------


def point_id(article_id: str) -> str:
    """The Qdrant point id (a UUID string) for an article id: ``uuid5(ARTICLE_NAMESPACE, article_id)``."""
    return str(uuid.uuid5(ARTICLE_NAMESPACE, article_id))


def collection_name(prefix: str, lang: str, model_version: str) -> str:
    """Collection name for one language and embedding-model version.

    ``"{prefix}_{lang}_{model_version}"`` with every run of characters outside
    ``[A-Za-z0-9_-]`` replaced by ``_`` and ``lang`` lower-cased, e.g.
    ``collection_name("newsmon", "SL", "e5-small@1.2")`` ->
    ``"newsmon_sl_e5-small_1_2"``. Names longer than 128 characters are cut
    and suffixed with a hash of the full name, so they stay unique and
    deterministic. Note that sanitising may map different inputs to one name
    (``"v1.2"`` and ``"v1_2"``).

    Raises ``ValueError`` if a part is empty or has no allowed character.
    """
    parts = []
    for what, raw in (("prefix", prefix), ("lang", lang.lower() if isinstance(lang, str) else lang),
                      ("model_version", model_version)):
        if not isinstance(raw, str):
            raise ValueError(f"collection_name: {what} must be str, got {type(raw).__name__}")
        clean = _NAME_BAD_CHARS.sub("_", raw.strip()).strip("_")
        if not clean:
            raise ValueError(f"collection_name: {what} {raw!r} is empty after sanitising")
        parts.append(clean)
    name = "_".join(parts)
    if len(name) > _NAME_MAX_LEN:
        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]
        name = f"{name[: _NAME_MAX_LEN - 17]}-{digest}"
    return name


def _check_ids(ids: Sequence[str], *, what: str = "ids", unique: bool = False) -> list[str]:
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of str, not a single {type(ids).__name__}")
    out = list(ids)
    for i in out:
        if not isinstance(i, str) or not i:
            raise ValueError(f"{what}: every id must be a non-empty str, got {i!r}")
    if unique and len(set(out)) != len(out):
        counts: dict[str, int] = {}
        for i in out:
            counts[i] = counts.get(i, 0) + 1
        dups = sorted(i for i, c in counts.items() if c > 1)
        raise ValueError(f"{what}: duplicate ids in one call: {dups[:10]}")
    return out


def _check_vectors(vectors: Any, dim: int, *, what: str = "vectors", n: int | None = None) -> np.ndarray:
    """Validate and return a C-contiguous ``(n, dim) float32`` copy/view of ``vectors``."""
    arr = np.asarray(vectors)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{what}: expected a real-valued (n, {dim}) array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D (n, {dim}) array, got shape {arr.shape}")
    if arr.shape[1] != dim:
        raise ValueError(f"{what}: expected dimension {dim}, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{what}: expected {n} rows (one per id), got {arr.shape[0]}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(f"{what}: rows {bad[:10].tolist()} contain NaN or inf (or overflow float32)")
    zero = ~arr.any(axis=1)
    if zero.any():
        bad = np.flatnonzero(zero)
        raise ValueError(f"{what}: rows {bad[:10].tolist()} are all-zero; cosine similarity is undefined")
    return arr


def _check_label_sets(labels: Sequence[Sequence[str]], n: int) -> list[list[str]]:
    if isinstance(labels, (str, bytes)):
        raise ValueError("labels must be a sequence of label sets, not a str")
    sets = list(labels)
    if len(sets) != n:
        raise ValueError(f"labels: expected {n} label sets (one per id), got {len(sets)}")
    out = []
    for k, ls in enumerate(sets):
        if isinstance(ls, (str, bytes)):
            raise ValueError(f"labels[{k}] is a str ({ls!r}); a label set must be a sequence of str, e.g. [{ls!r}]")
        clean: list[str] = []
        for lab in ls:
            if not isinstance(lab, str) or not lab:
                raise ValueError(f"labels[{k}]: every label must be a non-empty str, got {lab!r}")
            if lab not in clean:
                clean.append(lab)
        out.append(clean)
    return out


def _check_payloads(payloads: Sequence[dict] | None, ids: list[str]) -> list[dict]:
    if payloads is None:
        return [{} for _ in ids]
    if isinstance(payloads, dict):
        raise ValueError("payloads must be a sequence of dicts (one per id), not a single dict")
    pl = list(payloads)
    if len(pl) != len(ids):
        raise ValueError(f"payloads: expected {len(ids)} dicts (one per id), got {len(pl)}")
    out = []
    for aid, p in zip(ids, pl):
        if p is None:
            p = {}
        if not isinstance(p, dict):
            raise ValueError(f"payload for {aid!r} must be a dict, got {type(p).__name__}")
        for key in (FIELD_LABELS, FIELD_N_LABELS):
            if key in p:
                raise ValueError(f"payload for {aid!r} may not set reserved field {key!r}; pass labels separately")
        if FIELD_ARTICLE_ID in p and p[FIELD_ARTICLE_ID] != aid:
            raise ValueError(f"payload for {aid!r} has a different article_id {p[FIELD_ARTICLE_ID]!r}")
        out.append(p)
    return out


def _full_payload(aid: str, labels: list[str], payload: dict) -> dict:
    full = {k: v for k, v in payload.items() if k not in INTERNAL_FIELDS}
    full[FIELD_ARTICLE_ID] = aid
    full[FIELD_LABELS] = list(labels)
    full[FIELD_N_LABELS] = len(labels)
    return full


def _label_payload(labels: list[str]) -> dict:
    return {FIELD_LABELS: list(labels), FIELD_N_LABELS: len(labels)}


def _user_payload(payload: dict | None) -> dict:
    return {k: v for k, v in (payload or {}).items() if k not in INTERNAL_FIELDS}


def _labels_of(payload: dict | None) -> tuple[str, ...]:
    return tuple((payload or {}).get(FIELD_LABELS) or ())


def _check_top_k(top_k: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    return int(top_k)


def _check_filter(flt: SearchFilter | None) -> SearchFilter | None:
    if flt is not None and not isinstance(flt, SearchFilter):
        raise ValueError(f"filter must be a SearchFilter or None, got {type(flt).__name__}")
    if flt is not None and isinstance(flt.exclude_ids, str):
        raise ValueError("SearchFilter.exclude_ids must be a tuple of ids, not a str")
    return flt


def _vector_of(raw: Any) -> np.ndarray | None:
    """Engine record vector (list, or {"": list} for the default vector) -> ``(d,) float32``."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        raw = raw.get("", next(iter(raw.values()), None))
        if raw is None:
            return None
    return np.asarray(raw, dtype=np.float32)


def _memory_point(rec: Any, with_vectors: bool) -> MemoryPoint:
    """A :class:`MemoryPoint` from an engine record (qdrant-edge or qdrant-client: ``.payload``, ``.vector``)."""
    payload = rec.payload or {}
    return MemoryPoint(article_id=payload.get(FIELD_ARTICLE_ID, ""), labels=_labels_of(payload),
                       payload=_user_payload(payload), vector=_vector_of(rec.vector) if with_vectors else None)


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


# --------------------------------------------------------------------------
# embedded adapter: qdrant-edge
# --------------------------------------------------------------------------


class EdgeMemory:
    """Embedded knowledge memory on ``qdrant-edge-py`` (Qdrant's engine in-process).

    Data lives in ``Path(path) / collection`` (created if missing) and
    survives :meth:`close` and process restarts; reopening the directory sees
    it. The directory is locked (WAL lock) while open: a second
    :class:`EdgeMemory` on it, in this or another process, raises
    :class:`MemoryLockedError`. So all workers that use one collection must
    share one instance in one process; otherwise use a Qdrant server.

    Searches are exact brute-force scans of the unindexed segments (fast up
    to roughly 10^5 points); :meth:`optimize` builds the HNSW index
    explicitly (slow; never called on the request path).

    Args:
        path: parent directory of the collections.
        collection: collection name (a directory name; see :func:`collection_name`).
        dim: embedding dimension ``d``, ``>= 1``.

    Raises:
        MemoryLockedError: the directory is already open.
        ValueError: bad arguments, or the stored collection has another
            dimension or distance.
    """

    def __init__(self, path: str | Path, collection: str, dim: int) -> None:
        import qdrant_edge as qe

        if not isinstance(collection, str) or not collection or _NAME_BAD_CHARS.search(collection):
            raise ValueError(f"collection must be a non-empty name of [A-Za-z0-9_-], got {collection!r}")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be an int >= 1, got {dim!r}")
        self._qe = qe
        self.collection = collection
        self.dim = int(dim)
        self.directory = Path(path) / collection
        config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine))
        self._shard = self._open(config)
        try:
            self._ensure_indexes()
        except BaseException:
            self._shard.close()
            raise

    @property
    def _live(self) -> Any:
        shard = getattr(self, "_shard", None)
        if shard is None:
            raise KnowledgeMemoryError(f"{self!r} is closed")
        return shard

    # -- opening -----------------------------------------------------------------

    def _open(self, config: Any) -> Any:
        qe = self._qe
        directory = str(self.directory)
        has_data = (self.directory / "edge_config.json").exists() or (self.directory / "segments").is_dir()
        try:
            if has_data:
                return qe.EdgeShard.load(directory, config)
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                return qe.EdgeShard.create(directory, config)
            except Exception as exc:  # lost a creation race: somebody created it meanwhile
                if "already contains" not in str(exc):
                    raise
                return qe.EdgeShard.load(directory, config)
        except Exception as exc:
            raise self._translate_open_error(exc) from exc

    def _translate_open_error(self, exc: Exception) -> Exception:
        msg = str(exc)
        if "WouldBlock" in msg or "Can't init WAL" in msg:
            return MemoryLockedError(
                f"knowledge memory {self.directory} is already open (WAL lock held) by another "
                "EdgeMemory in this or another process. Embedded mode (qdrant-edge) needs all "
                "workers in one process sharing one EdgeMemory; for several processes run a "
                "Qdrant server and open the memory with a URL (open_memory(url=...)). "
                f"Engine error: {msg}"
            )
        if "incompatible" in msg.lower():
            return ValueError(
                f"knowledge memory {self.directory} holds a collection that does not match "
                f"dim={self.dim}, cosine distance: {msg}"
            )
        return exc

    def _ensure_indexes(self) -> None:
        qe = self._qe
        wanted = {
            FIELD_LABELS: qe.PayloadSchemaType.Keyword,
            FIELD_LANG: qe.PayloadSchemaType.Keyword,
            FIELD_ARTICLE_ID: qe.PayloadSchemaType.Keyword,
            FIELD_N_LABELS: qe.PayloadSchemaType.Integer,
        }
        existing = set(self._live.info().payload_schema)
        for name, schema in wanted.items():
            if name not in existing:
                self._live.update(qe.UpdateOperation.create_field_index(name, schema))

    # -- filters -----------------------------------------------------------------

    def _filter(self, flt: SearchFilter | None) -> Any:
        flt = _check_filter(flt)
        if flt is None:
            return None
        qe = self._qe
        must: list[Any] = []
        must_not: list[Any] = []
        if flt.lang is not None:
            must.append(qe.FieldCondition(FIELD_LANG, match=qe.MatchValue(flt.lang)))
        if flt.labelled is True:
            must.append(qe.FieldCondition(FIELD_N_LABELS, range=qe.RangeFloat(gte=1)))
        elif flt.labelled is False:
            must.append(qe.FieldCondition(FIELD_N_LABELS, range=qe.RangeFloat(lt=1)))
        if flt.exclude_ids:
            ids = _check_ids(flt.exclude_ids, what="exclude_ids")
            must_not.append(qe.HasIdCondition({point_id(i) for i in ids}))
        if not must and not must_not:
            return None
        return qe.Filter(must=must or None, must_not=must_not or None)

    # -- interface ---------------------------------------------------------------

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        labels: Sequence[Sequence[str]],
        payloads: Sequence[dict] | None = None,
    ) -> None:
        """See :meth:`KnowledgeMemory.upsert`. ``vectors``: ``(n, d)`` float."""
        qe = self._qe
        ids_ = _check_ids(ids, unique=True)
        vecs = _check_vectors(vectors, self.dim, n=len(ids_))
        label_sets = _check_label_sets(labels, len(ids_))
        pls = _check_payloads(payloads, ids_)
        points = [
            qe.Point(point_id(aid), vecs[k].tolist(), _full_payload(aid, label_sets[k], pls[k]))
            for k, aid in enumerate(ids_)
        ]
        for chunk in _chunks(points, _WRITE_BATCH):
            self._live.update(qe.UpdateOperation.upsert_points(list(chunk)))

    def delete(self, ids: Sequence[str]) -> None:
        """See :meth:`KnowledgeMemory.delete`. Unknown ids are ignored."""
        ids_ = _check_ids(ids)
        for chunk in _chunks([point_id(i) for i in ids_], _WRITE_BATCH):
            self._live.update(self._qe.UpdateOperation.delete_points(list(chunk)))

    def set_labels(self, ids: Sequence[str], labels: Sequence[Sequence[str]]) -> None:
        """See :meth:`KnowledgeMemory.set_labels`. Raises ``KeyError`` for unknown ids."""
        ids_ = _check_ids(ids)
        label_sets = _check_label_sets(labels, len(ids_))
        missing = [aid for aid, p in zip(ids_, self.get(ids_)) if p is None]
        if missing:
            raise KeyError(f"set_labels: ids not in {self.collection!r}: {missing[:20]}")
        for aid, ls in zip(ids_, label_sets):
            self._live.update(self._qe.UpdateOperation.set_payload([point_id(aid)], _label_payload(ls)))

    def get(self, ids: Sequence[str], with_vectors: bool = False) -> list[MemoryPoint | None]:
        """See :meth:`KnowledgeMemory.get`; vectors are ``(d,) float32``, unit-normalised."""
        ids_ = _check_ids(ids)
        found: dict[str, MemoryPoint] = {}
        unique_pids = list(dict.fromkeys(point_id(i) for i in ids_))
        for chunk in _chunks(unique_pids, _READ_BATCH):
            for rec in self._live.retrieve(list(chunk), True, bool(with_vectors)):
                found[str(rec.id)] = _memory_point(rec, with_vectors)
        return [found.get(point_id(i)) for i in ids_]

    def search(
        self, vectors: np.ndarray, top_k: int, filter: SearchFilter | None = None
    ) -> list[list[Neighbour]]:
        """See :meth:`KnowledgeMemory.search`. ``vectors``: ``(m, d)`` float; one batched engine query per 64 rows."""
        qe = self._qe
        k = _check_top_k(top_k)
        qs = _check_vectors(vectors, self.dim)
        flt = self._filter(filter)
        out: list[list[Neighbour]] = []
        for chunk in _chunks(qs, _QUERY_BATCH):
            requests = [
                qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()), filter=flt, with_payload=True)
                for q in chunk
            ]
            for hits in self._live.query_batch(qe.QueryBatchRequest(requests)):
                out.append([_neighbour(h.payload, h.score) for h in hits])
        return out

    def count(self, filter: SearchFilter | None = None) -> int:
        """See :meth:`KnowledgeMemory.count` (exact)."""
        return int(self._live.count(self._qe.CountRequest(exact=True, filter=self._filter(filter))))

    def scroll(self, filter: SearchFilter | None = None, with_vectors: bool = False,
               batch: int = 256) -> Iterator[MemoryPoint]:
        """See :meth:`KnowledgeMemory.scroll`."""
        qe = self._qe
        flt = self._filter(filter)
        offset = None
        while True:
            records, offset = self._live.scroll(qe.ScrollRequest(offset=offset, limit=batch, filter=flt,
                                                                 with_payload=True, with_vector=bool(with_vectors)))
            for rec in records:
                yield _memory_point(rec, with_vectors)
            if offset is None or not records:
                return

    def flush(self) -> None:
        """Force pending writes to disk (the WAL already makes them durable)."""
        self._live.flush()

    def optimize(self) -> bool:
        """Merge segments and build the HNSW index; blocks, can take minutes.

        Call it offline (e.g. after a bulk load), never on the request path.
        Returns ``True`` if anything was optimised. After it, searches are
        approximate (HNSW) instead of exact.
        """
        return bool(self._live.optimize())

    def close(self) -> None:
        """Flush, close and unlock the directory. Idempotent; the instance is unusable afterwards."""
        shard, self._shard = getattr(self, "_shard", None), None
        if shard is not None:
            try:
                shard.flush()
            finally:
                shard.close()

    def __enter__(self) -> "EdgeMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EdgeMemory(path={str(self.directory.parent)!r}, collection={self.collection!r}, dim={self.dim})"


def _neighbour(payload: dict | None, score: float) -> Neighbour:
    payload = payload or {}
    return Neighbour(
        article_id=payload.get(FIELD_ARTICLE_ID, ""),
        similarity=float(score),
        labels=_labels_of(payload),
        payload=_user_payload(payload),
    )


# --------------------------------------------------------------------------
# server adapter: qdrant-client
# --------------------------------------------------------------------------

_TRANSIENT_HTTP = frozenset({408, 429, 502, 503, 504})


def _transient(exc: BaseException, what: str) -> MemoryUnavailableError | None:
    """Map a qdrant-client exception raised by operation ``what`` to
    :class:`MemoryUnavailableError` if it is transient, else ``None``."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    try:
        from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
    except ImportError:  # pragma: no cover - older clients
        ResourceExhaustedResponse = ()  # type: ignore[assignment,misc]
    import httpx

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
    try:
        import grpc
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.RESOURCE_EXHAUSTED):
            return MemoryUnavailableError(f"{what}: Qdrant server unavailable (gRPC {code.name}): {exc}")
    return None


@contextmanager
def _server_call(what: str) -> Iterator[None]:
    try:
        yield
    except KnowledgeMemoryError:
        raise
    except Exception as exc:
        mapped = _transient(exc, what)
        if mapped is None:
            raise
        raise mapped from exc


class QdrantServerMemory:
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
            owns it; :func:`open_memory` passes ``True``).

    Raises:
        MemoryUnavailableError: the server is unreachable or overloaded
            (transient; retry). Also raised by every method.
        ValueError: bad arguments, or the existing collection has another
            size / distance / uses named vectors.
    """

    def __init__(self, client: "QdrantClient", collection: str, dim: int, *, close_client: bool = False) -> None:
        from qdrant_client import models

        if not isinstance(collection, str) or not collection:
            raise ValueError(f"collection must be a non-empty str, got {collection!r}")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be an int >= 1, got {dim!r}")
        self._m = models
        self._client = client
        self._close_client = close_client
        self.collection = collection
        self.dim = int(dim)
        self._ensure_collection()

    @property
    def _live(self) -> Any:
        client = getattr(self, "_client", None)
        if client is None:
            raise KnowledgeMemoryError(f"{self!r} is closed")
        return client

    def _ensure_collection(self) -> None:
        from qdrant_client.http.exceptions import UnexpectedResponse

        m = self._m
        with _server_call(f"open collection {self.collection!r}"):
            if not self._live.collection_exists(self.collection):
                try:
                    self._live.create_collection(
                        self.collection, vectors_config=m.VectorParams(size=self.dim, distance=m.Distance.COSINE)
                    )
                except UnexpectedResponse as exc:  # 409: another worker created it meanwhile
                    if exc.status_code != 409:
                        raise
            info = self._live.get_collection(self.collection)
        params = info.config.params.vectors
        if not isinstance(params, m.VectorParams):
            raise ValueError(
                f"collection {self.collection!r} uses named vectors ({params!r}); expected one unnamed vector"
            )
        if params.size != self.dim or params.distance != m.Distance.COSINE:
            raise ValueError(
                f"collection {self.collection!r} has size={params.size}, distance={params.distance}; "
                f"expected size={self.dim}, distance=Cosine"
            )
        wanted = {
            FIELD_LABELS: m.PayloadSchemaType.KEYWORD,
            FIELD_LANG: m.PayloadSchemaType.KEYWORD,
            FIELD_ARTICLE_ID: m.PayloadSchemaType.KEYWORD,
            FIELD_N_LABELS: m.PayloadSchemaType.INTEGER,
        }
        existing = set(info.payload_schema or {})
        for name, schema in wanted.items():
            if name in existing:
                continue
            with _server_call(f"create payload index {name!r}"), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
                self._live.create_payload_index(self.collection, name, field_schema=schema, wait=True)

    def _filter(self, flt: SearchFilter | None) -> Any:
        flt = _check_filter(flt)
        if flt is None:
            return None
        m = self._m
        must: list[Any] = []
        must_not: list[Any] = []
        if flt.lang is not None:
            must.append(m.FieldCondition(key=FIELD_LANG, match=m.MatchValue(value=flt.lang)))
        if flt.labelled is True:
            must.append(m.FieldCondition(key=FIELD_N_LABELS, range=m.Range(gte=1)))
        elif flt.labelled is False:
            must.append(m.FieldCondition(key=FIELD_N_LABELS, range=m.Range(lt=1)))
        if flt.exclude_ids:
            ids = _check_ids(flt.exclude_ids, what="exclude_ids")
            must_not.append(m.HasIdCondition(has_id=sorted({point_id(i) for i in ids})))
        if not must and not must_not:
            return None
        return m.Filter(must=must or None, must_not=must_not or None)

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        labels: Sequence[Sequence[str]],
        payloads: Sequence[dict] | None = None,
    ) -> None:
        """See :meth:`KnowledgeMemory.upsert`. ``vectors``: ``(n, d)`` float; 512 points per request."""
        m = self._m
        ids_ = _check_ids(ids, unique=True)
        vecs = _check_vectors(vectors, self.dim, n=len(ids_))
        label_sets = _check_label_sets(labels, len(ids_))
        pls = _check_payloads(payloads, ids_)
        points = [
            m.PointStruct(id=point_id(aid), vector=vecs[k].tolist(), payload=_full_payload(aid, label_sets[k], pls[k]))
            for k, aid in enumerate(ids_)
        ]
        with _server_call("upsert"):
            for chunk in _chunks(points, _WRITE_BATCH):
                self._live.upsert(self.collection, points=list(chunk), wait=True)

    def delete(self, ids: Sequence[str]) -> None:
        """See :meth:`KnowledgeMemory.delete`. Unknown ids are ignored."""
        ids_ = _check_ids(ids)
        with _server_call("delete"):
            for chunk in _chunks([point_id(i) for i in ids_], _WRITE_BATCH):
                self._live.delete(self.collection, points_selector=self._m.PointIdsList(points=list(chunk)), wait=True)

    def set_labels(self, ids: Sequence[str], labels: Sequence[Sequence[str]]) -> None:
        """See :meth:`KnowledgeMemory.set_labels`. Raises ``KeyError`` for unknown ids; one batch request."""
        m = self._m
        ids_ = _check_ids(ids)
        label_sets = _check_label_sets(labels, len(ids_))
        missing = [aid for aid, p in zip(ids_, self.get(ids_)) if p is None]
        if missing:
            raise KeyError(f"set_labels: ids not in {self.collection!r}: {missing[:20]}")
        ops = [
            m.SetPayloadOperation(set_payload=m.SetPayload(payload=_label_payload(ls), points=[point_id(aid)]))
            for aid, ls in zip(ids_, label_sets)
        ]
        with _server_call("set_labels"):
            for chunk in _chunks(ops, _WRITE_BATCH):
                self._live.batch_update_points(self.collection, update_operations=list(chunk), wait=True)

    def get(self, ids: Sequence[str], with_vectors: bool = False) -> list[MemoryPoint | None]:
        """See :meth:`KnowledgeMemory.get`; vectors are ``(d,) float32``, unit-normalised."""
        ids_ = _check_ids(ids)
        found: dict[str, MemoryPoint] = {}
        unique_pids = list(dict.fromkeys(point_id(i) for i in ids_))
        with _server_call("get"):
            for chunk in _chunks(unique_pids, _READ_BATCH):
                records = self._live.retrieve(
                    self.collection, ids=list(chunk), with_payload=True, with_vectors=bool(with_vectors)
                )
                for rec in records:
                    found[str(rec.id)] = _memory_point(rec, with_vectors)
        return [found.get(point_id(i)) for i in ids_]

    def search(
        self, vectors: np.ndarray, top_k: int, filter: SearchFilter | None = None
    ) -> list[list[Neighbour]]:
        """See :meth:`KnowledgeMemory.search`. ``vectors``: ``(m, d)`` float; one ``query_batch_points`` per 64 rows."""
        m = self._m
        k = _check_top_k(top_k)
        qs = _check_vectors(vectors, self.dim)
        flt = self._filter(filter)
        out: list[list[Neighbour]] = []
        with _server_call("search"):
            for chunk in _chunks(qs, _QUERY_BATCH):
                requests = [m.QueryRequest(query=q.tolist(), limit=k, filter=flt, with_payload=True) for q in chunk]
                for resp in self._live.query_batch_points(self.collection, requests=requests):
                    out.append([_neighbour(h.payload, h.score) for h in resp.points])
        return out

    def count(self, filter: SearchFilter | None = None) -> int:
        """See :meth:`KnowledgeMemory.count` (exact)."""
        flt = self._filter(filter)
        with _server_call("count"):
            return int(self._live.count(self.collection, count_filter=flt, exact=True).count)

    def scroll(self, filter: SearchFilter | None = None, with_vectors: bool = False,
               batch: int = 256) -> Iterator[MemoryPoint]:
        """See :meth:`KnowledgeMemory.scroll`."""
        flt = self._filter(filter)
        offset = None
        while True:
            with _server_call("scroll"):
                records, offset = self._live.scroll(self.collection, scroll_filter=flt, limit=batch, offset=offset,
                                                    with_payload=True, with_vectors=bool(with_vectors))
            for rec in records:
                yield _memory_point(rec, with_vectors)
            if offset is None or not records:
                return

    def close(self) -> None:
        """Close the client if this memory owns it (``close_client=True``). Idempotent."""
        client, self._client = getattr(self, "_client", None), None
        if client is not None and self._close_client:
            client.close()

    def __enter__(self) -> "QdrantServerMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QdrantServerMemory(collection={self.collection!r}, dim={self.dim})"


# --------------------------------------------------------------------------
# factory
# --------------------------------------------------------------------------


def open_memory(
    *,
    url: str | None,
    api_key: str | None,
    path: str | Path,
    collection: str,
    dim: int,
) -> KnowledgeMemory:
    """Open the knowledge memory for one collection.

    With ``url`` (non-empty): :class:`QdrantServerMemory` over
    ``QdrantClient(url=url, api_key=api_key)`` (the client is closed with the
    memory). Without: :class:`EdgeMemory` in ``path/collection``.

    Raises:
        MemoryLockedError: embedded store already open elsewhere.
        MemoryUnavailableError: server unreachable (transient).
        ValueError: bad arguments or an incompatible existing collection.
    """
    if url:
        from qdrant_client import QdrantClient

        client = QdrantClient(url=url, api_key=api_key or None)
        try:
            return QdrantServerMemory(client, collection, dim, close_client=True)
        except BaseException:
            client.close()
            raise
    return EdgeMemory(path, collection, dim)
