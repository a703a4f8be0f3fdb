"""How flat the calibration's base grid is, and what that does to the test figures (not in CI).

For every point of the base grid the calibration searches (lexical weight 0 or :data:`GRID_LEXICAL`, then k, tau and
the threshold of :mod:`newsmon.shared.predictors.calibrate`), on eval's calibration articles (:mod:`eval_inputs`):
the objective (micro-F1 + subset accuracy), and whether the best point's lift over it is beyond the noise (the
paired bootstrap 90 % interval of the lift, the calibration's keep rule, :func:`paired_lift_interval`). Printed:

- the best points on the calibration articles, with their figures on the validation split alone and on test;
- the points the calibration cannot tell from its best (lift interval reaching 0) and the span of their test
  figures: the part of a test figure that no calibration on these articles can choose;
- the best points on the validation split alone and on test alone, with their calibration objective;
- how often the two most common label sets of the memory occur among the calibration and the test articles.

The test figures are printed for the record only: nothing here chooses by them.

Usage: ``.venv/bin/python benchmarks/calibration_surface.py --data ../shared/data/sentinews_sl`` (about 5 minutes
warm on sentinews_sl; on reuters21578_en the grid over 9,508 calibration articles takes much longer).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import Counter

import numpy as np

from eval_inputs import build, pad
from record import BenchmarkRecord, run_name
from newsmon.shared.predictors import LabelVocab
from newsmon.shared.predictors.calibrate import GRID_K, GRID_LEXICAL, GRID_TAU, GRID_THRESHOLD
from newsmon.shared.predictors.lexical import fuse
from newsmon.shared.predictors.rae_xmc import rae_xmc_scores
from newsmon.shared.predictors.thresholds import micro_f1_acc, paired_lift_interval


def surface(x, vocab: LabelVocab, Y_cal: np.ndarray, Y_te: np.ndarray, n_val: int) -> list[dict]:
    """One row per grid point: its parameters, calibration / validation / test (micro-F1, subset accuracy), and
    its ``(n, L)`` bool proposals on the calibration articles (``P``)."""
    L, rows = len(vocab), []
    for w in (0.0, *GRID_LEXICAL):
        rc = fuse(x.cal_retrieval, x.cal_texts if w else [], w, max(GRID_K), x.terms)
        rt = fuse(x.test_retrieval, x.test_texts if w else [], w, max(GRID_K), x.terms)
        Rc, Rt = rc.label_matrix(LabelVocab(vocab.labels)), rt.label_matrix(LabelVocab(vocab.labels))
        for k, tau in itertools.product([k for k in GRID_K if k <= rc.k], GRID_TAU):
            Sc = pad(rae_xmc_scores(rc.sims, Rc, k, tau, 1.0, Rc.shape[1]), L)
            St = pad(rae_xmc_scores(rt.sims, Rt, k, tau, 1.0, Rt.shape[1]), L)
            for thr in GRID_THRESHOLD:
                P = Sc > thr
                rows.append({"params": (w, k, tau, float(thr)), "cal": micro_f1_acc(Y_cal, P),
                             "val": micro_f1_acc(Y_cal[-n_val:], P[-n_val:]) if n_val else (0.0, 0.0),
                             "test": micro_f1_acc(Y_te, St > thr), "P": P})
    return rows


COLUMNS = ["lexical weight", "k", "tau", "threshold", "calibration objective", "validation objective",
           "test micro-F1", "test subset accuracy"]


def _row(r: dict) -> list:
    w, k, tau, thr = r["params"]
    (cf, ca), (vf, va), (tf, ta) = r["cal"], r["val"], r["test"]
    return [w, k, tau, round(thr, 2), round(cf + ca, 4), round(vf + va, 4), round(100 * tf, 1), round(100 * ta, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    with BenchmarkRecord(run_name("calibration_surface", args.data)) as rec:
        measure(args.data, args.top, rec)


def measure(data: str, top: int, rec: BenchmarkRecord) -> None:
    """The grid's surface, its flat top and the label-set shares, into ``rec``."""
    t0 = time.perf_counter()
    x = build(data)
    vocab, Y_cal, Y_te = x.gold_matrices()
    n_val = x.n_validation
    rows = surface(x, vocab, Y_cal, Y_te, n_val)
    rows.sort(key=lambda r: -sum(r["cal"]))
    best = rows[0]
    tied = [r for r in rows if paired_lift_interval(Y_cal, best["P"], r["P"])[0] <= 0]
    print(f"{data}: {len(rows)} grid points, {len(x.cal_gold)} calibration articles ({n_val} validation), "
          f"{len(x.test_gold)} test; {time.perf_counter() - t0:.0f} s")
    rec.data.update(grid_points=len(rows), calibration_articles=len(x.cal_gold), validation_articles=n_val,
                    test_articles=len(x.test_gold))
    rec.table(f"Best {top} grid points on the calibration articles ({data})", COLUMNS,
              [_row(r) for r in rows[:top]])
    tf = [100 * r["test"][0] for r in tied]
    ta = [100 * r["test"][1] for r in tied]
    print(f"\n{len(tied)} points the calibration cannot tell from its best (the paired 90 % interval of the best's "
          f"lift over them reaches 0; objectives {sum(tied[-1]['cal']):.4f}-{sum(best['cal']):.4f}): test micro-F1 "
          f"{min(tf):.1f}-{max(tf):.1f}, test subset accuracy {min(ta):.1f}-{max(ta):.1f}")
    rec.data["indistinguishable_from_best"] = {
        "points": len(tied), "objectives": [round(sum(tied[-1]["cal"]), 4), round(sum(best["cal"]), 4)],
        "test_micro_f1": [round(min(tf), 1), round(max(tf), 1)], "test_subset_accuracy": [round(min(ta), 1),
                                                                                          round(max(ta), 1)]}
    for name, key in (("the validation split alone", "val"), ("test alone (for the record)", "test")):
        rec.table(f"Best 3 grid points on {name} ({data})", COLUMNS,
                  [_row(r) for r in sorted(rows, key=lambda r: -sum(r[key]))[:3]])
    common = [s for s, _ in Counter(tuple(sorted(g)) for g in x.cal_gold[:len(x.cal_gold) - n_val]).most_common(2)]
    print("\nshare of articles whose label set is one of the memory's 2 most common sets "
          f"({' / '.join(str(list(s)) for s in common)}):")
    for name, gold in (("train (leave-one-out)", x.cal_gold[:len(x.cal_gold) - n_val]),
                       ("validation", x.cal_gold[len(x.cal_gold) - n_val:]), ("test", x.test_gold)):
        share = np.mean([tuple(sorted(g)) in common for g in gold]) if gold else float("nan")
        print(f"- {name}: {100 * share:.1f} % of {len(gold)}")
        rec.data.setdefault("common_label_sets_share", {})[name] = round(100 * float(share), 1)


if __name__ == "__main__":
    main()
