"""Would a feature lift stacking? The fusion model's training pairs of ``eval``'s calibration, cross-fitted with
and without candidate features, judged on all the calibration articles and on the validation split alone.

The calibration's articles are the memory's own articles scored leave-one-out, then the validation split. A feature
computed from the memory's label sets (a *target statistic*: how often two labels go together) has to leave the
article out of its own counts, and leaving out exactly the article shifts its value by its own labels: for a pair
(top label ``a``, candidate ``j``) that the article carries, the count of ``a`` with ``j`` is one lower than for an
article carrying ``a`` alone. Gradient-boosted trees find such shifts (the target leakage of leave-one-out target
encoding: Prokhorenkova et al., "CatBoost: unbiased boosting with categorical features", NeurIPS 2018, section 3).
So the study computes each feature two ways and reads the validation articles, which are in no count, apart:

- ``loo``: counts without the article itself (exactly what a new article sees, and exactly the leak);
- ``fold``: counts without the article's whole fold (the memory in 5 folds by position; validation articles read
  all counts): every article of a fold reads the same value for the same pair, so no article's value depends on its
  own labels.

Features tried (``a``: the article's best candidate other than ``j``, by the weighted score so far):

- ``cooc``: from the memory's label sets, ``P(j | a)``, ``P(a | j)``, the most and the sum of ``P(j | b)`` over the
  article's three best candidates ``b`` other than ``j``;
- ``local``: the same two conditionals among the article's first ``k`` neighbours (no target statistic: the
  neighbours never include the article).

Each model is the product's (:func:`newsmon.shared.scoring.components.stacking.fit_model`'s trees and settings), 5
folds by article position as the calibration cross-fits; each figure is at its best threshold on the articles read
(so the rows compare features, not thresholds). Run from the repository root::

    python benchmarks/stacking_features.py --data ../shared/data/reuters21578_en
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from eval_inputs import build
from record import BenchmarkRecord, run_name

from newsmon.shared.scoring import decision
from newsmon.shared.scoring.components import stacking

FOLDS = stacking.FOLDS


def capture(data: str) -> dict[str, Any]:
    """Calibrate ``eval``'s ``newsmon`` row on ``data`` and keep stacking's training pairs (the last option tried:
    its rows, cols, features, targets) with each calibration article's first k neighbours' label sets."""
    saved: dict[str, Any] = {}
    cross_fit, mix_context = stacking.StackingComponent.cross_fit, decision.mix_context

    def kept_cross_fit(self, scores, vocab, context, options, gold, folds=FOLDS):
        rows, cols, X, _names = self.pairs(scores, vocab, context, options)
        saved.update(rows=rows, cols=cols, X=X, y=gold[rows, cols].astype(bool), labels=list(vocab.labels),
                     gold_rows=gold.sum(axis=1), m=scores.shape[0], neighbours=getattr(context, "first_k", None))
        return cross_fit(self, scores, vocab, context, options, gold, folds)

    def kept_context(retrieval, rae, label_counts, k):
        ctx = mix_context(retrieval, rae, label_counts, k)
        ctx.first_k = [[tuple(x) for x in row[:k]] for row in retrieval.labels]
        return ctx

    stacking.StackingComponent.cross_fit, decision.mix_context = kept_cross_fit, kept_context
    try:
        inputs = build(data)
        inputs.calibrate()
    finally:
        stacking.StackingComponent.cross_fit, decision.mix_context = cross_fit, mix_context
    if "X" not in saved:
        raise RuntimeError("the calibration tried no stacking option: nothing to study")
    saved.update(memory=list(inputs.memory.labels), gold=list(inputs.cal.gold))
    return saved


def features(s: dict[str, Any], how: str) -> dict[str, np.ndarray]:
    """``{"cooc": (p, 4), "local": (p, 2)}`` float32 features of the pairs, the memory's counts taken ``how``
    (``loo`` or ``fold``, see the module docstring)."""
    rows, cols, labels, memory = s["rows"], s["cols"], s["labels"], s["memory"]
    n_mem, L = len(memory), len(labels)
    idx = {lb: j for j, lb in enumerate(labels)}
    if any(tuple(s["gold"][i]) != tuple(memory[i]) for i in range(n_mem)):
        raise RuntimeError("the calibration's first articles are not the memory's, in order")
    r, c = zip(*[(i, idx[lb]) for i, ls in enumerate(memory) for lb in ls if lb in idx], strict=True)
    M = sp.csr_matrix((np.ones(len(r), np.float32), (r, c)), shape=(n_mem, L))
    C = (M.T @ M).toarray()
    per_fold = [C - (M[np.arange(n_mem) % FOLDS == f].T @ M[np.arange(n_mem) % FOLDS == f]).toarray()
                for f in range(FOLDS)]
    own = [{idx[lb] for lb in g if lb in idx} for g in s["gold"]]

    def cond(a: int, b: int, i: int) -> float:
        """``P(b | a)`` from the memory's label sets."""
        if how == "fold":
            cf = per_fold[i % FOLDS] if i < n_mem else C
            return float(cf[a, b] / cf[a, a]) if cf[a, a] > 0 else 0.0
        cab, ca = C[a, b], C[a, a]
        if i < n_mem and a in own[i]:
            ca, cab = ca - 1, cab - (b in own[i])
        return float(cab / ca) if ca > 0 else 0.0

    near = [[{idx[lb] for lb in x if lb in idx} for x in row] for row in s["neighbours"]]

    def local(a: int, b: int, i: int) -> float:
        carrying = [x for x in near[i] if a in x]
        return sum(b in x for x in carrying) / len(carrying) if carrying else 0.0

    rank = s["X"][:, 1].astype(int)
    order: dict[int, list[int]] = {}
    for p in np.lexsort((rank, rows)):
        order.setdefault(int(rows[p]), []).append(int(cols[p]))
    cooc, loc = np.zeros((len(rows), 4), np.float32), np.zeros((len(rows), 2), np.float32)
    for p, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        others = [b for b in order[i] if b != j]
        if not others:
            continue
        a = others[0]
        cooc[p] = (cond(a, j, i), cond(j, a, i), max(cond(b, j, i) for b in others[:3]),
                   sum(cond(b, j, i) for b in others[:3]))
        loc[p] = (local(a, j, i), local(j, a, i))
    return {"cooc": cooc, "local": loc}


