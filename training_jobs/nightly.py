"""``newsmon train nightly``: mine hard negatives -> train a candidate -> calibrate the candidate and production (the
calibration of ``memory build --calibrate``) -> compare their calibrated ``newsmon`` rows on the same test articles
-> promote or refuse, with the reason (:mod:`newsmon.training_jobs.rollout`, :mod:`newsmon.training_jobs.gate`).
One tuner (the calibration), one gate (the calibrated scorer): no Optuna stage; ``newsmon train tune`` remains an
offline study of the ``rae`` baseline, outside the chain.

The candidate is the encoder fine-tuned with FlagEmbedding on CUDA; without CUDA it is what
``training.cpu_budget`` says: by default a linear adapter on the stored vectors (:mod:`adapter`, minutes; its
promotion transforms the memory's vectors instead of re-encoding them), or the fine-tune with a step budget.

Training articles come from a labelled corpus's train split (``--source corpus``) or from the knowledge
memory itself (``--source memory``: every labelled article, moderator decisions included, with the vectors
already stored). The calibration uses the corpus's validation split (beside the memory's articles), the gate its
test split.

Exit status: 0 when the job ran (whether the candidate was promoted or refused: a refusal is a decision, with
its reason in ``<home>/models/rollouts.jsonl``); non-zero only when a stage failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog

from newsmon.shared.classifier import model_identity
from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus
from newsmon.shared.encoder import Encoder, resolve_model
from newsmon.shared.memory import MemoryRouter, SearchFilter
from newsmon.shared.promotion import effective_encoder_settings
from newsmon.training_jobs.train_adapter import fit_candidate
from newsmon.training_jobs.finetune import finetune
from newsmon.training_jobs.mining import mine_hard_negatives, write_jsonl
from newsmon.training_jobs.rollout import models_dir, rollout

log = structlog.get_logger(__name__)


@dataclass
class NightlyReport:
    """Timings (seconds) and outputs of each stage."""

    mining: dict = field(default_factory=dict)
    budget: str = "finetune"
    candidate: str | None = None
    adapter: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)
    rollout: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)


def memory_training_set(settings: Settings) -> tuple[list[str], list[str], list[tuple], np.ndarray]:
    """The labelled articles of the knowledge memory (every language collection of the current model version):
    ids, texts (kept in the payloads), label sets and their stored ``(n, d)`` float32 vectors, so nothing is
    re-embedded. Moderator decisions are in it: the nightly job learns from them."""
    version, dim = model_identity(settings)
    router = MemoryRouter(settings, version, dim)
    ids, texts, labels, vecs = [], [], [], []
    try:
        for lang in router.languages():
            for p in router.memory(lang).scroll(SearchFilter(labelled=True), with_vectors=True):
                if p.payload.get("text"):
                    ids.append(p.article_id)
                    texts.append(p.payload["text"])
                    labels.append(p.labels)
                    vecs.append(p.vector)
    finally:
        router.close()
    return ids, texts, labels, (np.stack(vecs) if vecs else np.zeros((0, dim), dtype=np.float32))


def mine(settings: Settings, corpus: Corpus | None, out_file: Path, progress: bool = False,
         source: str = "corpus") -> dict:
    """Write the hard-negative JSONL from the current model's embeddings; returns the report (with
    ``data_sha256``).

    Args:
        source: ``corpus`` (the train split, embedded now) or ``memory`` (the labelled articles of the
            knowledge memory, with their stored vectors).
    """
    if source == "memory":
        ids, texts, label_sets, vecs = memory_training_set(settings)
    elif source == "corpus":
        train = [a for a in corpus.split("train") if a.labels]
        ids, texts, label_sets = [a.id for a in train], [a.text for a in train], [a.labels for a in train]
        enc = Encoder(effective_encoder_settings(settings), settings.home)
        try:
            vecs = enc.encode(texts, role="passage", progress=progress)
        finally:
            enc.close()
    else:
        raise ValueError(f"source must be corpus or memory, got {source!r}")
    if len(ids) < 2:
        raise RuntimeError(f"too few labelled articles to mine from the {source} ({len(ids)})")
    t = settings.training
    records, report = mine_hard_negatives(ids, texts, label_sets, vecs, top=t.top, n_neg=t.n_neg)
    report.data_sha256 = write_jsonl(records, out_file)
    log.info("hard negatives mined", **report.as_dict())
    return report.as_dict()


def budget(settings: Settings) -> str:
    """``finetune`` where CUDA is present, else ``training.cpu_budget`` (``adapter`` by default)."""
    import torch  # deferred: seconds to import

    return "finetune" if torch.cuda.is_available() else settings.training.cpu_budget


def adapter_candidate(settings: Settings, corpus: Corpus, out: Path, source: str = "corpus") -> dict:
    """The CPU budget's candidate: an adapter trained on the current model's vectors of the training articles
    (the corpus's train split, cached embeddings reused, or the memory's stored vectors), early-stopped on the
    corpus's validation split; returns :func:`newsmon.training_jobs.train_adapter.fit_candidate`'s report.

    Raises:
        RuntimeError: the corpus has no labelled validation article, or too few training articles.
    """
    val = [a for a in corpus.split("validation") if a.labels]
    if not val:
        raise RuntimeError("the adapter budget needs labelled validation articles (early stopping)")
    current = effective_encoder_settings(settings)
    enc = Encoder(current, settings.home)
    try:
        if source == "memory":
            _, _, labels, vecs = memory_training_set(settings)
        else:
            train = [a for a in corpus.split("train") if a.labels]
            labels, vecs = [a.labels for a in train], enc.encode([a.text for a in train], role="passage",
                                                                progress=True)
        val_vecs = enc.encode([a.text for a in val], role="query", progress=True)
        trained_on = enc.model_id
    finally:
        enc.close()
    if len(labels) < 2:
        raise RuntimeError(f"too few labelled articles to train on from the {source} ({len(labels)})")
    return fit_candidate(settings, labels, vecs, val_vecs, [a.labels for a in val], out, current.model, trained_on)


def _finetune_candidate(settings: Settings, corpus: Corpus, out: Path, rep: NightlyReport, max_steps: int | None,
                        source: str) -> None:
    """Mine the FlagEmbedding file and fine-tune the encoder into ``out`` (the GPU path)."""
    work = models_dir(settings) / "nightly"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rep.mining = mine(settings, corpus, work / "hard_negatives.jsonl", progress=True, source=source)
    rep.seconds["mining"] = time.perf_counter() - t0
    if rep.mining["queries_written"] == 0:
        raise RuntimeError("no training query has a positive: nothing to fine-tune on")
    t0 = time.perf_counter()
    base = resolve_model(effective_encoder_settings(settings).model, settings.home)
    finetune(settings, base, work / "hard_negatives.jsonl", out, rep.mining["data_sha256"], rep.mining,
             max_steps=max_steps or settings.training.max_steps)
    rep.seconds["finetune"] = time.perf_counter() - t0


def run_nightly(settings: Settings, corpus: Corpus, max_steps: int | None = None,
                source: str = "corpus") -> NightlyReport:
    """The whole chain; see the module docstring. ``calibration`` of the report: language -> the id of the
    candidate's calibration record (named by ``promoted.json`` when promoted)."""
    rep = NightlyReport(budget=budget(settings))
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = models_dir(settings) / f"candidate-{stamp}"
    if rep.budget == "adapter":
        t0 = time.perf_counter()
        rep.adapter = adapter_candidate(settings, corpus, out, source)
        rep.mining = rep.adapter["mining"]
        rep.seconds["adapter"] = time.perf_counter() - t0
    else:
        _finetune_candidate(settings, corpus, out, rep, max_steps, source)
    rep.candidate = str(out)
    t0 = time.perf_counter()
    decision = rollout(settings, str(out), corpus)
    rep.rollout = {"promoted": decision.promoted, "reason": decision.reason, "reembedded": decision.reembedded,
                   "candidate": decision.candidate, "current": decision.current}
    rep.calibration = decision.candidate["records"]
    rep.seconds["calibrate_and_gate"] = time.perf_counter() - t0
    return rep
