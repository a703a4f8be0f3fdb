"""The CPU budget of the nightly job: a linear adapter on the stored (frozen) encoder vectors.

Instead of fine-tuning the encoder (one InfoNCE step of the research shape costs about a minute on 2 CPU cores,
an epoch over sentinews_sl about 5 hours), learn a ``d x d`` matrix ``W`` applied after pooling:
``e'(x) = normalize(W e(x))``, on both sides (query and memory), so the knowledge memory needs no re-encoding,
only a matrix product over its stored vectors (:func:`newsmon.shared.encoder_adapter.transform_vectors`).

Training (torch on CPU, seconds): mined (query, positive, hard negatives) index triples
(:func:`newsmon.training_jobs.mining.mine_pair_indices`), InfoNCE over ``[pos, negs]`` with temperature ``T``
(``-log softmax(cos / T)[pos]``; van den Oord et al. 2018, the loss of the research's fine-tuning), ``W``
started at the identity and pulled back towards it by ``decay * ||W - I||_F^2`` (the adapter starts as the
current model and moves only as far as the data asks), full-batch Adam, early stopping on the validation
split's label-overlap precision@10 (:func:`overlap_at_k`; validation queries against the train memory, both
sides adapted). The best epoch's ``W`` is kept.

``objective="labelset"`` trains for what the scorer computes instead of for pairs: each training article's
``neighbours`` nearest memory articles (fixed, mined with the current vectors, itself left out) get the softmax
weights ``q = softmax(cos(W x, W n_j) / T)``, each label the neighbours' share ``p_l = sum_j q_j Y_jl`` (the
RAE-XMC score, ``p = softmax(s / tau) . Y``), and the loss is the binary cross-entropy of ``p_l`` against the
article's gold labels over the labels its neighbourhood carries (:func:`labelset_batches`, :func:`_labelset_loss`).
It stops early on the validation split's label-set micro-F1 of that scorer (:func:`labelset_f1`).

Longer than 400 lines: the two objectives (mined pairs and label sets) share one training loop, its single-thread
determinism and its early stopping, which a split would have to import back and forth.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import structlog

from newsmon.shared.encoder_adapter import transform_vectors

log = structlog.get_logger(__name__)


@dataclass
class AdapterConfig:
    """Hyper-parameters of :func:`train_adapter`.

    Attributes:
        temperature: InfoNCE temperature over cosine similarities.
        learning_rate: Adam step size.
        decay: weight of ``||W - I||_F^2`` (per matrix entry summed; 0 = free map).
        max_epochs: full passes over the mined triples; patience: epochs without a validation gain before
            stopping; batch: queries per optimiser step; seed: torch seed (batch order).
        objective: ``infonce`` (mined pairs) or ``labelset`` (the scorer's label shares over the ``neighbours``
            nearest memory articles; early stopping on :func:`labelset_f1`).
        rank: None = a full ``d x d`` matrix; ``r`` = a low-rank residual ``W = I + U V^T`` (``U``, ``V``:
            ``(d, r)``; ``U`` starts at zero, so ``W`` starts at the identity).
    """

    temperature: float = 0.05
    learning_rate: float = 1e-3
    decay: float = 0.01
    max_epochs: int = 80
    patience: int = 10
    batch: int = 256
    seed: int = 13
    objective: str = "infonce"
    neighbours: int = 50
    rank: int | None = None


@dataclass
class AdapterResult:
    """What :func:`train_adapter` returns: ``W`` ``(d, d)`` float32 (apply as ``x @ W.T``), the epoch kept,
    the validation overlap@10 per epoch (index 0 = the identity), the mean training loss per epoch, seconds
    (all epochs, and per epoch)."""

    W: np.ndarray
    best_epoch: int
    history: list[float]
    losses: list[float]
    seconds: float
    seconds_per_epoch: float
    config: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-able summary (no matrix)."""
        d = asdict(self)
        d.pop("W")
        return d


