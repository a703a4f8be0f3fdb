"""The knowledge memory's interface and the helpers both Qdrant adapters share.

Longer than 400 lines: the interface, its value types and the argument checks are one contract, which both
adapters and their tests read together.

Storage layout (both adapters, shared so data can move between them):

* point id: ``uuid5(ARTICLE_NAMESPACE, article_id)`` (see :func:`point_id`);
* payload field ``"article_id"`` (str): the original article id;
* payload field ``"labels"`` (list of str): the label set, may be empty;
* payload field ``"n_labels"`` (int): ``len(labels)``, used by the ``labelled`` filter;
* every other payload field is the caller's (e.g. ``"lang"``).

Payload indexes: keyword on ``labels``, ``lang``, ``article_id`` and ``duplicate_of``, integer on ``n_labels``.

Vectors are stored unit-normalised by the engine (cosine distance): :meth:`KnowledgeMemory.get` reads back
``v / ||v||``. Similarities are cosine similarities in ``[-1, 1]``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from newsmon.schemas.base import check_article_id, check_label

#: Fixed namespace for mapping article ids to Qdrant point ids (``uuid5(NAMESPACE_URL, "newsmon:knowledge-memory")``).
#: Never change it: existing collections would no longer find their points.
ARTICLE_NAMESPACE = uuid.UUID("99c427ca-289a-5471-ac47-5b2101df3024")

#: Payload fields owned by the memory itself: stripped from the payloads handed back, not settable through them.
FIELD_ARTICLE_ID = "article_id"
FIELD_LABELS = "labels"
FIELD_N_LABELS = "n_labels"
FIELD_LANG = "lang"
#: Payload field of a near-copy's point: the id of the original it was proposed from (None for originals).
FIELD_DUPLICATE_OF = "duplicate_of"
INTERNAL_FIELDS = frozenset({FIELD_ARTICLE_ID, FIELD_LABELS, FIELD_N_LABELS})
#: The payload indexes of every collection: field -> kind (``keyword`` or ``integer``).
PAYLOAD_INDEXES = {FIELD_LABELS: "keyword", FIELD_LANG: "keyword", FIELD_ARTICLE_ID: "keyword",
                   FIELD_N_LABELS: "integer", FIELD_DUPLICATE_OF: "keyword"}
#: The named sparse vector of every point, made from its payload ``FIELD_TEXT`` (hashed sublinear-TF terms, unit
#: length: :func:`newsmon.shared.terms.sparse_terms`) and searched with the engine's IDF modifier.
LEXICAL_VECTOR, FIELD_TEXT = "lexical", "text"
#: Payload fields a search leaves out of its hits (the scorer reads a neighbour's stored lexical vector, not its text).
SEARCH_PAYLOAD_EXCLUDED = (FIELD_TEXT,)
WRITE_BATCH = 512  # points per write request; reads and queries per batched request:
READ_BATCH = 1024
QUERY_BATCH = 64
NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_NAME_MAX_LEN = 128


# -- errors ------------------------------------------------------------------------------------------------


class KnowledgeMemoryError(RuntimeError):
    """Base class of the memory's own errors (argument errors are ValueError/KeyError)."""


class MemoryLockedError(KnowledgeMemoryError):
    """The embedded store's directory is already open (WAL lock held).

    Raised by :class:`~newsmon.shared.memory.EdgeMemory` when another ``EdgeMemory`` -- in this process or
    another one -- holds the same ``path/collection``. Embedded mode needs every worker in one process
    sharing one instance; for several processes run a Qdrant server and use
    :class:`~newsmon.shared.memory.QdrantServerMemory`.
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


# -- value types -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Neighbour:
    """One search hit.

    Attributes:
        article_id: the stored article's id.
        similarity: cosine similarity to the query, in ``[-1, 1]``.
        labels: the stored label set (empty for pending articles).
        payload: the caller's payload (internal fields ``article_id``, ``labels``, ``n_labels`` removed).
        terms: its stored lexical vector ``(indices (t,) int32, values (t,) float32)``; None without one.
        point: ``(collection, point id)`` of a hit searched without its payload (``search(..., payloads=False)``):
            its ``article_id`` (``""``), ``labels`` and ``payload`` are not read yet (:meth:`KnowledgeMemory.points`
            reads them); None for a hit read whole.
    """

    article_id: str
    similarity: float
    labels: tuple[str, ...]
    payload: dict = field(default_factory=dict)
    terms: tuple[np.ndarray, np.ndarray] | None = None
    point: tuple[str, str] | None = None


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
        duplicate_of: only the near-copies of this article (payload ``"duplicate_of"``); ``None``: any.
        labels: only points carrying at least one of these labels; empty: any.
    """

    lang: str | None = None
    labelled: bool | None = True
    exclude_ids: tuple[str, ...] = ()
    duplicate_of: str | None = None
    labels: tuple[str, ...] = ()


