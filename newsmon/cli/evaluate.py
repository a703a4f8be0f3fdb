"""``newsmon eval``: every registered predictor on a labelled corpus, printed like RAE-XMC's Table 7.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

import json
import shlex
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
    peers: Annotated[str, typer.Option(help="Comma-separated peers trained and scored beside the methods: annif "
                                            "(its tfidf, omikuji Parabel and Bonsai and their ensemble, run from its "
                                            "own environment <home>/peers/annif, created on first use).")] = "",
    record: Annotated[bool, typer.Option(help="Also write the run as a benchmark record "
                                              "(benchmarks/results/eval.<corpus>/, from a source checkout).")] = False,
) -> None:
    """Evaluate RAE-XMC against zero-shot 1-NN, ML-KNN and TF-IDF SVM / LogReg (and the peers) on the test split;
    print a table like RAE-XMC's Table 7, write results.json, results.md and f1_by_frequency.png."""
    # deferred: see the module docstring
    from newsmon.shared.evaluation import EvalInputError, format_ratios, markdown_table, run_eval, write_outputs
    from newsmon.shared.evaluation.report import cost_rows, format_peer_ratios

    s = settings_from_env(data=data)
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    chosen_peers = [m.strip() for m in peers.split(",") if m.strip()]
    recorder = _recorder() if record else None
    _prepare_peers(chosen_peers, s.home)
    t0 = time.perf_counter()
    corpus = corpus_or_fail(s, limit)  # reports the bad lines
    out_dir = out or Path("runs") / f"eval-{corpus.path.parent.name}"
    try:
        report = run_eval(corpus, chosen, s, tune=tune, out_dir=None, progress=True, peers=chosen_peers)
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
    if report.get("ratio_to_peer"):
        console.print(format_peer_ratios(report["ratio_to_peer"]), highlight=False)
    for name, wall, cpu, rss, where in cost_rows(report):
        if where:  # an ablation row has no cost of its own (its row's calibration computed it)
            console.print(f"{name}: {wall} s, CPU {cpu} s, peak RSS {rss} MiB ({where})", highlight=False)
    if recorder is not None:
        given = {"--data": data, "--methods": methods, "--tune": tune or None, "--out": out, "--limit": limit,
                 "--peers": peers or None}
        command = ["newsmon", "eval"] + [str(x) for k, v in given.items() if v is not None for x in (k, v)]
        _write_record(recorder, report, data or s.data, shlex.join([*command, "--record"]))
    console.print(f"wall time {report['timings']['wall_s']:.1f} s; wrote {out_dir}/results.json, results.md, "
                  "f1_by_frequency.png")


def _prepare_peers(peers: list[str], home: Path) -> None:
    """Create the peers' environments before the run (minutes on first use), so that a peer that cannot be
    installed fails the command at once with the reason, not after the other methods ran."""
    if "annif" not in peers:
        return
    from newsmon.shared.predictors.annif_peer import PeerUnavailable, annif_executable  # deferred: see the top

    console.print(f"Annif peer: its environment is {home}/peers/annif (created on first use)", highlight=False)
    try:
        annif_executable(home)
    except PeerUnavailable as exc:
        fail(str(exc))


def _recorder():
    """``benchmarks/record.py`` of the source checkout this package runs from (the benchmarks are scripts, not a
    package), or a clear failure without one."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "record.py"
    if not path.is_file():
        fail(f"--record needs a source checkout of newsmon: {path} not found")
    spec = importlib.util.spec_from_file_location("newsmon_benchmark_record", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_record(recorder, report: dict, data: Path, command: str) -> None:
    """The run of ``command`` as the benchmark record ``eval.<corpus>``: the quality table, the cost table (wall time,
    CPU time and peak RSS of each row) and the ratios; the full report stays in the output folder."""
    from newsmon.shared.evaluation import table_notes, table_rows
    from newsmon.shared.evaluation.report import cost_rows

    header, rows = table_rows(report)
    with recorder.BenchmarkRecord(recorder.run_name("eval", data)) as rec:
        rec.command = command
        rec.table("Quality on the test split (%)", header, rows, note=" ".join(table_notes(report)))
        rec.table("Cost of each row", ["method", "wall s", "CPU s", "peak RSS MiB", "measured in"],
                  cost_rows(report),
                  note="Rows measured in the eval process exclude the shared embedding and search "
                       "(timings below); a peer's row is its own processes' training and suggestions.")
        rec.data.update({"ratio_to_peer": report.get("ratio_to_peer"), "ratio_to_svm": report.get("ratio_to_svm"),
                         "timings": report["timings"], "corpus": {k: v for k, v in report["corpus"].items()
                                                                  if k != "bad_line_details"},
                         "params": {k: m["params"] for k, m in report["methods"].items() if m.get("params")}})