def apply(W: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """``normalize(x @ W.T)`` (``W`` None: ``x`` unchanged)."""
    return x if W is None else transform_vectors(W, x)


def _sets(label_sets: Sequence[Sequence[str]]) -> list[set]:
    return [set(x) for x in label_sets]


def top_neighbours(queries: np.ndarray, memory: np.ndarray, k: int, exclude_self: bool = False) -> np.ndarray:
    """Indices ``(m, k)`` of each query's ``k`` most similar memory rows (inner product, best first); with
    ``exclude_self`` the queries are the memory and row ``i`` skips ``i`` (leave-one-out)."""
    sims = queries @ memory.T
    if exclude_self:
        np.fill_diagonal(sims, -np.inf)
    k = min(k, memory.shape[0])
    part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(part, order, axis=1)


def overlap_at_k(queries: np.ndarray, query_labels: Sequence[Sequence[str]], memory: np.ndarray,
                 memory_labels: Sequence[Sequence[str]], k: int = 10, exclude_self: bool = False) -> float:
    """Label-overlap precision@k: the share of each query's top-``k`` memory neighbours that share at least one
    label with it, averaged over queries (a fraction). Inputs: ``(m, d)`` / ``(n, d)`` normalised rows."""
    idx = top_neighbours(queries, memory, k, exclude_self)
    q, mem = _sets(query_labels), _sets(memory_labels)
    return float(np.mean([np.mean([bool(q[i] & mem[j]) for j in row]) for i, row in enumerate(idx)]))


def one_nn_micro_f1(queries: np.ndarray, query_labels: Sequence[Sequence[str]], memory: np.ndarray,
                    memory_labels: Sequence[Sequence[str]]) -> float:
    """Zero-shot 1-NN micro-F1 (a fraction): each query proposes its nearest memory article's label set."""
    idx = top_neighbours(queries, memory, 1)[:, 0]
    q, mem = _sets(query_labels), _sets(memory_labels)
    tp = sum(len(q[i] & mem[j]) for i, j in enumerate(idx))
    n_pred = sum(len(mem[j]) for j in idx)
    n_gold = sum(len(x) for x in q)
    return 2 * tp / max(1, n_pred + n_gold)


def pair_quality(triples: dict, vectors: np.ndarray, label_sets: Sequence[Sequence[str]]) -> dict:
    """Quality of mined triples: share of positives sharing >= 1 label with their query, share of negatives
    sharing none, mean Jaccard of query and positive, and the cosine distribution of positives and negatives
    (mean and 10/50/90th percentiles) with the share of negatives more similar than their query's first
    positive."""
    q, p, n = triples["query"], triples["pos"], triples["neg"]
    labels = _sets(label_sets)
    if len(q) == 0:
        return {"queries": 0}
    pairs_p = [(q[i], j) for i, j in zip(*np.nonzero(p >= 0)) for j in [p[i, j]]]
    pairs_n = [(q[i], j) for i, j in zip(*np.nonzero(n >= 0)) for j in [n[i, j]]]
    pos_ok = np.mean([bool(labels[a] & labels[b]) for a, b in pairs_p])
    jac = np.mean([len(labels[a] & labels[b]) / max(1, len(labels[a] | labels[b])) for a, b in pairs_p])
    neg_ok = np.mean([not (labels[a] & labels[b]) for a, b in pairs_n])
    s_pos = np.asarray([vectors[a] @ vectors[b] for a, b in pairs_p])
    s_neg = np.asarray([vectors[a] @ vectors[b] for a, b in pairs_n])
    first = np.einsum("ij,ij->i", vectors[q], vectors[p[:, 0]])
    s_neg_q = np.einsum("ikd,id->ik", vectors[np.where(n >= 0, n, 0)], vectors[q])
    pct = (10, 50, 90)
    return {"queries": int(len(q)), "positives_per_query": float((p >= 0).sum(1).mean()),
            "negatives_per_query": float((n >= 0).sum(1).mean()),
            "positive_shares_label": float(pos_ok), "positive_jaccard": float(jac),
            "negative_shares_none": float(neg_ok),
            "cos_positive": {"mean": float(s_pos.mean()), **{f"p{x}": float(np.percentile(s_pos, x)) for x in pct}},
            "cos_negative": {"mean": float(s_neg.mean()), **{f"p{x}": float(np.percentile(s_neg, x)) for x in pct}},
            "negatives_above_positive": float(np.mean((s_neg_q > first[:, None])[n >= 0]))}


def labelset_batches(label_sets: Sequence[Sequence[str]], vectors: np.ndarray, neighbours: int = 50
                     ) -> dict[str, np.ndarray]:
    """The label-set objective's inputs: per memory article (the query) its ``neighbours`` nearest other articles
    (current vectors) and the labels of that neighbourhood.

    Returns:
        ``{"query": (m,), "nbr": (m, C) int, "carries": (m, C, K) bool, "gold": (m, K) bool, "valid": (m, K)
        bool}``: ``carries[i, j, k]`` whether neighbour ``j`` of query ``i`` carries its ``k``-th local label
        (the labels its neighbourhood carries, ``K`` the most any neighbourhood has), ``gold`` whether the query
        does; queries whose neighbourhood carries none of their labels are left out (no gradient towards gold).
    """
    labels = [tuple(sorted(set(x))) for x in label_sets]
    idx = top_neighbours(vectors, vectors, min(neighbours, len(labels) - 1), exclude_self=True)
    rows = []
    for i, nb in enumerate(idx):
        local = sorted({lb for j in nb for lb in labels[j]})
        if not set(local) & set(labels[i]):
            continue
        rows.append((i, nb, local))
    K = max((len(r[2]) for r in rows), default=1)
    m, C = len(rows), idx.shape[1]
    carries = np.zeros((m, C, K), dtype=bool)
    gold = np.zeros((m, K), dtype=bool)
    valid = np.zeros((m, K), dtype=bool)
    for r, (i, nb, local) in enumerate(rows):
        pos = {lb: k for k, lb in enumerate(local)}
        valid[r, :len(local)] = True
        for lb in labels[i]:
            if lb in pos:
                gold[r, pos[lb]] = True
        for j, a in enumerate(nb):
            for lb in labels[a]:
                carries[r, j, pos[lb]] = True
    return {"query": np.asarray([r[0] for r in rows], dtype=np.int64),
            "nbr": np.asarray([r[1] for r in rows], dtype=np.int64).reshape(m, C),
            "carries": carries, "gold": gold, "valid": valid}


def labelset_f1(queries: np.ndarray, query_labels: Sequence[Sequence[str]], memory: np.ndarray,
                memory_labels: Sequence[Sequence[str]], k: int = 50, temperature: float = 0.05,
                thresholds: Sequence[float] = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)) -> float:
    """Label-set micro-F1 (a fraction) of the neighbour scorer ``p = softmax(cos / T) . Y`` over each query's
    ``k`` nearest memory rows, at the best of ``thresholds`` (a label is proposed when ``p_l >= t``; the top
    label always). Inputs: ``(m, d)`` / ``(n, d)`` normalised rows."""
    k = min(k, memory.shape[0])
    idx = top_neighbours(queries, memory, k)
    sims = np.take_along_axis(queries @ memory.T, idx, axis=1) / temperature
    w = np.exp(sims - sims.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    scores = []
    for i, row in enumerate(idx):
        p: dict[str, float] = {}
        for wj, j in zip(w[i], row):
            for lb in memory_labels[j]:
                p[lb] = p.get(lb, 0.0) + float(wj)
        scores.append(p)
    gold = _sets(query_labels)
    best = 0.0
    for t in thresholds:
        tp = n_pred = 0
        for g, p in zip(gold, scores):
            pred = {lb for lb, v in p.items() if v >= t} or ({max(p, key=lambda lb: p[lb])} if p else set())
            tp += len(pred & g)
            n_pred += len(pred)
        best = max(best, 2 * tp / max(1, n_pred + sum(len(g) for g in gold)))
    return best


def _labelset_loss(torch, W, X, q, nbr, carries, gold, valid, T, decay, eye):
    """The label-set objective (see the module docstring) plus ``decay * ||W - I||^2``; a scalar tensor.
    ``q``: ``(b,)`` query rows of ``X``; ``nbr``: ``(b, C)``; ``carries``: ``(b, C, K)``; ``gold``, ``valid``:
    ``(b, K)``."""
    f = torch.nn.functional
    rows = torch.cat([q[:, None], nbr], dim=1)
    uniq, inverse = torch.unique(rows, return_inverse=True)
    Z = f.normalize(X[uniq] @ W.T, dim=-1)[inverse]  # (b, 1 + C, d)
    weights = torch.softmax(torch.einsum("bd,bcd->bc", Z[:, 0], Z[:, 1:]) / T, dim=1)
    p = torch.einsum("bc,bck->bk", weights, carries.float()).clamp(1e-6, 1 - 1e-6)
    y = gold.float()
    bce = -(y * torch.log(p) + (1 - y) * torch.log(1 - p))
    v = valid.float()
    return (bce * v).sum() / v.sum() + decay * ((W - eye) ** 2).sum()


def _loss(torch, W, X, rows, mask, weights, T, decay, eye):
    """Weighted InfoNCE over [positives, negatives] plus ``decay * ||W - I||^2``; a scalar tensor.

    ``rows``: ``(b, 1 + P + n_neg)`` indices into ``X`` (query, positives, negatives); ``mask``: ``(b, P +
    n_neg)`` which candidates exist; ``weights``: ``(b, P)`` positive weights summing to 1 per query. The loss
    is ``-sum_p w_p log softmax(cos / T)[p]`` (one positive of weight 1: the research's InfoNCE). Each distinct
    row is mapped once (hard negatives repeat across queries), which is what makes an epoch cheap."""
    f = torch.nn.functional
    uniq, inverse = torch.unique(rows, return_inverse=True)
    Z = f.normalize(X[uniq] @ W.T, dim=-1)[inverse]  # (b, 1 + P + n_neg, d)
    logits = torch.einsum("bd,bkd->bk", Z[:, 0], Z[:, 1:]) / T
    logp = torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=1)[:, :weights.shape[1]]
    nll = -(weights * logp.masked_fill(weights == 0, 0.0)).sum(1).mean()
    return nll + decay * ((W - eye) ** 2).sum()


