"""Streaming throughput and feedback latency of the workers, against the encoder's own speed.

Prints:
- the encoder's own articles/s at the worker's batch size (embedding cache off, same texts);
- streaming articles/s through the real pipeline (Tansu broker, classifier worker: validate, near-duplicate
  check, embed, memory search, RAE-XMC, produce, commit), first publish to last proposal, and the ratio
  (target >= 0.95), ``--runs`` times (each on a fresh memory and broker; the encoder measured right before and
  right after the stream, the mean taken, since the load of a shared machine moves),
  then the median and spread of the ratio and the worker's seconds per stage;
- decision-to-memory latency p50 / p99 (moderator decision consumed -> the memory serves it);
- the near-duplicate detector's precision / recall (runs benchmarks/dedup_quality.py).

``--memories`` names the knowledge memories streamed against, each ``--runs`` times, the runs of the memories
alternating (run 1 of each, then run 2 of each, ...; the load of a shared machine falls on each alike):
``uncalibrated`` (the train articles, scored with the settings' defaults) and ``calibrated`` (the demo's calibrated
memory: the same train articles, calibrated on the memory leave-one-out and the validation split as ``newsmon
demo`` and ``memory build --calibrate`` do, :func:`newsmon.training_jobs.calibration.calibrate_memory`, reused from
the home's calibration cache after the first run). The ratio of each, and calibrated / uncalibrated, come from the
same run; every proposal of the calibrated memory must name the record.

Usage (repository root)::

    .venv/bin/python benchmarks/stream_throughput.py --data ../shared/data/sentinews_sl --n 200 --batch 16 --runs 3
    .venv/bin/python benchmarks/stream_throughput.py --memories uncalibrated,calibrated --n 64 --runs 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from record import BenchmarkRecord, run_name

os.environ.setdefault("HF_HUB_OFFLINE", "1")


MEMORIES = ("uncalibrated", "calibrated")


def one_run(args, corpus, encoder, run: int, last: bool, memory: str = "uncalibrated") -> dict:
    """One measurement on a fresh memory and broker: the encoder alone on the stream's texts (the worker's
    batches, in arrival order), then the whole pipeline; the decision latency on the last run only. ``memory``
    ``calibrated``: the memory calibrated as the demo calibrates it before it streams."""
    from confluent_kafka import Consumer, Producer

    from newsmon.broker import TansuBroker
    from newsmon.demo import article_event, decision_for
    from newsmon.schemas import LabelProposal, parse_event
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.config import Settings
    from newsmon.workers.observability import BATCH_SECONDS
    from newsmon.workers.runtime import build_runtime

    train = corpus.split("train")[: args.memory]
    stream = (corpus.split("validation") + corpus.split("test"))[: args.n]
    tmp = Path(tempfile.mkdtemp(prefix="newsmon-bench-"))
    s = Settings()
    s.memory.path = tmp / "memory"
    s.encoder.max_length = args.max_length
    s.encoder.batch_size = args.batch
    s.worker.batch_max_messages = args.batch
    s.worker.batch_max_ms = 100
    s.worker.http_port = None
    s.kafka.session_timeout_ms = 6000
    s.kafka.topic_partitions = 1
    s.kafka.create_topics = True

    clf = Classifier(s, encoder=encoder)
    cache = encoder.cache
    clf.add_articles(train, progress=run == 0)  # cached embeddings are fine for the memory
    record = None
    if memory == "calibrated":  # as the demo: the memory leave-one-out and the validation split (cached inputs)
        from newsmon.shared.scoring.records import record_id
        from newsmon.training_jobs.calibration import calibrate_memory

        t_cal = time.perf_counter()
        cal = calibrate_memory(clf, corpus.split("validation"), written_by="demo", corpus=str(corpus.path))
        record = cal[train[0].lang].record
        print(f"calibrated memory: record {record_id(record)} ({'reused' if cal[train[0].lang].reused else 'computed'}"
              f" in {time.perf_counter() - t_cal:.1f} s): components "
              f"{[c['name'] for c in record.params.get('components') or []]}, lexical search "
              f"{record.params.get('lexical_search')}", flush=True)
        record = record_id(record)
    encoder.cache = None  # from here on: every article is really embedded
    texts = [article_event(a).text for a in stream]
    enc_before = _encoder_rate(encoder, texts, args.batch)
    stages_before = {st: _hist_sum(BATCH_SECONDS, st) for st in ("dedup", "embed", "search_score", "total")}
    with TansuBroker() as broker:
        s.kafka.bootstrap_servers = broker.bootstrap
        rt = build_runtime(s, classifier=clf).start()
        conf = s.kafka.client_config()
        consumer = Consumer({**conf, "group.id": "bench", "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000})
        consumer.subscribe([s.kafka.topic_proposals])
        producer = Producer({**conf, "enable.idempotence": True})
        # warm-up: group joins and one tiny batch, not timed
        warm = article_event(corpus.split("train")[-1])
        producer.produce(s.kafka.topic_articles, key=warm.kafka_key(), value=warm.to_bytes())
        producer.flush(10)
        while True:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                break
        gold = {a.id: list(a.labels) for a in stream}
        t0 = time.perf_counter()
        for a in stream:
            ev = article_event(a)
            producer.produce(s.kafka.topic_articles, key=ev.kafka_key(), value=ev.to_bytes())
        producer.flush(30)
        got: dict[str, LabelProposal] = {}
        while len(got) < len(stream) and time.perf_counter() - t0 < 3600:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            pr = parse_event(LabelProposal, m.value())
            got.setdefault(pr.article_id, pr)
        stream_s = time.perf_counter() - t0
        rate = len(got) / stream_s
        enc_after = _encoder_rate(encoder, texts, args.batch)  # the load moves: the encoder is measured on
        enc_rate = (enc_before + enc_after) / 2  # both sides of the stream and the mean taken
        out = {"encoder": enc_rate, "stream": rate, "ratio": rate / enc_rate, "load": os.getloadavg()[0],
               "memory": memory, "record": record,
               "proposals_with_record": sum(1 for x in got.values() if x.scoring is not None
                                            and record is not None and x.scoring.calibration == record)}
        if record is not None and out["proposals_with_record"] != len(got):
            raise RuntimeError(f"{len(got) - out['proposals_with_record']} proposals of the calibrated memory were "
                               f"not scored with its record {record}")
        out["stages"] = {st: _hist_sum(BATCH_SECONDS, st) - v for st, v in stages_before.items()}
        dups = sum(1 for x in got.values() if x.duplicate_of)
        print(f"run {run + 1} ({memory} memory): encoder alone {enc_before:.2f} before, {enc_after:.2f} after the stream, mean "
              f"{enc_rate:.2f} articles/s (batches of {args.batch} in arrival order, "
              f"max_length {encoder.max_length}, {len(texts)} articles, {encoder.runtime}); streaming {rate:.2f} "
              f"articles/s ({len(got)} proposals in {stream_s:.1f} s, {dups} near-copies); ratio {out['ratio']:.3f}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        if last:
            for pr in got.values():
                d = decision_for(pr.article_id, [x.label for x in pr.labels], gold[pr.article_id])
                producer.produce(s.kafka.topic_decisions, key=d.kafka_key(), value=d.to_bytes())
            producer.flush(30)
            updater = next(w for w in rt.workers if w.name == "memory-updater")
            deadline = time.monotonic() + 120
            while updater.applied < len(got) and time.monotonic() < deadline:
                time.sleep(0.1)
            out["latency_ms"] = np.array(updater.latencies_s) * 1000
        consumer.close()
        del producer
        rt.close()
    encoder.cache = cache
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _encoder_rate(encoder, texts: list[str], batch: int) -> float:
    """Articles/s of the encoder alone on ``texts`` in the worker's batches, in arrival order (cache off)."""
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        encoder.encode(texts[i:i + batch], role="query")
    return len(texts) / (time.perf_counter() - t0)


