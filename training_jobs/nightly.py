"""``newsmon train nightly``: mine hard negatives -> train a candidate -> tune k / tau / lambda / threshold (for
the candidate and the current model) -> rollout -> re-calibrate the promoted model's memory.

The candidate is the encoder fine-tuned with FlagEmbedding on CUDA; without CUDA it is what
``training.cpu_budget`` says: by default a linear adapter on the stored vectors (:mod:`adapter`, minutes; its
promotion transforms the memory's vectors instead of re-encoding them), or the fine-tune with a step budget.

Training articles come from a labelled corpus's train split (``--source corpus``) or from the knowledge
memory itself (``--source memory``: every labelled article, moderator decisions included, with the vectors
already stored). Tuning and the rollout gate use the corpus's validation and test splits.

Exit status: 0 when the job ran (whether the candidate was promoted or refused: a refusal is a decision, with
its reason in ``<home>/models/rollouts.jsonl``); non-zero only when a stage failed.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog

from newsmon.shared.classifier import model_identity
from newsmon.shared.config import Settings, mask_url, reveal
from newsmon.shared.data import Corpus
from newsmon.shared.encoder import Encoder, model_fingerprint, resolve_model
from newsmon.shared.evaluation import run_eval
from newsmon.shared.memory import MemoryRouter, SearchFilter
from newsmon.shared.promotion import effective_encoder_settings, settings_with_model
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
    tuning: dict = field(default_factory=dict)
    rollout: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)


def optuna_storage(settings: Settings) -> str:
    """The Optuna storage URL: ``training.optuna_storage`` or SQLite in the home directory."""
    if settings.training.optuna_storage:
        return reveal(settings.training.optuna_storage)
    Path(settings.home).mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(settings.home) / 'optuna.db'}"


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


def tune(settings: Settings, corpus: Corpus, model: str, trials: int, resume: str | None = None) -> dict:
    """Optuna search of k / tau / lambda / threshold on the validation split with ``model`` (study stored in
    :func:`optuna_storage`); returns the best params with the validation subset accuracy and micro-F1.

    Each run is a new study named after the model, the data and the run (:func:`study_name`), so a run never
    reports the optimum another run found on other data. ``resume`` names an earlier study to continue; it
    must have been run on the same data (model and corpus fingerprints), else ``ValueError``.
    """
    import optuna  # deferred: a slow import

    s = settings_with_model(settings, model)
    storage = optuna_storage(settings)
    fingerprint = {"model": model_fingerprint(resolve_model(model, settings.home)), "data": corpus_fingerprint(corpus)}
    name = resume or study_name(model, fingerprint)
    if resume:
        try:
            earlier = optuna.load_study(study_name=resume, storage=storage).user_attrs
        except KeyError:
            raise ValueError(f"no Optuna study {resume!r} in {mask_url(storage)} to resume") from None
        if {k: earlier.get(k) for k in fingerprint} != fingerprint:
            raise ValueError(f"study {resume!r} was run on other data or another model ({earlier}); "
                             "start a new study instead of resuming it")
    report = run_eval(corpus, ["rae"], s, tune=trials, progress=False, tune_storage=storage, study_name=name)
    study = optuna.load_study(study_name=name, storage=storage)
    for key, value in fingerprint.items():
        study.set_user_attr(key, value)
    params = report["methods"]["rae_tuned"]["params"]
    return {"study": name, "storage": mask_url(storage), "trials_in_study": len(study.trials), **params}


def corpus_fingerprint(corpus: Corpus) -> str:
    """sha256 of what tuning sees of a corpus: every article's id, split, labels and text, in order."""
    h = hashlib.sha256()
    for a in corpus.articles:
        h.update(json.dumps([a.id, a.split, list(a.labels), a.text], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def study_name(model: str, fingerprint: dict[str, str]) -> str:
    """``newsmon-rae-<model folder>-<model and data hash, 12 hex>-<UTC time>-<6 random hex>``: one study per
    run, recognisable by model and data."""
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
    folder = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name)[:60]
    return f"newsmon-rae-{folder}-{digest}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


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


def recalibrate(settings: Settings, corpus: Corpus) -> dict:
    """Re-calibrate the scoring for the promoted model (its memory), on the corpus's validation split.

    The one place the nightly job re-calibrates: :func:`newsmon.training_jobs.calibration.calibrate_memory`
    on the promoted version's memory (leave-one-out) plus the validation split, written by ``nightly``; the
    workers, ``suggest`` and ``eval`` read the records. Returns the chosen parameters per language, or
    ``{"skipped": reason}`` when the promoted version's memory holds no labelled article (nothing to calibrate:
    the first ``memory build --calibrate`` does it).
    """
    from newsmon.shared.classifier import Classifier  # deferred: loads the promoted encoder
    from newsmon.training_jobs.calibration import calibrate_memory  # deferred: imports the predictors

    clf = Classifier(settings)
    try:
        out = calibrate_memory(clf, [a for a in corpus.split("validation") if a.labels], written_by="nightly",
                               corpus=str(corpus.path))
    except ValueError as exc:  # an empty memory: nothing to calibrate
        return {"skipped": str(exc)}
    finally:
        clf.close()
    return {lang: c.record.params for lang, c in out.items()}


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


def run_nightly(settings: Settings, corpus: Corpus, max_steps: int | None = None, trials: int | None = None,
                source: str = "corpus") -> NightlyReport:
    """The whole chain; see the module docstring."""
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
    n_trials = settings.training.tune_trials if trials is None else trials
    current_model = resolve_model(effective_encoder_settings(settings).model, settings.home)
    rae: dict = {"candidate": None, "current": None}
    if n_trials:
        t0 = time.perf_counter()
        rae["candidate"] = tune(settings, corpus, str(out), n_trials)
        rae["current"] = tune(settings, corpus, current_model, n_trials)
        rep.tuning = rae
        rep.seconds["tuning"] = time.perf_counter() - t0
        manifest = out / "newsmon_model.json"
        info = json.loads(manifest.read_text())
        info["rae"] = rae["candidate"]
        manifest.write_text(json.dumps(info, indent=2, default=float))
    t0 = time.perf_counter()
    decision = rollout(settings, str(out), corpus, candidate_rae=rae["candidate"], current_rae=rae["current"])
    rep.rollout = {"promoted": decision.promoted, "reason": decision.reason, "reembedded": decision.reembedded,
                   "candidate": decision.candidate, "current": decision.current}
    rep.seconds["rollout"] = time.perf_counter() - t0
    if decision.promoted:
        t0 = time.perf_counter()
        rep.calibration = recalibrate(settings, corpus)
        rep.seconds["calibration"] = time.perf_counter() - t0
    return rep
