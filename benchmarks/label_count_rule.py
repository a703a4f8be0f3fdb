"""The label-count rule (not in CI): propose each article's n best labels, n predicted from its neighbours' label
counts, the decision rule issue 10 lists for subset accuracy ("proposing the top-n labels with n predicted from
the neighbours' label counts"). Measured here on the calibration articles, by the calibration's own keep rule, on
top of the calibrated parameters (the rule switched off), before it was added to the product: it was kept on
reuters21578_en and is now a calibration step (:data:`newsmon.shared.predictors.calibrate.RULE_GRID`).

The calibration is eval's (:mod:`eval_inputs`: the train split scored leave-one-out plus the validation split,
hybrid search as the workers search, label keys and label counts of the train memory), then
:func:`newsmon.shared.predictors.calibrate.calibrate`. On top of the calibrated proposals, for each article:

- ``n = Σ_j w_j |Y_j|`` over its first k neighbours, ``w = softmax(s / tau)`` (the calibrated k and tau; RAE-XMC
  eq. 8's weights), rounded (``round``) or up (``ceil``); the RCut strategy (Yang, "A study of thresholding
  strategies for text categorization", SIGIR 2001, section 2.1) with a rank predicted per article;
- ``cap``: the calibrated proposals, at most the n best of them;
- ``rank cut >= c``: the n best labels whose score reaches c, replacing the threshold's decision (the other rules'
  proposals stay).

Each variant: micro-F1, subset accuracy and the objective on the calibration articles, the paired bootstrap 90 %
interval of its lift over the calibrated proposals, whether the calibration's keep rule
(:func:`newsmon.shared.predictors.calibrate._lifts`) would keep it, and, for the record only, the test split's
figures (the rule is judged on the calibration articles alone).

Usage: ``.venv/bin/python benchmarks/label_count_rule.py --data ../shared/data/sentinews_sl`` (embeddings come
from the encoder's cache under NEWSMON_HOME when it has them; about 4 minutes warm on sentinews_sl).
"""

from __future__ import annotations

import time

import numpy as np

from eval_inputs import build, pad
from record import BenchmarkRecord, run_on_corpus
from newsmon.shared.predictors import DECIDING_RULES, LabelVocab, Retrieval
from newsmon.shared.predictors.calibrate import RULE_GRID, Params, _lifts
from newsmon.shared.predictors.head_model import HeadScores
from newsmon.shared.predictors.label_keys import LabelHits
from newsmon.shared.predictors.rules import best_labels, mean_label_count, newsmon_decision
from newsmon.shared.predictors.thresholds import micro_f1_acc, paired_lift_interval

MIN_SCORES = (0.10, 0.15, 0.20, 0.25, 0.30)


def variants(r: Retrieval, labels: list[str], L: int, p: Params, hits: LabelHits | None, counts: dict[str, int],
             known: set[str] | None, head: HeadScores | None = None) -> dict[str, np.ndarray]:
    """``(m, L)`` bool proposals: the calibrated ones (``calibrated``) and each label-count variant."""
    d = newsmon_decision(r, LabelVocab(labels), p, known, hits, counts, reasons=True, head=head)
    S, P = pad(d.scores, L), pad(d.proposed, L)
    kept = [DECIDING_RULES.index(r) for r in ("tail_support", "new_label_support", "floor")]  # they stay
    others = pad(np.isin(d.decided_by, kept), L)
    out = {"calibrated": P}
    n_hat = mean_label_count(r, p.top_k, p.tau)  # the rule's own n, before its rounding
    for how, n in (("round", np.floor(n_hat + 0.5)), ("ceil", np.ceil(n_hat))):
        top = best_labels(S, n.astype(int), -np.inf)
        out[f"cap ({how})"] = (P & top) | others
        for c in MIN_SCORES:
            out[f"rank cut ({how}) >= {c:.2f}"] = (top & (S >= c)) | others
    return out


def main() -> None:
    run_on_corpus("label_count_rule", __doc__.splitlines()[0], measure)


def measure(data: str, rec: BenchmarkRecord) -> None:
    """Each variant on the calibration articles (and test, for the record), into ``rec``."""
    t0 = time.perf_counter()
    x = build(data)
    without = tuple(r for r in RULE_GRID if r != "label_count")  # the calibration without the rule itself
    cal = x.calibrate(rules=without)
    p = cal.params
    vocab, Y_cal, Y_te = x.gold_matrices()
    L = len(vocab)
    r_cal, r_te, cal_hits, te_hits = x.scored_with(p)
    h_cal, h_te = x.heads(p)
    on_cal = variants(r_cal, vocab.labels, L, p, cal_hits, x.counts, None, h_cal)
    on_te = variants(r_te, vocab.labels, L, p, te_hits, x.counts, x.known, h_te)
    print(f"{data}: calibration {len(x.cal_gold)} articles (train leave-one-out + validation), "
          f"test {len(x.test_gold)}; "
          f"calibrated {p.as_dict()}; {time.perf_counter() - t0:.0f} s")
    rec.data.update(calibration_articles=len(x.cal_gold), test_articles=len(x.test_gold), calibrated=p.as_dict())
    rows = []
    f1_0, acc_0 = micro_f1_acc(Y_cal, on_cal["calibrated"])
    for name, prop in on_cal.items():
        f1, acc = micro_f1_acc(Y_cal, prop)
        lo, hi = paired_lift_interval(Y_cal, prop, on_cal["calibrated"])
        kept = "-" if name == "calibrated" else ("yes" if _lifts(f1 + acc, f1_0 + acc_0, (lo, hi)) else "no")
        tf1, tacc = micro_f1_acc(Y_te, on_te[name])
        rows.append([name, round(100 * f1, 1), round(100 * acc, 1), round(f1 + acc, 4), f"{lo:+.4f} .. {hi:+.4f}",
                     kept, round(100 * tf1, 1), round(100 * tacc, 1)])
    rec.table(f"The label-count rule on top of the calibrated parameters ({data})",
              ["variant", "calibration micro-F1", "subset accuracy", "objective", "lift 90 % interval", "kept",
               "test micro-F1", "test subset accuracy"], rows,
              note="Judged on the calibration articles by the calibration's keep rule; the test columns are for the "
                   "record only.")


if __name__ == "__main__":
    main()
