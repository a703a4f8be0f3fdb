"""The decision rules of the product's predictor (``newsmon``, :mod:`newsmon.shared.predictors.newsmon`): RAE-XMC scores over the retrieved neighbours, with decision rules that
the research method lacks, each switchable and calibrated on the memory itself (leave-one-out) plus validation:

- **threshold**: ``p > threshold`` on the RAE-XMC score ``p = softmax(s / tau) . Y`` (RAE-XMC eq. 8), with the
  label keys mixed in when ``label_lambda > 0`` (:mod:`newsmon.shared.predictors.label_keys`: lambda weighs the
  label part of the memory, the role the paper gives it, instead of rescaling ``p`` against the threshold) and
  the head model mixed in when ``head_weight > 0`` (:mod:`newsmon.shared.predictors.head_model`: a logistic
  regression over words and punctuation for each label on 100 or more memory articles, :func:`mix_head`); with
  ``bucket_thresholds`` one threshold per label-frequency bucket instead (memory articles carrying the label
  <= 10, 11-99, 100-499, >= 500: :func:`column_thresholds`), and with ``label_thresholds`` a threshold of its own
  for each frequent label named there (SCut; :mod:`newsmon.shared.predictors.thresholds`);
- **label count**: each article gets its n best labels whose score reaches ``label_count``, n the softmax-weighted
  mean label count of its k neighbours, rounded (:func:`predicted_label_count`); it replaces the thresholds'
  decision (the RCut strategy with a rank predicted per article: Yang, "A study of thresholding strategies for text
  categorization", SIGIR 2001, section 2.1; the issue's "top-n labels with n predicted from the neighbours' label
  counts");
- **floor**: the best label is proposed when its score reaches ``floor`` even if no label passes the
  threshold (an article always close to its neighbours gets at least one label);
- **label-set vote**: the neighbours vote, with their softmax weights, for their *exact* label sets; when the
  winning set holds at least ``set_vote`` of the weight it is proposed as a whole (a kNN over label powersets,
  which targets subset accuracy);
- **tail support**: a label carried by at least ``tail_support`` of the first ``tail_neighbours`` neighbours,
  each at cosine >= ``tail_similarity``, is proposed whatever its softmax share, so 3 confirmed close articles
  suffice for a new or rare label (the paper notes RAE-XMC hurts the tail and suggests 1-NN there);
- **new-label support**: a label the calibration never saw (one confirmed by moderators since, so no leave-one-out
  could weigh it) is proposed when at least ``new_label_support`` of the first ``new_label_neighbours``
  neighbours carry it at cosine >= ``new_label_similarity``; a memory of thousands of articles holding 2 of a new
  label's 3 confirmations among an article's 20 nearest is strong evidence, which the softmax share of a label
  among k = 100 neighbours never shows. Chosen by a replay inside the calibration
  (:func:`newsmon.shared.predictors.calibrate.new_label_replay`).

:func:`newsmon_decision` is the one implementation: the live classifier, ``suggest`` and ``eval`` all call it
(``eval`` and the calibration through :func:`newsmon_decide`, which drops the reasons).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.head_model import HeadScores
from newsmon.shared.predictors.label_keys import LabelHits, key_scores
from newsmon.shared.predictors.rae_xmc import neighbour_weights, rae_xmc_scores
from newsmon.shared.predictors.retrieval import DECIDING_RULES, LabelVocab, Retrieval


def set_vote(retrieval: Retrieval, k: int, tau: float) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """The label-set vote: per query, the exact label set with the largest summed softmax weight among its
    first ``k`` neighbours (weights ``softmax(s / tau)``), and that weight.

    Returns:
        (``m`` winning label sets (sorted tuples; ``()`` without neighbours), ``(m,)`` float64 weights in [0, 1]).
    """
    w = neighbour_weights(retrieval.sims, min(k, retrieval.k), tau)
    sets, weights = [], np.zeros(len(w))
    for i, row in enumerate(retrieval.labels):
        acc: dict[tuple[str, ...], float] = {}
        for j, labels in enumerate(row[:k]):
            if w[i, j] > 0 and labels:
                key = tuple(sorted(labels))
                acc[key] = acc.get(key, 0.0) + w[i, j]
        best = max(acc.items(), key=lambda kv: (kv[1], -len(kv[0])), default=((), 0.0))
        sets.append(best[0])
        weights[i] = best[1]
    return sets, weights


def tail_support(retrieval: Retrieval, vocab: LabelVocab, support: int, neighbours: int,
                 similarity: float) -> np.ndarray:
    """``(m, L)`` bool: labels carried by at least ``support`` of each query's first ``neighbours`` neighbours
    that have a dense cosine similarity >= ``similarity`` (:attr:`Retrieval.cosine`: after hybrid retrieval's
    fusion the ranking score is not a cosine, and the threshold is one)."""
    n = min(neighbours, retrieval.k)
    close = retrieval.head(n)
    rows = close.label_matrix(vocab)
    L = len(vocab)
    rows = sp.csr_matrix((rows.data, rows.indices, rows.indptr), shape=(rows.shape[0], L))
    ok = (np.nan_to_num(close.cosine, neginf=-1.0) >= similarity).astype(np.float32).reshape(-1)
    m = close.sims.shape[0]
    W = sp.csr_matrix((ok, (np.repeat(np.arange(m), n), np.arange(m * n))), shape=(m, m * n))
    return np.asarray((W @ rows).todense()) >= support


def mean_label_count(retrieval: Retrieval, k: int, tau: float, label_rows: sp.csr_matrix | None = None
                     ) -> np.ndarray:
    """``(m,)`` float64: ``sum_j w_j |Y_j| / sum_j w_j`` over each query's first ``k`` neighbours, with the softmax
    weights ``w = softmax(s / tau)`` (RAE-XMC eq. 8's) and ``|Y_j|`` the neighbour's number of labels, read from
    ``label_rows`` (``(m * K, L)``, :meth:`Retrieval.label_matrix`; built here when None); 0 without neighbours."""
    w = neighbour_weights(retrieval.sims, min(k, retrieval.k), tau)
    rows = retrieval.label_matrix(LabelVocab()) if label_rows is None else label_rows
    sizes = np.diff(rows.indptr).reshape(len(w), retrieval.k)[:, :w.shape[1]]
    return (w * sizes).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-12)


def predicted_label_count(retrieval: Retrieval, k: int, tau: float, label_rows: sp.csr_matrix | None = None
                          ) -> np.ndarray:
    """``(m,)`` int: each query's predicted label count, :func:`mean_label_count` rounded, halves up."""
    return np.floor(mean_label_count(retrieval, k, tau, label_rows) + 0.5).astype(int)


def best_labels(scores: np.ndarray, n: np.ndarray, minimum: float) -> np.ndarray:
    """``(m, L)`` bool: each row's ``n[i]`` highest ``scores`` ``(m, L)`` that reach ``minimum`` (ties: the lower
    column first)."""
    rank = np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1, kind="stable")
    return (rank < n[:, None]) & (scores >= minimum)


