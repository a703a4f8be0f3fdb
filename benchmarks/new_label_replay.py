"""Replay of new labels (not in CI): can 3 confirmations make a label work at once, without retraining?

For every label of the corpus with 6-60 articles: hide it from the knowledge memory (the whole corpus, every
article a memory point), give it back to 3 of its articles (3 moderator confirmations), then score that label on
every other article of the corpus (leave-one-out: an article never retrieves itself). Positives are the other
articles carrying the label. Reported: micro precision / recall / F1 of the new labels over all articles, for

- the calibrated ``newsmon`` predictor (parameters from :func:`newsmon.shared.predictors.calibrate.calibrate` on
  the train split scored leave-one-out plus validation, as ``eval`` does; the replayed label is not among the
  labels the calibration saw, as a label confirmed after the calibration is not in the workers), with its rules as
  calibrated (the new-label rule included), without the new-label rule, and with tail support at other settings;
- the reference rule "propose when a confirmed article is the nearest neighbour" (1-NN).

Usage: ``.venv/bin/python benchmarks/new_label_replay.py --data ../shared/data/sentinews_sl`` (embeddings come
from the encoder's cache under NEWSMON_HOME when it has them).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from newsmon.shared.config import Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.encoder import Encoder
from newsmon.shared.memory.edge import EdgeMemory
from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.scoring import LabelVocab, MemoryArticles, Queries, Retrieval, decide, get_component
from newsmon.shared.scoring.rules import get_rule
from newsmon.shared.scoring.calibration import LEXICAL_CANDIDATES, calibrate, calibration_set
from newsmon.shared.scoring.decision import neighbours_needed
from newsmon.shared.scoring.lexical import TermVectors, fuse
from newsmon.shared.scoring.rules.tail_support import SupportOptions
from record import BenchmarkRecord, run_name

#: Variants on top of the calibrated parameters: None = as calibrated; "no new-label rule"; tail-support settings.
VARIANTS = [None, "no new-label rule", (2, 5, 0.88), (1, 1, 0.9)]


def neighbours(Q: np.ndarray, P: np.ndarray, ids: list[str], texts: list[str], labels: list[tuple],
               query_idx: np.ndarray, memory_idx: np.ndarray, n: int, loo: bool) -> Retrieval:
    """Hybrid top-``n`` (dense top-n united with the lexical top-n, as the workers search) of each query among
    the memory rows, from a temporary embedded knowledge memory (itself excluded when ``loo``)."""
    with tempfile.TemporaryDirectory(prefix="newsmon-replay-") as tmp:
        mem = EdgeMemory(tmp, "replay", P.shape[1])
        try:
            mem.upsert([ids[j] for j in memory_idx], P[memory_idx], [labels[j] for j in memory_idx],
                       [{"text": texts[j]} for j in memory_idx])
            extra = 1 if loo else 0
            hits = mem.search(Q[query_idx], n + extra, texts=[texts[i] for i in query_idx], lexical_k=n + extra)
        finally:
            mem.close()
    rows = [[h for h in row if not (loo and h.article_id == ids[q])][:2 * n] for q, row in zip(query_idx, hits)]
    return Retrieval.from_neighbours(rows, 2 * n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--min-articles", type=int, default=6)
    ap.add_argument("--max-articles", type=int, default=60)
    args = ap.parse_args()
    with BenchmarkRecord(run_name("new_label_replay", args.data)) as rec:
        replay(args, rec)


def replay(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """The replay of every label with ``--min-articles`` to ``--max-articles`` articles, into ``rec``."""
    t0 = time.perf_counter()
    s = Settings()
    arts = [a for a in load_corpus(args.data).articles if a.labels]
    ids, texts, labels = [a.id for a in arts], [a.text for a in arts], [tuple(a.labels) for a in arts]
    enc = Encoder(s.encoder, s.home)
    P = enc.encode(texts, role="passage")
    Q = enc.encode(texts, role="query")
    enc.close()
    split = np.array([a.split for a in arts])
    tr, va = np.flatnonzero(split == "train"), np.flatnonzero(split == "validation")
    n = max(100, LEXICAL_CANDIDATES)
    terms = TermVectors()
    # the calibration eval would choose: train leave-one-out + validation
    own = [labels[i] for i in tr]
    memory = MemoryArticles(P[tr], [texts[i] for i in tr], own)
    cal = calibrate(calibration_set(memory, neighbours(Q, P, ids, texts, labels, tr, tr, n, True),
                                    neighbours(Q, P, ids, texts, labels, va, tr, n, False), [labels[i] for i in va],
                                    Queries([texts[i] for i in va], Q[va])), terms)
    # the head model, where kept, mixes into head labels only (100+ articles): not replayed; nor stacking, whose
    # model read the head model's scores (it serves a new label by the same features as any: the eval rows)
    params = ScoringParams(**{**cal.params.model_dump(), "components": [
        c for c in cal.params.components if c.name not in ("head_model", "stacking")]})
    everyone = np.arange(len(arts))
    # the workers' label keys: the whole memory's, each article's own vector taken out (it is the query); the
    # replayed label has none (its keys are built at the calibration, before its confirmations)
    whole = MemoryArticles(P, texts, labels)
    keys = params.component("label_keys")
    lk = get_component("label_keys")
    all_hits = lk.held_out_evidence(lk.fit(whole, keys), whole, keys) if keys is not None else None
    dense = neighbours(Q, P, ids, texts, labels, everyone, everyone, n, True)
    r = fuse(dense, texts, params.lexical_weight, max(neighbours_needed(params), 10), terms)
    counts: dict[str, list[int]] = {}
    for i, lbs in enumerate(labels):
        for lb in lbs:
            counts.setdefault(lb, []).append(i)
    new = {lb: ix for lb, ix in counts.items() if args.min_articles <= len(ix) <= args.max_articles}
    rng = np.random.default_rng(13)
    variants = {_name(v): _variant(params, v) for v in VARIANTS}
    tallies = {name: [0, 0, 0] for name in ["1-NN rule", *variants]}
    for lb, ix in sorted(new.items()):
        confirmed = set(rng.choice(ix, 3, replace=False).tolist())
        confirmed_ids = {ids[i] for i in confirmed}
        hidden = Retrieval(r.ids, r.sims, [[tuple(x for x in row_lbs if x != lb or nid in confirmed_ids)
                                            for nid, row_lbs in zip(r.ids[i], r.labels[i])]
                                           for i in range(len(arts))], None, r.texts, r.cosines)
        queries = np.array([i for i in everyone if i not in confirmed])
        evidence = {}
        if all_hits is not None:
            evidence["label_keys"] = type(all_hits)([all_hits.labels[i] for i in queries],
                                                    all_hits.cosines[queries]).relabel(
                lambda t, lb=lb: () if t[0] == lb else t)
        counts = {k: c for k, c in whole.label_counts().items() if k != lb}  # new: the rare bucket
        gold = np.array([lb in labels[i] for i in queries])
        sub = Retrieval(hidden.ids[queries], hidden.sims[queries], [hidden.labels[i] for i in queries], None, None,
                        None if hidden.cosines is None else hidden.cosines[queries])
        nn = np.array([lb in row[0] for row in sub.labels])
        _tally(tallies["1-NN rule"], nn, gold)
        known = set(cal.known_labels) - {lb}  # the label is new: confirmed after the calibration
        for name, p in variants.items():
            vocab = LabelVocab()
            chosen = decide(sub, vocab, p, evidence, counts, known).proposed
            got = chosen[:, vocab.index[lb]] if lb in vocab.index else np.zeros(len(queries), bool)
            _tally(tallies[name], got, gold)
    print(f"{args.data}: {len(new)} labels with {args.min_articles}-{args.max_articles} articles, 3 confirmations "
          f"each, scored on the other {len(arts) - 3} articles; calibrated "
          f"{params.model_dump(mode='json', exclude_defaults=True)}; "
          f"{time.perf_counter() - t0:.0f} s")
    rows = []
    for name, (tp, fp, fn) in tallies.items():
        prec = round(tp / (tp + fp), 3) if tp + fp else "–"
        recall = round(tp / (tp + fn), 3) if tp + fn else "–"
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        rows.append([name, prec, recall, round(f1, 3), tp + fp])
    rec.data.update(labels=len(new), calibrated=params.model_dump(mode="json", exclude_defaults=True))
    rec.table(f"New labels from 3 confirmations ({args.data})",
              ["rule", "micro precision", "micro recall", "micro F1", "proposed"], rows,
              note=f"{len(new)} labels with {args.min_articles}-{args.max_articles} articles, each hidden and given "
                   f"back to 3 of its articles, scored on the other {len(arts) - 3:,} articles.")


def _name(v) -> str:
    if v is None:
        return "newsmon (calibrated)"
    return f"newsmon, {v}" if isinstance(v, str) else f"newsmon + tail {v[0]} of {v[1]} >= {v[2]}"


def _variant(params: ScoringParams, v) -> ScoringParams:
    """The calibrated parameters changed as ``v`` says (see :data:`VARIANTS`)."""
    if v is None:
        return params
    if isinstance(v, str):
        return ScoringParams(**{**params.model_dump(), "rules": [r for r in params.rules
                                                                 if r.name != "new_label_support"]})
    rules = [r.model_dump() for r in params.rules if r.name != "tail_support"]
    rules.append({"name": "tail_support", "options": SupportOptions(support=v[0], neighbours=v[1],
                                                                    similarity=v[2]).model_dump()})
    rules.sort(key=lambda r: get_rule(r["name"]).ORDER)  # the order the rules run in
    return ScoringParams(**{**params.model_dump(), "rules": rules})


def _tally(t: list[int], pred: np.ndarray, gold: np.ndarray) -> None:
    t[0] += int((pred & gold).sum())
    t[1] += int((pred & ~gold).sum())
    t[2] += int((~pred & gold).sum())


if __name__ == "__main__":
    main()
