"""The nightly job's CPU budget measured: a linear adapter on the stored e5 vectors, before and after, on the
test split (not in CI; its record is on the docs' measurements page).

For each mining variant (the research's: nearest positive sharing a label, 15 negatives from the top 500 sharing
none; positive by label overlap; negatives from ranks 30-200; both; 8 positives weighted by label Jaccard), the adapter is trained on the train split
(early stopping on validation label-overlap@10) and measured on validation; the variant with the best
validation overlap@10 is kept (the test split is reported for all, but not used to choose). For the kept one:
zero-shot 1-NN micro-F1, label-overlap precision@10 of the neighbours, RAE-XMC with k / tau / lambda /
threshold tuned on validation for each model (Optuna, ``--trials``) and the ``newsmon`` row (calibrated), base vs adapted, all on the test split;
wall time per epoch and peak RSS.

Usage (repository root; embeddings come from the shared cache under NEWSMON_HOME)::

    .venv/bin/python benchmarks/adapter_epoch.py --data ../shared/data/sentinews_sl
    .venv/bin/python benchmarks/adapter_epoch.py --data ../shared/data/reuters21578_en --train-limit 3000 \
        --test-limit 1000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from record import BenchmarkRecord, run_name

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VARIANTS = {
    "research: nearest pos, top-500 negs": {"adapter_positive": "nearest", "adapter_neg_ranks": None},
    "overlap pos, top-500 negs": {"adapter_positive": "overlap", "adapter_neg_ranks": None},
    "nearest pos, negs ranks 30-200": {"adapter_positive": "nearest", "adapter_neg_ranks": (30, 200)},
    "overlap pos, negs ranks 30-200": {"adapter_positive": "overlap", "adapter_neg_ranks": (30, 200)},
    "8 pos weighted by Jaccard, top-500 negs (default)": {"adapter_positive": "weighted", "adapter_neg_ranks": None},
}


def _subset_corpus(data: str, train_limit: int | None, val_limit: int | None, test_limit: int | None, out: Path):
    """The corpus with the first ``train_limit`` train, ``val_limit`` validation and ``test_limit`` test
    articles (all when None)."""
    from newsmon.shared.data import load_corpus

    rows = [json.loads(x) for x in (Path(data) / "articles.jsonl").read_text(encoding="utf-8").splitlines()]
    limits = {"train": train_limit, "validation": val_limit, "test": test_limit}
    seen: dict[str, int] = {}
    kept = []
    for r in rows:
        seen[r["split"]] = seen.get(r["split"], 0) + 1
        if limits.get(r["split"]) is None or seen[r["split"]] <= limits[r["split"]]:
            kept.append(r)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    return load_corpus(out)


def _encode_chunked(enc, texts: list[str], role: str, chunk: int = 128):
    """``enc.encode`` in chunks, so the cache keeps what was embedded if the run is stopped."""
    import numpy as np

    parts = [enc.encode(texts[i:i + chunk], role=role) for i in range(0, len(texts), chunk)]
    print(f"  {role}: {len(texts)} articles", flush=True)
    return np.vstack(parts) if parts else np.zeros((0, enc.dim), dtype=np.float32)


def _retrieval_figures(vecs: dict, labels: dict, W=None) -> dict:
    from newsmon.training_jobs.train_adapter import apply, one_nn_micro_f1, overlap_at_k

    mem = apply(W, vecs["train"])
    out = {}
    for split in ("validation", "test"):
        q = apply(W, vecs[split])
        out[split] = {"1nn_uF1": one_nn_micro_f1(q, labels[split], mem, labels["train"]),
                      "overlap10": overlap_at_k(q, labels[split], mem, labels["train"], 10)}
    return out


def _rae(settings, corpus, model: str, trials: int) -> dict:
    """RAE-XMC on test with k / tau / lambda / threshold tuned on validation for ``model`` (in-memory Optuna
    study), and the ``newsmon`` row (what the workers run; calibrated on the memory and validation)."""
    from newsmon.shared.evaluation import run_eval
    from newsmon.shared.promotion import settings_with_model

    rep = run_eval(corpus, ["rae", "newsmon"], settings_with_model(settings, model), tune=trials, progress=False)
    out = {}
    for name in ("rae_tuned", "newsmon"):
        m = rep["methods"][name]
        out[name] = {"uF1": m["metrics"]["all"]["uF1"], "Acc": m["metrics"]["all"]["Acc"], "params": m["params"]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="../shared/data/sentinews_sl")
    p.add_argument("--train-limit", type=int, default=None, help="first N train articles (default: all)")
    p.add_argument("--val-limit", type=int, default=None, help="first N validation articles (default: all)")
    p.add_argument("--test-limit", type=int, default=None, help="first N test articles (default: all)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 on a loaded machine)")
    p.add_argument("--embed-only", action="store_true", help="fill the embedding cache and stop")
    p.add_argument("--trials", type=int, default=30, help="Optuna trials of RAE-XMC per model (0: skip RAE)")
    p.add_argument("--variants", default="all", help="comma-separated variant numbers (1-5) or all")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args()
    with BenchmarkRecord(run_name("adapter_epoch", args.data)) as rec:
        measure(args, rec)


def measure(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """Each mining variant's adapter, then base against the kept one on test, into ``rec``."""
    import torch

    from newsmon.shared.config import Settings
    from newsmon.shared.encoder import Encoder
    from newsmon.shared.logs import configure_logging
    from newsmon.training_jobs.train_adapter import fit_candidate

    configure_logging("console", "WARNING")
    torch.set_num_threads(args.threads)
    s = Settings()
    tmp = Path(tempfile.mkdtemp(prefix="newsmon-adapter-bench-"))
    corpus = _subset_corpus(args.data, args.train_limit, args.val_limit, args.test_limit, tmp / "articles.jsonl")
    splits = {k: [a for a in corpus.split(k) if a.labels] for k in ("train", "validation", "test")}
    labels = {k: [a.labels for a in v] for k, v in splits.items()}
    enc = Encoder(s.encoder, s.home)
    t0 = time.perf_counter()
    vecs = {k: _encode_chunked(enc, [a.text for a in v], "passage" if k == "train" else "query")
            for k, v in splits.items()}
    model_id, embed_s = enc.model_id, time.perf_counter() - t0
    enc.close()
    if args.embed_only:
        print(f"embedded {sum(len(v) for v in vecs.values())} articles in {embed_s:.0f} s ({model_id})")
        return
    result = {"corpus": str(args.data), "model": model_id, "articles": {k: len(v) for k, v in splits.items()},
              "embed_s_cached_or_not": embed_s, "base": _retrieval_figures(vecs, labels), "variants": {}}
    names = list(VARIANTS) if args.variants == "all" else [list(VARIANTS)[int(i) - 1] for i in args.variants.split(",")]
    best = None
    for name in names:
        v = s.model_copy(deep=True)
        v.training = v.training.model_copy(update=VARIANTS[name])
        rep = fit_candidate(v, labels["train"], vecs["train"], vecs["validation"], labels["validation"],
                            tmp / f"adapter-{names.index(name)}", s.encoder.model, model_id)
        from newsmon.shared.encoder_adapter import read_adapter

        W = read_adapter(rep["model_path"]).W
        rep["figures"] = _retrieval_figures(vecs, labels, W)
        result["variants"][name] = rep
        print(f"{name}: val overlap10 {rep['figures']['validation']['overlap10']:.3f} test "
              f"1nn {rep['figures']['test']['1nn_uF1']:.3f} overlap10 {rep['figures']['test']['overlap10']:.3f} "
              f"({rep['training']['seconds']:.1f} s, best epoch {rep['training']['best_epoch']})", flush=True)
        if best is None or rep["figures"]["validation"]["overlap10"] > result["variants"][best]["figures"][
                "validation"]["overlap10"]:
            best = name
    result["kept"] = best
    if args.trials:
        result["rae_base"] = _rae(s, corpus, s.encoder.model, args.trials)
        result["rae_adapted"] = _rae(s, corpus, result["variants"][best]["model_path"], args.trials)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({k: v for k, v in result.items() if k != "variants"}, indent=2, default=float))
    tables(result, rec)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=float))