@runtime_checkable
class KnowledgeMemory(Protocol):
    """A vector store of labelled articles, one collection, cosine similarity.

    Attributes:
        collection: the collection's name.
        dim: the embedding dimension ``d``.

    Conventions shared by all methods:

    * ids are non-empty ``str`` article ids; those written (upsert, set_labels) follow the article-id policy
      of the wire (:func:`~newsmon.schemas.base.check_article_id`), labels are stored in canonical form;
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

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, labels: Sequence[Sequence[str]],
               payloads: Sequence[dict] | None = None) -> None:
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

    def search(self, vectors: np.ndarray, top_k: int, filter: SearchFilter | None = None,
               texts: Sequence[str] | None = None, lexical_k: int = 0, exact: bool = False,
               payloads: bool = True) -> list[list[Neighbour]]:
        """Nearest neighbours by cosine similarity, optionally united with lexical neighbours (hybrid search).

        Args:
            vectors: ``(m, d)`` float query array (any scale).
            top_k: dense hits per query, ``>= 1``.
            filter: restriction on the candidates; ``None``: all points.
            texts: the ``m`` query texts; with ``lexical_k > 0`` the top-``lexical_k`` by the lexical vector
                (:data:`LEXICAL_VECTOR`) join the dense top-``top_k``, each with its dense cosine;
                ``exact``: scan every point instead of the HNSW index (for measuring its recall).
            payloads: False: the hits come without their payloads (:attr:`Neighbour.point` set), except those whose
                similarity another hit equals, which the article id orders; a caller that keeps a few of many
                candidates reads only those (:meth:`points`). The engine reads a point's whole payload to answer
                any field of it.

        Returns ``m`` lists of at most ``top_k + lexical_k`` :class:`Neighbour`, by cosine similarity, highest
        first. Raises ``ValueError`` on a bad shape, ``top_k < 1``, ``lexical_k < 0`` or ``len(texts) != m``.
        """
        ...

    def points(self, point_ids: Sequence[str]) -> dict[str, MemoryPoint]:
        """The stored articles of the hits searched without their payloads (:attr:`Neighbour.point`'s ids), by point
        id, without their vectors and texts; a point deleted since is missing."""
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


# -- names -------------------------------------------------------------------------------------------------


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
        clean = NAME_BAD_CHARS.sub("_", raw.strip()).strip("_")
        if not clean:
            raise ValueError(f"collection_name: {what} {raw!r} is empty after sanitising")
        parts.append(clean)
    name = "_".join(parts)
    if len(name) > _NAME_MAX_LEN:
        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]
        name = f"{name[: _NAME_MAX_LEN - 17]}-{digest}"
    return name


# -- argument checks (ValueError with the reason) ----------------------------------------------------------


def check_dim(dim: Any) -> int:
    """``dim`` as an int ``>= 1``; raises ``ValueError`` otherwise."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim must be an int >= 1, got {dim!r}")
    return int(dim)


def check_ids(ids: Sequence[str], *, what: str = "ids", unique: bool = False, write: bool = False) -> list[str]:
    """The ids as a list of non-empty str (distinct when ``unique``); raises ``ValueError`` otherwise.

    ``write``: the ids are about to be stored, so each must follow the article-id policy
    (:func:`~newsmon.schemas.base.check_article_id`), the same as on the wire: a point the proposal schema would
    refuse as a neighbour never enters the memory. Reads and deletes take any non-empty id (old points stay
    reachable).
    """
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of str, not a single {type(ids).__name__}")
    out = list(ids)
    for i in out:
        if not isinstance(i, str) or not i:
            raise ValueError(f"{what}: every id must be a non-empty str, got {i!r}")
        if write:
            check_article_id(i)
    if unique and len(set(out)) != len(out):
        counts: dict[str, int] = {}
        for i in out:
            counts[i] = counts.get(i, 0) + 1
        dups = sorted(i for i, c in counts.items() if c > 1)
        raise ValueError(f"{what}: duplicate ids in one call: {dups[:10]}")
    return out


def check_vectors(vectors: Any, dim: int, *, what: str = "vectors", n: int | None = None) -> np.ndarray:
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


def check_label_sets(labels: Sequence[Sequence[str]], n: int) -> list[list[str]]:
    """``n`` label sets as lists of distinct labels in canonical form (:func:`~newsmon.schemas.base.check_label`:
    NFC, lower case; order kept, labels equal in that form merged); raises ``ValueError`` otherwise."""
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
            lab = check_label(lab)
            if lab not in clean:
                clean.append(lab)
        out.append(clean)
    return out


def check_payloads(payloads: Sequence[dict] | None, ids: list[str]) -> list[dict]:
    """One caller payload per id (``{}`` for None); raises ``ValueError`` on reserved or conflicting fields."""
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


def check_top_k(top_k: Any) -> int:
    """``top_k`` as an int ``>= 1``; raises ``ValueError`` otherwise."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    return int(top_k)


def check_filter(flt: SearchFilter | None) -> SearchFilter | None:
    """``flt`` when it is a :class:`SearchFilter` or None; raises ``ValueError`` otherwise."""
    if flt is not None and not isinstance(flt, SearchFilter):
        raise ValueError(f"filter must be a SearchFilter or None, got {type(flt).__name__}")
    if flt is not None and isinstance(flt.exclude_ids, str):
        raise ValueError("SearchFilter.exclude_ids must be a tuple of ids, not a str")
    if flt is not None and isinstance(flt.labels, str):
        raise ValueError("SearchFilter.labels must be a tuple of labels, not a str")
    return flt