def _epoch(torch, opt, W, X, batch_index: tuple, eye, cfg: AdapterConfig) -> float:
    """One pass over the triples in random mini-batches; returns the mean training loss. ``W``: a callable
    giving the current ``(d, d)`` matrix (a full parameter, or ``I + U V^T``)."""
    if cfg.objective == "labelset":
        return _labelset_epoch(torch, opt, W, X, batch_index, eye, cfg)
    qi, pi, ni, mask, wi = batch_index
    total = 0.0
    for b in torch.randperm(len(qi)).split(cfg.batch):
        opt.zero_grad()
        rows = torch.cat([qi[b, None], pi[b].clamp(min=0), ni[b].clamp(min=0)], dim=1)
        loss = _loss(torch, W(), X, rows, mask[b], wi[b], cfg.temperature, cfg.decay, eye)
        loss.backward()
        opt.step()
        total += float(loss.detach()) * len(b)
    return total / len(qi)


def _labelset_epoch(torch, opt, W, X, batch_index: tuple, eye, cfg: AdapterConfig) -> float:
    qi, nbr, carries, gold, valid = batch_index
    total = 0.0
    for b in torch.randperm(len(qi)).split(cfg.batch):
        opt.zero_grad()
        loss = _labelset_loss(torch, W(), X, qi[b], nbr[b], carries[b], gold[b], valid[b], cfg.temperature,
                              cfg.decay, eye)
        loss.backward()
        opt.step()
        total += float(loss.detach()) * len(b)
    return total / len(qi)


