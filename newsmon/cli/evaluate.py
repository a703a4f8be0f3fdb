"""``newsmon eval``: every registered predictor on a labelled corpus, printed like RAE-XMC's Table 7.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from newsmon.cli.common import console, corpus_or_fail, fail, settings_from_env
#: The registered predictors (newsmon.shared.predictors.available()), named here to keep start-up fast.
_ALL = "rae,zshot,mlknn,svm,logreg,newsmon"


def eval_cmd(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    methods: Annotated[str, typer.Option(help=f"Comma-separated: {_ALL}.")] = _ALL,
    tune: Annotated[int, typer.Option(min=0, help="Optuna trials of k/tau/lambda/threshold on validation "
                                                 "(0 = off).")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default runs/eval-<corpus>).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Read only the first N valid articles (a slice).")] = None,
) -> None:
    """Evaluate RAE-XMC against zero-shot 1-NN, ML-KNN and TF-IDF SVM / LogReg on the test split; print a
    table like RAE-XMC's Table 7, write results.json, results.md and f1_by_frequency.png."""
    # deferred: see the module docstring
    from newsmon.shared.evaluation import EvalInputError, format_ratios, markdown_table, run_eval, write_outputs

    s = settings_from_env(data=data)
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    t0 = time.perf_counter()
    corpus = corpus_or_fail(s, limit)  # reports the bad lines
    out_dir = out or Path("runs") / f"eval-{corpus.path.parent.name}"
    try:
        report = run_eval(corpus, chosen, s, tune=tune, out_dir=None, progress=True)
    except EvalInputError as exc:
        fail(str(exc))
    report["corpus"]["bad_line_details"] = [{"line": b.line, "reason": b.reason} for b in corpus.bad_lines]
    report["timings"]["wall_s"] = time.perf_counter() - t0
    write_outputs(report, out_dir)
    c = report["corpus"]
    print(f"{corpus.path}: test split, figures in % (train {c['train']}, validation {c['validation']}, "
          f"test {c['test']}; bad lines skipped {c['bad_lines']})")
    print(markdown_table(report))
    for m in report["methods"].values():
        if m["params"]:
            console.print(f"{m['name']}: {json.dumps(m['params'], default=float)}")
    for key, r in report.get("ratio_to_svm", {}).items():
        console.print(format_ratios(report["methods"][key]["name"], r), highlight=False)
    console.print(f"wall time {report['timings']['wall_s']:.1f} s; wrote {out_dir}/results.json, results.md, "
                  "f1_by_frequency.png")
