"""What the benchmark's own process adds to a batch at a million points: the suspects of the 7 December gap, each
beside plain rounds in one process.

On 7 December ``scale.py``'s calibrated step served its record at 260 / 364 ms (p50 / p99, batch of 16, 1M points)
while a worker-like process (``scale_restart.py``) served the same record at 199-209 / 222-272 once warm. The
suspects were what the benchmark's process holds or runs beside the scoring: the timing wrapper of the retrieve
part (``scale.TimedSource``), the RSS sampler's thread (``scale.RssSampler``, which lists ``/proc`` every 0.25 s),
the objects the calibrated step's fit leaves alive (the memory sample, the fitted models) and the cyclic garbage
collector's walks over them.

One process opens the kept memory, waits for its files to be read into the page cache, and scores rounds of
``--batches`` batches of 16 articles no earlier batch scored, with the collection's current record (a worker's path:
``Classifier.scorer.propose``), in the order ``plain, suspect, plain, suspect, ...`` for each suspect in turn, then
the same after the fit (``after fit``: the calibrated step's ``fit_calibrated`` run once, its models held) and with
what is alive frozen (``gc frozen``). Per round: p50 / p99, the garbage collector's milliseconds (all generations, per
round and the most in one batch), the interpreter's other threads' CPU share, and the machine's steal time. The plain
rounds' spread is the yardstick: a suspect matters only beyond it.
Run from the repository root after ``scale.py --keep`` built the memory and its
``calibrated`` step left the calibrated record current::

    python benchmarks/scale_suspects.py --workdir /work/.scale38 --size 1000000
"""

from __future__ import annotations

import argparse
import gc
import os
import threading
import time
from pathlib import Path

import numpy as np
import scale
from record import BenchmarkRecord

#: CPU seconds per jiffy (``/proc/stat``)
TICK = 1 / os.sysconf("SC_CLK_TCK")


class GcClock:
    """Milliseconds the cyclic garbage collector runs (``gc.callbacks``), all generations."""

    def __init__(self) -> None:
        self.total = 0.0
        self._t = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.total += (time.perf_counter() - self._t) * 1000


def steal() -> int:
    """The machine's steal jiffies so far (``/proc/stat``'s cpu line, the 8th figure)."""
    with open("/proc/stat", encoding="ascii") as f:
        return int(f.readline().split()[8])


def thread_ticks() -> dict[str, int]:
    """CPU jiffies (user + system) of each of this process' threads, by thread id."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[t] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/work/.scale38")
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=30, help="batches of 16 per round")
    ap.add_argument("--seed", type=int, default=26, help="the memory's scale.py --seed (its generator)")
    ap.add_argument("--labels", type=int, default=12_000, help="the memory's scale.py --labels")
    ap.add_argument("--calibrated-train", type=int, default=2000, help="as scale.py's, for the fit")
    args = ap.parse_args()

    from scale_calibrated import calibrated_params, fit_calibrated

    from newsmon.shared.classifier import TEXT_PAYLOAD_CHARS, Classifier
    from newsmon.shared.config import Settings
    from newsmon.shared.memory import MemoryRouter
    from newsmon.shared.scoring.calibration import LEXICAL_CANDIDATES

    workdir = Path(args.workdir)
    s = scale.settings_for(workdir, args.size)
    version, dim = scale.model_version(s)
    clf = Classifier(s, encoder=scale.NoEncoder(version, dim), router=MemoryRouter(s, version, dim))
    clf.memory(scale.LANG)
    t0 = time.perf_counter()
    for t in threading.enumerate():  # the memory's files read into the page cache first: a warm worker's rounds
        if t.name == "newsmon-read-ahead":
            t.join(1800)
    read_ahead_s = round(time.perf_counter() - t0, 1)
    gen = scale.Archive(scale.corpus_sentences(scale.ROOT.parent / "shared" / "data"), seed=args.seed,
                        labels=args.labels, text_chars=TEXT_PAYLOAD_CHARS)
    clock = GcClock()
    main_tid = str(os.getpid())  # the main thread's id is the process id
    rounds: list[dict] = []

    def score(name: str, timed: bool = False) -> None:
        qs = gen.extra(16 * args.batches, f"suspects-{len(rounds)}")
        source = clf.scorer.neighbours
        if timed:
            clf.scorer.neighbours = scale.TimedSource(source)
        walls, gcs = [], []
        before, stolen, t0 = thread_ticks(), steal(), time.perf_counter()
        try:
            for st in range(0, 16 * args.batches, 16):
                g, t = clock.total, time.perf_counter()
                clf.scorer.propose(qs.texts[st:st + 16], [scale.LANG] * 16, qs.vectors[st:st + 16])
                walls.append((time.perf_counter() - t) * 1000)
                gcs.append(clock.total - g)
        finally:
            clf.scorer.neighbours = source
        el, after = time.perf_counter() - t0, thread_ticks()
        others = sum(v - before.get(k, 0) for k, v in after.items() if k != main_tid) * TICK / el
        row = {"round": name, "p50_ms": round(float(np.percentile(walls, 50)), 1),
               "p99_ms": round(float(np.percentile(walls, 99)), 1), "gc_ms": round(sum(gcs), 1),
               "gc_max_ms": round(max(gcs), 1), "other_threads_cpu": round(others, 2),
               "steal_s": round((steal() - stolen) * TICK, 2), "objects": len(gc.get_objects())}
        rounds.append(row)
        print(row, flush=True)

    with BenchmarkRecord(f"scale_suspects.{args.size}") as rec:
        try:
            score("warm-up (the record's models loaded, frozen)")
            for suspect in ("timed source", "rss sampler"):
                score("plain")
                if suspect == "rss sampler":
                    with scale.RssSampler():
                        score(suspect)
                else:
                    score(suspect, timed=True)
            score("plain")
            params = calibrated_params(scale.record_params(50, 0.2, LEXICAL_CANDIDATES))
            counts = scale.label_counts(workdir / str(args.size) / "archive.parquet", gen, args.size)
            train = gen.extra(args.calibrated_train, "stacking")
            t0 = time.perf_counter()
            held = fit_calibrated(clf, params, counts, train.texts, train.vectors, train.labels,
                                  Settings().calibration.max_memory_articles)
            fit_s = round(time.perf_counter() - t0, 1)
            for name in ("after fit", "plain (after fit)", "after fit"):
                score(name)
            gc.collect()
            gc.freeze()
            for name in ("gc frozen", "gc frozen"):
                score(name)
            del held
        finally:
            clf.close()
        plain = [r for r in rounds if r["round"].startswith("plain")]
        rec.data.update(rounds=rounds, read_ahead_s=read_ahead_s,
                        size=args.size, batches=args.batches, seed=args.seed, labels=args.labels,
                        fit_s=fit_s, plain_spread_ms={q: round(max(r[q] for r in plain) - min(r[q] for r in plain), 1)
                                                       for q in ("p50_ms", "p99_ms")})
        rec.table("The benchmark's suspects beside plain rounds, one process, batch of 16 (ms)",
                  ["round", "p50", "p99", "gc ms (most in a batch)", "other threads' CPU", "steal s"],
                  [[r["round"], r["p50_ms"], r["p99_ms"], f"{r['gc_ms']:.0f} ({r['gc_max_ms']:.0f})",
                    r["other_threads_cpu"], r["steal_s"]] for r in rounds],
                  note=f"{args.size:,} points; each round {args.batches} batches of articles no batch scored before")


if __name__ == "__main__":
    main()
