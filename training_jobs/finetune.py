"""Contrastive fine-tuning of the encoder with FlagEmbedding (InfoNCE over query, positive, hard negatives).

FlagEmbedding's encoder-only embedder runner (``FlagEmbedding.finetune.embedder.encoder_only.base``) is driven
in-process with our settings. In-batch negatives are off by default: in classification data, the other
queries' positives in a batch often share a label with the query, so treating them as negatives teaches the
model to push apart articles that should be close (false negatives). FlagEmbedding turns them off for a data
file whose name ends in ``no_in_batch_neg`` when batches are built per data file
(``same_dataset_within_batch``), which is what we do.

The result is a versioned model directory (transformers checkpoint) with ``newsmon_model.json``: base model,
training-data hash, hyper-parameters, mining report and (after evaluation) figures.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import structlog

from newsmon.shared.config import Settings

log = structlog.get_logger(__name__)


def _trainer_args(settings: Settings, base_model: str, data_file: Path, work: Path, max_steps: int | None,
                  cuda: bool) -> list[str]:
    """Command-line arguments of FlagEmbedding's encoder-only embedder runner from our settings."""
    t = settings.training
    enc = settings.encoder
    args = [
        "--model_name_or_path", base_model, "--train_data", str(data_file),
        "--output_dir", str(work), "--overwrite_output_dir", "True",
        "--train_group_size", str(t.train_group_size),
        "--query_max_len", str(t.query_max_len), "--passage_max_len", str(t.passage_max_len),
        "--learning_rate", str(t.learning_rate), "--num_train_epochs", str(t.epochs),
        "--per_device_train_batch_size", str(t.batch_size), "--temperature", str(t.temperature),
        "--sentence_pooling_method", enc.pooling, "--normalize_embeddings", "True",
        "--same_dataset_within_batch", "True",
        "--query_instruction_for_retrieval", enc.query_prefix, "--query_instruction_format", "{}{}",
        "--passage_instruction_for_retrieval", enc.passage_prefix, "--passage_instruction_format", "{}{}",
        "--save_strategy", "no", "--logging_steps", "5", "--report_to", "none",
        "--dataloader_num_workers", "0", "--warmup_ratio", "0.1", "--seed", str(t.seed),
    ]
    if max_steps:
        args += ["--max_steps", str(max_steps)]
    return args + (["--fp16", "True"] if cuda else ["--use_cpu", "True"])


def _manifest(settings: Settings, base_model: str, data_sha256: str, mining: dict | None, max_steps: int | None,
              seconds: float, cuda: bool) -> dict:
    """``newsmon_model.json`` of a fine-tuned model: identity, base model, data hash, hyper-parameters."""
    t = settings.training
    enc = settings.encoder
    base_manifest = Path(base_model) / "newsmon_model.json"
    base_info = json.loads(base_manifest.read_text()) if base_manifest.exists() else {"model_id": base_model}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return {
        "model_id": f"newsmon-ft-{stamp}-{data_sha256[:8]}", "base_model": base_info.get("model_id", base_model),
        "base_model_path": base_model, "trained_at": stamp, "training_data_sha256": data_sha256,
        "training_seconds": round(seconds, 1), "device": "cuda" if cuda else "cpu",
        "hyperparameters": {**t.model_dump(), "max_steps": max_steps, "pooling": enc.pooling,
                            "query_prefix": enc.query_prefix, "passage_prefix": enc.passage_prefix},
        "mining": mining or {}, "pooling": enc.pooling, "query_prefix": enc.query_prefix,
        "passage_prefix": enc.passage_prefix, "evaluation": {},
    }


def finetune(settings: Settings, base_model: str, train_file: Path, out_dir: Path, data_sha256: str,
             mining: dict | None = None, max_steps: int | None = None) -> Path:
    """Fine-tune ``base_model`` (a transformers directory) on ``train_file``; write the model to ``out_dir``.

    Args:
        settings: ``training`` (temperature, learning rate, epochs, max lengths, batch and group sizes,
            in-batch negatives) and ``encoder`` (pooling, prefixes) settings.
        max_steps: stop after this many optimiser steps (CPU tests and step budgets); None = full epochs.

    Returns:
        ``out_dir``. Raises whatever the trainer raises (out of memory, bad data), after removing ``out_dir``.
    """
    import torch  # deferred: seconds to import; only the fine-tuning stage needs it
    from FlagEmbedding.finetune.embedder.encoder_only.base import (  # deferred: heavy, fine-tuning only
        EncoderOnlyEmbedderDataArguments, EncoderOnlyEmbedderModelArguments, EncoderOnlyEmbedderRunner,
        EncoderOnlyEmbedderTrainingArguments)
    from transformers import HfArgumentParser  # deferred: seconds to import

    cuda = torch.cuda.is_available()
    data_file = train_file
    if not settings.training.in_batch_negatives and not train_file.stem.endswith("no_in_batch_neg"):
        data_file = train_file.with_name(train_file.stem + ".no_in_batch_neg.jsonl")
        shutil.copyfile(train_file, data_file)
    work = out_dir.with_name(out_dir.name + ".training")
    shutil.rmtree(work, ignore_errors=True)
    parser = HfArgumentParser((EncoderOnlyEmbedderModelArguments, EncoderOnlyEmbedderDataArguments,
                               EncoderOnlyEmbedderTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(
        args=_trainer_args(settings, base_model, data_file, work, max_steps, cuda))
    started = time.perf_counter()
    try:
        runner = EncoderOnlyEmbedderRunner(model_args=model_args, data_args=data_args, training_args=training_args)
        runner.run()
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        if data_file != train_file:
            data_file.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    manifest = _manifest(settings, base_model, data_sha256, mining, max_steps, seconds, cuda)
    (work / "newsmon_model.json").write_text(json.dumps(manifest, indent=2))
    (work / "training_args.bin").unlink(missing_ok=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    work.rename(out_dir)
    log.info("fine-tuned model written", path=str(out_dir), seconds=round(seconds, 1))
    return out_dir
