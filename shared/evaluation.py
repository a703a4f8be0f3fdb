"""Offline evaluation: RAE-XMC and its baselines on a labelled corpus, reported like RAE-XMC's Table 7.

The train split is the knowledge memory (and the baselines' training set); the validation split is used
only by ``--tune``; every figure is on the test split. Outputs: a printed table, ``results.json``,
``results.md`` and ``f1_by_frequency.png`` in the output folder.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import structlog

from newsmon.shared.config import RaeSettings, Settings
from newsmon.shared.data import Article, Corpus
from newsmon.shared.metrics import evaluate, f1_by_frequency
from newsmon.shared.predictors import (MLKNN, LabelVocab, Retrieval, neighbour_counts, one_nn_scores,
                               rae_xmc_scores)

log = structlog.get_logger(__name__)

METHODS = ("rae", "zshot", "mlknn", "svm", "logreg")
METHOD_NAMES = {"rae": "RAE-XMC", "rae_tuned": "RAE-XMC (tuned)", "zshot": "zero-shot 1-NN",
                "mlknn": "ML-KNN", "svm": "TF-IDF + SVM", "logreg": "TF-IDF + LogReg"}
TABLE_COLUMNS = ("uF1", "uP", "uR", "F1", "P", "R", "Acc")
#: Search space of --tune (RAE-XMC eq. 8 parameters).
TUNE_TOP_K_MAX = 100


class EvalInputError(ValueError):
    """The corpus or the options cannot be evaluated (unknown method, a missing split)."""


@dataclass
class MethodResult:
    """Metrics (see :func:`shared.metrics.evaluate`), timings (seconds) and parameters of one method."""

    method: str
    metrics: dict
    seconds: float
    params: dict = field(default_factory=dict)
    f1_buckets: list = field(default_factory=list)


def _retrieve(memories: dict, vectors: np.ndarray, langs: Sequence[str], top_k: int,
              exclude_self: Sequence[str] | None = None) -> Retrieval:
    """Search each article's language collection; ``exclude_self`` drops the query's own id (leave-one-out)."""
    from newsmon.shared.memory import SearchFilter

    k = top_k + (1 if exclude_self is not None else 0)
    rows: list = [None] * len(langs)
    for lang in sorted(set(langs)):
        idx = [i for i, lg in enumerate(langs) if lg == lang]
        if lang not in memories:
            for i in idx:
                rows[i] = []
            continue
        hits = memories[lang].search(vectors[idx], k, SearchFilter(labelled=True))
        for i, h in zip(idx, hits):
            if exclude_self is not None:
                h = [n for n in h if n.article_id != exclude_self[i]][:top_k]
            rows[i] = h
    return Retrieval.from_neighbours(rows, top_k)


def tune_rae(val_retrieval: Retrieval, Y_val, vocab: LabelVocab, n_trials: int, seed: int = 13,
             storage: str | None = None, study_name: str | None = None) -> tuple[dict, float, float]:
    """Optuna (TPE) search of top-k, tau, lambda and threshold on the validation split.

    Objective: subset accuracy (micro-F1 is recorded as a trial attribute beside it).

    Args:
        storage: Optuna storage URL (``sqlite:///...``, ``postgresql://...``); None = in memory.
        study_name: name of the study in the storage (an existing one is continued).

    Returns:
        (best params as RaeSettings fields, best subset accuracy, micro-F1 of the best trial).
    """
    import optuna
    from sklearn.metrics import accuracy_score, f1_score

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    Yt = np.asarray(Y_val.todense()).astype(bool)
    label_rows = val_retrieval.label_matrix(vocab)
    K = val_retrieval.k

    def objective(trial: "optuna.Trial") -> float:
        k = trial.suggest_int("top_k", 1, K)
        tau = trial.suggest_float("tau", 0.005, 1.0, log=True)
        lam = trial.suggest_float("lam", 0.5, 2.0)
        thr = trial.suggest_float("threshold", 0.05, 0.95)
        p = rae_xmc_scores(val_retrieval.sims, label_rows, k, tau, lam, len(vocab)) > thr
        p = p[:, :Yt.shape[1]]
        trial.set_user_attr("micro_f1", float(f1_score(Yt, p, average="micro", zero_division=0)))
        return float(accuracy_score(Yt, p))

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed),
                                storage=storage, study_name=study_name, load_if_exists=True)
    # start from the research defaults so the search can only keep or improve them on validation
    study.enqueue_trial({"top_k": min(50, K), "tau": 0.04, "lam": 1.0, "threshold": 0.5})
    study.optimize(objective, n_trials=n_trials, show_progress_bar=False)
    best = study.best_trial
    return dict(best.params), float(best.value), float(best.user_attrs["micro_f1"])


def _label_matrix(vocab: LabelVocab, articles: Sequence[Article]):
    return vocab.encode([a.labels for a in articles])


def _resize(m, n_cols: int):
    """A CSR label matrix widened to ``n_cols`` columns (the vocabulary grew after it was encoded)."""
    return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], n_cols))


def run_eval(corpus: Corpus, methods: Sequence[str], settings: Settings, tune: int = 0,
             mlknn_k: int = 10, out_dir: Path | None = None, progress: bool = True,
             tune_storage: str | None = None, study_name: str | None = None) -> dict:
    """Evaluate ``methods`` (subset of :data:`METHODS`) on ``corpus``; returns the JSON-able report.

    Raises:
        EvalInputError: an unknown method, or a corpus without train or test articles.
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise EvalInputError(f"unknown methods {sorted(unknown)}; choose from {','.join(METHODS)}")
    train, val, test = corpus.split("train"), corpus.split("validation"), corpus.split("test")
    if not train or not test:
        raise EvalInputError(f"{corpus.path}: need train and test articles (found {len(train)} / {len(test)})")
    if tune and not val:
        raise EvalInputError("--tune needs validation articles")
    started = time.perf_counter()
    vocab = LabelVocab(lb for a in train for lb in a.labels)
    n_train_labels = len(vocab)
    Y_train = _label_matrix(vocab, train)
    Y_val = _label_matrix(vocab, val) if val else None
    Y_test = _label_matrix(vocab, test)
    L = len(vocab)  # train labels first, then labels seen only in validation / test
    Y_train, Y_test = _resize(Y_train, L), _resize(Y_test, L)
    Y_val = _resize(Y_val, L) if Y_val is not None else None
    train_counts = np.zeros(L)
    train_counts[:n_train_labels] = np.asarray(Y_train.sum(axis=0)).ravel()[:n_train_labels]
    results: list[MethodResult] = []
    report: dict = {"corpus": corpus.summary(), "methods": {}, "timings": {}}

    dense = [m for m in methods if m in ("rae", "zshot", "mlknn")]
    if dense:
        from newsmon.shared.encoder import Encoder
        from newsmon.shared.memory import EdgeMemory, collection_name

        t0 = time.perf_counter()
        enc = Encoder(settings.encoder, settings.home)
        report["timings"]["encoder_load_s"] = time.perf_counter() - t0
        report["encoder"] = {"model": enc.model_id, "pooling": enc.settings.pooling,
                             "max_length": enc.max_length, "device": enc.device}
        t0 = time.perf_counter()
        texts = [a.text for a in train]
        train_vecs = enc.encode(texts, role="passage", progress=progress)
        q_articles = test + val
        q_vecs = enc.encode([a.text for a in q_articles], role="query", progress=progress)
        test_vecs, val_vecs = q_vecs[:len(test)], q_vecs[len(test):]
        report["timings"]["embed_s"] = time.perf_counter() - t0
        enc.close()
        K = max(settings.rae.top_k, TUNE_TOP_K_MAX if tune else 0, mlknn_k)
        with tempfile.TemporaryDirectory(prefix="newsmon-eval-") as tmp:
            t0 = time.perf_counter()
            memories = {}
            for lang in sorted({a.lang for a in train}):
                idx = [i for i, a in enumerate(train) if a.lang == lang]
                mem = EdgeMemory(tmp, collection_name("eval", lang, enc.model_id), enc.dim)
                mem.upsert([train[i].id for i in idx], train_vecs[idx], [train[i].labels for i in idx],
                           [{"lang": lang} for _ in idx])
                memories[lang] = mem
            report["timings"]["memory_build_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            test_r = _retrieve(memories, test_vecs, [a.lang for a in test], K)
            val_r = _retrieve(memories, val_vecs, [a.lang for a in val], K) if tune else None
            train_r = _retrieve(memories, train_vecs, [a.lang for a in train], mlknn_k,
                                exclude_self=[a.id for a in train]) if "mlknn" in methods else None
            report["timings"]["search_s"] = time.perf_counter() - t0
            report["timings"]["search_ms_per_query"] = 1000 * report["timings"]["search_s"] / max(
                1, len(test) + (len(val) if tune else 0) + (len(train) if train_r else 0))
            for mem in memories.values():
                mem.close()
        test_rows = test_r.label_matrix(vocab)

        if "rae" in methods:
            rs: RaeSettings = settings.rae
            t0 = time.perf_counter()
            sc = rae_xmc_scores(test_r.sims, test_rows, rs.top_k, rs.tau, rs.lam, L)
            results.append(MethodResult("rae", {}, time.perf_counter() - t0,
                                        {"top_k": rs.top_k, "tau": rs.tau, "lam": rs.lam,
                                         "threshold": rs.threshold}))
            results[-1].metrics = evaluate(Y_test, sc > rs.threshold, sc, train_counts)
            results[-1].f1_buckets = f1_by_frequency(Y_test, sc > rs.threshold, train_counts)
            if tune:
                t0 = time.perf_counter()
                best, val_acc, val_f1 = tune_rae(val_r, Y_val, vocab, tune, storage=tune_storage,
                                                 study_name=study_name)
                tune_s = time.perf_counter() - t0
                sc = rae_xmc_scores(test_r.sims, test_rows, best["top_k"], best["tau"], best["lam"], L)
                pred = sc > best["threshold"]
                results.append(MethodResult("rae_tuned", evaluate(Y_test, pred, sc, train_counts), tune_s,
                                            {**best, "trials": tune, "validation_Acc": val_acc,
                                             "validation_uF1": val_f1}))
                results[-1].f1_buckets = f1_by_frequency(Y_test, pred, train_counts)
        if "zshot" in methods:
            t0 = time.perf_counter()
            sc = one_nn_scores(test_r.sims, test_rows, L)
            results.append(MethodResult("zshot", evaluate(Y_test, sc > 0, sc, train_counts),
                                        time.perf_counter() - t0))
            results[-1].f1_buckets = f1_by_frequency(Y_test, sc > 0, train_counts)
        if "mlknn" in methods:
            t0 = time.perf_counter()
            train_rows = train_r.label_matrix(vocab)
            c_train = neighbour_counts(train_rows, len(train), mlknn_k, mlknn_k, L)
            model = MLKNN(k=mlknn_k).fit(Y_train, c_train)
            c_test = neighbour_counts(test_rows, len(test), K, mlknn_k, L)
            sc = model.predict_proba(c_test)
            results.append(MethodResult("mlknn", evaluate(Y_test, sc > 0.5, sc, train_counts),
                                        time.perf_counter() - t0, {"k": mlknn_k, "s": model.s}))
            results[-1].f1_buckets = f1_by_frequency(Y_test, sc > 0.5, train_counts)

    for kind in ("svm", "logreg"):
        if kind not in methods:
            continue
        from newsmon.shared.baselines import TfidfOneVsAll

        t0 = time.perf_counter()
        if progress:
            log.info(f"fitting TF-IDF + {kind}: one classifier per training label", labels=n_train_labels)
        model = TfidfOneVsAll(kind=kind).fit([a.text for a in train], Y_train)
        sc = model.scores([a.text for a in test])
        pred = sc > model.threshold
        results.append(MethodResult(kind, evaluate(Y_test, pred, sc, train_counts), time.perf_counter() - t0))
        results[-1].f1_buckets = f1_by_frequency(Y_test, pred, train_counts)

    report["timings"]["total_s"] = time.perf_counter() - started
    for r in results:
        report["methods"][r.method] = {"name": METHOD_NAMES[r.method], "metrics": r.metrics,
                                       "seconds": r.seconds, "params": r.params, "f1_by_frequency": r.f1_buckets}
    report["label_groups"] = {"frequent": int((train_counts >= 500).sum()), "rare": int((train_counts <= 10).sum()),
                              "all": int(L)}
    ratios = {}
    if "svm" in report["methods"]:
        svm = report["methods"]["svm"]["metrics"]["all"]
        for key in ("rae", "rae_tuned"):
            if key in report["methods"]:
                m = report["methods"][key]["metrics"]["all"]
                ratios[key] = {"uF1": _ratio(m["uF1"], svm["uF1"]), "Acc": _ratio(m["Acc"], svm["Acc"])}
    report["ratio_to_svm"] = ratios
    if out_dir is not None:
        write_outputs(report, Path(out_dir))
    return report


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b and not math.isnan(b) else float("nan")


def _fmt(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def table_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the Table-7-like summary: method; uF1 uP uR F1 P R Acc for all / frequent / rare;
    P@1 P@3 P@5 nDCG@5 (percentages)."""
    header = ["method"] + [f"{g}:{c}" for g in ("all", "freq", "rare") for c in TABLE_COLUMNS] + \
        ["P@1", "P@3", "P@5", "nDCG@5"]
    rows = []
    for key, m in report["methods"].items():
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2, default=float))
    c = report["corpus"]
    lg = report["label_groups"]
    md = [f"# newsmon eval: {c['path']}", "",
          f"Train {c['train']}, validation {c['validation']}, test {c['test']} articles; {lg['all']} labels "
          f"({lg['frequent']} frequent >= 500, {lg['rare']} rare <= 10 training occurrences); "
          f"{c['bad_lines']} bad lines skipped. Figures in %, on the test split.", "",
          markdown_table(report), ""]
    for key, m in report["methods"].items():
        if m["params"]:
            md.append(f"- {m['name']}: {json.dumps(m['params'], default=float)}")
    md.append(f"- timings (s): {json.dumps({k: round(v, 2) for k, v in report['timings'].items()})}")
    (out_dir / "results.md").write_text("\n".join(md) + "\n")

    fig, ax = plt.subplots(figsize=(9, 4.5))
    methods = list(report["methods"].items())
    buckets = [b["bucket"] for b in methods[0][1]["f1_by_frequency"]] if methods else []
    width = 0.8 / max(1, len(methods))
    for i, (key, m) in enumerate(methods):
        ys = [b["F1"] if b["F1"] == b["F1"] else 0.0 for b in m["f1_by_frequency"]]
        ax.bar(np.arange(len(buckets)) + i * width, ys, width, label=m["name"])
    ax.set_xticks(np.arange(len(buckets)) + width * (len(methods) - 1) / 2, buckets)
    ax.set_xlabel("training occurrences of the label")
    ax.set_ylabel("macro-F1 on test")
    ax.set_title(f"F1 per label-frequency bucket — {Path(c['path']).parent.name}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "f1_by_frequency.png", dpi=110)
    plt.close(fig)