def tables(result: dict, rec: BenchmarkRecord) -> None:
    """The variants (validation and test) and base against the kept adapter, as tables of ``rec``."""
    def figures(f: dict) -> list[float]:
        return [round(100 * f["validation"]["overlap10"], 1), round(100 * f["test"]["1nn_uF1"], 1),
                round(100 * f["test"]["overlap10"], 1)]

    rows = [[name, *figures(v["figures"]), v["training"]["best_epoch"], round(v["training"]["seconds"], 1)]
            for name, v in result["variants"].items()]
    rows.append(["(base model)", *figures(result["base"]), "", ""])
    n = result["articles"]
    rec.table(f"Mining variants ({n['train']:,} train, {n['validation']:,} validation, {n['test']:,} test articles)",
              ["mining variant", "val overlap@10", "test 1-NN micro-F1", "test overlap@10", "best epoch",
               "training seconds"], rows,
              note=f"Kept: {result['kept']} (the best validation overlap@10; test is reported, not used to choose).")
    if "rae_base" in result:
        rows = [[f"{name} {metric}", round(100 * result["rae_base"][name][metric], 1),
                 round(100 * result["rae_adapted"][name][metric], 1)]
                for name in ("rae_tuned", "newsmon") for metric in ("uF1", "Acc")]
        rec.table("Test split, base against the kept adapter", ["figure", "base", "adapted"], rows)
    rec.data.update({k: v for k, v in result.items() if k not in ("variants", "rae_base", "rae_adapted")})


if __name__ == "__main__":
    main()
