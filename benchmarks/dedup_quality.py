"""Quality and speed of the near-duplicate detector (shared/dedup/) on a real corpus.

The sampled articles (exact duplicates of the corpus dropped first) are split in two halves:

* A, the originals: indexed with ``check_and_add`` (a hit here is a false positive: two distinct corpus articles
  declared copies). Each original gets four near-copies, queried with ``find`` and expected to return its id:
  ``title`` (headline replaced by another article's headline), ``drop`` (one paragraph, or a span of sentences
  of about 20% of the body, cut), ``translit`` (whole text Latin -> Serbian Cyrillic), ``boiler`` (aggregator
  boilerplate: share line, "Preberite tudi: <2 other headlines>", "Vir: STA", copyright line).
* B, distinct articles: each queried with ``find`` against the index of A; any hit is a false positive. For every
  B article two hard-negative pairs are reported on their own: its TF-IDF nearest neighbour in A, and its nearest
  A article among those sharing >= 2 labels.

Precision = TP / (TP + wrong-id hits + false positives on distinct articles), per kind with that kind's near-copies
and all the distinct-article checks. Throughput: ``check_and_add`` over the whole stream (A, then near-copies and
B shuffled), in memory and, with ``--redis-url``, in Redis.

``--sweep`` first prints recall per kind and false positives for a grid of shingle sizes x thresholds, from the
signatures alone (no LSH), to choose the defaults.

Usage (repository root)::

    python benchmarks/dedup_quality.py --data ../shared/data/sentinews_sl --n 1000 --redis-url redis://127.0.0.1:6379/15
    python benchmarks/dedup_quality.py --data ../shared/data/reuters21578_en --n 2000 --sweep
"""

from __future__ import annotations

import argparse
import random
import re
import time
import uuid
from collections import defaultdict

import numpy as np


from newsmon.shared.data import Article, load_corpus
from record import BenchmarkRecord, run_name
from newsmon.shared.dedup import (
    DEFAULT_MIN_WORDS,
    DEFAULT_NUM_PERM,
    DEFAULT_SHINGLE_SIZE,
    DEFAULT_THRESHOLD,
    NearDuplicateIndex,
    shingle_form,
    serbian_latin_to_cyrillic,
    shingles,
)

KINDS = ("title", "drop", "translit", "boiler")
SHORT_WORDS = 60  # recall is also printed for originals under / over this many words

_BOILER = {
    "sl": ("Deli z prijatelji: Facebook | Twitter | E-pošta | Natisni", "Preberite tudi: {t1}",
           "Preberite tudi: {t2}", "Vir: STA", "Foto: Bobo", "© {portal} 2013. Vse pravice pridržane. "
           "Prepovedano je kopiranje in objavljanje vsebin brez pisnega dovoljenja."),
    "en": ("Share this article: Facebook | Twitter | Email | Print", "Read more: {t1}", "Read also: {t2}",
           "Source: Reuters", "Photo: Reuters", "(c) 1987 {portal}. All rights reserved. Republication or "
           "redistribution without prior written consent is prohibited."),
}
_PORTALS = ("Novice24.si", "Regionalno.net", "NewsHub Online", "Aggregator Daily")
_SENT_END = re.compile(r"(?<=[.!?])\s*(?=[\"„«]?[A-ZČŠŽĆĐ])")
_PARA = re.compile(r"\n(?=[ \t]{2,}\S)|\n\s*\n")


def split_title(a: Article) -> tuple[str, str]:
    """(headline, body) of an article whose text is title + body."""
    title = (a.title or "").strip()
    if title and a.text.startswith(title):
        return title, a.text[len(title):]
    first, _, rest = a.text.partition("\n")
    return first, "\n" + rest


def variant_title(a: Article, other_title: str) -> str:
    _, body = split_title(a)
    return other_title + body