#: Label-frequency buckets of ``bucket_thresholds``: a label carried by <= 10 memory articles (rare, and every label
#: new since the calibration), 11-99, 100-499, >= 500 (frequent); the edges are the field's rare / frequent cuts.
BUCKET_EDGES = (10, 99, 499)


def column_thresholds(vocab: LabelVocab, params: Any, label_counts: Mapping[str, int] | None) -> np.ndarray:
    """``(L,)`` float64 threshold of each label of ``vocab``: ``params.bucket_thresholds[b]`` for the label's
    frequency bucket b (:data:`BUCKET_EDGES`, from ``label_counts``: memory articles per label, 0 when missing)
    when both are given, else ``params.threshold``; then ``params.label_thresholds`` ({label: threshold}, when
    given) for the labels it names."""
    buckets = getattr(params, "bucket_thresholds", None)
    if not buckets or label_counts is None:
        out = np.full(len(vocab), params.threshold, dtype=np.float64)
    else:
        counts = np.array([label_counts.get(lb, 0) for lb in vocab.labels])
        out = np.asarray(buckets, dtype=np.float64)[np.searchsorted(BUCKET_EDGES, counts, side="left")]
    for lb, t in (getattr(params, "label_thresholds", None) or {}).items():
        if lb in vocab.index:
            out[vocab.index[lb]] = t
    return out


def neighbours_needed(params: Any) -> int:
    """Neighbours per query that :func:`newsmon_decide` reads with ``params``: k and each rule's window."""
    return max(params.top_k, params.tail_neighbours if params.tail_support else 1,
               getattr(params, "new_label_neighbours", 1) if getattr(params, "new_label_support", 0) else 1)


#: Each deciding rule's code in :attr:`Decision.decided_by` (its index in :data:`DECIDING_RULES`).
_CODE: dict[str, np.int8] = {name: np.int8(i) for i, name in enumerate(DECIDING_RULES)}