def _hist_sum(hist, stage: str) -> float:
    """Seconds summed so far in one stage of ``newsmon_batch_seconds``."""
    for metric in hist.collect():
        for sample in metric.samples:
            if sample.name.endswith("_sum") and sample.labels.get("stage") == stage:
                return sample.value
    return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="../shared/data/sentinews_sl")
    p.add_argument("--n", type=int, default=200, help="articles streamed (from validation + test)")
    p.add_argument("--batch", type=int, default=16, help="worker micro-batch = encoder batch size")
    p.add_argument("--max-length", type=int, default=512, help="encoder max_length (tokens)")
    p.add_argument("--memory", type=int, default=1150, help="train articles in the knowledge memory")
    p.add_argument("--runs", type=int, default=3, help="measurements; the median and spread are printed")
    p.add_argument("--sequential", action="store_true", help="no batch in flight (the worker before "
                   "workers/ahead.py), for comparison")
    p.add_argument("--memories", default="uncalibrated",
                   help=f"knowledge memories streamed against, comma-separated, each --runs times: {', '.join(MEMORIES)}")
    p.add_argument("--skip-dedup-quality", action="store_true")
    args = p.parse_args()
    args.memories = [m.strip() for m in args.memories.split(",") if m.strip()]
    if not args.memories or set(args.memories) - set(MEMORIES):
        p.error(f"--memories: choose from {', '.join(MEMORIES)}")
    if args.sequential:
        from newsmon.workers.base import BatchWorker
        from newsmon.workers.classifier_worker import ClassifierWorker

        ClassifierWorker.step = BatchWorker.step  # each batch finished before the next is consumed

    from newsmon.shared.logs import configure_logging

    configure_logging("console", "WARNING")
    with BenchmarkRecord(run_name("stream_throughput", args.data)) as rec:
        measure(args, rec)
    if not args.skip_dedup_quality:
        print("near-duplicate detector (benchmarks/dedup_quality.py):", flush=True)
        subprocess.run([sys.executable, str(Path(__file__).with_name("dedup_quality.py")), "--data", args.data,
                        "--n", "600"], check=False)


