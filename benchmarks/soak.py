"""Soak benchmark of the stream under faults (not in CI): N articles through the real workers while faults are
injected at random, then checks that nothing was lost.

The stream: sentinews_sl and reuters21578_en texts, interleaved and recycled with new ids (``soak-<i>``; a recycled
text is a near-copy of its first use), published at ``--rate`` articles/s, with ``--poison`` of the messages
poison (invalid JSON, a missing field, an unknown ``schema_version``, too large, a lone surrogate the encoder
rejects). One message in every ``--pathological`` is a pathological article instead: a valid article event
(title null) whose body is, in turn, 600,000 zero-width spaces (U+200B; 1.8 MB, under the 2 MB message limit),
1 MB of the letter ``a``, one letter followed by 200,000 combining marks (two classes, alternating: the order
NFC sorts), 300,000 random letters without a space, 100,000 ``&#269;`` HTML entities, or 100,000 nested HTML
tags around a few words. The product may propose it (abstaining is fine) or dead-letter it with a reason.
A moderator decision (confirm the proposal, add ``soak:<k>``) is sent for ``--decide`` of the fresh
proposals. The workers run as one ``newsmon worker all`` process (embedded memory) with a fault hook.

Faults, one at a time, exponential inter-arrival times with mean ``--fault-every`` seconds, chosen at random:

- **SIGKILL** of the worker process, restarted at once;
- **broker outage** of 10 s: the Tansu process is stopped (SIGSTOP) and continued (SIGCONT). Tansu keeps its log
  in memory only, so a real restart would lose every topic; the stop gives the clients the same unreachable
  broker (requests time out, connections stall) without losing the log;
- **memory outage** of 10 s: every knowledge-memory call in the worker raises ``MemoryUnavailableError`` (the
  hook checks a flag file), as a Qdrant server outage does.

At the end: every valid article proposed at least once, every poison message in ``articles.dlq`` with its reason
code, every pathological article proposed or dead-lettered (with its reason and stage; neither is lost), every
decision applied to the memory (zero decisions lost), and no batch held past the stage budget
(``--stage-budget``, ``NEWSMON_WORKER__STAGE_BUDGET_S``). Prints articles/s, repeats (proposals of the same
article and revision more than once), p99 latency (publish -> proposal, and the worker's batch time), the
longest batch and, per pathological article, what became of it and how long it took.

Usage (repository root)::

    .venv/bin/python benchmarks/soak.py --n 20000 --rate 6   # about 1 hour on 2 cores
    .venv/bin/python benchmarks/soak.py --n 1500 --pathological 100 --fault-every 60   # a short check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from record import BenchmarkRecord
from datetime import UTC

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]

WORKER = """
import os, pathlib
from newsmon.shared.memory import MemoryUnavailableError
from newsmon.shared.memory.common import QdrantAdapter
FLAG = pathlib.Path(os.environ["SOAK_MEMORY_DOWN"])
def faulty(fn):
    def call(*a, **k):
        if FLAG.exists():
            raise MemoryUnavailableError("soak: memory outage")
        return fn(*a, **k)
    return call
for name in ("upsert", "delete", "set_labels", "get", "search", "count", "scroll"):
    setattr(QdrantAdapter, name, faulty(getattr(QdrantAdapter, name)))
