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
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from newsmon.cli.common import console, corpus_or_fail, err, fail, settings_from_env
from newsmon.shared.config import Settings

if TYPE_CHECKING:
    from newsmon.schemas import LabelProposal


def memory_build(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    split: Annotated[str, typer.Option(help="Split to load into the memory.")] = "train",
    limit: Annotated[Optional[int], typer.Option(min=1, help="Read only the first N valid articles.")] = None,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="Then calibrate the scoring on the memory "
                                            "(leave-one-out) and the corpus's validation split, as `newsmon tune`; "
                                            "an earlier calibration of the same inputs is reused.")] = False,
    recalibrate: Annotated[bool, typer.Option("--recalibrate", help="With --calibrate: calibrate even when an "
                                              "earlier calibration has the same inputs.")] = False,
) -> None:
    """Embed the labelled articles of one split and upsert them into the knowledge memory."""
    from newsmon.cli.calibrate import print_calibration, run_calibration  # deferred: see the module docstring
    from newsmon.shared.classifier import Classifier

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
        if calibrate:
            print_calibration(run_calibration(clf, corpus.split("validation"), "memory build", str(corpus.path),
                                              reuse=not recalibrate))
    finally:
        clf.close()


def _memory_where(s: Settings) -> str:
    """The knowledge memory the settings name, in words: the Qdrant server's URL or the embedded engine's folder."""
    from newsmon.shared.memory import engine_of  # deferred: see the module docstring

    return engine_of(s).describe(s)


#: Where the demo's memory is (``make demo`` keeps it apart from the default ``<home>/memory``).
DEMO_MEMORY_HINT = ("The demo's memory is <home>/demo-memory: NEWSMON_MEMORY__PATH={home}/demo-memory shows it.")


def memory_stats() -> None:
    """Articles per language collection of the current model version (labelled / pending). Loads no model."""
    from newsmon.shared.memory import MemoryRouter, SearchFilter, stored_collections  # deferred: see above

    s = settings_from_env()
    where = _memory_where(s)
    names = stored_collections(s)
    if not names:
        console.print(f"the knowledge memory at {where} is empty: fill it with `newsmon memory build --data PATH "
                      "--calibrate` "
                      f"(default NEWSMON_DATA={s.data}), then `newsmon suggest TEXT` proposes labels. "
                      f"{DEMO_MEMORY_HINT.format(home=s.home)}", soft_wrap=True, markup=False)
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
                      f"{', '.join(names)}: `newsmon memory build --calibrate` fills it with this model (or set "
                      "NEWSMON_ENCODER__MODEL to the model of those collections)", soft_wrap=True, markup=False)
        return
    print(json.dumps(out, indent=2))


def memory_index(
    language: Annotated[Optional[list[str]], typer.Option(help="Language memory to index (repeatable; default: "
                                                          "every language of the current model version).")] = None,
    status: Annotated[bool, typer.Option("--status", help="Only show each memory's index: points, indexed, "
                                         "generation.")] = False,
) -> None:
    """Build the HNSW index of the embedded knowledge memory, offline (no worker may have the memory open): after
    `newsmon memory import` or `memory build` of a large archive. A running worker rebuilds it by itself, off the
    request path, once memory.index.rebuild_unindexed points are outside it; a Qdrant server indexes by itself."""
    from newsmon.shared.classifier import model_identity
    from newsmon.shared.memory import (LocalIndex, MemoryLockedError, MemoryRouter,  # deferred: see the module docstring
                                       UnknownLanguageError)

    s = settings_from_env()
    version, dim = model_identity(s)
    router = MemoryRouter(s, version, dim)
    out = {}
    try:
        languages = language or router.languages()
        if not languages:
            msg = (f"the knowledge memory at {_memory_where(s)} has no collection of the model version {version}: "
                   f"fill it with `newsmon memory build` or `newsmon memory import`. {DEMO_MEMORY_HINT.format(home=s.home)}")
            if not status:
                fail(msg)
            console.print(msg, soft_wrap=True, markup=False)  # nothing to show, as `memory stats` says
            return
        for lg in languages:
            try:
                mem = router.memory(lg, create=False)
            except UnknownLanguageError as exc:
                fail(f"--language: {exc}")
            except MemoryLockedError as exc:
                fail(f"{exc}\nStop the workers (or index from the worker: it rebuilds by itself) and run it again.")
            if not isinstance(mem, LocalIndex):
                out[router.collection(lg)] = {"points": mem.count(), "note": "the Qdrant server indexes by itself"}
                continue
            t0 = time.perf_counter()
            if not status:
                mem.optimize()
            st: dict[str, Any] = mem.index_status()
            if not status:
                st["seconds"] = round(time.perf_counter() - t0, 1)
            if st["points"] < mem.index.min_points:
                st["note"] = f"below memory.index.min_points ({mem.index.min_points}): searched exactly, no index needed"
            out[router.collection(lg)] = st
    finally:
        router.close()
    print(json.dumps(out, indent=2))


