"""Long articles embedded in windows (``NEWSMON_ENCODER__MAX_CHUNKS``) against truncation at 512 tokens (not in
CI), judged as the calibration judges a lever: on the calibration articles, by the paired bootstrap 90 % interval
of the objective's lift (micro-F1 + subset accuracy).

multilingual-e5-small reads 512 tokens, and half of the sentinews_sl articles are longer (median 525 tokens), so
truncation embeds only their first part. With ``max_chunks`` N > 1 an article is embedded in up to N windows and
its vector is their token-weighted mean (:mod:`newsmon.shared.long_text`). For each setting the corpus is
embedded (from the encoder's cache under NEWSMON_HOME when it has the vectors), the ``newsmon`` row's calibration
is rebuilt as ``eval`` builds it (:mod:`eval_inputs`: train leave-one-out + validation, hybrid search, label keys)
and run in full, and its proposals on the calibration articles are compared article by article with those of
truncation. The test split's figures are printed for the record only: the choice is made on the calibration
articles.

Usage: ``.venv/bin/python benchmarks/long_articles.py --data ../shared/data/sentinews_sl --chunks 4`` (about 4
minutes per setting once both are cached; embedding sentinews_sl cold in 4 windows took about 9 minutes).
"""

from __future__ import annotations

import argparse
import time

from eval_inputs import build
from record import BenchmarkRecord, run_name
from newsmon.shared.scoring.calibration.selection import measure as measure_lift, verdict
from newsmon.shared.scoring.objective import Objective
from newsmon.shared.scoring.rules.threshold_search import micro_f1_acc


def calibrated(data: str, max_chunks: int) -> dict:
    """The calibration of the ``newsmon`` row with ``max_chunks``: its parameters and its ``(n, L)`` / ``(m, L)``
    bool proposals on the calibration and test articles, with the gold over the same columns."""
    t0 = time.perf_counter()
    x = build(data, max_chunks)
    cal = x.calibrate()
    p = cal.params
    vocab, Y_cal, Y_te = x.gold_matrices()
    P_cal, P_te = x.proposals(p, vocab)
    return {"params": p.model_dump(mode="json", exclude_defaults=True), "n_validation": x.n_validation,
            "Y_cal": Y_cal, "Y_te": Y_te, "P_cal": P_cal, "P_te": P_te, "labels": vocab.labels,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--chunks", type=int, default=4, help="max_chunks of the variant (truncation: 1)")
    args = ap.parse_args()
    with BenchmarkRecord(run_name("long_articles", args.data)) as rec:
        measure(args.data, args.chunks, rec)


def measure(data: str, chunks: int, rec: BenchmarkRecord) -> None:
    """Truncation against ``chunks`` windows, judged on the calibration articles, into ``rec``."""
    runs = {n: calibrated(data, n) for n in (1, chunks)}
    base = runs[1]
    assert all(r["labels"] == base["labels"] for r in runs.values()), "the vocabularies differ"
    print(f"{data}: {len(base['Y_cal'])} calibration articles, {len(base['Y_te'])} test articles")
    rows = []
    for n, r in runs.items():
        f1, acc = micro_f1_acc(r["Y_cal"], r["P_cal"])
        lift = measure_lift(Objective(), r["Y_cal"], r["P_cal"], base["P_cal"])
        _p, lo, hi = lift.figures["objective"]
        kept = "-" if n == 1 else ("yes" if verdict(lift).kept else "no")
        tf1, tacc = micro_f1_acc(r["Y_te"], r["P_te"])
        p = r["params"]
        short = ", ".join(f"{k} {v}" for k, v in p.items())
        name = "truncation (max_chunks 1)" if n == 1 else f"windows (max_chunks {n})"
        rows.append([name, short, round(100 * f1, 1), round(100 * acc, 1), round(f1 + acc, 4),
                     f"{lo:+.4f} .. {hi:+.4f}", kept, round(100 * tf1, 1), round(100 * tacc, 1), round(r["seconds"])])
    moved = int((runs[chunks]["P_cal"] != base["P_cal"]).any(axis=1).sum())
    rec.table(f"Long articles: truncation against windows ({data})",
              ["encoder input", "calibrated parameters", "calibration micro-F1", "subset accuracy", "objective",
               "lift over truncation, 90 %", "kept", "test micro-F1", "test subset accuracy", "seconds"], rows,
              note=f"Calibration articles whose proposals differ: {moved} of {len(base['Y_cal']):,}. The test "
                   "columns are for the record only.")
    # the two parts of the calibration articles apart (each setting's calibration as chosen on both parts)
    v = base["n_validation"]
    var = runs[chunks]
    parts = []
    for part, rows in (("train, leave-one-out", slice(0, -v)), ("validation", slice(-v, None))):
        Y, new, old = base["Y_cal"][rows], var["P_cal"][rows], base["P_cal"][rows]
        (f1, acc), (f1_0, acc_0) = micro_f1_acc(Y, new), micro_f1_acc(Y, old)
        _p, lo, hi = measure_lift(Objective(), Y, new, old).figures["objective"]
        parts.append([part, len(Y), round(f1_0 + acc_0, 4), round(f1 + acc, 4), f"{lo:+.4f} .. {hi:+.4f}"])
    rec.table("The two parts of the calibration articles apart", ["part", "articles", "objective, truncation",
                                                                  f"objective, windows ({chunks})",
                                                                  "paired lift 90 %"], parts)


if __name__ == "__main__":
    main()
