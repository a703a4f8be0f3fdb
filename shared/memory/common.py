"""What both Qdrant adapters do the same way, written once: argument checks, payloads, chunking, filters,
and the upsert / delete / set_labels / get / search / count / scroll flow.

:class:`QdrantAdapter` implements :class:`~newsmon.shared.memory.base.KnowledgeMemory` on top of a handful of
engine primitives that each adapter (:mod:`.edge`, :mod:`.server`) provides: filter conditions, one write /
delete / payload / retrieve / query / count / scroll call, and a guard that maps the engine's transient errors.

Longer than 400 lines: the search's one rule for ties (the top-k cut, the order of equal hits, the hits read
without payloads) is written here once for both engines, with the flow it serves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

import numpy as np

from newsmon.shared.text import cut_at_word
from newsmon.shared.memory.base import (FIELD_ARTICLE_ID, LEXICAL_VECTOR, FIELD_DUPLICATE_OF, FIELD_LABELS, FIELD_LANG,
                                        FIELD_N_LABELS, FIELD_TEXT, INTERNAL_FIELDS, QUERY_BATCH, READ_BATCH,
                                        WRITE_BATCH, KnowledgeMemoryError, MemoryPoint, Neighbour, SearchFilter,
                                        check_filter, check_ids, check_label_sets, check_payloads, check_top_k,
                                        check_vectors, point_id)
from newsmon.shared.terms import sparse_terms

#: Extra hits each search request (dense and lexical) asks the engine for, so that a tie at the top-k cut (identical
#: articles have identical cosines and identical lexical scores) is settled by article id here
#: (:func:`top_hits`), not by the engine's internal order, which differs between two identical searches (seen on
#: reuters21578_en's 91 pairs of identical articles, and on sentinews_sl, where one tie at the dense cut of a
#: hybrid search changed the calibration's record).
TIE_MARGIN = 8

#: Article text kept in each memory point's payload (characters), so the nightly job can re-embed the memory
#: with a new model version without the original corpus.
TEXT_PAYLOAD_CHARS = 20_000

#: A point as the adapters write it: (point id, dense vector, payload, lexical (indices, values) or None).
PointRow = tuple[str, list[float], dict, "tuple[list[int], list[float]] | None"]


class Hit(NamedTuple):
    """A search hit an adapter assembled itself (the engine's own hits have the same attributes): point id, payload,
    score (the cosine similarity) and named vectors."""

    id: Any
    payload: dict | None
    score: float
    vector: Any


# -- payloads and records ----------------------------------------------------------------------------------


#: Payload field of a point without a headline: the start of its text (at most :data:`EXCERPT_CHARS` characters, cut
#: at a word), which a search hands back (it leaves the text out), so the evidence shows words, not a bare id.
FIELD_EXCERPT = "excerpt"
EXCERPT_CHARS = 300


def full_payload(aid: str, labels: list[str], payload: dict) -> dict:
    """The stored payload: the caller's fields plus ``article_id``, ``labels`` and ``n_labels``, and for an article
    without a headline the ``excerpt`` of its text (:data:`FIELD_EXCERPT`) when the caller gave none."""
    full = {k: v for k, v in payload.items() if k not in INTERNAL_FIELDS}
    text = full.get(FIELD_TEXT)
    if FIELD_EXCERPT not in full and isinstance(text, str) and text.strip() \
            and not str(full.get("title") or "").strip():
        full[FIELD_EXCERPT] = cut_at_word(text, EXCERPT_CHARS)
    full[FIELD_ARTICLE_ID] = aid
    full[FIELD_LABELS] = list(labels)
    full[FIELD_N_LABELS] = len(labels)
    return full


def article_payload(lang: str, title: str | None, source: str | None, text: str) -> dict:
    """The caller's payload of a labelled corpus article, the same for ``memory build`` (embedded here) and
    ``memory import`` (embedded elsewhere): its language, title, source and cleaned text, the text cut to
    :data:`TEXT_PAYLOAD_CHARS` characters (the adapter makes the lexical vector from that text)."""
    return {FIELD_LANG: lang, "title": title, "source": source, FIELD_TEXT: text[:TEXT_PAYLOAD_CHARS]}


def label_payload(labels: list[str]) -> dict:
    """The payload fields that :meth:`KnowledgeMemory.set_labels` overwrites."""
    return {FIELD_LABELS: list(labels), FIELD_N_LABELS: len(labels)}


def _user_payload(payload: dict | None) -> dict:
    return {k: v for k, v in (payload or {}).items() if k not in INTERNAL_FIELDS}


def _labels_of(payload: dict | None) -> tuple[str, ...]:
    return tuple((payload or {}).get(FIELD_LABELS) or ())


def _vector_of(raw: Any) -> np.ndarray | None:
    """Engine record vector (list, or {"": list} for the default vector) -> ``(d,) float32``."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        raw = raw.get("", next(iter(raw.values()), None))
        if raw is None:
            return None
    return np.asarray(raw, dtype=np.float32)


def memory_point(rec: Any, with_vectors: bool) -> MemoryPoint:
    """A :class:`MemoryPoint` from an engine record (qdrant-edge or qdrant-client: ``.payload``, ``.vector``)."""
    payload = rec.payload or {}
    return MemoryPoint(article_id=payload.get(FIELD_ARTICLE_ID, ""), labels=_labels_of(payload),
                       payload=_user_payload(payload), vector=_vector_of(rec.vector) if with_vectors else None)


def ranked_neighbours(hits: Sequence[Any], collection: str | None = None) -> list[Neighbour]:
    """The :class:`Neighbour` of each engine hit (``.payload``, ``.score``, ``.vector``), best first, hits of equal
    similarity in article-id order. One pass: each hit's attributes are read once (the engine's bindings build them
    anew on every read), its payload is the engine's own fresh dict (the internal fields popped from it), and the
    sort runs only where two adjacent hits tie or are out of order (the engine answers best first).

    With ``collection`` (a search without payloads) a hit without a payload becomes a Neighbour to read later
    (:attr:`Neighbour.point`); the hits that tie carry theirs (:meth:`QdrantAdapter._tied_payloads`)."""
    out: list[Neighbour] = []
    for h in hits:
        raw = h.payload
        if raw is None and collection is not None:
            out.append(Neighbour("", float(h.score), (), {}, stored_terms(getattr(h, "vector", None)),
                                 (collection, str(h.id))))
            continue
        payload = raw or {}
        aid, labels = payload.get(FIELD_ARTICLE_ID, ""), _labels_of(payload)
        for key in INTERNAL_FIELDS:
            payload.pop(key, None)
        out.append(Neighbour(aid, float(h.score), labels, payload, stored_terms(getattr(h, "vector", None))))
    if any(a.similarity <= b.similarity for a, b in zip(out, out[1:])):  # a tie, or not best first
        out.sort(key=lambda n: (-n.similarity, n.article_id))
    return out


def stored_terms(vector: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The lexical vector ``(indices (t,) int32, values (t,) float32)`` among a record's named vectors (None without
    one): arrays, as an eval's leave-one-out search holds millions of hits at once."""
    sparse = vector.get(LEXICAL_VECTOR) if isinstance(vector, dict) else None
    if sparse is None:
        return None
    return np.asarray(sparse.indices, dtype=np.int32), np.asarray(sparse.values, dtype=np.float32)


def top_hits(hits: Sequence[Any], n: int) -> list[Any]:
    """The best ``n`` of an engine's ``hits`` (``.score``, ``.payload``) by score, hits of equal score in article-id
    order: the stated rule that settles a tie at the cut (the engine answered up to :data:`TIE_MARGIN` more).

    The payloads (the engine's bindings build each anew on every read: a dict per hit) are read only for the hits
    whose score equals the ``n``-th's, the only ones whose order decides which are kept; the order of the others
    among equals is :func:`ranked_neighbours`'s to settle, by the same rule."""
    scores = [float(h.score) for h in hits]
    order = sorted(range(len(hits)), key=lambda i: -scores[i])  # stable: the engine's order among equal scores
    if len(order) <= n:
        return [hits[i] for i in order]
    cut = scores[order[n - 1]]
    if scores[order[n]] != cut:  # no tie at the cut: the same n hits whatever the order among equals
        return [hits[i] for i in order[:n]]
    tied = [i for i in order if scores[i] == cut]
    tied.sort(key=lambda i: str((hits[i].payload or {}).get(FIELD_ARTICLE_ID, "")))
    above = [i for i in order if scores[i] > cut]
    return [hits[i] for i in above + tied[:n - len(above)]]


def split_hybrid(answers: Sequence[Sequence[Any]], hybrid: Sequence[bool], k: int, lexical_k: int
                 ) -> tuple[list[list], dict[int, list]]:
    """The answers of one batch that asked, per query, its dense request and, where ``hybrid[i]``, its lexical
    request right after it (each for up to :data:`TIE_MARGIN` more hits than needed): (per query its dense top-``k``;
    per hybrid query with any, the hits of its lexical top-``lexical_k`` its dense ones lack, which still need their
    dense cosine). Both cuts by :func:`top_hits`."""
    out: list[list] = []
    extra: dict[int, list] = {}
    pos = 0
    for i, lexical in enumerate(hybrid):
        dense = top_hits(answers[pos], k)
        pos += 1
        if lexical:
            seen = {h.id for h in dense}
            missing = [h for h in top_hits(answers[pos], lexical_k) if h.id not in seen]
            if missing:
                extra[i] = missing
            pos += 1
        out.append(dense)
    return out, extra


def with_cosines(hits: Sequence[Any], scored: Sequence[Any]) -> list[Hit]:
    """``hits`` with the score (the dense cosine) that ``scored``, an exact dense search of their ids, gave each;
    a hit it did not find (deleted meanwhile) is left out."""
    cos = {h.id: h.score for h in scored}
    return [Hit(h.id, h.payload, cos[h.id], h.vector) for h in hits if h.id in cos]


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Consecutive slices of ``seq`` of at most ``size`` items."""
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


class QdrantAdapter:
    """Shared implementation of the knowledge-memory interface over one Qdrant collection.

    Subclasses set ``collection``, ``dim`` and ``_handle`` (the engine object; ``None`` once closed) and
    implement the primitives below. Every primitive handles one request of at most ``WRITE_BATCH`` points,
    ``READ_BATCH`` ids or ``QUERY_BATCH`` queries.
    """

    collection: str
    dim: int
    _handle: Any = None
    #: Whether the collection has the lexical sparse vector (:data:`LEXICAL_VECTOR`); set by the adapter.
    lexical: bool = False

    # -- engine primitives ------------------------------------------------------------------------------
    def _match(self, key: str, value: str) -> Any:
        """Condition: payload ``key`` equals ``value``."""
        raise NotImplementedError

    def _match_any(self, key: str, values: list[str]) -> Any:
        """Condition: payload ``key`` (a value or a list of values) holds one of ``values``."""
        raise NotImplementedError

    def _range(self, key: str, gte: float | None = None, lt: float | None = None) -> Any:
        """Condition: numeric payload ``key`` in ``[gte, lt)``."""
        raise NotImplementedError

    def _has_id(self, pids: list[str]) -> Any:
        """Condition: the point id is one of ``pids``."""
        raise NotImplementedError

    def _make_filter(self, must: list, must_not: list) -> Any:
        """The engine filter of the conditions (``None`` lists are left out)."""
        raise NotImplementedError

    def _write(self, points: Sequence[PointRow]) -> None:
        """Upsert points (:data:`PointRow`; the lexical vector only where it is not None)."""
        raise NotImplementedError

    def _delete(self, pids: Sequence[str]) -> None:
        """Delete points by point id."""
        raise NotImplementedError

    def _set_payloads(self, items: Sequence[tuple[str, dict]]) -> None:
        """Overwrite the given payload fields of ``(point id, fields)`` pairs."""
        raise NotImplementedError

    def _retrieve(self, pids: Sequence[str], with_vectors: bool, with_text: bool = True) -> list:
        """Engine records (``.id``, ``.payload``, ``.vector``) of the stored ones among ``pids``; without
        ``with_text`` their payloads leave out :data:`SEARCH_PAYLOAD_EXCLUDED`."""
        raise NotImplementedError

    def _query(self, queries: np.ndarray, k: int, flt: Any,
               sparse: Sequence[tuple[list[int], list[float]] | None] | None = None, lexical_k: int = 0,
               exact: bool = False, payloads: bool = True) -> list[list]:
        """Per query row, the top-``k`` hits (``.payload``, ``.score``: the cosine); with ``sparse`` (per row, its
        lexical ``(indices, values)``, None for a row without words: dense only), united with the top-``lexical_k``
        by the lexical vector. ``sparse`` is None when the search is not hybrid. Each top is cut by
        :func:`top_hits` from :data:`TIE_MARGIN` more hits of the engine, so ties at a cut are settled by article
        id. Without ``payloads`` the hits' payloads are None, except the tied ones' (:meth:`_tied_payloads`, before
        the cut)."""
        raise NotImplementedError

    def _tied_payloads(self, answers: Sequence[Sequence[Any]]) -> list[list]:
        """``answers`` (lists of engine hits searched without payloads) with the payload read for every hit whose
        score another hit of its list equals: their article ids settle their order (:func:`top_hits`,
        :func:`ranked_neighbours`). One read for the whole batch; none when nothing ties (the usual case: equal
        cosines are near-copies). A hit whose point was deleted meanwhile keeps no payload."""
        tied: dict[str, None] = {}  # by str(id): an engine hands ids as UUIDs, another as strings
        scores = [[float(h.score) for h in hits] for hits in answers]
        for hits, sc in zip(answers, scores, strict=True):
            seen = Counter(sc)
            if len(seen) < len(sc):
                tied.update((str(h.id), None) for h, s in zip(hits, sc, strict=True) if seen[s] > 1)
        if not tied:
            return [list(hits) for hits in answers]
        got: dict[str, dict] = {}
        for chunk in chunks(list(tied), READ_BATCH):
            got.update((str(rec.id), rec.payload) for rec in self._retrieve(chunk, False, False))
        # each hit its own dict, as the engine hands them (ranked_neighbours pops the internal fields from it)
        return [[Hit(h.id, dict(got[str(h.id)]), s, h.vector) if str(h.id) in got else h
                 for h, s in zip(hits, sc, strict=True)]
                for hits, sc in zip(answers, scores, strict=True)]

    def _count(self, flt: Any) -> int:
        """Exact number of points matching ``flt``."""
        raise NotImplementedError

    def _scroll_page(self, flt: Any, limit: int, offset: Any, with_vectors: bool) -> tuple[list, Any]:
        """One page of records and the next offset (``None`` at the end)."""
        raise NotImplementedError

    def _guard(self, what: str) -> AbstractContextManager:
        """Context that maps the engine's transient errors of operation ``what`` (default: none)."""
        return nullcontext()

    # -- shared flow ------------------------------------------------------------------------------------
    @property
    def _live(self) -> Any:
        handle = getattr(self, "_handle", None)
        if handle is None:
            raise KnowledgeMemoryError(f"{self!r} is closed")
        return handle

    def _filter(self, flt: SearchFilter | None) -> Any:
        """The engine filter of a :class:`SearchFilter` (``None`` when it restricts nothing)."""
        flt = check_filter(flt)
        if flt is None:
            return None
        must: list[Any] = []
        must_not: list[Any] = []
        if flt.lang is not None:
            must.append(self._match(FIELD_LANG, flt.lang))
        if flt.duplicate_of is not None:
            must.append(self._match(FIELD_DUPLICATE_OF, flt.duplicate_of))
        if flt.labels:
            must.append(self._match_any(FIELD_LABELS, list(flt.labels)))
        if flt.labelled is True:
            must.append(self._range(FIELD_N_LABELS, gte=1))
        elif flt.labelled is False:
            must.append(self._range(FIELD_N_LABELS, lt=1))
        if flt.exclude_ids:
            ids = check_ids(flt.exclude_ids, what="exclude_ids")
            must_not.append(self._has_id(sorted({point_id(i) for i in ids})))
        if not must and not must_not:
            return None
        return self._make_filter(must or None, must_not or None)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, labels: Sequence[Sequence[str]],
               payloads: Sequence[dict] | None = None) -> None:
        """See :meth:`KnowledgeMemory.upsert`. ``vectors``: ``(n, d)`` float; 512 points per request."""
        ids_ = check_ids(ids, unique=True, write=True)
        vecs = check_vectors(vectors, self.dim, n=len(ids_))
        label_sets = check_label_sets(labels, len(ids_))
        pls = check_payloads(payloads, ids_)
        terms = sparse_terms([str(pl.get(FIELD_TEXT) or "") for pl in pls]) if self.lexical else [None] * len(ids_)
        points = [(point_id(aid), vecs[k].tolist(), full_payload(aid, label_sets[k], pls[k]), terms[k])
                  for k, aid in enumerate(ids_)]
        with self._guard("upsert"):
            for chunk in chunks(points, WRITE_BATCH):
                self._write(list(chunk))

    def delete(self, ids: Sequence[str]) -> None:
        """See :meth:`KnowledgeMemory.delete`. Unknown ids are ignored."""
        ids_ = check_ids(ids)
        with self._guard("delete"):
            for chunk in chunks([point_id(i) for i in ids_], WRITE_BATCH):
                self._delete(list(chunk))

    def set_labels(self, ids: Sequence[str], labels: Sequence[Sequence[str]]) -> None:
        """See :meth:`KnowledgeMemory.set_labels`. Raises ``KeyError`` for unknown ids (nothing changed)."""
        ids_ = check_ids(ids, write=True)
        label_sets = check_label_sets(labels, len(ids_))
        missing = [aid for aid, p in zip(ids_, self.get(ids_)) if p is None]
        if missing:
            raise KeyError(f"set_labels: ids not in {self.collection!r}: {missing[:20]}")
        items = [(point_id(aid), label_payload(ls)) for aid, ls in zip(ids_, label_sets)]
        with self._guard("set_labels"):
            for chunk in chunks(items, WRITE_BATCH):
                self._set_payloads(list(chunk))

    def get(self, ids: Sequence[str], with_vectors: bool = False) -> list[MemoryPoint | None]:
        """See :meth:`KnowledgeMemory.get`; vectors are ``(d,) float32``, unit-normalised."""
        ids_ = check_ids(ids)
        found = self._read("get", [point_id(i) for i in ids_], bool(with_vectors), True)
        return [found.get(point_id(i)) for i in ids_]

    def _read(self, op: str, pids: Sequence[str], with_vectors: bool, with_text: bool) -> dict[str, MemoryPoint]:
        """The stored points among ``pids`` by point id, one read per :data:`READ_BATCH` distinct ids."""
        found: dict[str, MemoryPoint] = {}
        with self._guard(op):
            for chunk in chunks(list(dict.fromkeys(pids)), READ_BATCH):
                for rec in self._retrieve(list(chunk), with_vectors, with_text):
                    found[str(rec.id)] = memory_point(rec, with_vectors)
        return found

    def search(self, vectors: np.ndarray, top_k: int, filter: SearchFilter | None = None,
               texts: Sequence[str] | None = None, lexical_k: int = 0, exact: bool = False,
               payloads: bool = True) -> list[list[Neighbour]]:
        """See :meth:`KnowledgeMemory.search`. ``vectors``: ``(m, d)`` float; one batched query per 64 rows. A
        collection without the lexical vector (made before it existed) answers the dense hits only. Hits with equal
        similarity come in article-id order (a dense search settles the top-k cut that way too, see
        :data:`TIE_MARGIN`, dense and lexical alike), so two identical searches answer the same: without
        ``payloads`` too, as the hits that tie are read with theirs."""
        k = check_top_k(top_k)
        qs = check_vectors(vectors, self.dim)
        if isinstance(lexical_k, bool) or not isinstance(lexical_k, int) or lexical_k < 0:
            raise ValueError(f"lexical_k must be an int >= 0, got {lexical_k!r}")
        if texts is not None and len(texts) != len(qs):
            raise ValueError(f"texts: expected {len(qs)} query texts, got {len(texts)}")
        terms = sparse_terms(list(texts)) if texts is not None and lexical_k and self.lexical else None
        flt = self._filter(filter)
        out: list[list[Neighbour]] = []
        with self._guard("search"):
            for start in range(0, len(qs), QUERY_BATCH):
                chunk = qs[start:start + QUERY_BATCH]
                sparse = terms[start:start + QUERY_BATCH] if terms is not None else None
                got = self._query(chunk, k, flt, sparse, lexical_k, exact, payloads)
                if not payloads and sparse is not None:  # a lexical hit may tie with a dense one of its query
                    got = self._tied_payloads(got)
                out.extend(ranked_neighbours(hits, None if payloads else self.collection)  # ties: by article id
                           for hits in got)
        return out

    def points(self, point_ids: Sequence[str]) -> dict[str, MemoryPoint]:
        """See :meth:`KnowledgeMemory.points`: one read per :data:`READ_BATCH` ids."""
        return self._read("points", point_ids, False, False)

    def count(self, filter: SearchFilter | None = None) -> int:
        """See :meth:`KnowledgeMemory.count` (exact)."""
        flt = self._filter(filter)
        with self._guard("count"):
            return int(self._count(flt))

    def scroll(self, filter: SearchFilter | None = None, with_vectors: bool = False,
               batch: int = 256) -> Iterator[MemoryPoint]:
        """See :meth:`KnowledgeMemory.scroll`."""
        flt = self._filter(filter)
        offset = None
        while True:
            with self._guard("scroll"):
                records, offset = self._scroll_page(flt, batch, offset, bool(with_vectors))
            for rec in records:
                yield memory_point(rec, with_vectors)
            if offset is None or not records:
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the engine handle. Idempotent."""
        raise NotImplementedError
