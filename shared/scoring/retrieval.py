"""What every neighbour-based predictor works on: a growing label vocabulary, the top-K neighbours of a batch
of articles (:class:`Retrieval`), and the labels with the neighbours behind each (:class:`LabelScore`,
:class:`Explained`: the scorer's working form of a proposal, made by
:func:`newsmon.shared.scoring.decision.explain`; the scorer returns :class:`newsmon.schemas.Proposal`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.text import cut_at_word


class LabelVocab:
    """A growing mapping label <-> column index (labels are free strings; new labels appear every week)."""

    def __init__(self, labels: Iterable[str] = ()):
        self.labels: list[str] = []
        self.index: dict[str, int] = {}
        self.extend(labels)

    def extend(self, labels: Iterable[str]) -> None:
        """Add unseen labels at the end (existing columns keep their index)."""
        for lb in labels:
            if lb not in self.index:
                self.index[lb] = len(self.labels)
                self.labels.append(lb)

    def __len__(self) -> int:
        return len(self.labels)

    def encode(self, label_sets: Sequence[Iterable[str]], grow: bool = True) -> sp.csr_matrix:
        """Label sets -> ``(n, L)`` 0/1 CSR matrix (float32). Unknown labels are added when ``grow`` (in the order
        they are first seen), ignored otherwise.

        Each distinct label set is read once (the neighbours of many queries repeat the same articles' sets), the
        rows are gathered with array operations: 1.9 million label sets (reuters21578_en's calibration articles x
        200 candidates) in a fraction of a second."""
        keyed: Sequence[Any] = label_sets
        try:
            distinct = dict.fromkeys(keyed)  # the distinct sets in first-seen order (hashing in C)
        except TypeError:  # a set that cannot be hashed (a list): as a tuple
            keyed = [ls if isinstance(ls, tuple) else tuple(ls) for ls in label_sets]
            distinct = dict.fromkeys(keyed)
        cols_of = []
        for key in distinct:
            if grow:
                self.extend(key)
            cols_of.append(sorted({self.index[lb] for lb in key if lb in self.index}))
        code = dict(zip(distinct, range(len(distinct)), strict=True))
        codes = np.fromiter(map(code.__getitem__, keyed), dtype=np.int64, count=len(keyed))
        lengths = np.fromiter(map(len, cols_of), dtype=np.int64, count=len(cols_of))
        flat = np.fromiter((c for cols in cols_of for c in cols), dtype=np.int64, count=int(lengths.sum()))
        starts = np.cumsum(lengths) - lengths
        row_len = lengths[codes]
        indptr = np.zeros(len(keyed) + 1, dtype=np.int64)
        np.cumsum(row_len, out=indptr[1:])
        at = np.arange(indptr[-1], dtype=np.int64)  # each entry's place in ``flat``: its set's start + its rank
        at -= np.repeat(indptr[:-1], row_len)
        at += np.repeat(starts[codes], row_len)
        del codes, row_len
        indices = flat[at]
        del at
        return sp.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr),
                             shape=(len(keyed), len(self)), dtype=np.float32)


@dataclass
class Retrieval:
    """The top-K neighbours of ``m`` query articles.

    Attributes:
        ids: ``(m, K)`` object array of neighbour article ids (``""`` where fewer than K were found).
        sims: ``(m, K)`` float32 cosine similarities, descending per row (``-inf`` where missing).
        labels: ``m`` lists of ``K`` label tuples (empty tuple where missing).
        titles: ``m`` lists of ``K`` neighbour titles for people, uncut (:func:`title_source`: an explanation cuts
            the few it shows, :func:`cut_title`; None where missing or unknown); None when the search returned no
            payloads.
        texts: ``m`` lists of ``K`` neighbour texts (payload ``text``; ``""`` where missing), for the lexical
            fusion of hybrid retrieval (:mod:`newsmon.shared.scoring.lexical`); None when not kept.
        cosines: ``(m, K)`` float32 dense cosine similarities when ``sims`` holds another ranking score (the
            fused score of hybrid retrieval); None when ``sims`` are the cosines. See :attr:`cosine`.
        terms: ``m`` lists of ``K`` stored lexical vectors ``(indices, values)`` of the neighbours (the memory's
            :data:`~newsmon.shared.memory.base.LEXICAL_VECTOR`, made from the same text), which the lexical fusion
            reads instead of tokenising ``texts`` again; None where a neighbour has none.
    """

    ids: np.ndarray
    sims: np.ndarray
    labels: list[list[tuple[str, ...]]]
    titles: list[list[str | None]] | None = None
    texts: list[list[str]] | None = None
    cosines: np.ndarray | None = None
    terms: list[list[Any]] | None = None
    #: label_matrix's last matrices, by the vocabulary's labels before it (the calibration asks again and again).
    _label_rows: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def cosine(self) -> np.ndarray:
        """``(m, K)`` float32 dense cosine similarities of the neighbours (``sims`` unless they were fused)."""
        return self.sims if self.cosines is None else self.cosines

    @classmethod
    def from_neighbours(cls, neighbours: Sequence[Sequence], top_k: int | None = None,
                        shared: dict[tuple, tuple] | None = None) -> Retrieval:
        """Build from the memory's search result: ``m`` lists of objects with ``article_id``,
        ``similarity`` and ``labels`` (e.g. :class:`newsmon.shared.memory.Neighbour`), each sorted by
        similarity.

        A memory article retrieved by many queries is held once: its labels, title, text and stored terms are
        taken from its first hit and shared by the others (``shared``: that cache, by article id and labels, to pass to
        every call of one search of an unchanged memory, e.g. an eval's leave-one-out search in chunks; a new one
        per call when None). Without it an eval of 9,508 queries x 400 neighbours held each neighbour's copies
        millions of times over (gigabytes).

        A neighbour searched without its payload (its ``point``, ``(collection, point id)``, not None) is held by that
        point in ``ids`` until :meth:`with_articles` gives its article id, labels and title."""
        k = top_k or max((len(n) for n in neighbours), default=0)
        m = len(neighbours)
        ids = np.full((m, k), "", dtype=object)
        sims = np.full((m, k), -np.inf, dtype=np.float32)
        labels: list[list[tuple[str, ...]]] = []
        titles: list[list[str | None]] = []
        texts: list[list[str]] = []
        terms: list[list[Any]] = []
        shared = {} if shared is None else shared
        none: tuple = ((), None, "", None)
        for i, row in enumerate(neighbours):
            row = list(row)[:k]
            held = []
            for j, nb in enumerate(row):
                point = getattr(nb, "point", None)
                ids[i, j] = nb.article_id if point is None else point
                sims[i, j] = nb.similarity
                labels_j = tuple(nb.labels)
                key = (nb.article_id, labels_j) if point is None else point  # the same id and labels: one point
                one = shared.get(key)
                if one is None:
                    one = shared[key] = (labels_j, title_source(getattr(nb, "payload", None)), _text(nb),
                                         getattr(nb, "terms", None))
                held.append(one)
            held += [none] * (k - len(row))
            labels.append([x[0] for x in held])
            titles.append([x[1] for x in held])
            texts.append([x[2] for x in held])
            terms.append([x[3] for x in held])
        return cls(ids, sims, labels, titles, texts, terms=terms)

    def with_articles(self, read: Callable[[list], dict]) -> Retrieval:
        """This retrieval with each neighbour held by its point (see :meth:`from_neighbours`) given its article id,
        labels and title (text ``""``: a search's hits leave it out) by ``read`` (the points -> by point, objects
        with ``article_id``, ``labels``, ``payload``; called once). A point ``read`` lacks (deleted since the
        search) is left out, the row's later neighbours moving up. ``self`` when none is held by its point."""
        held = [(i, j) for i, row in enumerate(self.ids.tolist()) for j, x in enumerate(row) if isinstance(x, tuple)]
        if not held:
            return self
        got = read([self.ids[i, j] for i, j in held])
        ids, labels = self.ids.copy(), [list(row) for row in self.labels]
        titles = [list(row) for row in self.titles] if self.titles is not None else None
        gone = np.zeros(ids.shape, dtype=bool)
        for i, j in held:
            point = got.get(ids[i, j])
            if point is None:
                gone[i, j] = True
                continue
            ids[i, j], labels[i][j] = point.article_id, tuple(point.labels)
            if titles is not None:
                titles[i][j] = title_source(point.payload)
        out = Retrieval(ids, self.sims, labels, titles, self.texts, self.cosines, self.terms)
        return out._without(gone) if gone.any() else out

    def _without(self, gone: np.ndarray) -> Retrieval:
        """This retrieval without the ``(m, K)`` bool ``gone`` neighbours: each row's others in their order, then
        empty slots (id ``""``, similarity ``-inf``, no labels)."""
        order = np.argsort(gone, axis=1, kind="stable")
        keep = ~np.take_along_axis(gone, order, axis=1)

        def pick(rows: list | None, empty: Any) -> list | None:
            return None if rows is None else [
                [row[j] if ok else empty for j, ok in zip(o.tolist(), k.tolist(), strict=True)]
                for row, o, k in zip(rows, order, keep, strict=True)]

        def take(x: np.ndarray | None, empty: Any) -> np.ndarray | None:
            return None if x is None else np.where(keep, np.take_along_axis(x, order, axis=1), empty)

        none = np.float32(-np.inf)
        return Retrieval(take(self.ids, ""), take(self.sims, none), pick(self.labels, ()) or [],
                         pick(self.titles, None), pick(self.texts, ""), take(self.cosines, none),
                         pick(self.terms, None))

    @classmethod
    def concat(cls, parts: Sequence[Retrieval]) -> Retrieval:
        """The queries of ``parts``, in order, cut to the smallest K; titles and texts kept when every part has
        them, the cosines when any part was fused."""
        k = min(p.k for p in parts)

        def rows(name: str) -> list | None:
            lists = [getattr(p, name) for p in parts]
            return None if any(x is None for x in lists) else [row[:k] for x in lists for row in x]

        fused = any(p.cosines is not None for p in parts)
        return cls(np.vstack([p.ids[:, :k] for p in parts]), np.vstack([p.sims[:, :k] for p in parts]),
                   rows("labels"), rows("titles"), rows("texts"),
                   np.vstack([p.cosine[:, :k] for p in parts]) if fused else None, rows("terms"))

    @property
    def k(self) -> int:
        return self.sims.shape[1]

    def label_matrix(self, vocab: LabelVocab) -> sp.csr_matrix:
        """``(m * K, L)`` CSR 0/1 label rows of the neighbours (row ``i * K + j`` = neighbour j of query i); the
        labels ``vocab`` lacks are added to it. Computed once per vocabulary (its labels, in order) while
        ``labels`` is the same list; callers must not change the matrix."""
        key = tuple(vocab.labels)
        got = self._label_rows.get(key)
        if got is not None and got[0] is self.labels:
            vocab.extend(got[1])
            return got[2]
        m = vocab.encode([labels for row in self.labels for labels in row])
        if len(self._label_rows) >= 4:
            self._label_rows.clear()
        self._label_rows[key] = (self.labels, vocab.labels[len(key):], m)
        return m

    def rows(self, idx: Sequence[int]) -> Retrieval:
        """The queries ``idx`` (positions), in that order."""
        ix = np.asarray(idx, dtype=int)

        def pick(x: list | None) -> list | None:
            return None if x is None else [x[i] for i in ix]

        return Retrieval(self.ids[ix], self.sims[ix], pick(self.labels), pick(self.titles), pick(self.texts),
                         None if self.cosines is None else self.cosines[ix], pick(self.terms))

    def head(self, k: int) -> Retrieval:
        """The first ``k`` neighbours of each query."""
        return Retrieval(self.ids[:, :k], self.sims[:, :k], [row[:k] for row in self.labels],
                         None if self.titles is None else [row[:k] for row in self.titles],
                         None if self.texts is None else [row[:k] for row in self.texts],
                         None if self.cosines is None else self.cosines[:, :k],
                         None if self.terms is None else [row[:k] for row in self.terms])


def _text(nb: Any) -> str:
    """A neighbour's stored text (payload ``text``; ``""`` without one)."""
    return str((getattr(nb, "payload", None) or {}).get("text") or "")


#: Characters of a neighbour's title (or text snippet) shown to people; the wire allows 300.
TITLE_CHARS = 160


def display_title(payload: dict | None, limit: int = TITLE_CHARS) -> str | None:
    """What a moderator sees of a memory article: its headline, or when it has none the start of its text (the
    stored ``excerpt``, which a search hands back, or the ``text``), whitespace collapsed and cut at a word to
    ``limit`` characters with an ellipsis (:func:`~newsmon.shared.text.cut_at_word`); None without any."""
    return cut_title(title_source(payload), limit)


def title_source(payload: dict | None) -> str | None:
    """The string :func:`display_title` shows cut: the headline, else the ``excerpt``, else the ``text`` (the first
    that is not blank), as stored; None without any. A lookup, no copy: what a search keeps of each of its
    thousands of candidates, of which an explanation shows a few (:func:`cut_title`)."""
    if not payload:
        return None
    for key in ("title", "excerpt", "text"):
        value = payload.get(key)
        if isinstance(value, str) and value and not value.isspace():
            return value
    return None


def cut_title(source: str | None, limit: int = TITLE_CHARS) -> str | None:
    """A :func:`title_source` as people see it: whitespace collapsed, cut at a word to ``limit`` characters
    (:func:`~newsmon.shared.text.cut_at_word`, which leaves a string it has cut as it is); None stays None."""
    return None if source is None else cut_at_word(source, limit)


def aggregate(weights: np.ndarray, label_rows: sp.csr_matrix, K: int, n_labels: int) -> np.ndarray:
    """``sum_j weights[i, j] * Y[i*K + j]`` for every query i -> ``(m, L)`` float32 (one sparse product).

    Args:
        weights: ``(m, k)`` weights of each query's first ``k <= K`` neighbours.
        label_rows: ``(m * K, L')`` 0/1 label rows (:meth:`Retrieval.label_matrix`); widened to ``n_labels``.
    """
    return np.asarray(_weighted_labels(weights, label_rows, K, n_labels).todense(), dtype=np.float32)


def aggregate_sparse(weights: np.ndarray, label_rows: sp.csr_matrix, K: int, n_labels: int) -> sp.csr_matrix:
    """:func:`aggregate` as an ``(m, L)`` float32 CSR matrix (no repeated entries; ``.toarray()`` equals
    :func:`aggregate`, bit for bit)."""
    C = _weighted_labels(weights, label_rows, K, n_labels)
    return sp.csr_matrix((np.asarray(C.data, dtype=np.float32), C.indices, C.indptr), shape=C.shape)


def _weighted_labels(weights: np.ndarray, label_rows: sp.csr_matrix, K: int, n_labels: int) -> sp.csr_matrix:
    """The ``(m, n_labels)`` float64 CSR product of :func:`aggregate`."""
    m, k = weights.shape
    cols = (np.arange(m)[:, None] * K + np.arange(k)[None, :]).reshape(-1)
    # the CSR matrix a (rows, cols) triplet gives (its entries in this order), built without the conversion
    W = sp.csr_matrix((np.ascontiguousarray(weights).reshape(-1), cols, np.arange(0, m * k + 1, k)),
                      shape=(m, label_rows.shape[0]))
    Y = label_rows
    if Y.shape[1] < n_labels:
        Y = sp.csr_matrix((Y.data, Y.indices, Y.indptr), shape=(Y.shape[0], n_labels))
    return sp.csr_matrix(W @ Y)


@dataclass
class LabelScore:
    """One label with its score and the neighbours (article id, cosine similarity) behind it; ``titles``: the
    same neighbours' titles for people (:func:`display_title`), in the same order (empty when unknown);
    ``decided_by``: the name of the decision rule that proposed it (None: not proposed, or not known);
    ``threshold``: the label's own threshold (None: not known).

    The evidence's provenance, for its ``reason`` (:mod:`newsmon.shared.scoring.reasons`, in words): ``carriers`` of
    the article's first ``window`` neighbours (k) carry it; when none does, ``neighbours`` are those after the first
    k that carry it (``beyond``) or the memory's closest articles carrying it, found for it (``searched``), and
    ``components`` the score components that gave it a share."""

    label: str
    score: float
    neighbours: list[tuple[str, float]]
    titles: list[str | None] = field(default_factory=list)
    decided_by: str | None = None
    threshold: float | None = None
    carriers: int = 0
    window: int = 0
    beyond: bool = False
    searched: bool = False
    components: list[str] = field(default_factory=list)
    reason: str | None = None


@dataclass
class Explained:
    """The scorer's working form of one article's proposal (made by
    :func:`newsmon.shared.scoring.decision.explain`, completed and put on the wire by the scorer, which returns a
    :class:`newsmon.schemas.Proposal`): the labels proposed, best first, with their evidence; ``candidates``: the
    best labels at or below the threshold (score > 0) that were not proposed, best first; ``abstained``: why the
    rules proposed nothing on purpose (None: they did not abstain)."""

    labels: list[LabelScore]
    candidates: list[LabelScore] = field(default_factory=list)
    abstained: str | None = None

    @property
    def label_set(self) -> set[str]:
        return {x.label for x in self.labels}
