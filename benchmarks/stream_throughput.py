"""Streaming throughput and feedback latency of the workers, against the encoder's own speed.

Prints:
- the encoder's own articles/s at the worker's batch size (embedding cache off, same texts);
- streaming articles/s through the real pipeline (Tansu broker, classifier worker: validate, near-duplicate
  check, embed, memory search, RAE-XMC, produce, commit), first publish to last proposal, and the ratio
  (target >= 0.9);
- decision-to-memory latency p50 / p99 (moderator decision consumed -> the memory serves it);
- the near-duplicate detector's precision / recall (runs benchmarks/dedup_quality.py).

Usage (repository root)::

    python benchmarks/stream_throughput.py --data ../shared/data/sentinews_sl --n 200 --batch 16
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="../shared/data/sentinews_sl")
    p.add_argument("--n", type=int, default=200, help="articles streamed (from validation + test)")
    p.add_argument("--batch", type=int, default=16, help="worker micro-batch = encoder batch size")
    p.add_argument("--max-length", type=int, default=512, help="encoder max_length (tokens)")
    p.add_argument("--memory", type=int, default=1150, help="train articles in the knowledge memory")
    p.add_argument("--skip-dedup-quality", action="store_true")
    args = p.parse_args()

    from confluent_kafka import Consumer, Producer

    from newsmon.broker import TansuBroker
    from newsmon.demo import article_event, decision_for
    from newsmon.schemas import LabelProposal, parse_event
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.config import Settings
    from newsmon.shared.data import load_corpus
    from newsmon.shared.logs import configure_logging
    from newsmon.workers.runtime import build_runtime

    configure_logging("console", "WARNING")
    corpus = load_corpus(args.data)
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

    clf = Classifier(s)
    clf.add_articles(train, progress=True)  # cached embeddings are fine for the memory
    clf.encoder.cache = None  # from here on: every article is really embedded
    texts = [article_event(a).text for a in stream]
    t0 = time.perf_counter()
    for i in range(0, len(texts), args.batch):  # the same batches, in the same order, as the worker gets them
        clf.encoder.encode(texts[i:i + args.batch], role="query")
    enc_rate = len(texts) / (time.perf_counter() - t0)
    print(f"encoder alone: {enc_rate:.2f} articles/s (batches of {args.batch} in arrival order, max_length "
          f"{clf.encoder.max_length}, {len(texts)} articles, device {clf.encoder.device})")

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
        dups = sum(1 for x in got.values() if x.duplicate_of)
        print(f"streaming: {rate:.2f} articles/s ({len(got)} proposals in {stream_s:.1f} s, {dups} near-copies "
              f"skipped the model); ratio to the encoder alone: {rate / enc_rate:.2f} (target >= 0.9)")
        for pr in got.values():
            d = decision_for(pr.article_id, [x.label for x in pr.labels], gold[pr.article_id])
            producer.produce(s.kafka.topic_decisions, key=d.kafka_key(), value=d.to_bytes())
        producer.flush(30)
        updater = next(w for w in rt.workers if w.name == "memory-updater")
        deadline = time.monotonic() + 120
        while updater.applied < len(got) and time.monotonic() < deadline:
            time.sleep(0.1)
        lat = np.array(updater.latencies_s) * 1000
        print(f"decision -> memory: p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
              f"max {lat.max():.1f} ms over {len(lat)} decisions")
        consumer.close()
        del producer
        rt.close()
    shutil.rmtree(tmp, ignore_errors=True)
    if not args.skip_dedup_quality:
        print("near-duplicate detector (benchmarks/dedup_quality.py):", flush=True)
        subprocess.run([sys.executable, str(Path(__file__).with_name("dedup_quality.py")), "--data", args.data,
                        "--n", "600"], check=False)


if __name__ == "__main__":
    main()
