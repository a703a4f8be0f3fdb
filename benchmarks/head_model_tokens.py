"""What the head model reads: its calibration step with word tokens only (the TF-IDF baselines' analyser) against
the words and punctuation marks that ship, on eval's calibration articles (:mod:`eval_inputs`: train leave-one-out
plus validation), on top of the parameters the calibration had before the step.

Usage: ``.venv/bin/python benchmarks/head_model_tokens.py --data ../shared/data/sentinews_sl``
(about 3 minutes warm on sentinews_sl; reuters21578_en needs its full calibration first, about 20 minutes).
Prints, per tokenisation, the best objective of the step's grid at the C the calibration chose, with the paired
bootstrap 90 % interval of its lift over the proposals before the step.
"""

from __future__ import annotations

import time

import newsmon.shared.predictors.head_model as head_model
from eval_inputs import build, pad
from record import BenchmarkRecord, run_on_corpus
from newsmon.shared.predictors import LabelVocab
from newsmon.shared.predictors.calibrate import GRID_THRESHOLD, HEAD_GRID, Params
from newsmon.shared.predictors.rules import mix_head, newsmon_decision
from newsmon.shared.predictors.thresholds import micro_f1_acc, paired_lift_interval
from newsmon.shared.terms import hashing_vectorizer

TOKENS = {"word tokens only": r"(?u)\b\w\w+\b", "words and punctuation marks (shipped)": head_model.TOKEN_PATTERN}


def main() -> None:
    run_on_corpus("head_model_tokens", __doc__.splitlines()[0], measure)


def measure(data: str, rec: BenchmarkRecord) -> None:
    """The step's best objective per tokenisation, into ``rec``."""
    t0 = time.perf_counter()
    x = build(data)
    cal = x.calibrate()
    before, c = None, None
    for step in cal.steps:  # the parameters the step started from, and the C it chose
        if step["step"] == "+ head model":
            c = step["params"]["head_c"]
            break
        if step["kept"]:
            before = Params(**step["params"])
    r_cal, _, hits, _ = x.scored_with(before)
    vocab, Y, _ = x.gold_matrices()
    L = len(vocab)
    S0 = pad(newsmon_decision(r_cal, LabelVocab(vocab.labels), before, None, hits, x.counts).scores, L)
    P0 = S0 > before.threshold
    f1, acc = micro_f1_acc(Y, P0)
    n_train = len(x.cal_gold) - x.n_validation
    print(f"{data}: {len(x.cal_gold)} calibration articles; before the step {before.as_dict()}; "
          f"objective {f1 + acc:.4f}; the calibration's C {c}")
    rec.data.update(calibration_articles=len(x.cal_gold), before=before.as_dict(), objective_before=f1 + acc,
                    head_c=c)
    rows = [["none (the parameters before the step)", round(f1 + acc, 4), "", "", "", ""]]
    for name, pattern in TOKENS.items():
        head_model._VECTORIZER = hashing_vectorizer(pattern)
        t1 = time.perf_counter()
        head = head_model.calibration_head_scores(x.cal_texts[:n_train], x.cal_gold[:n_train],
                                                  x.cal_texts[n_train:])(c)
        best = None
        for beta in sorted({b for _, b in HEAD_GRID}):
            S = pad(mix_head(S0.copy(), LabelVocab(vocab.labels), head, beta), L)
            for thr in GRID_THRESHOLD:
                f1, acc = micro_f1_acc(Y, S > thr)
                if best is None or f1 + acc > best[0]:
                    best = (f1 + acc, beta, float(thr), S > thr)
        lo, hi = paired_lift_interval(Y, best[3], P0)
        rows.append([name, round(best[0], 4), best[1], best[2], f"{lo:+.4f} .. {hi:+.4f}",
                     round(time.perf_counter() - t1)])
    rec.table(f"The head model's step by its tokens ({data}, C {c})",
              ["tokens", "best objective", "beta", "threshold", "lift 90 % interval", "seconds"], rows,
              note=f"Objective: micro-F1 + subset accuracy on {len(x.cal_gold):,} calibration articles; the interval "
                   "is the paired bootstrap 90 % interval of the lift over the proposals before the step.")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
