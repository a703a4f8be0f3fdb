"""Multi-label metrics with the field's names (scikit-learn implementations where they exist).

Definitions (``Y`` gold, ``Z`` predicted, both ``(n, L)`` 0/1; ``S`` scores ``(n, L)``):

- micro precision / recall / F1 (``uP``, ``uR``, ``uF1``): from true/false positives pooled over all labels
  (``sklearn.metrics.precision_recall_fscore_support(average="micro")``).
- macro precision / recall / F1 (``P``, ``R``, ``F1``): the unweighted mean of per-label figures over the
  labels that occur in the gold labels or the predictions of the evaluated articles (a label with neither
  has no defined precision or recall and is left out; a label with no prediction counts precision 0).
- subset accuracy (``Acc``): share of articles whose predicted set equals the gold set exactly
  (``sklearn.metrics.accuracy_score`` on multi-label indicators).
- frequent / rare: the same, restricted to the columns of labels with >= 500 / <= 10 occurrences in the
  training split; subset accuracy there is computed over the articles with at least one gold label in the
  group (comparing the sets restricted to the group).
- ``P@k``: mean over articles of |top-k scored labels ∩ gold| / k; ``nDCG@k``: ``sklearn.metrics.ndcg_score``
  with binary gains.
- ``R@k``: mean over the articles with a gold label of |top-k scored labels ∩ gold| / |gold| (recall at k, e.g.
  Manning, Raghavan & Schütze, *Introduction to Information Retrieval*, ch. 8): the share of the gold labels a
  moderator finds among the k candidates shown (``R@10``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import ndcg_score

FREQUENT_MIN = 500
RARE_MAX = 10


def _dense(m) -> np.ndarray:
    return np.asarray(m.todense() if sp.issparse(m) else m)


def label_groups(train_counts: np.ndarray) -> dict[str, np.ndarray]:
    """Column indices per group from ``(L,)`` training occurrence counts: all, frequent (>= 500), rare (<= 10).

    Labels never seen in training (count 0) belong to ``rare``.
    """
    cols = np.arange(train_counts.shape[0])
    return {"all": cols, "frequent": cols[train_counts >= FREQUENT_MIN], "rare": cols[train_counts <= RARE_MAX]}


def _prf(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision, recall, F1 from counts (0 where undefined, as scikit-learn's ``zero_division=0``)."""
    tp, fp, fn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn))
    p = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
    r = np.divide(tp, tp + fn, out=np.zeros_like(tp), where=(tp + fn) > 0)
    f = np.divide(2 * tp, 2 * tp + fp + fn, out=np.zeros_like(tp), where=(2 * tp + fp + fn) > 0)
    return p, r, f


def classification_metrics(Y_true, Y_pred, columns: np.ndarray | None = None) -> dict[str, float]:
    """Micro/macro precision, recall, F1 and subset accuracy over the given label columns.

    Computed from per-label true/false positive counts, which equals scikit-learn's
    ``precision_recall_fscore_support(average="micro" | "macro", labels=used, zero_division=0)`` and
    ``accuracy_score`` on multi-label indicators (tested against them), and stays correct for a single label
    column (which scikit-learn would read as a binary problem and score the negative class too).

    Args:
        Y_true, Y_pred: ``(n, L)`` 0/1 (dense or sparse).
        columns: label columns to keep (default all).

    Returns:
        ``{"uF1", "uP", "uR", "F1", "P", "R", "Acc", "n_labels", "n_articles"}``; figures in [0, 1]; NaN where
        the group is empty.
    """
    Yt = _dense(Y_true).astype(bool)
    Yp = _dense(Y_pred).astype(bool)
    if columns is not None:
        Yt, Yp = Yt[:, columns], Yp[:, columns]
    out = dict.fromkeys(("uF1", "uP", "uR", "F1", "P", "R", "Acc"), float("nan"))
    used = np.flatnonzero(Yt.any(axis=0) | Yp.any(axis=0))
    out["n_labels"] = int(len(used))
    rows = np.arange(Yt.shape[0]) if columns is None else np.flatnonzero(Yt.any(axis=1))
    out["n_articles"] = int(len(rows))
    if len(used) == 0 or len(rows) == 0:
        return out
    tp = (Yt & Yp).sum(axis=0)[used]
    fp = (~Yt & Yp).sum(axis=0)[used]
    fn = (Yt & ~Yp).sum(axis=0)[used]
    p, r, f = _prf(tp.sum(), fp.sum(), fn.sum())
    out.update(uP=float(p), uR=float(r), uF1=float(f))
    p, r, f = _prf(tp, fp, fn)
    out.update(P=float(p.mean()), R=float(r.mean()), F1=float(f.mean()))
    out["Acc"] = float((Yt[rows] == Yp[rows]).all(axis=1).mean())
    return out