def train_adapter(vectors: np.ndarray, triples: dict, val_queries: np.ndarray,
                  val_labels: Sequence[Sequence[str]], memory_labels: Sequence[Sequence[str]],
                  config: AdapterConfig | None = None) -> AdapterResult:
    """Train ``W`` on mined triples over ``vectors`` (the memory: train split or knowledge memory).

    Args:
        vectors: ``(n, d)`` float32 normalised vectors of the current model; also the memory searched by the
            validation queries.
        triples: ``{"query": (m,), "pos": (m, P), "pos_w": (m, P), "neg": (m, n_neg)}`` int indices into
            ``vectors`` (``-1`` = none) and positive weights, from
            :func:`newsmon.training_jobs.mining.mine_pair_indices`.
        val_queries, val_labels: the validation split's ``(v, d)`` vectors and label sets (early stopping);
            memory_labels: the label sets of ``vectors``.

    Returns:
        :class:`AdapterResult` with the best epoch's ``W`` (the identity when no epoch beat it).

    Raises:
        ValueError: no triple to train on.
    """
    import torch  # deferred: seconds to import; only training needs it

    cfg = config or AdapterConfig()
    if len(triples["query"]) == 0:
        raise ValueError("no mined triple to train the adapter on")
    # One thread: a multi-threaded reduction sums in another order from run to run, and W (whose bytes name the
    # candidate's model version) then differs in its 7th digit (measured: two runs of the same inputs, 4e-7 apart)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(torch, vectors, triples, val_queries, val_labels, memory_labels, cfg)
    finally:
        torch.set_num_threads(threads)


