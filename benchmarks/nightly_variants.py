"""Fine-tuning variants of the nightly job, each judged by the real gate (issue 41 item 2).

One home per corpus: the memory built from the corpus's train split and calibrated as ``memory build --calibrate``
(production). Then, per variant, the nightly job's own stages with that variant's settings: the candidate trained
(``training_jobs/nightly.py: adapter_candidate``; the ``identity`` variant is an adapter whose matrix is the
identity, the control that isolates what the candidate's calibration does from what the adapter does), then
``training_jobs/rollout.py: rollout``: the memory carried into the candidate's collections, the candidate
calibrated, production's calibration read (a scratch store, reused when its inputs did not change), both measured
on the corpus's test split, ``gate.judge``. ``promoted.json`` is removed after each variant, so every candidate is
judged against the same production. Settings of a variant are ``NEWSMON_`` settings overrides (see ``VARIANTS``).

Usage (one corpus a run; ``nice`` it on a shared machine)::

    nice python benchmarks/nightly_variants.py --data ../shared/data/sentinews_sl --home /tmp/nv-sl \\
        --shared-home $NEWSMON_HOME --variants identity default

``--shared-home`` lends the encoder's weights (symlinked) and a copy of its embedding cache (read once, with
SQLite's backup) to the run's own home, which is all the run writes.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from record import BenchmarkRecord, run_name

from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus, load_corpus

#: Variant -> (settings overrides by dotted name, what it tries). ``identity`` trains nothing.
VARIANTS: dict[str, tuple[dict, str]] = {
    "identity": ({}, "adapter W = I (no training): the candidate's calibration alone"),
    "identity+memcal": ({"calibration.adapted_memory_articles": True},
                        "W = I, calibrated on memory leave-one-out + validation like production"),
    "default": ({}, "the shipped adapter (8 Jaccard-weighted positives, 15 negatives, lr 1e-3, decay 0.01)"),
    "default+memcal": ({"calibration.adapted_memory_articles": True},
                       "the shipped adapter, calibrated like production"),
    "near-identity+memcal": ({"calibration.adapted_memory_articles": True, "training.adapter_learning_rate": 2e-4,
                              "training.adapter_decay": 1.0},
                             "small steps (lr 2e-4), strong pull to I (decay 1.0), calibrated like production"),
    "listwise+memcal": ({"calibration.adapted_memory_articles": True, "training.adapter_objective": "labelset"},
                        "label-set objective (softmax over the top-50 neighbours vs label Jaccard), calibrated "
                        "like production"),
    "listwise": ({"training.adapter_objective": "labelset"}, "label-set objective, validation-only calibration"),
    "lowrank16+memcal": ({"calibration.adapted_memory_articles": True, "training.adapter_rank": 16},
                         "low-rank residual W = I + UV^T (r 16), the shipped mining, calibrated like production"),
    "listwise-lowrank16+memcal": ({"calibration.adapted_memory_articles": True, "training.adapter_rank": 16,
                                   "training.adapter_objective": "labelset"},
                                  "label-set objective on a rank-16 residual, calibrated like production"),
    "listwise-near-identity+memcal": ({"calibration.adapted_memory_articles": True,
                                       "training.adapter_objective": "labelset", "training.adapter_decay": 1.0,
                                       "training.adapter_learning_rate": 2e-4},
                                      "label-set objective, small steps, strong pull to I, calibrated like "
                                      "production"),
    "epochs40-nostop+memcal": ({"calibration.adapted_memory_articles": True, "training.adapter_patience": 40,
                                "training.adapter_max_epochs": 40},
                               "more epochs: 40, patience 40 (the best validation epoch kept)"),
}


def with_overrides(base: Settings, overrides: dict) -> Settings:
    """A deep copy of ``base`` with ``{"section.field": value}`` overrides applied."""
    s = base.model_copy(deep=True)
    for dotted, value in overrides.items():
        section, name = dotted.split(".")
        setattr(getattr(s, section), name, value)
    return s


def prepare_home(home: Path, shared: Path | None) -> None:
    """The run's own home: the encoder's model directories linked from ``shared/models``, and a copy of its
    embedding cache (made once)."""
    (home / "models").mkdir(parents=True, exist_ok=True)
    if shared is None:
        return
    for d in (shared / "models").iterdir():
        link = home / "models" / d.name
        if d.is_dir() and not d.name.startswith("candidate-") and not link.exists():
            link.symlink_to(d.resolve())
    cache = home / "embeddings.sqlite"
    src = shared / "embeddings.sqlite"
    if src.exists():
        a = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        b = sqlite3.connect(str(cache))
        a.backup(b)
        a.close()
        b.close()


def build_production(s: Settings, corpus: Corpus) -> dict:
    """The train split in the memory (once), calibrated as ``memory build --calibrate`` (reused when unchanged)."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.scoring.records import record_id
    from newsmon.training_jobs.calibrate_memory import calibrate_memory

    t0 = time.perf_counter()
    clf = Classifier(s)
    try:
        if not clf.languages():
            clf.add_articles([a for a in corpus.split("train") if a.labels], progress=True)
        done = calibrate_memory(clf, [a for a in corpus.split("validation") if a.labels],
                                written_by="memory build", corpus=str(corpus.path))
    finally:
        clf.close()
    return {"records": {lang: record_id(c.record) for lang, c in done.items()},
            "seconds": round(time.perf_counter() - t0, 1)}