def variant_drop(a: Article, rng: random.Random) -> str:
    """Cut one paragraph (10-35% of the body's words), else a span of sentences of about 20% of them."""
    title, body = split_title(a)
    total = len(body.split()) or 1
    paras = _PARA.split(body.strip())
    fits = [i for i in range(1, len(paras)) if 0.10 <= len(paras[i].split()) / total <= 0.35]
    if fits:
        i = rng.choice(fits)
        return title + "\n" + "\n".join(p for j, p in enumerate(paras) if j != i)
    sents = [s for s in _SENT_END.split(body.strip()) if s.strip()]
    if len(sents) >= 3:
        start = rng.randrange(1, len(sents))
        end, cut = start, 0
        while end < len(sents) and cut < 0.15 * total:
            cut += len(sents[end].split())
            end += 1
        if cut <= 0.35 * total:
            return title + "\n" + " ".join(sents[:start] + sents[end:])
    words = body.split()  # too few sentences: cut the last 20% of the words
    return title + "\n" + " ".join(words[: max(1, int(len(words) * 0.8))])


def variant_boiler(a: Article, t1: str, t2: str, rng: random.Random) -> str:
    lines = _BOILER.get(a.lang, _BOILER["en"])
    portal = rng.choice(_PORTALS)
    head = lines[0]
    tail = "\n".join(x.format(t1=t1, t2=t2, portal=portal) for x in lines[1:])
    return f"{head}\n{a.text}\n{tail}"


def make_variants(originals: list[Article], titles: list[str], rng: random.Random) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {k: [] for k in KINDS}
    for a in originals:
        t_other = rng.choice(titles)
        while t_other == a.title:
            t_other = rng.choice(titles)
        out["title"].append(variant_title(a, t_other))
        out["drop"].append(variant_drop(a, rng))
        out["translit"].append(serbian_latin_to_cyrillic(a.text))
        out["boiler"].append(variant_boiler(a, rng.choice(titles), rng.choice(titles), rng))
    return out