def _train(torch, vectors, triples, val_queries, val_labels, memory_labels, cfg: AdapterConfig) -> AdapterResult:
    torch.manual_seed(cfg.seed)
    d = vectors.shape[1]
    X = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    if cfg.objective == "labelset":
        batch_index = tuple(torch.from_numpy(triples[k]) for k in ("query", "nbr", "carries", "gold", "valid"))
    else:
        qi, pi = torch.from_numpy(triples["query"]), torch.from_numpy(triples["pos"])
        ni = torch.from_numpy(triples["neg"])
        mask = torch.cat([pi >= 0, ni >= 0], dim=1)
        wi = torch.from_numpy(triples.get("pos_w", np.ones(tuple(pi.shape), dtype=np.float32)))
        batch_index = (qi, pi, ni, mask, wi)
    eye = torch.eye(d)
    if cfg.rank:  # W = I + U V^T: U starts at zero (W = I), V small and seeded
        U = torch.nn.Parameter(torch.zeros(d, cfg.rank))
        V = torch.nn.Parameter(0.01 * torch.randn(d, cfg.rank))
        params = [U, V]

        def W():
            return eye + U @ V.T
    else:
        full = torch.nn.Parameter(eye.clone())
        params = [full]

        def W():
            return full
    opt = torch.optim.Adam(params, lr=cfg.learning_rate)

    def score(w: np.ndarray | None) -> float:
        if cfg.objective == "labelset":
            return labelset_f1(apply(w, val_queries), val_labels, apply(w, vectors), memory_labels,
                               cfg.neighbours, cfg.temperature)
        return overlap_at_k(apply(w, val_queries), val_labels, apply(w, vectors), memory_labels, 10)

    history = [score(None)]
    best, best_epoch, best_W = history[0], 0, np.eye(d, dtype=np.float32)
    losses: list[float] = []
    t0 = time.perf_counter()
    for epoch in range(1, cfg.max_epochs + 1):
        losses.append(_epoch(torch, opt, W, X, batch_index, eye, cfg))
        w = W().detach().numpy().copy()
        history.append(score(w))
        if history[-1] > best:
            best, best_epoch, best_W = history[-1], epoch, w
        elif epoch - best_epoch >= cfg.patience:
            break
    seconds = time.perf_counter() - t0
    log.info("adapter trained", objective=cfg.objective, best_epoch=best_epoch, val_score=round(best, 4),
             identity=round(history[0], 4),
             epochs=len(history) - 1, seconds=round(seconds, 1))
    return AdapterResult(best_W.astype(np.float32), best_epoch, history, losses, seconds,
                         seconds / max(1, len(history) - 1), asdict(cfg))


