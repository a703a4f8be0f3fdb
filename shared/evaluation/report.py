"""The evaluation report as a table shaped like RAE-XMC's Table 7, in Markdown, JSON and a plot."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from newsmon.shared.metrics import FREQUENT_MIN, RARE_MAX

TABLE_COLUMNS = ("uF1", "uP", "uR", "F1", "P", "R", "Acc")
GROUPS = ("all", "frequent", "rare")

#: Figures computed from fewer test articles than this are marked low-sample (one article moves a figure by
#: more than a point).
LOW_SAMPLE_ARTICLES = 100
LOW_SAMPLE_MARK = "†"

_GROUP_RULE = {"frequent": f"a label with >= {FREQUENT_MIN} training occurrences",
               "rare": f"a label with <= {RARE_MAX} training occurrences", "all": "a label"}


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is 0 or NaN."""
    return float(a / b) if b and not math.isnan(b) else float("nan")


def _ratio_entry(m: dict, svm: dict, key: str, what: str, base: str = "TF-IDF + SVM"
                 ) -> tuple[float | None, str | None]:
    """One ratio ``m[key] / svm[key]`` (``base``: the name of the row divided by) and, when there is none, why
    (for the "–" shown instead)."""
    if _missing(m[key]) or _missing(svm[key]):
        return None, f"{what} is undefined (no gold or proposed label in the test split)"
    if svm[key] == 0:
        return None, f"{base}'s {what} is 0"
    return ratio(m[key], svm[key]), None


def ratios_to_svm(methods: dict) -> dict:
    """Micro-F1 and subset-accuracy ratios of RAE-XMC (default and tuned) and of the product row (``newsmon``) to
    TF-IDF + SVM, when both ran.

    Returns ``{method: {"uF1": x | None, "Acc": x | None, "why": {key: reason}, "test_articles": n,
    "low_sample": bool}}``: a ratio that cannot be formed is None with its reason in ``why`` (never NaN);
    ``low_sample`` when the figures come from fewer than :data:`LOW_SAMPLE_ARTICLES` test articles.
    """
    if "svm" not in methods:
        return {}
    fitted = _fitted(methods)
    n = int(fitted[0]["metrics"]["all"].get("n_articles", 0)) if fitted else 0
    out = {}
    for key in ("rae", "rae_tuned", "newsmon"):
        if key in methods:
            entry: dict = {"why": {}, "test_articles": n, "low_sample": n < LOW_SAMPLE_ARTICLES}
            failed = next((m for m in (methods[key], methods["svm"]) if m.get("error")), None)
            for col, what in (("uF1", "micro-F1"), ("Acc", "subset accuracy")):
                if failed is not None:
                    entry[col], why = None, f"{failed['name']} could not be fitted"
                else:
                    entry[col], why = _ratio_entry(methods[key]["metrics"]["all"], methods["svm"]["metrics"]["all"],
                                                   col, what)
                if why:
                    entry["why"][col] = why
            out[key] = entry
    return out


#: The columns of the ratios to a peer: micro-F1, macro-F1, subset accuracy.
PEER_RATIO_COLUMNS = (("uF1", "micro-F1"), ("F1", "macro-F1"), ("Acc", "subset accuracy"))


def ratios_to_peer(methods: dict, prefix: str = "annif_") -> dict:
    """The ``newsmon`` row against the peer's best row (the fitted row named ``<prefix>...`` with the highest
    test micro-F1): ``{"best": key, "best_name": name, "uF1" / "F1" / "Acc": ratio | None, "why": {col: reason}}``;
    empty when the ``newsmon`` row or every peer row is missing."""
    peers = {k: m for k, m in methods.items() if k.startswith(prefix) and not m.get("error")}
    ours = methods.get("newsmon")
    if not peers or ours is None or ours.get("error"):
        return {}
    best = max(peers, key=lambda k: -1.0 if _missing(peers[k]["metrics"]["all"]["uF1"])
               else peers[k]["metrics"]["all"]["uF1"])
    out: dict = {"best": best, "best_name": peers[best]["name"], "why": {}}
    for col, what in PEER_RATIO_COLUMNS:
        out[col], why = _ratio_entry(ours["metrics"]["all"], peers[best]["metrics"]["all"], col, what,
                                     peers[best]["name"])
        if why:
            out["why"][col] = why
    return out


def format_peer_ratios(r: dict) -> str:
    """One line: ``newsmon / <best peer row>: micro-F1 x1.05, macro-F1 x0.40, subset accuracy x1.30``."""
    parts = [f"{what} " + (f"x{r[col]:.3f}" if not _missing(r.get(col)) else f"– ({r['why'].get(col, 'undefined')})")
             for col, what in PEER_RATIO_COLUMNS]
    return f"newsmon / {r['best_name']} (the peer's best micro-F1): " + ", ".join(parts)


def cost_rows(report: dict) -> list[list]:
    """Per row: method, wall time (s), CPU time (s, None where not measured) and peak RSS (MiB) of the
    process(es) that computed it, and which."""
    return [[m["name"], round(m.get("wall_s", m["seconds"]), 1),
             None if m.get("cpu_s") is None else round(m["cpu_s"], 1),
             None if m.get("peak_rss_mib") is None else round(m["peak_rss_mib"]), m.get("measured_in", "")]
            for m in report["methods"].values()]


def _fitted(methods: dict) -> list[dict]:
    """The method entries that have metrics (not those that could not be fitted on the corpus)."""
    return [m for m in methods.values() if not m.get("error")]