def precision_at_k(Y_true, scores: np.ndarray, k: int) -> float:
    """Mean over articles of |top-k scored labels ∩ gold| / k (ties broken by column order)."""
    Yt = _dense(Y_true).astype(bool)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(Yt, top, axis=1).sum(axis=1)
    return float(np.mean(hits / k))


def recall_at_k(Y_true, scores: np.ndarray, k: int) -> float:
    """Mean over the articles with a gold label of |top-k scored labels ∩ gold| / |gold| (ties broken by column
    order); NaN when no article has a gold label."""
    Yt = _dense(Y_true).astype(bool)
    n_gold = Yt.sum(axis=1)
    keep = n_gold > 0
    if not keep.any():
        return float("nan")
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(Yt, top, axis=1).sum(axis=1)
    return float(np.mean(hits[keep] / n_gold[keep]))


def ranking_metrics(Y_true, scores: np.ndarray, ks: Sequence[int] = (1, 3, 5), ndcg_k: int = 5,
                    recall_ks: Sequence[int] = (10,)) -> dict:
    """``P@k`` for each k, ``R@k`` for each of ``recall_ks`` and ``nDCG@ndcg_k`` (scikit-learn) from ``(n, L)``
    scores.

    A figure that is undefined is NaN, with the reason under ``"undefined"`` (``{metric: reason}``): nDCG with
    fewer than 2 labels to rank (a corpus with a single label), or with no test article carrying a gold label.
    """
    Yt = _dense(Y_true).astype(float)
    out: dict = {f"P@{k}": precision_at_k(Yt, scores, k) for k in ks}
    out.update({f"R@{k}": recall_at_k(Yt, scores, k) for k in recall_ks})
    keep = Yt.sum(axis=1) > 0
    name = f"nDCG@{ndcg_k}"
    if Yt.shape[1] < 2:
        out[name], out["undefined"] = float("nan"), {name: f"{name} needs at least 2 labels to rank (found "
                                                            f"{Yt.shape[1]})"}
    elif not keep.any():
        out[name], out["undefined"] = float("nan"), {name: f"no test article has a gold label, so {name} is "
                                                            "undefined"}
    else:
        out[name] = float(ndcg_score(Yt[keep], scores[keep], k=ndcg_k))
    return out


def evaluate(Y_true, Y_pred, scores: np.ndarray | None, train_counts: np.ndarray) -> dict:
    """All metrics of one method: ``{"all": {...}, "frequent": {...}, "rare": {...}, "ranking": {...}}``.

    Args:
        Y_true, Y_pred: ``(n, L)`` 0/1; scores: ``(n, L)`` float (None: no ranking metrics);
        train_counts: ``(L,)`` label occurrences in the training split.
    """
    groups = label_groups(train_counts)
    out = {"all": classification_metrics(Y_true, Y_pred)}
    for name in ("frequent", "rare"):
        out[name] = classification_metrics(Y_true, Y_pred, groups[name])
    if scores is not None:
        out["ranking"] = ranking_metrics(Y_true, scores)
    return out


#: Buckets of training occurrences for :func:`f1_by_frequency` (inclusive bounds; the last is "frequent").
FREQUENCY_BUCKETS = ((0, 1), (2, 5), (6, RARE_MAX), (RARE_MAX + 1, 50), (51, 100), (101, FREQUENT_MIN - 1),
                     (FREQUENT_MIN, None))


def f1_by_frequency(Y_true, Y_pred, train_counts: np.ndarray) -> list[dict]:
    """Macro-F1 per bucket of training occurrences (:data:`FREQUENCY_BUCKETS`, inclusive bounds), over the
    labels of the bucket that occur in the gold labels or the predictions."""
    out = []
    for lo, hi in FREQUENCY_BUCKETS:
        name = f"≥{lo}" if hi is None else f"{lo}-{hi}"
        cols = np.flatnonzero((train_counts >= lo) & (train_counts <= (np.inf if hi is None else hi)))
        m = classification_metrics(Y_true, Y_pred, cols) if len(cols) else {"F1": float("nan"), "n_labels": 0}
        out.append({"bucket": name, "F1": m["F1"], "n_labels": m["n_labels"]})
    return out