def identity_candidate(s: Settings, out: Path) -> dict:
    """An adapter model whose matrix is the identity, trained on production's version."""
    from newsmon.shared.encoder import Encoder
    from newsmon.shared.encoder_adapter import write_adapter
    from newsmon.shared.promotion import effective_encoder_settings

    current = effective_encoder_settings(s)
    enc = Encoder(current, s.home)
    try:
        dim, trained_on = enc.dim, enc.model_id
    finally:
        enc.close()
    adapter = write_adapter(out, np.eye(dim, dtype=np.float32), current.model, trained_on,
                            extra={"adapter_training": {"variant": "identity"}})
    return {"model_path": str(adapter.path), "suffix": adapter.suffix}


def similarity_shift(s: Settings, corpus: Corpus, candidate: Path, k: int = 75) -> dict:
    """How the candidate moves what the calibration's absolute similarity levers read: for the test articles
    (query role) against the train articles (passage role), base vectors and adapted ones, the mean cosine of the
    nearest and the ``k``-th nearest, and the label-overlap precision@10 (%)."""
    from newsmon.shared.encoder import Encoder
    from newsmon.shared.encoder_adapter import read_adapter
    from newsmon.shared.promotion import effective_encoder_settings
    from newsmon.training_jobs.train_adapter import apply, overlap_at_k, top_neighbours

    adapter = read_adapter(candidate)
    train = [a for a in corpus.split("train") if a.labels]
    test = [a for a in corpus.split("test") if a.labels]
    enc = Encoder(effective_encoder_settings(s), s.home)
    try:
        mem = enc.encode([a.text for a in train], role="passage")
        q = enc.encode([a.text for a in test], role="query")
    finally:
        enc.close()
    out = {}
    for side, w in (("base", None), ("candidate", adapter.step if adapter is not None else None)):
        qa, ma = apply(w, q), apply(w, mem)
        idx = top_neighbours(qa, ma, k)
        sims = np.take_along_axis(qa @ ma.T, idx, axis=1)
        out[side] = {"cos_top1": round(float(sims[:, 0].mean()), 4), f"cos_top{k}": round(float(sims[:, -1].mean()), 4),
                     "overlap10": round(100 * overlap_at_k(qa, [a.labels for a in test], ma,
                                                           [a.labels for a in train], 10), 1)}
    return out


def run_variant(base: Settings, corpus: Corpus, name: str) -> dict:
    """Train the variant's candidate and put it through the real rollout; returns the row."""
    from newsmon.shared.promotion import promoted_file
    from newsmon.training_jobs.nightly import adapter_candidate
    from newsmon.training_jobs.rollout import models_dir, rollout

    overrides, what = VARIANTS[name]
    s = with_overrides(base, overrides)
    promoted_file(s).unlink(missing_ok=True)
    out = models_dir(s) / f"candidate-{name}"
    t0 = time.perf_counter()
    train = identity_candidate(s, out) if name.startswith("identity") else adapter_candidate(s, corpus, out)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    d = rollout(s, str(out), corpus)
    t_gate = time.perf_counter() - t0
    promoted_file(s).unlink(missing_ok=True)  # the next variant is judged against the same production
    shift = similarity_shift(s, corpus, out)
    keep = ("uF1", "Acc", "uP", "uR", "P@1", "model_version", "records")
    row = {"variant": name, "what": what, "overrides": overrides, "promoted": d.promoted, "reason": d.reason,
           "current": {k: d.current.get(k) for k in keep}, "candidate": {k: d.candidate.get(k) for k in keep},
           "delta": {m: round(100 * (d.candidate[m] - d.current[m]), 1) for m in ("uF1", "Acc")},
           "carried": d.reembedded, "seconds": {"train": round(t_train, 1), "calibrate_and_gate": round(t_gate, 1)},
           "similarity": shift,
           "training": {k: v for k, v in train.items() if k in ("training", "validation_overlap10", "mining")}}
    print(json.dumps({k: row[k] for k in ("variant", "reason", "delta", "seconds", "similarity")}), flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--home", required=True, help="the run's own home (memory, candidates, records)")
    ap.add_argument("--shared-home", default=None, help="a home to lend the encoder and the embedding cache")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args(argv)
    home = Path(args.home)
    prepare_home(home, Path(args.shared_home) if args.shared_home else None)
    base = Settings(home=home, data=Path(args.data))
    base.memory.path = home / "memory"
    base.encoder.follow_promoted = True
    corpus = load_corpus(Path(args.data))
    with BenchmarkRecord(run_name("nightly_variants", args.data)) as rec:
        rec.data["production"] = build_production(base, corpus)
        rows = []
        for name in args.variants:
            rows.append(run_variant(base, corpus, name))
            rec.data["variants"] = rows
        rec.table(f"Nightly candidates through the gate ({args.data})",
                  ["variant", "production uF1", "Acc", "candidate uF1", "Acc", "delta uF1", "delta Acc", "verdict",
                   "train s", "calibrate+gate s", "test cos top-1 base -> cand", "test overlap@10 base -> cand"],
                  [[r["variant"], round(100 * r["current"]["uF1"], 1), round(100 * r["current"]["Acc"], 1),
                    round(100 * r["candidate"]["uF1"], 1), round(100 * r["candidate"]["Acc"], 1),
                    r["delta"]["uF1"], r["delta"]["Acc"], "promoted" if r["promoted"] else "refused",
                    r["seconds"]["train"], r["seconds"]["calibrate_and_gate"],
                    f'{r["similarity"]["base"]["cos_top1"]} -> {r["similarity"]["candidate"]["cos_top1"]}',
                    f'{r["similarity"]["base"]["overlap10"]} -> {r["similarity"]["candidate"]["overlap10"]}']
                   for r in rows],
                  note="the gate's calibrated newsmon rows on the test split, %")


if __name__ == "__main__":
    main()