def format_ratios(name: str, r: dict) -> str:
    """One line: ``<name> / TF-IDF+SVM: micro-F1 x1.20, subset accuracy x1.05``, a ratio that could not be
    formed shown as "–" with its reason, and the low-sample mark with the number of test articles."""
    mark = LOW_SAMPLE_MARK if r.get("low_sample") else ""
    parts = []
    for col, what in (("uF1", "micro-F1"), ("Acc", "subset accuracy")):
        x = r.get(col)
        shown = f"x{x:.3f}{mark}" if not _missing(x) else f"– ({r.get('why', {}).get(col, 'undefined')})"
        parts.append(f"{what} {shown}")
    line = f"{name} / TF-IDF+SVM: " + ", ".join(parts)
    if mark:
        line += f" ({mark} low-sample: {r['test_articles']} test articles, fewer than {LOW_SAMPLE_ARTICLES})"
    return line


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _group_articles(report: dict) -> dict[str, int]:
    """Test articles behind each group's figures (the same for every method): all, or those with a gold
    label of the group."""
    first = next(iter(_fitted(report["methods"])), None)
    if first is None:
        return {}
    return {g: int(first["metrics"][g].get("n_articles", 0)) for g in GROUPS}


#: The ranking columns of the table: precision at 1, 3, 5, nDCG at 5 and the recall of the gold labels among the
#: ten best-scored candidates (what a moderator sees offered).
RANKING_COLUMNS = ("P@1", "P@3", "P@5", "nDCG@5", "R@10")


def _fmt(x, low: bool = False) -> str:
    return "–" if _missing(x) else f"{100 * x:.1f}{LOW_SAMPLE_MARK if low else ''}"


def table_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the Table-7-like summary: method; uF1 uP uR F1 P R Acc for all / frequent / rare;
    P@1 P@3 P@5 nDCG@5 R@10 (percentages). A figure from fewer than :data:`LOW_SAMPLE_ARTICLES` test articles
    carries :data:`LOW_SAMPLE_MARK`; one that cannot be computed is "–" (:func:`table_notes` says why)."""
    header = ["method"] + [f"{g}:{c}" for g in ("all", "freq", "rare") for c in TABLE_COLUMNS] + \
        list(RANKING_COLUMNS)
    low = {g: n < LOW_SAMPLE_ARTICLES for g, n in _group_articles(report).items()}
    rows = []
    for m in report["methods"].values():
        if m.get("error"):  # could not be fitted: table_notes gives the reason
            rows.append([m["name"]] + ["–"] * (len(header) - 1))
            continue
        row = [m["name"]]
        for g in GROUPS:
            row += [_fmt(m["metrics"][g][c], low.get(g, False)) for c in TABLE_COLUMNS]
        rk = m["metrics"].get("ranking", {})
        row += [_fmt(rk.get(c), low.get("all", False)) for c in RANKING_COLUMNS]
        rows.append(row)
    return header, rows


def table_notes(report: dict) -> list[str]:
    """The footnotes of the table: which figures are low-sample (fewer than :data:`LOW_SAMPLE_ARTICLES` test
    articles, with the counts) and why a group shows "–" instead of a figure."""
    counts = _group_articles(report)
    notes = []
    low = [f"{g} {n}" for g, n in counts.items() if 0 < n < LOW_SAMPLE_ARTICLES]
    if low:
        notes.append(f"{LOW_SAMPLE_MARK} low-sample: computed from fewer than {LOW_SAMPLE_ARTICLES} test articles "
                     f"({', '.join(low)}); one article moves such a figure by 1 point or more, read it as rough.")
    fitted = _fitted(report["methods"])
    for g, n in counts.items():
        if n == 0 or any(_missing(m["metrics"][g][c]) for m in fitted for c in TABLE_COLUMNS):
            notes.append(f"– in {g}: no test article carries {_GROUP_RULE[g]}, "
                         "so the figure is undefined.")
    undefined = {k: why for m in fitted for k, why in m["metrics"].get("ranking", {}).get("undefined", {}).items()}
    notes += [f"– in {k}: {why}." for k, why in undefined.items()]
    notes += [f"– for {m['name']}: {m['error']}." for m in report["methods"].values() if m.get("error")]
    return notes


def markdown_table(report: dict) -> str:
    """The summary table in Markdown (figures in %)."""
    header, rows = table_rows(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    notes = table_notes(report)
    return "\n".join(lines + ([""] + notes if notes else []))


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
    for key, r in report.get("ratio_to_svm", {}).items():
        md.append(f"- {format_ratios(report['methods'][key]['name'], r)}")
    if report.get("ratio_to_peer"):
        md.append(f"- {format_peer_ratios(report['ratio_to_peer'])}")
    md += ["", "| method | wall s | CPU s | peak RSS MiB | measured in |", "|---|---|---|---|---|"]
    md += ["| " + " | ".join("–" if v is None else str(v) for v in row) + " |" for row in cost_rows(report)]
    md.append("")
    md.append(f"- timings (s): {json.dumps({k: round(v, 2) for k, v in report['timings'].items()})}")
    (out_dir / "results.md").write_text("\n".join(md) + "\n")
    plot_f1_by_frequency(report, out_dir / "f1_by_frequency.png")


def plot_f1_by_frequency(report: dict, path: Path) -> None:
    """Bar chart of macro-F1 per label-frequency bucket, one bar per method (PNG)."""
    import matplotlib  # deferred: a slow import plus the backend; only written outputs need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: after choosing the Agg backend

    fig, ax = plt.subplots(figsize=(9, 4.5))
    methods = [(k, m) for k, m in report["methods"].items() if not m.get("error")]
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
