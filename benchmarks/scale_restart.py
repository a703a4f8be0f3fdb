"""A restarted worker's first minutes on a kept ``scale.py`` memory: each start a new process that opens the memory
and scores rounds of batches of 16 with the collection's current record (the one a worker serves), every batch on
articles no earlier batch scored; per round p50 / p99 and the first batch.

The embedded engine drops its files from the page cache when a shard closes, so each start here (its predecessor
closed the memory) begins with the files on disk, as a worker restarted after a clean stop does. Each start warms
the scorer up before its first batch, as a worker does before its first consume (``Scorer.warm_up``: the record's
models loaded, the process's state frozen out of the cyclic collector). The starts alternate, so both settings see
the same machine, ``--vary read-ahead``: ``memory.read_ahead_mb`` off and on
(:mod:`newsmon.shared.memory.read_ahead`); ``--vary warm-up``: the warm-up off and on. Run from the repository
root after ``scale.py --keep`` built the memory (and its ``calibrated`` step left the calibrated record current)::

    python benchmarks/scale_restart.py --workdir /work/.scale38 --size 1000000 --starts 3 --rounds 3
    python benchmarks/scale_restart.py --workdir /work/.scale38 --size 1000000 --starts 3 --rounds 1 --vary warm-up
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from record import BenchmarkRecord

HERE = Path(__file__).resolve().parent


def child(workdir: str, size: int, rounds: int, batches: int, tag: str, seed: int, labels: int,
          warm_up: bool) -> None:
    """One start: open, warm the scorer up as a worker does before its first consume (``warm_up``:
    ``Scorer.warm_up``), score ``rounds`` x ``batches`` batches of unseen articles (the generator of the memory's
    ``scale.py --seed`` / ``--labels``), print one JSON line."""
    sys.path.insert(0, str(HERE))
    import scale

    from newsmon.shared.classifier import TEXT_PAYLOAD_CHARS, Classifier
    from newsmon.shared.memory import MemoryRouter

    s = scale.settings_for(Path(workdir), size)
    version, dim = scale.model_version(s)
    t0 = time.perf_counter()
    clf = Classifier(s, encoder=scale.NoEncoder(version, dim), router=MemoryRouter(s, version, dim))
    clf.memory(scale.LANG)
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    if warm_up:
        clf.scorer.warm_up(scale.LANG)
    warmed = time.perf_counter() - t0
    gen = scale.Archive(scale.corpus_sentences(scale.ROOT.parent / "shared" / "data"), seed=seed, labels=labels,
                        text_chars=TEXT_PAYLOAD_CHARS)
    out = {"open_s": round(opened, 2), "warm_up_s": round(warmed, 2), "rounds": []}
    try:
        for r in range(rounds):
            qs = gen.extra(16 * batches, f"restart-{tag}-{r}")
            walls = []
            for st in range(0, 16 * batches, 16):
                t = time.perf_counter()
                clf.scorer.propose(qs.texts[st:st + 16], [scale.LANG] * 16, qs.vectors[st:st + 16])
                walls.append((time.perf_counter() - t) * 1000)
            w = np.asarray(walls)
            out["rounds"].append({"p50_ms": round(float(np.percentile(w, 50)), 1),
                                  "p99_ms": round(float(np.percentile(w, 99)), 1),
                                  "first_ms": round(float(w[0]), 1), "mean_ms": round(float(w.mean()), 1)})
    finally:
        clf.close()
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/work/.scale38")
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--starts", type=int, default=3, help="starts per setting (alternating off, on)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=30, help="batches of 16 per round")
    ap.add_argument("--seed", type=int, default=26, help="the memory's scale.py --seed (its generator)")
    ap.add_argument("--labels", type=int, default=12_000, help="the memory's scale.py --labels")
    ap.add_argument("--vary", choices=("read-ahead", "warm-up"), default="read-ahead",
                    help="what the starts turn off and on: the memory's read-ahead (the scorer warmed up, as a worker "
                         "does) or the scorer's warm-up (read-ahead on)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-warm-up", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.workdir, args.size, args.rounds, args.batches, args.child, args.seed, args.labels,
              not args.no_warm_up)
        return
    with BenchmarkRecord(f"scale_restart.{args.size}") as rec:
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        for i in range(args.starts):
            for setting in ("off", "on"):
                env = dict(os.environ)
                env.pop("NEWSMON_MEMORY__READ_AHEAD_MB", None)
                if args.vary == "read-ahead" and setting == "off":
                    env["NEWSMON_MEMORY__READ_AHEAD_MB"] = "0"
                cold = ["--no-warm-up"] if args.vary == "warm-up" and setting == "off" else []
                proc = subprocess.run([sys.executable, __file__, "--workdir", args.workdir, "--size", str(args.size),
                                       "--rounds", str(args.rounds), "--batches", str(args.batches),
                                       "--seed", str(args.seed), "--labels", str(args.labels), *cold,
                                       "--child", f"{i}-{setting}"], env=env, capture_output=True, text=True,
                                      timeout=1800, check=True)
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
                runs[setting].append(json.loads(line[len("RESULT "):]))
                print(setting, runs[setting][-1], flush=True)
        rows = []
        for r in range(args.rounds):
            row = [f"round {r + 1} ({args.batches} batches)"]
            for setting in ("off", "on"):
                got = [x["rounds"][r] for x in runs[setting]]
                row.append(" / ".join(f"{g['p50_ms']:.0f}" for g in got))
                row.append(" / ".join(f"{g['p99_ms']:.0f}" for g in got))
            rows.append(row)
        off, on = (" / ".join(f"{x['rounds'][0]['first_ms']:.0f}" for x in runs[s]) for s in ("off", "on"))
        rows.append(["first batch ms", off, "", on, ""])
        off, on = (" / ".join(f"{x['warm_up_s'] * 1000:.0f}" for x in runs[s]) for s in ("off", "on"))
        rows.append(["warm-up before the first batch ms", off, "", on, ""])
        rec.data.update(runs=runs, vary=args.vary, starts=args.starts, rounds=args.rounds, batches=args.batches,
                        size=args.size, seed=args.seed, labels=args.labels)
        rec.table(f"A restarted worker's first rounds, batch of 16 (ms; one figure per start), {args.vary} off / on",
                  ["round", f"{args.vary} off p50", "off p99", "on p50", "on p99"], rows,
                  note=f"{args.size:,} points; each start a new process after the previous closed the memory")


if __name__ == "__main__":
    main()
