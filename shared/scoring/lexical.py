"""Hybrid retrieval: the dense neighbours re-ranked by their fusion with a lexical similarity.

News labels are often keyword-driven (company and person names, an outlet's conventions), which a small dense
encoder blurs. The knowledge memory returns the dense top-N candidates (``lexical_candidates``, with their stored
lexical vectors: the term vectors of their texts, made when they were stored); each candidate's score becomes

    s = (1 - w) * cos(dense) + w * cos(tf-idf),

with ``w = lexical_weight``, and the top-k by ``s`` are the neighbours RAE-XMC scores (eq. 8 then reads ``s``).
The TF-IDF vectors use sublinear term frequency (1 + log tf) over hashed word features (scikit-learn's
``HashingVectorizer``, the same word tokenisation as the TF-IDF baselines) and a *local* IDF computed over the N
candidates themselves: no vocabulary or global statistics to keep in step with the memory, so a moderator's
decision counts at once. A candidate without a stored lexical vector has its text tokenised here, cached by article
id; the memory's searches return no texts, so such a candidate from a search (a point of a collection made before
the lexical vector) counts 0 in the fusion.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from newsmon.shared.scoring.retrieval import Retrieval
from newsmon.shared.terms import N_FEATURES, term_rows


class TermVectors:
    """Sublinear TF rows ``(n, 2^20)`` float32 CSR of texts, cached by article id (LRU, ``max_items``).

    Thread-safe; an id's row is computed from the first text seen for it (a memory article's text does not
    change: a new text comes with a new id or a re-embedding, which clears the cache via :meth:`clear`).
    """

    def __init__(self, max_items: int = 200_000) -> None:
        self.max_items = max_items
        self._cache: OrderedDict[str, sp.csr_matrix] = OrderedDict()
        self._lock = threading.Lock()

    def rows(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> sp.csr_matrix:
        """``(n, 2^20)`` rows with ``1 + log(tf)`` weights; texts with an id are cached under it."""
        out: list[sp.csr_matrix | None] = [None] * len(texts)
        todo = []
        with self._lock:
            for i, key in enumerate(ids or [None] * len(texts)):
                hit = self._cache.get(key) if key else None
                if hit is not None:
                    self._cache.move_to_end(key)
                    out[i] = hit
                else:
                    todo.append(i)
        if todo:
            X = term_rows([texts[i] for i in todo])
            with self._lock:
                for r, i in enumerate(todo):
                    out[i] = X[r]
                    key = ids[i] if ids else None
                    if key:
                        self._cache[key] = X[r]
                while len(self._cache) > self.max_items:
                    self._cache.popitem(last=False)
        return sp.vstack(out, format="csr") if out else sp.csr_matrix((0, N_FEATURES), dtype=np.float32)

    def clear(self) -> None:
        """Forget every cached row."""
        with self._lock:
            self._cache.clear()


def local_tfidf_cosine(query: sp.csr_matrix, candidates: sp.csr_matrix) -> np.ndarray:
    """``(N,)`` float32 cosine between one query row ``(1, F)`` and ``N`` candidate rows ``(N, F)`` (sublinear TF,
    CSR), both weighted by the local IDF ``log((1 + N) / (1 + df)) + 1`` with ``df`` counted over the candidates
    (a term no candidate has keeps weight 1); 0 where a side is empty.

    Linear in the rows' stored terms (an ``O(t log t)`` sort of the ``t`` stored terms to count ``df``): the weights
    are looked up for the terms present and the query's terms found by binary search, with no sparse-by-dense
    products over the feature space and no array of the feature space's size."""
    n = candidates.shape[0]
    out = np.zeros(n, dtype=np.float32)
    cand, q = candidates.tocsr(), query.tocsr()
    if n == 0 or cand.nnz == 0 or q.nnz == 0:
        return out
    c_idx = np.asarray(cand.indices, dtype=np.int64)
    terms, at_term, term_df = np.unique(c_idx, return_inverse=True, return_counts=True)
    df = term_df[at_term]  # each stored term's document frequency among the candidates
    d_w = np.asarray(cand.data, dtype=np.float64) * (np.log((1.0 + n) / (1.0 + df)) + 1.0)
    rows = np.repeat(np.arange(n), np.diff(cand.indptr))
    dn = np.sqrt(np.bincount(rows, weights=d_w * d_w, minlength=n))
    q_idx = np.asarray(q.indices, dtype=np.int64)
    pos = np.minimum(np.searchsorted(terms, q_idx), len(terms) - 1)
    q_df = np.where(terms[pos] == q_idx, term_df[pos], 0)
    q_w = np.asarray(q.data, dtype=np.float64) * np.where(q_df > 0, np.log((1.0 + n) / (1.0 + q_df)) + 1.0, 1.0)
    qn = float(np.sqrt(np.dot(q_w, q_w)))
    order = np.argsort(q_idx, kind="stable")
    q_sorted, q_w_sorted = q_idx[order], q_w[order]
    at = np.minimum(np.searchsorted(q_sorted, c_idx), len(q_sorted) - 1)
    hit = q_sorted[at] == c_idx
    dots = np.bincount(rows[hit], weights=d_w[hit] * q_w_sorted[at[hit]], minlength=n)
    ok = (dn > 0) & (qn > 0)
    out[ok] = (dots[ok] / (dn[ok] * qn)).astype(np.float32)
    return out


