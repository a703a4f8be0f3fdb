"""Hard-negative mining for contrastive fine-tuning of the encoder (the nightly job, step 1).

For each training article (the query): search its top-``top`` neighbours among the training articles with
faiss (exact inner product on L2-normalised embeddings = cosine; faiss-gpu when CUDA is present, faiss-cpu
otherwise). The positive is the most similar other article sharing at least one label; the negatives are up
to ``n_neg`` of the most similar articles sharing none (RAE-XMC's recipe: 15 of the top 500). Articles
without any positive in their top ``top`` are skipped and counted.

Output: FlagEmbedding's fine-tuning JSONL, one ``{"query": str, "pos": [str], "neg": [str]}`` per line (plus
the ids, for audits).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import structlog

log = structlog.get_logger(__name__)


@dataclass
class MiningReport:
    """Counts of one mining run."""

    articles: int
    queries_written: int
    without_positive: int
    without_negative: int
    negatives_mean: float
    negatives_min: int
    negatives_max: int
    top: int
    n_neg: int
    faiss_device: str
    data_sha256: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def knn(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` inner-product neighbours of every row among all rows (itself included), with faiss.

    Args:
        vectors: ``(n, d)`` float32, L2-normalised rows.

    Returns:
        (similarities ``(n, k)`` float32, indices ``(n, k)`` int64), best first; -1 where fewer than k exist.
    """
    import faiss  # deferred: faiss-cpu or faiss-gpu (an extra); only mining needs it

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(x.shape[1])
    device = "cpu"
    if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        index = faiss.index_cpu_to_all_gpus(index)
        device = "gpu"
    index.add(x)
    sims, idx = index.search(x, min(k, x.shape[0]))
    knn.device = device  # type: ignore[attr-defined]
    return sims, idx


def mine_hard_negatives(ids: Sequence[str], texts: Sequence[str], label_sets: Sequence[Sequence[str]],
                        vectors: np.ndarray, top: int = 500, n_neg: int = 15) -> tuple[list[dict], MiningReport]:
    """Mine (query, positive, hard negatives) triples.

    Args:
        ids, texts, label_sets: the training articles (``n`` each).
        vectors: ``(n, d)`` float32 normalised embeddings of ``texts`` from the current model.
        top: neighbours searched per article; n_neg: negatives kept per query.

    Returns:
        (records for FlagEmbedding, :class:`MiningReport`).

    Raises:
        ValueError: lengths differ.
    """
    n = len(ids)
    if not (len(texts) == len(label_sets) == vectors.shape[0] == n):
        raise ValueError("ids, texts, label_sets and vectors must have the same length")
    sims, idx = knn(vectors, top + 1)
    labels = [set(x) for x in label_sets]
    records, negs_per_query = [], []
    no_pos = no_neg = 0
    for i in range(n):
        pos = None
        negs: list[int] = []
        for j in idx[i]:
            if j < 0 or j == i:
                continue
            if labels[i] & labels[j]:
                if pos is None:
                    pos = int(j)
            elif len(negs) < n_neg:
                negs.append(int(j))
            if pos is not None and len(negs) >= n_neg:
                break
        if pos is None:
            no_pos += 1
            continue
        if not negs:
            no_neg += 1
            continue
        records.append({"query": texts[i], "pos": [texts[pos]], "neg": [texts[j] for j in negs],
                        "query_id": ids[i], "pos_id": ids[pos], "neg_ids": [ids[j] for j in negs]})
        negs_per_query.append(len(negs))
    report = MiningReport(
        articles=n, queries_written=len(records), without_positive=no_pos, without_negative=no_neg,
        negatives_mean=float(np.mean(negs_per_query)) if negs_per_query else 0.0,
        negatives_min=int(min(negs_per_query, default=0)), negatives_max=int(max(negs_per_query, default=0)),
        top=top, n_neg=n_neg, faiss_device=getattr(knn, "device", "cpu"))
    return records, report