from newsmon.cli import app
app(["worker", "all"])
"""

FAULT_KINDS = ("sigkill", "broker_outage", "memory_outage")
POISON_KINDS = ("invalid_json", "schema_violation", "unsupported_version", "too_large", "text_rejected")
PATHOLOGICAL_KINDS = ("zero_width", "one_letter", "combining", "no_spaces", "entities", "nested_html")


def poison(kind: str, key: str, ev: dict) -> bytes:
    """A poison message of ``kind`` (its expected dead-letter reason) built from a valid event ``ev``."""
    if kind == "invalid_json":
        return b'{"article_id": "' + key.encode() + b'", "body": '
    if kind == "schema_violation":
        return json.dumps({k: v for k, v in ev.items() if k != "body"} | {"article_id": key}).encode()
    if kind == "unsupported_version":
        return json.dumps(ev | {"article_id": key, "schema_version": 99}).encode()
    if kind == "too_large":
        return json.dumps(ev | {"article_id": key, "body": "beseda " * 400_000}).encode()
    return json.dumps(ev | {"article_id": key, "body": ev["body"][:300] + " \ud800 konec"}).encode()


def pathological(kind: str, key: str, ev: dict, rng: random.Random) -> bytes:
    """A valid article event of ``kind`` (:data:`PATHOLOGICAL_KINDS`, see the module docstring) built from a valid
    event ``ev``: its body replaced, its title null (the body is all the text there is)."""
    if kind == "zero_width":
        body = "\u200b" * 600_000
    elif kind == "one_letter":
        body = "a" * 1_000_000
    elif kind == "combining":
        body = "e" + "\u0301\u0316" * 100_000  # combining classes 230 and 220: NFC has to reorder every pair
    elif kind == "no_spaces":
        body = "".join(rng.choices("abcdefghijklmnopqrstuvwxyzčšž", k=300_000))
    elif kind == "entities":
        body = "&#269;" * 100_000
    else:
        body = "<div><b>" * 50_000 + "globoko gnezdeno besedilo deeply nested text" + "</b></div>" * 50_000
    from newsmon.schemas import ArticleEvent

    value = ArticleEvent.model_validate(ev | {"article_id": key, "title": None, "body": body}).to_bytes()
    assert len(value) < 2_000_000, (kind, len(value))  # under worker.max_message_bytes: not a too_large poison
    return value


class Faults(threading.Thread):
    """Injects one fault at a time at random (see the module docstring); ``counts`` per kind."""

    def __init__(self, soak: Soak, every_s: float, seed: int, kinds: tuple[str, ...] = FAULT_KINDS):
        super().__init__(daemon=True)
        self.soak, self.every_s, self.rng = soak, every_s, random.Random(seed)
        self.stop = threading.Event()
        self.kinds = kinds
        self.counts = dict.fromkeys(FAULT_KINDS, 0)

    def run(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1 / self.every_s)):
            kind = self.rng.choice(self.kinds)
            self.counts[kind] += 1
            print(f"[{self.soak.elapsed():7.1f} s] fault: {kind}", flush=True)
            if kind == "sigkill":
                self.soak.kill_and_restart()
            elif kind == "broker_outage":
                os.kill(self.soak.broker.proc.pid, signal.SIGSTOP)
                self.stop.wait(10)
                os.kill(self.soak.broker.proc.pid, signal.SIGCONT)
            else:
                self.soak.memory_down.touch()
                self.stop.wait(10)
                self.soak.memory_down.unlink()


class Soak:
    """The broker, the worker process and the collectors of one soak run."""

    def __init__(self, args, s, broker, tmp: Path):
        self.args, self.s, self.broker, self.tmp = args, s, broker, tmp
        self.memory_down = tmp / "memory-down"
        self.t0 = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.restarts = 0
        self.crashes: list[tuple[float, int, str]] = []  # (elapsed s, exit status, log file) of a worker that exited

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def env(self) -> dict:
        s, k = self.s, self.s.kafka
        return {**os.environ, "NEWSMON_HOME": str(s.home), "NEWSMON_ENCODER__MODEL": s.encoder.model,
                "NEWSMON_MEMORY__PATH": str(s.memory.path), "NEWSMON_ENCODER__MAX_LENGTH": str(s.encoder.max_length),
                "NEWSMON_KAFKA__BOOTSTRAP_SERVERS": k.bootstrap_servers, "NEWSMON_KAFKA__SESSION_TIMEOUT_MS": "6000",
                "NEWSMON_KAFKA__TOPIC_PARTITIONS": "2", "NEWSMON_WORKER__BATCH_MAX_MESSAGES": str(self.args.batch),
                "NEWSMON_WORKER__BATCH_MAX_MS": "200", "NEWSMON_WORKER__HTTP_PORT": str(self.args.http_port),
                "NEWSMON_WORKER__HTTP_HOST": "127.0.0.1", "NEWSMON_WORKER__PAUSE_BACKOFF_S": "1",
                "NEWSMON_WORKER__PAUSE_BACKOFF_MAX_S": "8", "NEWSMON_LOG_FORMAT": "json",
                "NEWSMON_WORKER__STAGE_BUDGET_S": str(self.args.stage_budget),
                "SOAK_MEMORY_DOWN": str(self.memory_down)}

    def start_worker(self) -> None:
        log = open(self.tmp / f"worker-{self.restarts}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], env=self.env(), cwd=REPO, stdout=log,
                                     stderr=subprocess.STDOUT)

    def kill_and_restart(self) -> None:
        with self.lock:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(60)
            self.restarts += 1
            self.start_worker()

    def restart_if_exited(self) -> None:
        """A worker that exited by itself (not a SIGKILL of ours) is counted as a crash and started again."""
        with self.lock:
            rc = self.proc.poll()
            if rc is None:
                return
            log = self.tmp / f"worker-{self.restarts}.log"
            self.crashes.append((round(self.elapsed(), 1), rc, str(log)))
            print(f"[{self.elapsed():7.1f} s] WORKER EXITED BY ITSELF with status {rc}: {log}", flush=True)
            self.restarts += 1
            self.start_worker()

    def worker_logs(self) -> list[dict]:
        """The JSON log lines of every worker process of the run (other lines skipped)."""
        out = []
        for f in sorted(self.tmp.glob("worker-*.log")):
            for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        return out

    def stop_worker(self) -> int:
        with self.lock:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(120)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=20_000, help="articles streamed (poison included)")
    p.add_argument("--sl", default="../shared/data/sentinews_sl")
    p.add_argument("--en", default="../shared/data/reuters21578_en")
    p.add_argument("--memory", type=int, default=300, help="train articles per corpus in the knowledge memory")
    p.add_argument("--rate", type=float, default=20.0, help="articles published per second")
    p.add_argument("--poison", type=float, default=0.01, help="share of poison messages")
    p.add_argument("--pathological", type=int, default=500,
                   help="one pathological article in every N messages (0: none)")
    p.add_argument("--stage-budget", type=float, default=60.0, help="worker.stage_budget_s (seconds)")
    p.add_argument("--decide", type=float, default=0.1, help="share of fresh proposals that get a decision")
    p.add_argument("--fault-every", type=float, default=90.0, help="mean seconds between faults")
    p.add_argument("--faults", default=",".join(FAULT_KINDS), help="fault kinds to draw from (comma-separated)")
    p.add_argument("--max-length", type=int, default=128, help="encoder max_length (tokens)")
    p.add_argument("--batch", type=int, default=32, help="worker micro-batch")
    p.add_argument("--max-minutes", type=float, default=180.0, help="give up (exit 1) after this long")
    p.add_argument("--http-port", type=int, default=0, help="worker /metrics port (0: a free one)")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


def stream_events(args, corpora) -> list[tuple[str, bytes, str | None, str | None]]:
    """``(key, value, poison kind or None, pathological kind or None)`` in publish order: texts interleaved across
    the corpora, recycled; message ``i`` is pathological when ``i + 1`` is a multiple of ``--pathological``."""
    from newsmon.demo import article_event

    rng = random.Random(args.seed)
    pools = [list(c.articles) for c in corpora]
    texts = [a for group in zip(*pools) for a in group]  # interleaved, then the rest of the longer corpus
    texts += [a for p in pools for a in p[min(map(len, pools)):]]
    out = []
    n_poison = n_path = 0
    for i in range(args.n):
        a = texts[i % len(texts)]
        key = f"soak-{i}"
        ev = article_event(a).model_copy(update={"article_id": key})
        if args.pathological and (i + 1) % args.pathological == 0:
            kind = PATHOLOGICAL_KINDS[n_path % len(PATHOLOGICAL_KINDS)]
            n_path += 1
            out.append((key, pathological(kind, key, json.loads(ev.to_bytes()), rng), None, kind))
        elif rng.random() < args.poison:
            kind = POISON_KINDS[n_poison % len(POISON_KINDS)]
            n_poison += 1
            out.append((key, poison(kind, key, json.loads(ev.to_bytes())), kind, None))
        else:
            out.append((key, ev.to_bytes(), None, None))
    return out


class Collector(threading.Thread):
    """Reads the proposals and the dead letters; sends a decision for ``--decide`` of the fresh proposals."""

    def __init__(self, s, decide: float, seed: int):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

        from newsmon.schemas import dead_letter_topic

        super().__init__(daemon=True)
        k = s.kafka
        self.s, self.decide, self.rng = s, decide, random.Random(seed)
        self.c = Consumer({**k.client_config(), "group.id": f"soak-{seed}", "enable.auto.commit": False})
        # assigned, not subscribed: no group session, so a broker outage cannot make it read everything again
        self.c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in (k.topic_proposals,
                       dead_letter_topic(k.topic_articles)) for p in range(k.topic_partitions)])
        self.p = Producer({**k.client_config(), "enable.idempotence": True})
        self.dlq_topic = dead_letter_topic(k.topic_articles)
        self.first: dict[str, float] = {}          # article id -> first proposal's timestamp (ms)
        self.proposal: dict[str, dict] = {}        # article id -> what its first proposal said (labels, ...)
        self.seen: dict[tuple[str, int], int] = {}  # (article id, revision) -> times received
        self.batch_ms: list[float] = []            # the first proposal's batch time, per article
        self.max_batch: dict = {}                  # the timings of the longest batch among all proposals
        self.dead: dict[str, str] = {}             # key -> reason code
        self.dead_info: dict[str, dict] = {}       # key -> stage, timestamp (ms), detail of its first dead letter
        self.decided: dict[str, tuple[str, ...]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        from newsmon.schemas import LabelProposal, parse_event

        while not self.stop.is_set():
            m = self.c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            if m.topic() == self.dlq_topic:
                h = dict(m.headers() or ())
                k = m.key().decode()
                self.dead[k] = h.get("newsmon-reason", b"?").decode()
                self.dead_info.setdefault(k, {"stage": h.get("newsmon-stage", b"-").decode(), "ts": m.timestamp()[1],
                                              "detail": h.get("newsmon-error", b"").decode(errors="replace")[:300]})
                continue
            p = parse_event(LabelProposal, m.value())
            key = (p.article_id, p.revision)
            self.seen[key] = self.seen.get(key, 0) + 1
            t = p.timings
            if t is not None and t.total_ms > self.max_batch.get("total_ms", -1.0):
                self.max_batch = {"article_id": p.article_id, **t.model_dump()}
            if p.article_id not in self.first:
                self.first[p.article_id] = m.timestamp()[1]
                self.batch_ms.append(t.total_ms if t else 0.0)
                self.proposal[p.article_id] = {"labels": len(p.labels), "abstained": p.abstained,
                                               "duplicate_of": p.duplicate_of, "batch_ms": t.total_ms if t else 0.0}
                if p.duplicate_of is None and self.rng.random() < self.decide:
                    self.send_decision(p)
        self.c.close()
        self.p.flush(30)

    def send_decision(self, p) -> None:
        from datetime import datetime

        from newsmon.schemas import LabelDecision, ModeratorDecision

        items = [LabelDecision(label=x.label, action="confirmed") for x in p.labels]
        items.append(LabelDecision(label=f"soak:{len(self.decided) % 50}", action="added"))
        d = ModeratorDecision(article_id=p.article_id, moderator="soak", decided_at=datetime.now(UTC),
                              decisions=items)
        self.decided[p.article_id] = tuple(d.accepted_labels)
        self.p.produce(self.s.kafka.topic_decisions, key=d.kafka_key(), value=d.to_bytes())
        self.p.poll(0)


def build_memory(s, corpora, per_corpus: int) -> None:
    from newsmon.shared.classifier import Classifier

    clf = Classifier(s)
    for c in corpora:
        clf.add_articles(c.split("train")[:per_corpus], progress=True)
    clf.close()  # releases the embedded memory for the worker process


def publish(s, events, rate: float, t0: float, published: dict) -> None:
    from confluent_kafka import Producer

    p = Producer({**s.kafka.client_config(), "enable.idempotence": True, "linger.ms": 20,
                  "message.max.bytes": 64 * 1024 * 1024})  # the too_large poison is ~3 MB
    for i, (key, value, _poison, _path) in enumerate(events):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        published[key] = time.time() * 1000
        while True:
            try:
                p.produce(s.kafka.topic_articles, key=key.encode(), value=value)
                break
            except BufferError:
                p.poll(0.5)
        p.poll(0)
    p.flush(300)


def committed_all(s, group: str, topic: str) -> bool:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**s.kafka.client_config(), "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(s.kafka.topic_partitions)]
        done = c.committed(tps, timeout=10)
        return all(tp.offset >= c.get_watermark_offsets(tp, timeout=10)[1] for tp in done)
    except Exception:  # noqa: BLE001 - broker paused: not yet
        return False
    finally:
        c.close()


def decisions_in_memory(s, decided: dict[str, tuple[str, ...]]) -> int:
    """How many decided articles carry exactly their decision's labels in the memory (after the workers stop)."""
    from newsmon.shared.classifier import model_identity
    from newsmon.shared.memory import MemoryRouter

    version, dim = model_identity(s)
    router = MemoryRouter(s, version, dim)
    try:
        found = router.find_many(list(decided))
        return sum(1 for i, labels in decided.items() if i in found and set(found[i][1].labels) == set(labels))
    finally:
        router.close()