def lexical_cosines(retrieval: Retrieval, query_texts: Sequence[str], terms: TermVectors | None = None,
                    queries: sp.csr_matrix | None = None) -> np.ndarray:
    """``(m, K)`` float32 local TF-IDF cosine (:func:`local_tfidf_cosine`) of each query's candidates (0 where
    a candidate is missing), the lexical half of :func:`fuse`: it depends on the candidates only, not on the
    weight, so a search over weights computes it once.

    Equal, bit for bit, to :func:`local_tfidf_cosine` of each query's row and its candidates' rows
    (:func:`_candidate_rows`), computed without its per-query sorts: each distinct candidate's row is read once
    (its stored lexical vector, or its text's row) and its hashed terms numbered over the union of the candidates'
    and the queries' terms, so a query's document frequencies are one ``bincount`` and its terms one lookup.

    Args:
        queries: the ``(m, 2^20)`` term rows of ``query_texts`` when already at hand (:meth:`TermVectors.rows`;
            a calibration reads them for several candidate sets).

    Raises:
        ValueError: no candidate texts or stored terms."""
    if retrieval.texts is None and retrieval.terms is None:
        raise ValueError("hybrid retrieval needs the candidates' texts or stored terms (search with payloads)")
    terms = terms or TermVectors()
    m, n = retrieval.sims.shape
    Q = queries if queries is not None else terms.rows(list(query_texts))
    out = np.zeros((m, n), dtype=np.float32)
    if not m or not n:
        return out
    slot, idx, data = _candidate_table(retrieval, terms)
    lens = np.array([len(x) for x in idx], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if len(lens) else np.zeros(0, np.int64)
    q_idx_all = np.asarray(Q.indices, dtype=np.int64)
    flat_idx = np.concatenate(idx + [np.zeros(0, np.int64)], dtype=np.int64)
    flat_data = np.concatenate(data + [np.zeros(0, np.float64)], dtype=np.float64)
    flat_c, q_c_all, V = _numbered(flat_idx, q_idx_all)
    canonical = bool(Q.has_canonical_format)  # no repeated term in a query row (else the reference, per row)
    q_w_dense, q_mask = np.zeros(V, dtype=np.float64), np.zeros(V, dtype=bool)  # scratch, zero between queries
    for i in range(m):
        present = np.flatnonzero(slot[i] >= 0)
        if not len(present):
            continue
        if not canonical:
            out[i, present] = local_tfidf_cosine(Q[i], _candidate_rows(retrieval, i, present, terms))
            continue
        lo, hi = Q.indptr[i], Q.indptr[i + 1]
        s = slot[i, present]
        if hi == lo or not lens[s].sum():
            continue
        cos, ok = _numbered_cosine(lens[s], starts[s], flat_c, flat_data, q_c_all[lo:hi],
                                   np.asarray(Q.data[lo:hi], dtype=np.float64), q_w_dense, q_mask)
        out[i, present[ok]] = cos[ok]
    return out


def _numbered(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The int64 hashed term indices (``>= 0``) of ``a`` and of ``b`` numbered by the term's rank among the distinct
    terms of both (``searchsorted(unique(...))`` in one pass: a table over the hash range, 2^20 entries, instead of
    sorting a batch's 200,000 terms), and the number of distinct terms."""
    both = np.concatenate([a, b])
    top = int(both.max()) + 1 if len(both) else 1
    seen = np.zeros(top, dtype=bool)
    seen[both] = True
    vocab = np.flatnonzero(seen)
    number = np.empty(top, dtype=np.intp)  # read only at the distinct terms, each given its rank here
    number[vocab] = np.arange(len(vocab), dtype=np.intp)
    return number[a], number[b], len(vocab)


def _numbered_cosine(ln: np.ndarray, st: np.ndarray, flat_c: np.ndarray, flat_data: np.ndarray, q_c: np.ndarray,
                     q_data: np.ndarray, q_w_dense: np.ndarray, q_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`local_tfidf_cosine` of one query (its numbered terms ``q_c`` with their float64 weights ``q_data``)
    and its ``k`` candidates (their term counts ``ln`` and offsets ``st`` in the numbered table ``flat_c`` /
    ``flat_data``), the same operations on the same values in the same order: ((k,) float32 cosines, (k,) bool
    where defined). ``q_w_dense`` / ``q_mask``: zeroed scratch arrays over the numbered terms (left zeroed)."""
    k, total = len(ln), int(ln.sum())
    ends = np.cumsum(ln)
    pos = np.repeat(st - (ends - ln), ln) + np.arange(total)
    c_c, d = flat_c[pos], flat_data[pos]
    rows = np.repeat(np.arange(k), ln)
    df_all = np.bincount(c_c, minlength=len(q_mask))
    idf_of_df = np.log((1.0 + k) / (1.0 + np.arange(k + 1))) + 1.0  # the same values, once per df
    d_w = d * idf_of_df[df_all][c_c]
    dn = np.sqrt(np.bincount(rows, weights=d_w * d_w, minlength=k))
    q_df = df_all[q_c]
    q_w = q_data * np.where(q_df > 0, np.log((1.0 + k) / (1.0 + q_df)) + 1.0, 1.0)
    qn = float(np.sqrt(np.dot(q_w, q_w)))
    q_w_dense[q_c], q_mask[q_c] = q_w, True
    hit = q_mask[c_c]
    dots = np.bincount(rows[hit], weights=d_w[hit] * q_w_dense[c_c[hit]], minlength=k)
    q_w_dense[q_c], q_mask[q_c] = 0.0, False
    ok = (dn > 0) & (qn > 0)
    cos = np.zeros(k, dtype=np.float32)
    cos[ok] = (dots[ok] / (dn[ok] * qn)).astype(np.float32)
    return cos, ok


def _candidate_table(retrieval: Retrieval, terms: TermVectors
                     ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """The candidates' rows, each distinct one read once: (``(m, K)`` int64 slot of each present candidate, -1
    where missing; per slot, its hashed term indices ``int64`` and weights ``float64`` (the float32 values
    :func:`_candidate_rows` stores; int32 / float32 here, widened to int64 / float64 in one concatenation by
    :func:`lexical_cosines`, as :func:`local_tfidf_cosine` reads them)). A stored lexical vector is
    one slot per stored object (the memory's search shares one per article); a candidate without one is its text's
    row (:class:`TermVectors`, by article id, texts read in the queries' order, as :func:`_candidate_rows` reads
    them)."""
    m, n = retrieval.sims.shape
    slot = np.full((m, n), -1, dtype=np.int64)
    idx: list[np.ndarray] = []
    data: list[np.ndarray] = []
    by_object: dict[int, int] = {}
    by_id: dict[str, int] = {}
    todo: list[tuple[int, str, str]] = []  # (slot, id, text) of the candidates without stored terms, first seen first
    finite = np.isfinite(retrieval.sims)
    for i in range(m):
        stored = retrieval.terms[i] if retrieval.terms is not None else None
        for j in np.flatnonzero(finite[i]).tolist():
            x = stored[j] if stored is not None else None
            if x is not None:
                got = by_object.get(id(x))
                if got is None:
                    got = by_object[id(x)] = len(idx)
                    idx.append(np.asarray(x[0], dtype=np.int32))  # widened once, by the caller's concatenate
                    data.append(np.asarray(x[1], dtype=np.float32))
                slot[i, j] = got
            else:
                key = str(retrieval.ids[i, j])
                got = by_id.get(key) if key else None
                if got is None:  # (an id-less candidate is a slot of its own: its row is not cached)
                    got = len(idx)
                    if key:
                        by_id[key] = got
                    idx.append(np.zeros(0, np.int64))
                    data.append(np.zeros(0, np.float64))
                    todo.append((got, key, retrieval.texts[i][j] if retrieval.texts is not None else ""))
                slot[i, j] = got
    if todo:
        X = terms.rows([t for _s, _k, t in todo], [k for _s, k, _t in todo])
        for r, (at, _k, _t) in enumerate(todo):
            lo, hi = X.indptr[r], X.indptr[r + 1]
            idx[at] = np.asarray(X.indices[lo:hi], dtype=np.int32)
            data[at] = np.asarray(X.data[lo:hi], dtype=np.float32)
    return slot, idx, data


def fuse(retrieval: Retrieval, query_texts: Sequence[str], weight: float, k: int,
         terms: TermVectors | None = None, lexical: np.ndarray | None = None) -> Retrieval:
    """Re-rank each query's dense candidates by ``(1 - weight) * dense + weight * lexical`` and keep the top ``k``.

    Args:
        retrieval: the dense top-N candidates with their stored term vectors (``retrieval.terms``) or texts.
        query_texts: the ``m`` query texts; weight: the lexical weight ``w`` in [0, 1] (0: the dense order, cut
            to ``k``); k: neighbours kept; terms: the term-vector cache (a new one when None); lexical: the
            candidates' :func:`lexical_cosines` when already computed.

    Returns:
        a :class:`Retrieval` of ``k`` neighbours per query, ``sims`` holding the fused scores and ``cosines`` the
        dense cosines. Candidates of equal fused score keep their order in ``retrieval``.

    Raises:
        ValueError: ``weight`` outside [0, 1], or ``weight > 0`` without candidate texts.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"lexical weight must be in [0, 1], got {weight}")
    if weight == 0.0:
        return retrieval.head(k)
    lex = lexical if lexical is not None else lexical_cosines(retrieval, query_texts, terms)
    m, n = retrieval.sims.shape
    # every query at once, each value as the per-query expression gives it (the same float32 / float64 operations)
    present = np.isfinite(retrieval.sims)
    fused = np.full((m, n), -np.inf, dtype=np.float32)
    fused[present] = (1.0 - weight) * retrieval.sims[present] + weight * np.asarray(lex)[present]
    order = np.argsort(-fused, axis=1, kind="stable")[:, :k]  # a row's stable sort: its order alone

    def pick(rows: list | None) -> list | None:  # each row's positions as Python ints, one row at a time
        return None if rows is None else [[row[j] for j in o.tolist()] for row, o in zip(rows, order, strict=True)]

    return Retrieval(np.take_along_axis(retrieval.ids, order, axis=1), np.take_along_axis(fused, order, axis=1),
                     pick(retrieval.labels) or [], pick(retrieval.titles), pick(retrieval.texts),
                     np.take_along_axis(np.asarray(retrieval.cosine, dtype=np.float32), order, axis=1),
                     pick(retrieval.terms))


def _candidate_rows(retrieval: Retrieval, i: int, present: np.ndarray, terms: TermVectors) -> sp.csr_matrix:
    """``(len(present), 2^20)`` term rows of query ``i``'s candidates ``present``: each one's stored lexical vector
    when the memory returned it (unit-length sublinear TF of the same text: the local TF-IDF cosine does not
    depend on a row's length), else its text's row (:class:`TermVectors`, cached by id; empty without a text)."""
    stored = retrieval.terms[i] if retrieval.terms is not None else [None] * retrieval.k
    missing = [j for j in present if stored[j] is None]
    from_text = iter(terms.rows([retrieval.texts[i][j] if retrieval.texts is not None else "" for j in missing],
                                [str(retrieval.ids[i, j]) for j in missing]) if missing else [])
    indptr, indices, data = [0], [], []
    for j in present:
        if stored[j] is not None:
            idx, val = stored[j]
        else:
            row = next(from_text)
            idx, val = row.indices, row.data
        indices.append(np.asarray(idx, dtype=np.int32))
        data.append(np.asarray(val, dtype=np.float32))
        indptr.append(indptr[-1] + len(idx))
    return sp.csr_matrix((np.concatenate(data) if data else np.zeros(0, np.float32),
                          np.concatenate(indices) if indices else np.zeros(0, np.int32), np.asarray(indptr)),
                         shape=(len(present), N_FEATURES), dtype=np.float32)
