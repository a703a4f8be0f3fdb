"""``newsmon train nightly|mine|finetune|tune|rollout``: the nightly training job and its stages.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

from newsmon.cli.common import corpus_or_fail, fail, settings_from_env


def train_mine(
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
    out: Annotated[Path, typer.Option(help="FlagEmbedding JSONL to write.")] = Path("runs/hard_negatives.jsonl"),
    source: Annotated[str, typer.Option(help="corpus (train split) or memory (labelled memory articles).")] = "corpus",
) -> None:
    """Mine hard negatives with the current model (faiss top-500, 15 negatives)."""
    from newsmon.training_jobs.nightly import mine  # deferred: see the module docstring

    s = settings_from_env(data=data)
    corpus = corpus_or_fail(s) if source == "corpus" else None
    print(json.dumps(mine(s, corpus, out, progress=True, source=source), indent=2))


def train_finetune(
    train_file: Annotated[Path, typer.Argument(help="Hard-negative JSONL from `train mine`.")],
    out: Annotated[Path, typer.Option(help="Model directory to write.")],
    max_steps: Annotated[Optional[int], typer.Option(min=1, help="Cap on optimiser steps.")] = None,
) -> None:
    """Fine-tune the current encoder with FlagEmbedding (InfoNCE) on a hard-negative file."""
    from newsmon.shared.encoder import resolve_model  # deferred: see the module docstring
    from newsmon.shared.promotion import effective_encoder_settings
    from newsmon.training_jobs.finetune import finetune

    s = settings_from_env()
    sha = hashlib.sha256(train_file.read_bytes()).hexdigest()
    base = resolve_model(effective_encoder_settings(s).model, s.home)
    print(finetune(s, base, train_file, out, sha, max_steps=max_steps))


def train_tune(
    model: Annotated[str, typer.Argument(help="Model directory or id.")],
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
    trials: Annotated[int, typer.Option(min=1, help="Optuna trials.")] = 30,
    resume: Annotated[Optional[str], typer.Option(help="Continue this earlier study (same model and data) "
                                                       "instead of starting a new one.")] = None,
) -> None:
    """Optuna study of the rae baseline's k / tau / lambda / threshold on validation (subset accuracy); study in
    SQLite or PostgreSQL (NEWSMON_TRAINING__OPTUNA_STORAGE), a new one per run unless --resume names one. Not a
    stage of `train nightly`, and nothing it finds is served (the calibration chooses what serves)."""
    from newsmon.training_jobs.rae_study import tune  # deferred: see the module docstring

    s = settings_from_env(data=data)
    try:
        best = tune(s, corpus_or_fail(s), model, trials, resume=resume)
    except ValueError as exc:
        fail(str(exc))
    print(json.dumps(best, indent=2, default=float))


def train_rollout(
    model: Annotated[str, typer.Argument(help="Candidate model directory.")],
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
) -> None:
    """Carry the memory into the candidate's collections, calibrate the candidate and the current model (as
    `memory build --calibrate`), compare their calibrated newsmon rows on the test split; promote the candidate
    (switch, promoted.json naming its calibration records) only when micro-F1 and subset accuracy are not worse
    beyond the tolerance."""
    from newsmon.training_jobs.rollout import rollout  # deferred: see the module docstring

    s = settings_from_env(data=data)
    d = rollout(s, model, corpus_or_fail(s))
    print(json.dumps({"promoted": d.promoted, "reason": d.reason, "reembedded": d.reembedded,
                      "calibration": d.candidate["records"]}, indent=2))


def train_nightly(
    data: Annotated[Optional[Path], typer.Option(help="Corpus (default: NEWSMON_DATA).")] = None,
    max_steps: Annotated[Optional[int], typer.Option(
        min=1, help="Cap on fine-tuning steps (the finetune budget).")] = None,
    source: Annotated[str, typer.Option(help="Training articles: corpus (train split) or memory.")] = "corpus",
) -> None:
    """Mine -> train (the encoder on CUDA; on CPU NEWSMON_TRAINING__CPU_BUDGET: adapter by default) -> calibrate
    the candidate and the current model -> compare their calibrated newsmon rows on the test split -> promote or
    refuse. Exits 0 when the candidate is promoted or refused; non-zero only when a stage fails."""
    from newsmon.training_jobs.nightly import run_nightly  # deferred: see the module docstring

    s = settings_from_env(data=data)
    rep = run_nightly(s, corpus_or_fail(s), max_steps=max_steps, source=source)
    print(json.dumps(asdict(rep), indent=2, default=float))
