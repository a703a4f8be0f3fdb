"""The evaluation report as a table shaped like RAE-XMC's Table 7, in Markdown, JSON and a plot."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

TABLE_COLUMNS = ("uF1", "uP", "uR", "F1", "P", "R", "Acc")


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is 0 or NaN."""
    return float(a / b) if b and not math.isnan(b) else float("nan")


def ratios_to_svm(methods: dict) -> dict:
    """Micro-F1 and subset-accuracy ratios of RAE-XMC (default and tuned) to TF-IDF + SVM, when both ran."""
    if "svm" not in methods:
        return {}
    svm = methods["svm"]["metrics"]["all"]
    out = {}
    for key in ("rae", "rae_tuned"):
        if key in methods:
            m = methods[key]["metrics"]["all"]
            out[key] = {"uF1": ratio(m["uF1"], svm["uF1"]), "Acc": ratio(m["Acc"], svm["Acc"])}
    return out


def _fmt(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def table_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the Table-7-like summary: method; uF1 uP uR F1 P R Acc for all / frequent / rare;
    P@1 P@3 P@5 nDCG@5 (percentages)."""
    header = ["method"] + [f"{g}:{c}" for g in ("all", "freq", "rare") for c in TABLE_COLUMNS] + \
        ["P@1", "P@3", "P@5", "nDCG@5"]
    rows = []
    for m in report["methods"].values():
        row = [m["name"]]
        for g in ("all", "frequent", "rare"):
            row += [_fmt(m["metrics"][g][c]) for c in TABLE_COLUMNS]
        rk = m["metrics"].get("ranking", {})
        row += [_fmt(rk.get(c)) for c in ("P@1", "P@3", "P@5", "nDCG@5")]
        rows.append(row)
    return header, rows


def markdown_table(report: dict) -> str:
    """The summary table in Markdown (figures in %)."""
    header, rows = table_rows(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_outputs(report: dict, out_dir: Path) -> None:
    """Write ``results.json``, ``results.md`` and ``f1_by_frequency.png`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2, default=float))
    c = report["corpus"]
    lg = report["label_groups"]
    md = [f"# newsmon eval: {c['path']}", "",
          f"Train {c['train']}, validation {c['validation']}, test {c['test']} articles; {lg['all']} labels "
          f"({lg['frequent']} frequent >= 500, {lg['rare']} rare <= 10 training occurrences); "
          f"{c['bad_lines']} bad lines skipped. Figures in %, on the test split.", "",
          markdown_table(report), ""]
    for m in report["methods"].values():
        if m["params"]:
            md.append(f"- {m['name']}: {json.dumps(m['params'], default=float)}")
    md.append(f"- timings (s): {json.dumps({k: round(v, 2) for k, v in report['timings'].items()})}")
    (out_dir / "results.md").write_text("\n".join(md) + "\n")
    plot_f1_by_frequency(report, out_dir / "f1_by_frequency.png")


def plot_f1_by_frequency(report: dict, path: Path) -> None:
    """Bar chart of macro-F1 per label-frequency bucket, one bar per method (PNG)."""
    import matplotlib  # deferred: 0.5 s import plus the backend; only written outputs need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: after choosing the Agg backend

    fig, ax = plt.subplots(figsize=(9, 4.5))
    methods = list(report["methods"].items())
    buckets = [b["bucket"] for b in methods[0][1]["f1_by_frequency"]] if methods else []
    width = 0.8 / max(1, len(methods))
    for i, (_key, m) in enumerate(methods):
        ys = [b["F1"] if b["F1"] == b["F1"] else 0.0 for b in m["f1_by_frequency"]]
        ax.bar(np.arange(len(buckets)) + i * width, ys, width, label=m["name"])
    ax.set_xticks(np.arange(len(buckets)) + width * (len(methods) - 1) / 2, buckets)
    ax.set_xlabel("training occurrences of the label")
    ax.set_ylabel("macro-F1 on test")
    ax.set_title(f"F1 per label-frequency bucket — {Path(report['corpus']['path']).parent.name}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