def write_jsonl(records: list[dict], path: Path) -> str:
    """Write the records as JSONL; returns the file's sha256 (the training-data hash of the manifest)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            line = json.dumps(r, ensure_ascii=False) + "\n"
            h.update(line.encode())
            fh.write(line)
    return h.hexdigest()


def mine_pair_indices(label_sets: Sequence[Sequence[str]], vectors: np.ndarray, top: int = 500, n_neg: int = 15,
                      positive: str = "nearest", neg_ranks: tuple[int, int] | None = None,
                      n_pos: int = 4) -> dict[str, np.ndarray]:
    """Mine (query, positives, hard negatives) as index triples over ``vectors`` (for the adapter budget).

    Args:
        label_sets: ``n`` label sets; vectors: ``(n, d)`` float32 normalised rows of the current model.
        top: neighbours searched per article (faiss, exact).
        n_neg: negatives kept per query: the most similar neighbours sharing no label, within ``neg_ranks``.
        positive: ``nearest`` (the research's: one positive, the most similar neighbour sharing >= 1 label),
            ``overlap`` (one positive, the neighbour with the highest label Jaccard; the most similar among
            ties) or ``weighted`` (the ``n_pos`` most similar neighbours sharing a label, each weighted by its
            label Jaccard with the query, weights summing to 1).
        neg_ranks: ``(lo, hi)`` neighbour ranks (0 = the nearest other article) the negatives come from;
            None = all ``top``. E.g. ``(30, 200)`` skips the nearest non-sharing articles, which are often
            unlabelled near-duplicates (false negatives).

    Returns:
        ``{"query": (m,), "pos": (m, P), "pos_w": (m, P) float32, "neg": (m, n_neg)}``, ``-1`` padding the
        indices (``P`` = 1, or ``n_pos`` for ``weighted``); queries without a positive or a negative are left
        out.

    Raises:
        ValueError: lengths differ or ``positive`` is unknown.
    """
    if len(label_sets) != vectors.shape[0]:
        raise ValueError("label_sets and vectors must have the same length")
    if positive not in ("nearest", "overlap", "weighted"):
        raise ValueError(f"positive must be nearest, overlap or weighted, got {positive!r}")
    lo, hi = neg_ranks or (0, top)
    n_p = n_pos if positive == "weighted" else 1
    _, idx = knn(vectors, top + 1)
    labels = [set(x) for x in label_sets]
    out: dict[str, list] = {"query": [], "pos": [], "pos_w": [], "neg": []}
    for i in range(len(labels)):
        others = [int(j) for j in idx[i] if j >= 0 and j != i][:top]
        sharing = [j for j in others if labels[i] & labels[j]]
        negs = [j for r, j in enumerate(others) if lo <= r < hi and not labels[i] & labels[j]][:n_neg]
        if not sharing or not negs:
            continue
        jac = {j: len(labels[i] & labels[j]) / len(labels[i] | labels[j]) for j in sharing[:max(n_p, 50)]}
        pos = [max(jac, key=jac.get)] if positive == "overlap" else sharing[:n_p]
        w = np.asarray([jac[j] for j in pos] if positive == "weighted" else [1.0])
        out["query"].append(i)
        out["pos"].append(pos + [-1] * (n_p - len(pos)))
        out["pos_w"].append(list(w / w.sum()) + [0.0] * (n_p - len(pos)))
        out["neg"].append(negs + [-1] * (n_neg - len(negs)))
    m = len(out["query"])
    return {"query": np.asarray(out["query"], dtype=np.int64),
            "pos": np.asarray(out["pos"], dtype=np.int64).reshape(m, n_p),
            "pos_w": np.asarray(out["pos_w"], dtype=np.float32).reshape(m, n_p),
            "neg": np.asarray(out["neg"], dtype=np.int64).reshape(m, n_neg)}
