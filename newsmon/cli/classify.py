"""``newsmon memory build``, ``newsmon memory stats`` and ``newsmon suggest``: the classifier from the
command line.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from newsmon.cli.common import console, corpus_or_fail, err, fail, settings_from_env


def memory_build(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    split: Annotated[str, typer.Option(help="Split to load into the memory.")] = "train",
    limit: Annotated[Optional[int], typer.Option(help="Read only the first N valid articles.")] = None,
) -> None:
    """Embed the labelled articles of one split and upsert them into the knowledge memory."""
    from newsmon.shared.classifier import Classifier  # deferred: see the module docstring

    s = settings_from_env(data=data)
    corpus = corpus_or_fail(s, limit)  # reports the bad lines
    articles = [a for a in corpus.articles if a.split == split and a.labels]
    if not articles:
        fail(f"no labelled {split} articles in {corpus.path}")
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


def memory_stats() -> None:
    """Articles per language collection of the current model version (labelled / pending). Loads no model."""
    from newsmon.shared.memory import MemoryRouter, SearchFilter, stored_collections  # deferred: see above

    s = settings_from_env()
    where = s.memory.url and f"the Qdrant server {s.memory_mode()['url']}" or str(s.memory_mode()["path"])
    names = stored_collections(s)
    if not names:
        console.print(f"the knowledge memory at {where} is empty: fill it with `newsmon memory build --data PATH` "
                      f"(default NEWSMON_DATA={s.data}), then `newsmon suggest TEXT` proposes labels",
                      soft_wrap=True, markup=False)
        return
    # deferred, and only for a memory with collections: model_identity reads the checkpoint's config.json
    from newsmon.shared.classifier import model_identity

    version, dim = model_identity(s)
    router = MemoryRouter(s, version, dim)
    try:
        out = {}
        for lang in router.languages():
            mem = router.memory(lang)
            out[router.collection(lang)] = {"labelled": mem.count(SearchFilter(labelled=True)),
                                            "pending": mem.count(SearchFilter(labelled=False))}
    finally:
        router.close()
    if not out:
        console.print(f"the knowledge memory at {where} has no collection of the model version {version}, only "
                      f"{', '.join(names)}: `newsmon memory build` fills it with this model (or set "
                      "NEWSMON_ENCODER__MODEL to the model of those collections)", soft_wrap=True, markup=False)
        return
    print(json.dumps(out, indent=2))


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
    from newsmon.schemas.base import check_language_code  # deferred: see the module docstring (pydantic)
    from newsmon.shared.classifier import Classifier  # deferred: see the module docstring

    if file is not None:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    if not text or not text.strip():
        fail("give the article text as an argument or with --file")
    if lang is not None:
        try:
            check_language_code(lang)
        except ValueError as exc:
            fail(f"--lang: {exc}")
    s = settings_from_env(rae__top_k=top_k, rae__tau=tau, rae__threshold=threshold)
    clf = Classifier(s)
    try:
        known = clf.languages()
        if not known:
            fail("the knowledge memory is empty for this model: run `newsmon memory build` first")
        if lang and lang not in known:
            err.print(f"[yellow]note:[/yellow] no {lang!r} memory; searching {', '.join(known)} (cross-lingual)")
        elif lang and clf.router.labelled_count(lang) < s.memory.min_language_articles:
            err.print(f"[yellow]note:[/yellow] the {lang!r} memory is small; searching it with "
                      f"{', '.join(known)} (cross-lingual)")
        t0 = time.perf_counter()
        # score every label with support (threshold 0), then split at the configured threshold
        everything = s.rae.model_copy(update={"threshold": 0.0})
        proposals, _ = clf.propose([text], [lang], rae=everything)
        ms = 1000 * (time.perf_counter() - t0)
    finally:
        clf.close()
    _print_suggestion(proposals[0], s.rae, ms, as_json)


def _print_suggestion(everything, rae, ms: float, as_json: bool) -> None:
    """Print the labels of a :class:`~newsmon.shared.predictors.Proposal` above ``rae.threshold`` (JSON or a
    table), or the best candidates below it."""
    candidates = everything.labels
    p = type(everything)([x for x in candidates if x.score > rae.threshold])
    if as_json:
        print(json.dumps({"labels": [{"label": x.label, "score": x.score, "neighbours": [
            {"article_id": a, "similarity": sim} for a, sim in x.neighbours]} for x in p.labels],
            "latency_ms": ms}, ensure_ascii=False, indent=2))
        return
    if not p.labels:
        console.print(f"no label above the threshold {rae.threshold} ({ms:.0f} ms)")
        if candidates:
            best = ", ".join(f"{x.label} {x.score:.3f}" for x in candidates[:5])
            console.print(f"best candidates below it: {best} (lower it with --threshold)")
        return
    table = Table(title=f"proposals ({ms:.0f} ms; k={rae.top_k}, tau={rae.tau}, threshold={rae.threshold})")
    table.add_column("label")
    table.add_column("score", justify="right")
    table.add_column("supporting neighbours (id: cosine)")
    for x in p.labels:
        table.add_row(x.label, f"{x.score:.3f}", ", ".join(f"{a}: {sim:.3f}" for a, sim in x.neighbours))
    console.print(table)