def cross_fitted(X: np.ndarray, y: np.ndarray, rows: np.ndarray, m: int, iterations: int) -> np.ndarray:
    """``(p,)`` probabilities, each article's pairs by the product's model fitted without its fold."""
    fold, out = np.arange(m) % FOLDS, np.zeros(len(y), np.float32)
    for f in range(FOLDS):
        train, held = fold[rows] != f, fold[rows] == f
        out[held] = stacking.fit_model(X[train], y[train], [], iterations).probabilities(X[held])
    return out


def figures(prob: np.ndarray, s: dict[str, Any], first: int) -> dict[str, float]:
    """Micro-F1 and subset accuracy (%) of the articles from ``first`` on at the best threshold for their sum (a
    gold label outside the candidates is a miss)."""
    rows, y, gold_rows, m = s["rows"], s["y"], s["gold_rows"], s["m"]
    keep = rows >= first
    gold_total, best = int(gold_rows[first:].sum()), {"objective": -1.0}
    for t in np.round(np.arange(0.2, 0.71, 0.025), 3):
        P = (prob > t) & keep
        tp, fp = int((P & y).sum()), int((P & ~y).sum())
        hit = np.bincount(rows[P & y], minlength=m)[first:]
        wrong = np.bincount(rows[P & ~y], minlength=m)[first:]
        f1 = 200.0 * tp / (2 * tp + fp + (gold_total - tp))
        acc = 100.0 * float(((hit == gold_rows[first:]) & (wrong == 0)).mean())
        if f1 + acc > best["objective"]:
            best = {"objective": f1 + acc, "threshold": float(t), "micro_f1": round(f1, 2),
                    "subset_accuracy": round(acc, 2)}
    return best


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/reuters21578_en")
    ap.add_argument("--iterations", type=int, default=500, help="trees (the calibration's grid's most)")
    args = ap.parse_args(argv)
    with BenchmarkRecord(run_name("stacking_features", args.data)) as rec:
        s = capture(args.data)
        n_mem, X = len(s["memory"]), s["X"]
        variants: dict[str, np.ndarray] = {"the product's features": X}
        for how in ("loo", "fold"):
            f = features(s, how)
            variants[f"+ cooc ({how})"] = np.hstack([X, f["cooc"]])
            if how == "fold":
                variants["+ local"] = np.hstack([X, f["local"]])
        out, table = {}, []
        for name, Xv in variants.items():
            prob = cross_fitted(Xv, s["y"], s["rows"], s["m"], args.iterations)
            every, validation = figures(prob, s, 0), figures(prob, s, n_mem)
            out[name] = {"calibration_articles": every, "validation_articles": validation}
            table.append([name, every["micro_f1"], every["subset_accuracy"], validation["micro_f1"],
                          validation["subset_accuracy"]])
            print(table[-1], flush=True)
        rec.data.update(variants=out, pairs=int(len(s["y"])), articles=int(s["m"]), memory_articles=n_mem,
                        validation_articles=int(s["m"] - n_mem), iterations=args.iterations)
        rec.table("Stacking cross-fitted with candidate features (micro-F1 / subset accuracy %, each at its best "
                  "threshold)", ["features", "all calibration articles µF1", "subset acc.",
                                 "validation articles alone µF1", "subset acc."], table,
                  note="loo: counts without the article (leaks its labels); fold: without its fold")


if __name__ == "__main__":
    main()