def main() -> int:
    args = parse_args()
    with BenchmarkRecord("soak") as rec:
        return run(args, rec)


def run(args: argparse.Namespace, rec: BenchmarkRecord) -> int:
    """The soak (see the module docstring); its report into ``rec``. Returns the exit status (0: nothing lost)."""
    from newsmon.broker import TansuBroker, free_port
    from newsmon.shared.config import Settings
    from newsmon.shared.data import load_corpus
    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.logs import configure_logging
    from newsmon.workers.topics import ensure_topics

    configure_logging("console", "WARNING")
    import newsmon.workers

    # which code runs (an editable install runs its own checkout's; PYTHONPATH can put another link tree first)
    rec.data["newsmon_workers_from"] = str(Path(newsmon.workers.__file__).resolve().parent)
    print(f"newsmon.workers from {rec.data['newsmon_workers_from']}", flush=True)
    corpora = [load_corpus(args.sl), load_corpus(args.en)]
    tmp = Path(tempfile.mkdtemp(prefix="newsmon-soak-"))
    s = Settings(home=tmp / "home")
    s.encoder.model = resolve_model(s.encoder.model, Settings().home)
    s.encoder.max_length = args.max_length
    s.memory.path = tmp / "memory"
    s.kafka.topic_partitions = 2
    args.http_port = args.http_port or free_port()
    build_memory(s, corpora, args.memory)
    events = stream_events(args, corpora)
    valid = {k for k, _v, kind, path in events if kind is None and path is None}
    poisoned = {k: kind for k, _v, kind, _p in events if kind}
    patho = {k: path for k, _v, _k, path in events if path}
    print(f"soak: {len(events)} messages ({len(poisoned)} poison, {len(patho)} pathological), memory "
          f"{2 * args.memory} articles, max_length {args.max_length}, rate {args.rate}/s, a fault every "
          f"~{args.fault_every} s; {tmp}", flush=True)
    with TansuBroker(log_file=tmp / "tansu.log") as broker:
        s.kafka.bootstrap_servers = broker.bootstrap
        ensure_topics(s.kafka.client_config(), s.kafka.all_topics(), partitions=2)
        soak = Soak(args, s, broker, tmp)
        col = Collector(s, args.decide, args.seed)
        col.start()
        soak.start_worker()
        published: dict[str, float] = {}
        t0 = time.monotonic()
        pub = threading.Thread(target=publish, args=(s, events, args.rate, t0, published), daemon=True)
        pub.start()
        faults = Faults(soak, args.fault_every, args.seed, tuple(args.faults.split(",")))
        faults.start()
        ok = wait_done(soak, col, valid, poisoned, patho, t0, args.max_minutes)
        faults.stop.set()
        faults.join(30)
        wall = max(col.first.values()) / 1000 - min(published.values()) / 1000 if col.first else 0.0
        col.p.flush(30)  # every decision sent is delivered before the updater's commits are compared
        ok = wait_decisions(s, soak) and ok
        status = soak.stop_worker()
        col.stop.set()
        col.join(10)
    applied = decisions_in_memory(s, col.decided)
    ok = report(args, col, published, valid, poisoned, patho, faults, soak, wall, applied, status, rec) and ok
    return 0 if ok and applied == len(col.decided) and status == 0 else 1