@dataclass
class Decision:
    """What :func:`newsmon_decision` decided for ``m`` queries over ``L`` labels.

    Attributes:
        scores: ``(m, L)`` float32 RAE-XMC scores (with the label keys mixed in when on).
        proposed: ``(m, L)`` bool, the proposals.
        thresholds: ``(L,)`` float64, each label's threshold (:func:`column_thresholds`; with the label-count rule
            its minimum score).
        decided_by: ``(m, L)`` int8 index into :data:`DECIDING_RULES` of the rule that proposed each label, -1
            where none did; None unless asked for. A label the label-set vote proposed counts for the vote (it
            replaced the threshold's decision in that row) even when its score passes its threshold; otherwise
            the first rule of :data:`DECIDING_RULES` that proposes it (``label_count`` in place of ``threshold``
            when that rule is on).
    """

    scores: np.ndarray
    proposed: np.ndarray
    thresholds: np.ndarray
    decided_by: np.ndarray | None = None


def mix_head(scores: np.ndarray, vocab: LabelVocab, head: HeadScores | None, weight: float) -> np.ndarray:
    """``(m, L)`` scores with the head model mixed in: ``(1 - weight) * s + weight * P`` in the head labels'
    columns (the vocabulary grows by a head label no neighbour carries; ``scores`` is padded to it), unchanged
    when ``head`` is None or ``weight`` is 0 (Annif's ensemble, a weighted average of two predictors' scores)."""
    if head is None or not weight or not head.labels:
        return scores
    vocab.extend(head.labels)
    L = len(vocab)
    out = np.zeros((scores.shape[0], L), dtype=np.float32)
    out[:, :scores.shape[1]] = scores
    cols = [vocab.index[lb] for lb in head.labels]
    out[:, cols] = (1.0 - weight) * out[:, cols] + weight * head.probs
    return out


