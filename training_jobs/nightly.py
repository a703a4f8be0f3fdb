"""``newsmon train nightly``: mine hard negatives -> fine-tune -> tune k / tau / lambda / threshold -> rollout.

Exit status: 0 when the job ran (whether the candidate was promoted or refused: a refusal is a decision, with
its reason in ``<home>/models/rollouts.jsonl``); non-zero only when a stage failed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from shared.config import Settings

log = structlog.get_logger(__name__)


@dataclass
class NightlyReport:
    """Timings (seconds) and outputs of each stage."""

    mining: dict = field(default_factory=dict)
    candidate: str | None = None
    tuning: dict = field(default_factory=dict)
    rollout: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)


def optuna_storage(settings: Settings) -> str:
    """The Optuna storage URL: ``training.optuna_storage`` or SQLite in the home directory."""
    if settings.training.optuna_storage:
        return settings.training.optuna_storage
    Path(settings.home).mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(settings.home) / 'optuna.db'}"


def mine(settings: Settings, corpus, out_file: Path, progress: bool = False) -> dict:
    """Embed the train split with the current model and write the hard-negative JSONL; returns the report
    (with ``data_sha256``)."""
    from shared.encoder import Encoder
    from shared.promotion import effective_encoder_settings
    from training_jobs.mining import mine_hard_negatives, write_jsonl

    train = [a for a in corpus.split("train") if a.labels]
    enc = Encoder(effective_encoder_settings(settings), settings.home)
    try:
        vecs = enc.encode([a.text for a in train], role="passage", progress=progress)
    finally:
        enc.close()
    t = settings.training
    records, report = mine_hard_negatives([a.id for a in train], [a.text for a in train], [a.labels for a in train],
                                          vecs, top=t.top, n_neg=t.n_neg)
    report.data_sha256 = write_jsonl(records, out_file)
    log.info("hard negatives mined", **report.as_dict())
    return report.as_dict()


def tune(settings: Settings, corpus, model: str, trials: int) -> dict:
    """Optuna search of k / tau / lambda / threshold on the validation split with ``model`` (study stored in
    :func:`optuna_storage`); returns the best params with the validation subset accuracy and micro-F1."""
    from shared.evaluation import run_eval

    s = settings.model_copy(deep=True)
    s.encoder = settings.encoder.model_copy(update={"model": model})
    name = f"newsmon-rae-{Path(model).name}"
    report = run_eval(corpus, ["rae"], s, tune=trials, progress=False, tune_storage=optuna_storage(settings),
                      study_name=name)
    params = report["methods"]["rae_tuned"]["params"]
    return {"study": name, "storage": optuna_storage(settings).split("@")[-1], **params}


def run_nightly(settings: Settings, corpus, max_steps: int | None = None, trials: int | None = None) -> NightlyReport:
    """The whole chain; see the module docstring."""
    from shared.encoder import resolve_model
    from shared.promotion import effective_encoder_settings
    from training_jobs.finetune import finetune
    from training_jobs.rollout import models_dir, rollout

    rep = NightlyReport()
    work = models_dir(settings) / "nightly"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rep.mining = mine(settings, corpus, work / "hard_negatives.jsonl", progress=True)
    rep.seconds["mining"] = time.perf_counter() - t0
    if rep.mining["queries_written"] == 0:
        raise RuntimeError("no training query has a positive: nothing to fine-tune on")
    t0 = time.perf_counter()
    base = resolve_model(effective_encoder_settings(settings).model, settings.home)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = models_dir(settings) / f"candidate-{stamp}"
    finetune(settings, base, work / "hard_negatives.jsonl", out, rep.mining["data_sha256"], rep.mining,
             max_steps=max_steps or settings.training.max_steps)
    rep.candidate = str(out)
    rep.seconds["finetune"] = time.perf_counter() - t0
    n_trials = settings.training.tune_trials if trials is None else trials
    if n_trials:
        t0 = time.perf_counter()
        rep.tuning = tune(settings, corpus, str(out), n_trials)
        rep.seconds["tuning"] = time.perf_counter() - t0
        manifest = out / "newsmon_model.json"
        info = json.loads(manifest.read_text())
        info["rae"] = rep.tuning
        manifest.write_text(json.dumps(info, indent=2, default=float))
    t0 = time.perf_counter()
    decision = rollout(settings, str(out), corpus)
    rep.rollout = {"promoted": decision.promoted, "reason": decision.reason, "reembedded": decision.reembedded}
    rep.seconds["rollout"] = time.perf_counter() - t0
    return rep