def wait_done(soak, col, valid, poisoned, patho, t0, max_minutes) -> bool:
    """Wait until every valid article is proposed (or dead-lettered: a failure the report shows), every poison
    message dead-lettered and every pathological article proposed or dead-lettered (or the time is up)."""
    while time.monotonic() - t0 < max_minutes * 60:
        first, dead = set(col.first), set(col.dead)
        got, gone = len(valid & first), len(valid & dead - first)
        dead_poison, path_done = len(set(poisoned) & dead), len(set(patho) & (first | dead))
        if got + gone == len(valid) and dead_poison == len(poisoned) and path_done == len(patho):
            return True
        soak.restart_if_exited()
        if int(time.monotonic() - t0) % 30 == 0:
            print(f"[{soak.elapsed():7.1f} s] proposed {got}/{len(valid)}"
                  + (f" (+{gone} dead-lettered)" if gone else "")
                  + f", poison dead-lettered {dead_poison}/{len(poisoned)}, pathological done {path_done}/{len(patho)}",
                  flush=True)
        time.sleep(1)
    print("TIMED OUT", flush=True)
    return False


def wait_decisions(s, soak, timeout_s: float = 300) -> bool:
    """Wait until the memory updater committed every decision sent (each one applied or refused)."""
    col_deadline = time.monotonic() + timeout_s
    while time.monotonic() < col_deadline:
        if committed_all(s, s.kafka.updater_group, s.kafka.topic_decisions):
            return True
        time.sleep(2)
    print("decisions not all committed", flush=True)
    return False