def newsmon_decide(retrieval: Retrieval, vocab: LabelVocab, params: Any,
                   known_labels: Collection[str] | None = None,
                   label_hits: LabelHits | None = None,
                   label_counts: Mapping[str, int] | None = None,
                   head: HeadScores | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, proposed)`` of :func:`newsmon_decision` (same arguments, errors and shapes), for the callers
    that need no reasons (calibration, ``eval``)."""
    d = newsmon_decision(retrieval, vocab, params, known_labels, label_hits, label_counts, head=head)
    return d.scores, d.proposed


def newsmon_decision(retrieval: Retrieval, vocab: LabelVocab, params: Any,
                     known_labels: Collection[str] | None = None,
                     label_hits: LabelHits | None = None,
                     label_counts: Mapping[str, int] | None = None,
                     reasons: bool = False, head: HeadScores | None = None) -> Decision:
    """Scores and decisions of the ``newsmon`` predictor for ``m`` queries.

    Args:
        retrieval: the queries' top-K neighbours (K >= :func:`neighbours_needed`).
        vocab: the label vocabulary (grows with the neighbours' labels).
        params: an object with ``top_k``, ``tau``, ``threshold``, ``floor``, ``set_vote``, ``tail_support``,
            ``tail_neighbours``, ``tail_similarity`` and optionally ``label_count``, ``new_label_support``,
            ``new_label_neighbours``, ``new_label_similarity`` (e.g. :class:`newsmon.shared.config.RaeSettings`).
        known_labels: the labels the calibration saw (its record's ``labels``); the new-label rule serves the
            others. None: no label counts as new (no record tells), the rule is off.
        label_hits: the queries' nearest label keys (:mod:`newsmon.shared.predictors.label_keys`), mixed in with
            weight ``label_lambda`` (RAE-XMC's label part of the memory); None or ``label_lambda == 0``: off.
        label_counts: memory articles per label, for ``bucket_thresholds`` (:func:`column_thresholds`); None: the
            single ``threshold``.

        reasons: also say which rule proposed each label (:attr:`Decision.decided_by`; one ``(m, L)`` int8 more).
        head: the queries' head-model probabilities (:mod:`newsmon.shared.predictors.head_model`), mixed into
            their labels' scores with weight ``head_weight`` (beta): ``(1 - beta) * s + beta * P``; None or
            ``head_weight == 0``: off.

    Returns:
        A :class:`Decision` with ``L = len(vocab)`` after the call. A label proposed by a rule but under its
        threshold keeps its RAE-XMC score (the moderator sees the real share, and ``decided_by`` the rule).

    Raises:
        ValueError: ``top_k < 1`` or ``tau <= 0``.
    """
    rows = retrieval.label_matrix(vocab)
    m = retrieval.sims.shape[0]
    scores = mixed_scores(retrieval, rows, vocab, params, label_hits, head)
    if scores.shape[1] == 0:
        return Decision(np.zeros((m, 0), dtype=np.float32), np.zeros((m, 0), dtype=bool), np.zeros(0),
                        np.zeros((m, 0), dtype=np.int8) if reasons else None)
    thresholds, proposed, code = _first_decision(retrieval, rows, vocab, params, scores, label_counts)
    why = np.where(proposed, code, np.int8(-1)) if reasons else None
    if params.set_vote is not None:
        _apply_set_vote(retrieval, vocab, params, proposed, why)
    for code, extra in ((_CODE["tail_support"], _tail(retrieval, vocab, params)),
                        (_CODE["new_label_support"], _new_labels(retrieval, vocab, params, known_labels))):
        if extra is not None:
            if why is not None:
                why[extra & ~proposed] = code
            proposed |= extra
    if params.floor is not None:
        empty = ~proposed.any(axis=1)
        best = scores.argmax(axis=1)
        hit = np.flatnonzero(empty & (scores[np.arange(m), best] >= params.floor))
        proposed[hit, best[hit]] = True
        if why is not None:
            why[hit, best[hit]] = _CODE["floor"]
    return Decision(scores, proposed, thresholds, why)


def mixed_scores(retrieval: Retrieval, rows: sp.csr_matrix, vocab: LabelVocab, params: Any,
                 label_hits: LabelHits | None, head: HeadScores | None) -> np.ndarray:
    """``(m, L)`` float32 scores, the threshold part of the decision: RAE-XMC over the neighbours' label ``rows``
    (``retrieval.label_matrix(vocab)``), with the label keys and the head model mixed in where ``params`` turns
    them on (``vocab`` grows by their labels; ``L = len(vocab)`` after the call, 0 columns when there is no
    label)."""
    keys = label_hits if getattr(params, "label_lambda", 0.0) and label_hits is not None else None
    if keys is not None:
        vocab.extend(lb for row in keys.labels for lb in row[:params.label_keys])
    if getattr(params, "head_weight", 0.0) and head is not None:
        vocab.extend(head.labels)
    L = len(vocab)
    if L == 0:
        return np.zeros((retrieval.sims.shape[0], 0), dtype=np.float32)
    scores = rae_xmc_scores(retrieval.sims, rows, params.top_k, params.tau, 1.0, L)
    if keys is not None:
        lam = params.label_lambda
        scores = (scores + lam * key_scores(keys, params.label_keys, params.label_tau, vocab.index, L)) / (1 + lam)
    return mix_head(scores, vocab, head, getattr(params, "head_weight", 0.0))


def _first_decision(retrieval: Retrieval, rows: sp.csr_matrix, vocab: LabelVocab, params: Any, scores: np.ndarray,
                    label_counts: Mapping[str, int] | None) -> tuple[np.ndarray, np.ndarray, np.int8]:
    """The decision the other rules start from: ``(L,)`` thresholds, ``(m, L)`` bool proposals and the rule's code
    in :data:`DECIDING_RULES`: each label's threshold (:func:`column_thresholds`), or with ``params.label_count``
    the label-count rule, whose minimum score is then every label's bar (``rows``: the neighbours' label rows the
    scores were computed from)."""
    minimum = getattr(params, "label_count", None)
    if minimum is None:
        thresholds = column_thresholds(vocab, params, label_counts)
        return thresholds, scores > thresholds[None, :], _CODE["threshold"]
    n = predicted_label_count(retrieval, params.top_k, params.tau, rows)
    return (np.full(len(vocab), minimum, dtype=np.float64), best_labels(scores, n, minimum),
            _CODE["label_count"])


def _apply_set_vote(retrieval: Retrieval, vocab: LabelVocab, params: Any, proposed: np.ndarray,
                    why: np.ndarray | None) -> None:
    """The label-set vote, in place: in each row whose winning set holds >= ``params.set_vote`` of the weight,
    that set replaces the row's proposals (``why``: the vote's code for its labels, -1 for the rest)."""
    sets, weights = set_vote(retrieval, params.top_k, params.tau)
    for i in np.flatnonzero(weights >= params.set_vote):
        cols = [vocab.index[lb] for lb in sets[i]]
        proposed[i] = False
        proposed[i, cols] = True
        if why is not None:
            why[i] = -1
            why[i, cols] = _CODE["set_vote"]


def _tail(retrieval: Retrieval, vocab: LabelVocab, params: Any) -> np.ndarray | None:
    """``(m, L)`` bool of the tail-support rule, None when it is off."""
    if not params.tail_support:
        return None
    return tail_support(retrieval, vocab, params.tail_support, params.tail_neighbours, params.tail_similarity)


def _new_labels(retrieval: Retrieval, vocab: LabelVocab, params: Any,
                known_labels: Collection[str] | None) -> np.ndarray | None:
    """``(m, L)`` bool of the new-label rule (labels outside ``known_labels`` only), None when it is off."""
    if not getattr(params, "new_label_support", 0) or known_labels is None:
        return None
    new = np.array([lb not in known_labels for lb in vocab.labels], dtype=bool)
    if not new.any():
        return None
    return tail_support(retrieval, vocab, params.new_label_support, params.new_label_neighbours,
                        params.new_label_similarity) & new[None, :]