def suggest(
    text: Annotated[Optional[str], typer.Argument(help="Article text (title + body).")] = None,
    file: Annotated[Optional[Path], typer.Option("--file", "-f", help="Read the article from a file ('-' = stdin).")] = None,
    lang: Annotated[Optional[str], typer.Option(help="ISO 639-1 code, one of the memory's languages; default: "
                                                         "detected among them.")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="Neighbours (k).")] = None,
    tau: Annotated[Optional[float], typer.Option(help="Temperature tau.")] = None,
    threshold: Annotated[Optional[float], typer.Option(help="Proposal threshold.")] = None,
    article_id: Annotated[Optional[str], typer.Option("--id", help="Article id of the proposal (default: "
                                                      "suggest-<hash of the text>).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the proposal as JSON, in the shape POST /v1/suggest answers: a list holding the "
        "LabelProposal (as on the label-proposals topic).")] = False,
) -> None:
    """Propose labels for one article, as the classifier worker does (the label registry's renames and retired
    labels, the label rules' KwEs): each label with its score, source and evidence (the neighbours with their
    titles and similarity, the words a rule matched), and the best labels below the threshold."""
    from newsmon.schemas.base import check_article_id, check_language_code  # deferred: see the module docstring

    text = _article_text(text, file)
    if lang is not None:
        try:
            check_language_code(lang)
        except ValueError as exc:
            fail(f"--lang: {exc}")
    if article_id is not None:
        try:
            check_article_id(article_id)  # the id policy of every path, before any model is loaded
        except ValueError as exc:
            fail(f"--id: {exc}")
    s = settings_from_env(scoring__top_k=top_k, scoring__tau=tau, scoring__threshold=threshold)
    from newsmon.api.models import suggestion_id

    from newsmon.shared.scoring.records import CalibrationUnreadable

    try:
        proposal = _propose_one(s, text, lang, article_id or suggestion_id(text))
    except CalibrationUnreadable as exc:  # the record's path and what to run, not a traceback
        fail(str(exc), 1)
    if as_json:  # the body POST /v1/suggest answers: a list of LabelProposals, here of one
        print(json.dumps([proposal.model_dump(mode="json")], indent=2, ensure_ascii=False))
        return
    from newsmon.render import print_proposal  # deferred: see the module docstring

    print_proposal(console, proposal, neighbours=3, candidates=5, header=_header(proposal))
    if proposal.abstained:
        console.print(f"(no label proposed: {proposal.abstained})", markup=False)
    if not proposal.labels and proposal.candidates:
        console.print("(lower the threshold with --threshold to propose the labels below it)")


def _header(proposal: LabelProposal) -> str:
    """The first line of a proposal in the readable form: the parameters and where they come from, or the
    original of a near-copy that takes its decided labels."""
    from newsmon.render import thresholds_in_words  # deferred: see the module docstring

    r, t = proposal.scoring, proposal.timings
    if r is None:  # a near-copy of a decided article (found in the shared near-duplicate index): its labels
        return (f"{proposal.article_id}: a near-copy of {proposal.duplicate_of}, whose decided labels it takes; "
                f"{t.total_ms:.0f} ms")
    source = f"calibration {r.calibration}" if r.calibration else f"{r.source}: {r.note}" if r.note else r.source
    return (f"{proposal.article_id}: k={r.top_k}, tau={r.tau}, labels above {thresholds_in_words(proposal)} "
            f"({source}); {t.total_ms:.0f} ms; searched {proposal.memory_version}")


def _article_text(text: str | None, file: Path | None) -> str:
    """The article from the argument or ``--file`` (``-``: stdin); exits with a clear message when there is
    none, both are given, or it holds only whitespace."""
    if text is not None and file is not None:
        fail("give the article text as an argument or with --file, not both")
    if file is not None:
        try:
            text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"--file: cannot read {file}: {exc.strerror or exc}")
        if not text.strip():
            where = "stdin" if str(file) == "-" else file
            fail(f"the article in {where} is empty{' (only whitespace)' if text else ''}")
        return text
    if text is None:
        fail("give the article text as an argument or with --file")
    if not text.strip():
        fail(f"the article text is empty{' (only whitespace)' if text else ''}: give its title and body")
    return text


def _propose_one(s: Settings, text: str, lang: str | None, article_id: str) -> LabelProposal:
    """The :class:`~newsmon.schemas.LabelProposal` of one article through the classifier worker's stages
    (:mod:`newsmon.workers.proposing`, as ``POST /v1/suggest`` with a text): the text read as the worker reads an
    article (cleaned, cut to ``worker.max_text_chars``), looked up in the near-duplicate index, embedded, scored with
    the neighbours' labels through the label registry (renames, retired labels), then the registry's label rules
    (KwEs); nothing is written (no pending point, nothing indexed). The article is the event ``POST /v1/suggest``
    makes of a text (:class:`~newsmon.api.models.SuggestText`: outlet ``api``, country ``ZZ``, so a rule with a
    country, outlet or section filter does not match it). Exits with a clear message when the memory is empty, the
    language has no collection, or the article is refused as the worker would refuse it."""
    from newsmon.api.models import SuggestText  # deferred: see the module docstring
    from newsmon.shared.memory import UnknownLanguageError
    from newsmon.workers.proposing import open_pipeline, proposals_of, validated

    try:
        pipeline = open_pipeline(s)
    except ValueError as exc:  # the label registry's file does not parse: it names the file
        fail(str(exc), 1)
    clf = pipeline.classifier
    try:
        known = clf.languages()
        if not known:
            fail("the knowledge memory is empty for this model: run `newsmon memory build --data PATH --calibrate` "
                 "first")
        lang = clf.language_of([text], [lang])[0] or known[0]
        if lang not in known:  # never a new empty collection: the languages there are
            fail(f"--lang: {UnknownLanguageError(lang, known)}")
        elif clf.router.labelled_count(lang) < s.memory.min_language_articles:
            err.print(f"[yellow]note:[/yellow] the {lang!r} memory is small; searching it with "
                      f"{', '.join(known)} (cross-lingual)")
        event = SuggestText(text=text, lang=lang, article_id=article_id).event(lang)
        batch, rejected = validated(pipeline, [event], keep=False)
        if rejected:
            fail(f"the article is refused, as the classifier worker would refuse it: {rejected[0][1].reason}")
        return proposals_of(pipeline, batch)[0]
    finally:
        pipeline.dedup.close()
        clf.close()