def report(args, col, published, valid, poisoned, patho, faults, soak, wall, applied, status, rec) -> bool:
    """The tables (into ``rec``); True when nothing was lost, every valid article proposed, every poison message
    dead-lettered with its reason, no batch held past the stage budget and no worker exited by itself."""
    first, dead = set(col.first), set(col.dead)
    latency = np.array([col.first[k] - published[k] for k in valid if k in col.first and k in published])
    repeats = sum(n - 1 for n in col.seen.values())
    wrong = {k: (kind, col.dead.get(k)) for k, kind in poisoned.items()
             if col.dead.get(k) != kind and not (kind == "text_rejected" and col.dead.get(k) == "schema_violation")}
    lost_valid = sorted(valid - first - dead)
    lost_poison = sorted(set(poisoned) - dead)
    lost_path = sorted(set(patho) - first - dead)
    valid_dead = {k: col.dead[k] for k in sorted(valid & dead - first)}
    by_reason: dict[str, int] = {}
    for k in poisoned:
        by_reason[col.dead.get(k, "none")] = by_reason.get(col.dead.get(k, "none"), 0) + 1
    logs = soak.worker_logs()
    given_up = [x for x in logs if x.get("event", "").startswith("handling given up")]
    errors: dict[str, int] = {}
    for x in logs:
        if x.get("level") in ("error", "critical"):
            errors[x.get("event", "?")[:80]] = errors.get(x.get("event", "?")[:80], 0) + 1
    budget_ms = args.stage_budget * 1000
    mb = col.max_batch
    over_budget = bool(mb) and mb["total_ms"] > budget_ms
    rows = [("articles (valid + poison + pathological)",
             f"{len(valid) + len(poisoned) + len(patho)} ({len(valid)} + {len(poisoned)} + {len(patho)})"),
            ("lost (neither proposed nor dead-lettered): valid / poison / pathological",
             f"{len(lost_valid)} / {len(lost_poison)} / {len(lost_path)}"),
            ("valid articles proposed at least once", f"{len(valid & first)} / {len(valid)}"),
            ("valid articles dead-lettered instead", str(len(valid_dead))),
            ("poison messages dead-lettered with the expected reason",
             f"{len(poisoned) - len(wrong)} / {len(poisoned)}"),
            ("poison dead-lettered by reason", ", ".join(f"{r} {n}" for r, n in sorted(by_reason.items()))),
            ("pathological articles: proposed / dead-lettered / lost",
             f"{len(set(patho) & first)} / {len(set(patho) & dead - first)} / {len(lost_path)}"),
            ("decisions applied (memory holds exactly their labels)", f"{applied} / {len(col.decided)}"),
            ("faults: SIGKILL / broker outage 10 s / memory outage 10 s",
             f"{faults.counts['sigkill']} / {faults.counts['broker_outage']} / {faults.counts['memory_outage']}"),
            ("worker exited by itself (restarted)", str(len(soak.crashes))),
            ("throughput (first publish -> last first proposal)", f"{len(valid) / wall:.2f} articles/s over "
             f"{wall:.0f} s" if wall else "-"),
            ("repeats (same article and revision received again)", str(repeats)),
            ("latency publish -> first proposal, p50 / p99 (s)",
             f"{np.percentile(latency, 50) / 1000:.1f} / {np.percentile(latency, 99) / 1000:.1f}"
             if len(latency) else "-"),
            ("worker batch time p99 (s)", f"{np.percentile(col.batch_ms, 99) / 1000:.2f}" if col.batch_ms else "-"),
            (f"max batch time of any proposal (s), stage budget {args.stage_budget:g} s",
             f"{mb['total_ms'] / 1000:.2f} ({mb['article_id']}, {mb['batch_size']} articles)" if mb else "-"),
            ("stages given up over the budget (worker log)", str(len(given_up))),
            ("worker log errors by event", "; ".join(f"{e}: {n}" for e, n in sorted(errors.items())) or "none"),
            ("worker exit status after SIGTERM", str(status))]
    rec.table(f"Soak under faults: {len(valid) + len(poisoned) + len(patho):,} articles at {args.rate}/s, a fault "
              f"every ~{args.fault_every} s, one pathological article in every {args.pathological}",
              ["measure", "value"], [list(r) for r in rows])
    path_rows = []
    for k, kind in sorted(patho.items(), key=lambda kv: int(kv[0].split("-")[1])):
        if k in col.first:
            pr = col.proposal[k]
            outcome = f"proposed: {pr['labels']} labels" + (f", abstained ({pr['abstained']})" if pr["abstained"]
                                                              else "")
            outcome += f", near-copy of {pr['duplicate_of']}" if pr["duplicate_of"] else ""
            reason, stage, secs = "-", "-", (col.first[k] - published[k]) / 1000
            batch = f"{pr['batch_ms'] / 1000:.2f}"
        elif k in col.dead:
            d = col.dead_info[k]
            outcome, reason, stage = "dead-lettered", col.dead[k], d["stage"]
            secs, batch = (d["ts"] - published[k]) / 1000, "-"
        else:
            outcome, reason, stage, secs, batch = "LOST", "-", "-", float("nan"), "-"
        path_rows.append([k, kind, outcome, reason, stage, round(secs, 1), batch])
    if path_rows:
        rec.table("Pathological articles", ["article", "kind", "outcome", "reason", "stage",
                                            "publish -> outcome (s)", "worker batch (s)"], path_rows)
    rec.data.update({"lost": {"valid": lost_valid[:50], "poison": lost_poison[:50], "pathological": lost_path},
                     "valid_dead_lettered": dict(list(valid_dead.items())[:50]), "poison_wrong": wrong,
                     "poison_by_reason": by_reason, "faults": faults.counts, "worker_crashes": soak.crashes,
                     "max_batch": mb, "log_errors": errors,
                     "given_up": [{k: x.get(k) for k in ("timestamp", "stage", "error")} for x in given_up][:50],
                     "pathological_dead_letters": {k: col.dead_info[k] for k in patho if k in col.dead_info},
                     "args": vars(args)})
    if wrong:
        print("poison not dead-lettered as expected:", dict(list(wrong.items())[:10]))
    if valid_dead:
        print("valid articles dead-lettered:", {k: (r, col.dead_info[k]) for k, r in list(valid_dead.items())[:10]})
    if lost_valid or lost_poison or lost_path:
        print("LOST:", lost_valid[:10], lost_poison[:10], lost_path)
    if over_budget:
        print("a batch ran past the stage budget:", mb)
    print(f"load average at the end: {os.getloadavg()}")
    return not (lost_valid or lost_poison or lost_path or valid_dead or wrong or over_budget or soak.crashes)

if __name__ == "__main__":
    sys.exit(main())