def hard_negative_pairs(a_side: list[Article], b_side: list[Article]) -> dict[str, list[tuple[int, int, float]]]:
    """(b index, a index, TF-IDF cosine) for each B article: nearest A overall, nearest A sharing >= 2 labels."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [shingle_form(x.text) for x in a_side + b_side]
    vec = TfidfVectorizer(sublinear_tf=True, min_df=1, token_pattern=r"\S+")
    m = vec.fit_transform(texts)
    xa, xb = m[: len(a_side)], m[len(a_side):]
    sims = (xb @ xa.T).toarray()
    pairs: dict[str, list[tuple[int, int, float]]] = {"tfidf_nearest": [], "labels>=2": []}
    a_labels = [set(x.labels) for x in a_side]
    for i, b in enumerate(b_side):
        j = int(np.argmax(sims[i]))
        pairs["tfidf_nearest"].append((i, j, float(sims[i, j])))
        bl = set(b.labels)
        cand = [j for j, al in enumerate(a_labels) if len(al & bl) >= 2]
        if cand:
            j = max(cand, key=lambda k: sims[i, k])
            pairs["labels>=2"].append((i, j, float(sims[i, j])))
    return pairs


def exact_jaccard(x: str, y: str, n: int) -> float:
    sx, sy = shingles(shingle_form(x).split(), n), shingles(shingle_form(y).split(), n)
    return len(sx & sy) / max(1, len(sx | sy))


def sweep(a_side, b_side, variants, args) -> None:
    """Recall per kind / false positives from signature estimates alone, for shingle sizes x thresholds."""
    thresholds = [round(x, 2) for x in np.arange(0.40, 0.91, 0.05)]
    print("\n== sweep: estimated Jaccard from signatures (no LSH); FP = distinct articles (A within A, B vs A) "
          "with a match >= t ==")
    for n in args.sweep_sizes:
        idx = NearDuplicateIndex(num_perm=args.num_perm, shingle_size=n, min_words=args.min_words)
        sig = lambda t: idx.signature(t)  # noqa: E731
        sa = [sig(x.text) for x in a_side]
        sb = [sig(x.text) for x in b_side]
        va = np.stack([s for s in sa if s is not None])
        a_ok = [i for i, s in enumerate(sa) if s is not None]
        pos = {}
        for k in KINDS:
            est = []
            for i, t in enumerate(variants[k]):
                s, o = sig(t), sa[i]
                est.append(0.0 if s is None or o is None else float(np.mean(s == o)))
            pos[k] = np.array(est)
        neg = []
        for s in sb:
            if s is not None:
                neg.append(float((va == s).mean(axis=1).max()))
        for r, i in enumerate(a_ok):
            row = (va[r + 1:] == va[r]).mean(axis=1) if r + 1 < len(va) else np.zeros(0)
            neg.append(float(row.max()) if len(row) else 0.0)
        neg = np.array(neg)
        print(f"\nshingle_size={n}: hardest distinct pair est. J = {neg.max():.3f}; "
              f"99.9th pct = {np.percentile(neg, 99.9):.3f}")
        print("   t   " + " ".join(f"{k:>8s}" for k in KINDS) + "   recall      FP  precision")
        for t in thresholds:
            rec = {k: float(np.mean(pos[k] >= t)) for k in KINDS}
            tp = sum(int(np.sum(pos[k] >= t)) for k in KINDS)
            fp = int(np.sum(neg >= t))
            allpos = sum(len(pos[k]) for k in KINDS)
            print(f"  {t:.2f} " + " ".join(f"{rec[k]:8.3f}" for k in KINDS)
                  + f"   {tp / allpos:6.3f}  {fp:6d}  {tp / max(1, tp + fp):9.4f}")


def evaluate(index: NearDuplicateIndex, a_side, b_side, variants, pairs, args) -> dict:
    """Print the detector's figures; return them: ``kinds`` (rows kind, n, TP, wrong, miss, precision, recall, the
    all-kinds row last), ``distinct_checks`` and ``false_positives`` (distinct articles flagged)."""
    print(f"\n== detector: {index!r} ==")
    build_fp = []
    t0 = time.perf_counter()
    canonical = {}
    for a in a_side:
        hit = index.check_and_add(a.id, a.text)
        canonical[a.id] = a.id if hit is None else hit[0]
        if hit is not None:
            build_fp.append((a.id, hit))
    dt = time.perf_counter() - t0
    print(f"index of A: {index.count()} articles indexed from {len(a_side)} "
          f"({sum(1 for a in a_side if index.signature(a.text) is None)} under min_words) in {dt:.2f}s")
    b_fp = []
    for b in b_side:
        hit = index.find(b.text)
        if hit is not None:
            b_fp.append((b.id, hit))
    fp_neg = len(build_fp) + len(b_fp)
    n_neg = len(a_side) + len(b_side)
    res, short_long = {}, {}
    for k in KINDS:
        tp = wrong = miss = 0
        ok_by_len: dict[bool, list[bool]] = {True: [], False: []}
        for a, text in zip(a_side, variants[k]):
            hit = index.find(text)
            if hit is None:
                miss += 1
            elif hit[0] == canonical[a.id]:
                tp += 1
            else:
                wrong += 1
            ok_by_len[len(shingle_form(a.text).split()) < SHORT_WORDS].append(
                hit is not None and hit[0] == canonical[a.id])
        res[k] = (tp, wrong, miss)
        short_long[k] = ok_by_len
    print(f"distinct-article checks: {n_neg} ({len(a_side)} while building A, {len(b_side)} B queries), "
          f"false positives {fp_neg} (FP rate {fp_neg / max(1, n_neg):.4f})")
    n_short = sum(len(shingle_form(a.text).split()) < SHORT_WORDS for a in a_side)
    print(f"{'kind':>8s} {'n':>6s} {'TP':>6s} {'wrong':>6s} {'miss':>6s} {'precision':>10s} {'recall':>8s}  "
          f"recall <{SHORT_WORDS} words (n={n_short}) / >={SHORT_WORDS} words (n={len(a_side) - n_short})")
    tot, kinds = [0, 0, 0], []
    for k in KINDS:
        tp, wrong, miss = res[k]
        tot = [tot[0] + tp, tot[1] + wrong, tot[2] + miss]
        n = tp + wrong + miss
        sh, lo = short_long[k][True], short_long[k][False]
        kinds.append([k, n, tp, wrong, miss, round(tp / max(1, tp + wrong + fp_neg), 4), round(tp / max(1, n), 4)])
        print(f"{k:>8s} {n:6d} {tp:6d} {wrong:6d} {miss:6d} {tp / max(1, tp + wrong + fp_neg):10.4f} "
              f"{tp / max(1, n):8.4f}  {np.mean(sh) if sh else float('nan'):.4f} / "
              f"{np.mean(lo) if lo else float('nan'):.4f}")
    tp, wrong, miss = tot
    kinds.append(["all", tp + wrong + miss, tp, wrong, miss, round(tp / max(1, tp + wrong + fp_neg), 4),
                  round(tp / max(1, tp + wrong + miss), 4)])
    print(f"{'all':>8s} {tp + wrong + miss:6d} {tp:6d} {wrong:6d} {miss:6d} "
          f"{tp / max(1, tp + wrong + fp_neg):10.4f} {tp / max(1, tp + wrong + miss):8.4f}")
    by_id = {x.id: x for x in a_side + b_side}
    for name, ps in pairs.items():
        flagged = est = 0
        ests, exacts = [], []
        for i, j, _cos in ps:
            b, a = b_side[i], a_side[j]
            sb, sa = index.signature(b.text), index.signature(a.text)
            e = 0.0 if sb is None or sa is None else float(np.mean(sb == sa))
            ests.append(e)
            exacts.append(exact_jaccard(a.text, b.text, index.shingle_size))
            hit = index.find(b.text)
            flagged += int(hit is not None and hit[0] == canonical.get(a.id, a.id))
        if ps:
            est = float(np.max(ests))
            print(f"hard negatives {name}: {len(ps)} pairs, mean TF-IDF cosine "
                  f"{np.mean([c for _, _, c in ps]):.3f}, flagged {flagged}; est. Jaccard mean {np.mean(ests):.3f} "
                  f"max {est:.3f}; exact Jaccard max {np.max(exacts):.3f}")
    shown = (build_fp + b_fp)[: args.show_fp]
    for qid, (oid, jac) in shown:
        q, o = by_id[qid], by_id[oid]
        print(f"  FP {qid} -> {oid} est {jac:.3f} exact {exact_jaccard(q.text, o.text, index.shingle_size):.3f}"
              f" | {q.text[:90]!r} | {o.text[:90]!r}")
    if args.show_misses:
        misses = [(k, a, t) for k in KINDS for a, t in zip(a_side, variants[k]) if index.find(t) is None]
        lengths = defaultdict(list)
        for k, a, _ in misses:
            lengths[k].append(len(shingle_form(a.text).split()))
        for k, ls in lengths.items():
            print(f"  misses {k}: {len(ls)}, original words median {int(np.median(ls))}, "
                  f"share under 60 words {np.mean(np.array(ls) < 60):.2f}")
    return {"kinds": kinds, "distinct_checks": n_neg, "false_positives": fp_neg}


def corpus_scan(articles: list[Article], params: dict) -> None:
    """Stream the whole corpus through check_and_add: the corpus' own near-duplicates (re-sends, re-edits,
    templated reports) and how often their label sets agree (what copying the labels would get right)."""
    index = NearDuplicateIndex(**params)
    by_id = {a.id: a for a in articles}
    t0 = time.perf_counter()
    hits = [(a.id, *h) for a in articles if (h := index.check_and_add(a.id, a.text)) is not None]
    dt = time.perf_counter() - t0
    same = sum(set(by_id[q].labels) == set(by_id[o].labels) for q, o, _ in hits)
    overlap = [len(set(by_id[q].labels) & set(by_id[o].labels)) / max(1, len(set(by_id[q].labels)
               | set(by_id[o].labels))) for q, o, _ in hits]
    print(f"\n== corpus scan: {len(articles)} articles through check_and_add in {dt:.1f}s: {len(hits)} near-duplicates "
          f"of an earlier article; identical label sets {same}/{len(hits)}, mean label Jaccard "
          f"{np.mean(overlap) if overlap else float('nan'):.3f} ==")
    for q, o, jac in hits[:5]:
        print(f"  {q} -> {o} est {jac:.3f} | {by_id[q].text[:80]!r} | {by_id[o].text[:80]!r}")


def throughput(make_index, a_side, variants, b_side, rng: random.Random, label: str) -> float:
    """``check_and_add`` over the whole stream (A, then near-copies and B shuffled): articles/s (printed)."""
    stream = [(a.id, a.text) for a in a_side]
    rest = [(f"{a.id}#{k}", t) for k in KINDS for a, t in zip(a_side, variants[k])] + [(b.id, b.text) for b in b_side]
    rng.shuffle(rest)
    stream += rest
    index = make_index()
    try:
        t0 = time.perf_counter()
        hits = sum(index.check_and_add(i, t) is not None for i, t in stream)
        dt = time.perf_counter() - t0
        print(f"throughput {label}: {len(stream)} check_and_add in {dt:.2f}s = {len(stream) / dt:.0f} articles/s "
              f"({1e3 * dt / len(stream):.2f} ms each); {hits} duplicates, {index.count()} indexed")
        return len(stream) / dt
    finally:
        index.clear()
        index.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data/sentinews_sl", help="corpus folder or JSONL file")
    p.add_argument("--n", type=int, default=1000, help="articles sampled (half originals, half distinct)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    p.add_argument("--shingle-size", type=int, default=DEFAULT_SHINGLE_SIZE)
    p.add_argument("--num-perm", type=int, default=DEFAULT_NUM_PERM)
    p.add_argument("--min-words", type=int, default=DEFAULT_MIN_WORDS)
    p.add_argument("--redis-url", default=None, help="also measure the Redis-backed index (keys are removed)")
    p.add_argument("--sweep", action="store_true", help="print the shingle size x threshold grid first")
    p.add_argument("--sweep-sizes", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--show-fp", type=int, default=10, help="false positives to print")
    p.add_argument("--show-misses", action="store_true", help="summarise the lengths of missed near-copies")
    p.add_argument("--corpus-scan", action="store_true",
                   help="also stream the whole corpus through check_and_add and report its own near-duplicates")
    args = p.parse_args(argv)

    corpus = load_corpus(args.data)
    rng = random.Random(args.seed)
    seen, arts, exact_dups = set(), [], 0
    for a in corpus.articles:
        key = shingle_form(a.text)
        if key in seen:
            exact_dups += 1
            continue
        seen.add(key)
        arts.append(a)
    titles = [split_title(a)[0] for a in arts if split_title(a)[0].strip()]
    sample = rng.sample(arts, min(args.n, len(arts)))
    half = len(sample) // 2
    a_side, b_side = sample[:half], sample[half:]
    print(f"corpus {corpus.path}: {len(corpus.articles)} articles, {exact_dups} exact duplicates (same normalised "
          f"text) dropped; sample {len(sample)}: {len(a_side)} originals x {len(KINDS)} near-copies, "
          f"{len(b_side)} distinct queries; median words {int(np.median([len(a.text.split()) for a in sample]))}")
    variants = make_variants(a_side, titles, rng)
    for k in KINDS:
        ej = [exact_jaccard(a.text, t, args.shingle_size) for a, t in zip(a_side, variants[k])]
        print(f"  near-copies {k:>8s}: exact {args.shingle_size}-shingle Jaccard to the original: median "
              f"{np.median(ej):.3f}, 10th pct {np.percentile(ej, 10):.3f}, min {np.min(ej):.3f}")
    if args.sweep:
        sweep(a_side, b_side, variants, args)
    pairs = hard_negative_pairs(a_side, b_side)
    params = dict(threshold=args.threshold, num_perm=args.num_perm, shingle_size=args.shingle_size,
                  min_words=args.min_words)
    with BenchmarkRecord(run_name("dedup_quality", args.data)) as rec:
        rec.data.update(params=params, sample=len(sample), originals=len(a_side), distinct=len(b_side),
                        exact_duplicates_dropped=exact_dups)
        index = NearDuplicateIndex(**params)
        found = evaluate(index, a_side, b_side, variants, pairs, args)
        rec.table("Near-copies found, by kind", ["kind", "near-copies", "TP", "wrong id", "missed", "precision",
                                                  "recall"], found["kinds"],
                  note=f"{len(a_side)} originals, each with {len(KINDS)} near-copies; precision counts the "
                       f"{found['false_positives']} false positives of {found['distinct_checks']:,} distinct-article "
                       "checks against every kind.")
        rates = [["in memory", throughput(lambda: NearDuplicateIndex(**params), a_side, variants, b_side,
                                          random.Random(args.seed), "memory")]]
        if args.redis_url:
            ns = f"newsmon:dedup-bench:{uuid.uuid4().hex[:8]}"
            rates.append(["Redis", throughput(lambda: NearDuplicateIndex(**params, redis_url=args.redis_url,
                                                                         namespace=ns),
                                              a_side, variants, b_side, random.Random(args.seed),
                                              f"redis ({args.redis_url}, namespace {ns})")])
        rec.table("check_and_add throughput", ["index", "articles/s"], [[n, round(r)] for n, r in rates])
        rec.data.update(distinct_checks=found["distinct_checks"], distinct_flagged=found["false_positives"])
        if args.corpus_scan:
            corpus_scan(arts, params)

if __name__ == "__main__":
    main()