def config_from_settings(settings) -> AdapterConfig:
    """:class:`AdapterConfig` from ``settings.training`` (``adapter_*`` fields and the seed)."""
    t = settings.training
    return AdapterConfig(temperature=t.adapter_temperature, learning_rate=t.adapter_learning_rate,
                         decay=t.adapter_decay, max_epochs=t.adapter_max_epochs, patience=t.adapter_patience,
                         seed=t.seed, objective=t.adapter_objective, neighbours=t.adapter_neighbours,
                         rank=t.adapter_rank)


def fit_candidate(settings, label_sets: Sequence[Sequence[str]], vectors: np.ndarray, val_vectors: np.ndarray,
                  val_labels: Sequence[Sequence[str]], out_dir, current_model: str, trained_on: str) -> dict:
    """Mine, train and write an adapter model (the nightly job's CPU budget).

    Args:
        settings: ``training`` (top, n_neg, ``adapter_*``).
        label_sets, vectors: the training articles' labels and current ``(n, d)`` vectors (train split or the
            knowledge memory's stored vectors); val_vectors, val_labels: the validation split (query role).
        out_dir: the candidate model directory; current_model: the current ``encoder.model``; trained_on: its
            model version.

    Returns:
        the report: mining quality (:func:`pair_quality`), training summary, validation overlap@10 before and
        after, seconds and peak RSS in MiB (also written into the candidate's manifest).

    Raises:
        RuntimeError: no triple could be mined.
    """
    import resource

    from newsmon.shared.encoder_adapter import write_adapter
    from newsmon.training_jobs.mining import mine_pair_indices

    t = settings.training
    t0 = time.perf_counter()
    if t.adapter_objective == "labelset":
        triples = labelset_batches(label_sets, vectors, t.adapter_neighbours)
        mining = {"seconds": time.perf_counter() - t0, "objective": "labelset", "neighbours": t.adapter_neighbours,
                  "articles": len(label_sets), "queries": int(len(triples["query"])),
                  "local_labels_max": int(triples["valid"].shape[1]),
                  "gold_share_of_local": float(triples["gold"].sum() / max(1, triples["valid"].sum()))}
    else:
        triples = mine_pair_indices(label_sets, vectors, top=min(t.top, len(label_sets) - 1), n_neg=t.n_neg,
                                    positive=t.adapter_positive, neg_ranks=t.adapter_neg_ranks,
                                    n_pos=t.adapter_positives)
        mining = {"seconds": time.perf_counter() - t0, "positive": t.adapter_positive,
                  "n_pos": t.adapter_positives, "neg_ranks": t.adapter_neg_ranks, "articles": len(label_sets),
                  **pair_quality(triples, vectors, label_sets)}
    if not len(triples["query"]):
        raise RuntimeError("no training article has both a positive and a negative: nothing to train on")
    result = train_adapter(vectors, triples, val_vectors, val_labels, label_sets, config_from_settings(settings))
    report = {"mining": mining, "training": result.summary(),
              "validation_overlap10": {"before": result.history[0], "after": max(result.history)},
              "validation_score": "labelset_f1" if t.adapter_objective == "labelset" else "overlap@10",
              "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    adapter = write_adapter(out_dir, result.W, current_model, trained_on, extra={"adapter_training": report})
    report["model_path"] = str(adapter.path)
    report["suffix"] = adapter.suffix
    return report
