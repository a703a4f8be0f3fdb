"""The encoder's runtimes side by side on the sentinews_sl memory build: articles/s, speed-up over torch fp32,
cosine to torch fp32, and the retrieval quality that results (RAE-XMC micro-F1 of ``newsmon eval``).

For each runtime (default ``torch,onnx-int8``) the same train articles are embedded with the embedding cache off,
``passage`` role, at ``--max-length`` tokens and the encoder's batch size, as ``memory build`` does; torch fp32 is
the reference of the cosines. Then, unless ``--skip-eval``, ``newsmon eval --methods rae --tune N`` runs once
per runtime (``NEWSMON_ENCODER__RUNTIME`` set; share ``NEWSMON_HOME`` so the embedding cache is reused), or its
``results.json`` is read from ``--eval-dir/<runtime>`` when there. The machine's load average is printed with
the figures: on a shared machine the rates move, their ratio less.

Usage (repository root)::

    .venv/bin/python benchmarks/encoder_speed.py --data ../shared/data/sentinews_sl --n 200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from record import BenchmarkRecord, run_name

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def measure(runtimes: list[str], texts: list[str], max_length: int, threads: int | None) -> dict:
    """Embed ``texts`` with each runtime; returns {runtime: {"rate", "seconds", "vectors", "load_s"}}."""
    from newsmon.shared.config import EncoderSettings, Settings
    from newsmon.shared.encoder import Encoder

    home = Settings().home
    out = {}
    for rt in runtimes:
        t0 = time.perf_counter()
        enc = Encoder(EncoderSettings(runtime=rt, cache=False, max_length=max_length, threads=threads), home)
        load_s = time.perf_counter() - t0
        enc.encode(texts[:2])  # warm-up, not timed
        t0 = time.perf_counter()
        vecs = enc.encode(texts, role="passage")
        secs = time.perf_counter() - t0
        out[rt] = {"rate": len(texts) / secs, "seconds": secs, "vectors": vecs, "load_s": load_s,
                   "model": enc.model_id}
        print(f"  {rt}: {len(texts) / secs:.2f} articles/s ({secs:.0f} s; load {load_s:.0f} s; "
              f"load average {os.getloadavg()[0]:.1f})", flush=True)
        enc.close()
    return out


def eval_figures(runtime: str, data: str, tune: int, eval_dir: Path) -> dict:
    """RAE-XMC micro-F1 (default and tuned) of ``newsmon eval`` with ``runtime``: read from
    ``eval_dir/<runtime>/results.json`` when present, else run the eval there first."""
    out = eval_dir / runtime
    if not (out / "results.json").exists():
        cmd = [str(Path(sys.executable).with_name("newsmon")), "eval", "--data", data, "--methods", "rae",
               "--tune", str(tune), "--out", str(out)]
        subprocess.run(cmd, env={**os.environ, "NEWSMON_ENCODER__RUNTIME": runtime}, check=True)
    rep = json.loads((out / "results.json").read_text())
    return {k: 100 * rep["methods"][k]["metrics"]["all"]["uF1"] for k in ("rae", "rae_tuned")
            if k in rep.get("methods", {})}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="../shared/data/sentinews_sl")
    p.add_argument("--n", type=int, default=1150, help="train articles embedded per runtime")
    p.add_argument("--runtimes", default="torch,onnx-int8", help="the first is the reference (torch fp32)")
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--threads", type=int, default=None, help="encoder.threads (default: the runtime's)")
    p.add_argument("--tune", type=int, default=50, help="Optuna trials of the eval's tuned row")
    p.add_argument("--eval-dir", type=Path, default=Path("runs/encoder-speed"))
    p.add_argument("--skip-eval", action="store_true")
    args = p.parse_args()
    with BenchmarkRecord(run_name("encoder_speed", args.data)) as rec:
        compare(args, rec)


def compare(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """The runtimes side by side, into ``rec``."""
    from newsmon.shared.data import load_corpus

    runtimes = args.runtimes.split(",")
    texts = [a.text for a in load_corpus(args.data).split("train")[: args.n]]
    print(f"{len(texts)} sentinews_sl train articles, {args.max_length} tokens, cores {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    res = measure(runtimes, texts, args.max_length, args.threads)
    ref = res[runtimes[0]]
    f1 = {rt: {} if args.skip_eval else eval_figures(rt, args.data, args.tune, args.eval_dir) for rt in runtimes}
    print(f"\nload average at the end {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[2]:.1f} (15 min)\n")
    rows = []
    for rt in runtimes:
        r = res[rt]
        cos = (r["vectors"] * ref["vectors"]).sum(axis=1)
        uf1 = f1[rt]
        rows.append([rt, round(r["rate"], 2), f"{r['rate'] / ref['rate']:.2f}x", f"{cos.mean():.4f} / {cos.min():.4f}",
                     round(uf1["rae"], 1) if "rae" in uf1 else "–",
                     round(uf1["rae_tuned"], 1) if "rae_tuned" in uf1 else "–"])
    rec.table(f"The encoder's runtimes on {len(texts)} train articles ({args.max_length} tokens)",
              ["runtime", "articles/s", "speed-up", "cosine to fp32, mean / min", "RAE-XMC uF1",
               "RAE-XMC (tuned) uF1"], rows,
              note="The rates move with the machine's load, their ratio less. RAE-XMC: `newsmon eval --methods rae` "
                   "with the runtime set (– with --skip-eval).")
    if not args.skip_eval:
        base = f1[runtimes[0]].get("rae", float("nan"))
        for rt in runtimes[1:]:
            d = f1[rt].get("rae", float("nan")) - base
            print(f"{rt}: micro-F1 {d:+.1f} points against {runtimes[0]} "
                  f"({'within' if abs(d) <= 0.5 else 'outside'} the 0.5-point condition)")


if __name__ == "__main__":
    main()
