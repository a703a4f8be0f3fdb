"""How far the calibrated ``newsmon`` row's test figures move when the calibration sees other articles: the train
and validation articles of a corpus are re-split ``--seeds`` times (seeded; each re-split keeps the corpus's
validation size), each re-split is run through ``eval``'s ``newsmon`` row (memory = its train part, calibration =
leave-one-out + its validation part), and the fixed test split is scored each time. The table gives each seed's
micro-F1, macro-F1, subset accuracy and what the calibration kept, and the spread (max - min) of each figure
(issue 38's bar: <= 2.0 points for micro-F1 and subset accuracy). Seed 0 is the corpus's own split.

    python benchmarks/calibration_stability.py --data ../shared/data/sentinews_sl --seeds 5

``--keep "+ lexical fusion,+ head_model"`` fixes the levers instead of letting the calibration choose: those named
are kept, every other one refused, whatever their lift (their parameters are still chosen on each split). With the
same lever set on every split the spread is the memory's own; the spread beyond it is the selection's. The record
is then ``calibration_stability.<corpus>.fixed``. ``--params FILE`` (a JSON of scoring parameters, e.g. a run's
``methods.newsmon.params``) skips the calibration: every split is scored with the same parameters, so the spread
is the memory's alone (record ``calibration_stability.<corpus>.params``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from record import BenchmarkRecord, run_name

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus, load_corpus
from newsmon.shared.evaluation.run import run_eval
from newsmon.shared.predictors.newsmon import NewsmonPredictor
from newsmon.shared.scoring.calibration import run as calibration_run
from newsmon.shared.scoring.calibration.selection import LeverVerdict


def resplit(corpus: Corpus, seed: int) -> Corpus:
    """``corpus`` with its train and validation articles shuffled between the two splits by ``seed`` (the same
    validation size; the test split untouched; seed 0: the corpus's own split)."""
    if seed == 0:
        return corpus
    pool = [i for i, a in enumerate(corpus.articles) if a.split in ("train", "validation")]
    n_val = sum(1 for i in pool if corpus.articles[i].split == "validation")
    picked = set(np.random.default_rng(seed).permutation(len(pool))[:n_val].tolist())
    val = {pool[j] for j in picked}
    in_pool = set(pool)
    articles = [a.model_copy(update={"split": "validation" if i in val else "train"}) if i in in_pool else a
                for i, a in enumerate(corpus.articles)]
    return Corpus(corpus.path, articles, corpus.bad_lines)


@contextlib.contextmanager
def fixed_levers(keep: set[str] | None) -> Iterator[None]:
    """While inside: every lever named in ``keep`` is kept and every other one refused, whatever its lift (None:
    the calibration's own verdicts). Replaces the verdict the calibration run's :meth:`offer` reads."""
    if keep is None:
        yield
        return
    offer, verdict, name = calibration_run.CalibrationRun.offer, calibration_run.verdict, [""]

    def named_offer(self, lever, *a, **kw):  # noqa: ANN001, ANN202 (the method's own signature)
        name[0] = lever
        return offer(self, lever, *a, **kw)

    def forced(lift, *a, **kw):  # noqa: ANN001, ANN202
        v = verdict(lift, *a, **kw)
        kept = name[0] in keep
        return LeverVerdict(kept, f"fixed by the benchmark ({'kept' if kept else 'refused'}); the rule: {v.why}")

    calibration_run.CalibrationRun.offer, calibration_run.verdict = named_offer, forced
    try:
        yield
    finally:
        calibration_run.CalibrationRun.offer, calibration_run.verdict = offer, verdict


@contextlib.contextmanager
def fixed_params(path: str | None) -> Iterator[None]:
    """While inside: ``eval``'s ``newsmon`` row scores with the parameters in the JSON file ``path`` (a run's
    ``methods.newsmon.params``; its ``calibration`` figures ignored) instead of calibrating (None: calibrate)."""
    if path is None:
        yield
        return
    raw = {k: v for k, v in json.loads(Path(path).read_text(encoding="utf-8")).items() if k != "calibration"}
    params = ScoringParams(**raw)
    original = NewsmonPredictor.from_settings

    def with_params(cls, settings, **kw):  # noqa: ANN001, ANN202 (the classmethod's own signature)
        return cls(params=params)

    NewsmonPredictor.from_settings = classmethod(with_params)
    try:
        yield
    finally:
        NewsmonPredictor.from_settings = original


def _levers(methods: dict) -> list[dict]:
    """Each calibration step of a run's ``newsmon`` row: its name, kept or not, why, its lift on the calibration
    articles (objective: [lift, low, high], fractions), its test micro-F1 / subset accuracy (points) and its
    parameters (k, tau, threshold, lexical weight, the components' and rules' options)."""
    out = []
    for _key, e in sorted(((k, e) for k, e in methods.items() if k.startswith("newsmon_step")),
                         key=lambda kv: int(kv[0].rsplit("step", 1)[1])):
        params, m = e.get("params", {}), e["metrics"]["all"]
        out.append({"step": e["name"].split(": ", 1)[1], "why": params.get("why"),
                    "lift": (params.get("lift") or {}).get("objective"),
                    "test_micro_f1": round(100 * m["uF1"], 2), "test_subset_accuracy": round(100 * m["Acc"], 2),
                    "params": {k: params[k] for k in ("top_k", "tau", "threshold", "lexical_weight", "components",
                                                      "rules") if k in params}})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--keep", default=None,
                    help="comma-separated step names kept on every split (e.g. '+ lexical fusion,+ head_model'); "
                         "every other lever is refused")
    ap.add_argument("--params", default=None,
                    help="a JSON file of scoring parameters every split is scored with (no calibration)")
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args()
    corpus = load_corpus(args.data)
    keep = None if args.keep is None else {x.strip() for x in args.keep.split(",") if x.strip()}
    name = run_name("calibration_stability", args.data) + ("" if keep is None else ".fixed") + (
        "" if args.params is None else ".params")
    with BenchmarkRecord(name) as rec, fixed_levers(keep), fixed_params(args.params):
        if args.params is not None:
            rec.data["fixed_params"] = json.loads(Path(args.params).read_text(encoding="utf-8"))
        if keep is not None:
            rec.data["fixed_levers"] = sorted(keep)
        rows, figures, levers = [], [], []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            report = run_eval(resplit(corpus, seed), ["newsmon"], Settings(), progress=False)
            methods = report["methods"]
            m, metrics = methods["newsmon"], methods["newsmon"]["metrics"]["all"]
            kept = [e["name"].split(": ", 1)[1].removesuffix(" (kept)") for k, e in sorted(
                methods.items(), key=lambda kv: int(kv[0].rsplit("step", 1)[1]) if "_step" in kv[0] else -1)
                if k.startswith("newsmon_step") and e["name"].endswith("(kept)")]
            levers.append(_levers(methods))
            f = (100 * metrics["uF1"], 100 * metrics["F1"], 100 * metrics["Acc"])
            figures.append(f)
            rows.append([seed, *(round(x, 1) for x in f), round(m.get("wall_s", 0.0)), ", ".join(kept)])
            print(rows[-1], flush=True)
        spread = [round(max(f[j] for f in figures) - min(f[j] for f in figures), 2) for j in range(3)]
        rows.append(["spread (max - min)", *spread, "", ""])
        rec.data["spread"] = dict(zip(("micro_f1", "macro_f1", "subset_accuracy"), spread, strict=True))
        rec.data["seeds"] = [{**dict(zip(("micro_f1", "macro_f1", "subset_accuracy"), f, strict=True)),
                              "levers": lv} for f, lv in zip(figures, levers, strict=True)]
        rec.table(f"Calibration stability: {args.seeds} re-splits of train + validation ({args.data})",
                  ["seed", "test micro-F1", "macro-F1", "subset accuracy", "newsmon row wall s", "levers kept"], rows,
                  note="Seed 0 is the corpus's own split; the test split is the same in every run. Issue 38's bar: "
                       "spread <= 2.0 points for micro-F1 and subset accuracy.")


if __name__ == "__main__":
    main()