def measure(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """``--runs`` streams against the encoder alone, the stage times and the decision latency, into ``rec``."""
    from newsmon.shared.config import Settings
    from newsmon.shared.data import load_corpus
    from newsmon.shared.encoder import Encoder

    corpus = load_corpus(args.data)
    s = Settings()
    s.encoder.max_length, s.encoder.batch_size = args.max_length, args.batch
    encoder = Encoder(s.encoder, s.home)
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    runs = [one_run(args, corpus, encoder, i, i == args.runs - 1 and kind == args.memories[-1], kind)
            for i in range(args.runs) for kind in args.memories]
    ratios = np.array([r["ratio"] for r in runs])
    several = len(args.memories) > 1
    rec.table(f"Streaming against the encoder alone ({args.n} articles, batches of {args.batch}, "
              f"{args.max_length} tokens)", ["run", *(["memory"] if several else []), "encoder alone, articles/s",
                                             "pipeline, articles/s", "ratio pipeline / encoder", "load average after"],
              [[i // len(args.memories) + 1, *([r["memory"]] if several else []), round(r["encoder"], 2),
                round(r["stream"], 2), round(r["ratio"], 3), round(r["load"], 1)] for i, r in enumerate(runs)],
              note=f"Median ratio {np.median(ratios):.3f} (target >= 0.95), spread {ratios.min():.3f}-"
                   f"{ratios.max():.3f}. Each run on a fresh memory and broker; the encoder measured right before and "
                   "after its stream, the mean taken." + (" No batch in flight (--sequential)." if args.sequential
                                                         else ""))
    by_memory = {kind: [r for r in runs if r["memory"] == kind] for kind in args.memories}
    rec.data["memories"] = {kind: {"ratios": [round(r["ratio"], 4) for r in rs],
                                   "median_ratio": round(float(np.median([r["ratio"] for r in rs])), 4),
                                   "encoder": [round(r["encoder"], 3) for r in rs],
                                   "stream": [round(r["stream"], 3) for r in rs],
                                   "load": [round(r["load"], 2) for r in rs], "record": rs[0]["record"],
                                   "proposals_with_record": [r["proposals_with_record"] for r in rs]}
                            for kind, rs in by_memory.items()}
    if several:
        med = {kind: float(np.median([r["ratio"] for r in rs])) for kind, rs in by_memory.items()}
        rows = [[kind, len(rs), round(med[kind], 3), f"{min(r['ratio'] for r in rs):.3f}-"
                 f"{max(r['ratio'] for r in rs):.3f}", round(float(np.median([r["encoder"] for r in rs])), 2),
                 round(float(np.median([r["stream"] for r in rs])), 2), rs[0]["record"] or "-"]
                for kind, rs in by_memory.items()]
        note = "Runs of the memories alternate (run 1 of each, then run 2 ...). Target >= 0.95."
        if {"calibrated", "uncalibrated"} <= set(med):
            rec.data["calibrated_over_uncalibrated"] = round(med["calibrated"] / med["uncalibrated"], 4)
            note += (f" Median ratio calibrated / uncalibrated {med['calibrated'] / med['uncalibrated']:.3f}"
                     " (same run).")
        rec.table("Streaming / encoder by knowledge memory", ["memory", "runs", "median ratio", "spread",
                                                              "encoder alone median, articles/s",
                                                              "pipeline median, articles/s", "calibration record"],
                  rows, note=note)
        for row in rows:
            print(f"{row[0]} memory: median stream / encoder {row[2]:.3f} over {row[1]} runs (spread {row[3]})")
    print(f"\nstreaming / encoder alone over {len(runs)} runs: median {np.median(ratios):.3f}, spread "
          f"{ratios.min():.3f}-{ratios.max():.3f} (target >= 0.95); encoder alone median "
          f"{np.median([r['encoder'] for r in runs]):.2f}, streaming median {np.median([r['stream'] for r in runs]):.2f}"
          f" articles/s; load average {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[2]:.1f} (15 min)")
    st = runs[-1]["stages"]
    print("worker seconds per stage, last run (embedding overlaps the rest): "
          + ", ".join(f"{k} {v:.1f}" for k, v in st.items()))
    lat = runs[-1]["latency_ms"]
    print(f"decision -> memory: p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
          f"max {lat.max():.1f} ms over {len(lat)} decisions")
    rec.table("Worker seconds per stage, last run, and decision -> memory latency", ["measure", "value"],
              [*[[f"seconds in stage {k}", round(v, 1)] for k, v in st.items()],
               ["decision -> memory p50 (ms)", round(float(np.percentile(lat, 50)), 1)],
               ["decision -> memory p99 (ms)", round(float(np.percentile(lat, 99)), 1)],
               ["decisions", len(lat)]], note="Embedding overlaps the other stages (one batch in flight).")
    encoder.close()


if __name__ == "__main__":
    main()
