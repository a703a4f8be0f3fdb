"""Hard-negative fine-tuning on sentinews_sl: RAE-XMC micro-F1 and subset accuracy before and after.

For the GPU machine (one prepared run, under 10 minutes): full epochs, 512 tokens, fp16. On CPU the same
script runs with a step budget (``--max-steps``) and shorter inputs.

Usage (repository root)::

    python benchmarks/finetune_sentinews.py                          # GPU: 1 epoch, 512 tokens
    python benchmarks/finetune_sentinews.py --max-steps 20 --max-length 128   # CPU budget
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from record import BenchmarkRecord

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="../shared/data/sentinews_sl")
    p.add_argument("--max-steps", type=int, default=None, help="optimiser step budget (CPU); default: epochs")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max-length", type=int, default=512, help="tokens (encoder and training)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args()
    with BenchmarkRecord("finetune_sentinews") as rec:
        measure(args, rec)


def measure(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """Mine, fine-tune and evaluate before and after, into ``rec``."""
    import torch

    from newsmon.shared.config import Settings
    from newsmon.shared.data import load_corpus
    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.logs import configure_logging
    from newsmon.training_jobs.finetune import finetune
    from newsmon.training_jobs.nightly import mine
    from newsmon.training_jobs.rollout import evaluate_model

    configure_logging("console", "WARNING")
    s = Settings()
    s.encoder.max_length = args.max_length
    t = s.training
    t.query_max_len = t.passage_max_len = args.max_length
    t.batch_size, t.train_group_size, t.learning_rate, t.epochs = args.batch_size, args.group_size, args.lr, args.epochs
    corpus = load_corpus(args.data)
    base = resolve_model(s.encoder.model, s.home)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    before = evaluate_model(s, base, corpus)
    t_eval = time.perf_counter() - t0
    work = Path(tempfile.mkdtemp(prefix="newsmon-ft-"))
    t0 = time.perf_counter()
    rep = mine(s, corpus, work / "hn.jsonl")
    t_mine = time.perf_counter() - t0
    t0 = time.perf_counter()
    cand = finetune(s, base, work / "hn.jsonl", work / "candidate", rep["data_sha256"], rep, max_steps=args.max_steps)
    t_ft = time.perf_counter() - t0
    after = evaluate_model(s, str(cand), corpus)
    figures = {
        "device": device, "max_length": args.max_length, "max_steps": args.max_steps, "epochs": args.epochs,
        "queries": rep["queries_written"], "without_positive": rep["without_positive"],
        "before": {k: before[k] for k in ("uF1", "Acc", "P@1")}, "after": {k: after[k] for k in ("uF1", "Acc", "P@1")},
        "seconds": {"eval": round(t_eval, 1), "mining": round(t_mine, 1), "finetune": round(t_ft, 1)},
    }
    print(f"device {device}; {rep['queries_written']} training queries ({rep['without_positive']} without a "
          f"positive); fine-tuning {t_ft:.0f} s")
    print(f"RAE-XMC on test (k=50, tau=0.04, threshold=0.5): micro-F1 {100 * before['uF1']:.1f} -> "
          f"{100 * after['uF1']:.1f}, subset accuracy {100 * before['Acc']:.1f} -> {100 * after['Acc']:.1f}, "
          f"P@1 {100 * before['P@1']:.1f} -> {100 * after['P@1']:.1f}")
    rec.table(f"RAE-XMC on test before and after fine-tuning ({device}, {args.max_length} tokens)",
              ["figure", "before", "after"],
              [[k, round(100 * before[k], 1), round(100 * after[k], 1)] for k in ("uF1", "Acc", "P@1")],
              note="k=50, tau=0.04, threshold 0.5 (the research defaults).")
    rec.data.update(figures)
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
