"""The nightly chain on a GPU with the production encoder (issue 41 item 4): BAAI/bge-m3, fp16, on CUDA, in under
10 minutes on one H100, every stage budgeted.

The chain is the one ``newsmon train nightly`` runs (:func:`newsmon.training_jobs.nightly.run_nightly`, its
``finetune`` budget, which CUDA selects), on a fresh home filled as production is:

====================  ========  ==========================================================================
stage                 budget s  what
====================  ========  ==========================================================================
preflight             30        CUDA present, the weights on local disk, the encoder loaded (fp16)
memory_build          60        the train split embedded and stored (``memory build``)
calibrate_production  90        production's calibration (``memory build --calibrate``: memory + validation)
mining                30        hard negatives mined from the train split (faiss, top 500)
finetune              210       FlagEmbedding, fp16, 512 tokens, a step budget (``--max-steps``)
calibrate_and_gate    150       the memory re-embedded by the candidate, both calibrated, the gate
====================  ========  ==========================================================================

(570 s; 30 s spare within the 600 s the script is allowed). The finetune budget assumes about 1.5 s per step of
8 queries x 8 passages x 512 tokens on bge-m3 (568 M parameters) in fp16 on an H100, an estimate, not a measurement:
the run records each stage's seconds against its budget, exits 3 when a stage overran, and stops (exit 4) when the
whole run passes ``--deadline`` seconds.

The weights are never downloaded at run time (``HF_HUB_OFFLINE=1``): install them beforehand, on a machine with
the network, into the Hugging Face cache the GPU machine reads (``hf download BAAI/bge-m3``, or copy the cache),
or give their directory with ``--model``. Without CUDA or without the weights the script exits 2 at once and says
which is missing.

``--dry-run`` checks the plan and the settings on any machine (CPU): the budgets fit the deadline, the encoder
settings are production's (bge-m3, CLS pooling, 8192 tokens, no prefixes, torch runtime, fp16 on CUDA), the
training lengths fit the encoder's, the corpus has labelled train, validation and test articles, the step budget;
it reports whether CUDA and the weights are present (what the real run would stop on) and exits 0 unless the plan
or the settings are wrong (then 1). It loads no model and writes no record.

Usage (repository root, on the GPU machine)::

    python benchmarks/gpu_chain.py --dry-run                      # anywhere: the plan and the settings
    python benchmarks/gpu_chain.py --data ../shared/data/sentinews_sl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # never download at run time: the weights are installed beforehand

#: Stage -> budget in seconds (see the module docstring).
BUDGET_S = {"preflight": 30, "memory_build": 60, "calibrate_production": 90, "mining": 30, "finetune": 210,
            "calibrate_and_gate": 150}
#: The whole run's limit (s): the issue's "under 10 minutes".
DEADLINE_S = 600
#: Estimated seconds per fine-tuning step on one H100 (8 queries x 8 passages x 512 tokens, bge-m3, fp16).
STEP_S_ESTIMATE = 1.5
#: Training sequence length (tokens) of queries and passages.
TRAIN_TOKENS = 512
EXIT_MISSING, EXIT_OVER_BUDGET, EXIT_DEADLINE = 2, 3, 4


class ChainUnavailable(RuntimeError):
    """What the GPU chain needs is missing (CUDA, the weights); the message says what and how to get it."""


def production_settings(home: Path, data: str, model_path: str):
    """Settings of the production encoder on CUDA: ``model_path`` (bge-m3's directory), CLS pooling, 8192 tokens,
    no prefixes, the torch runtime (fp16 on CUDA), embedded memory in ``home``; fine-tuning at
    :data:`TRAIN_TOKENS` tokens, batch 8, group 8, one epoch; the encoder followed through ``promoted.json``."""
    from newsmon.shared.config import Settings

    s = Settings(home=home, data=Path(data))
    s.memory.path = home / "memory"
    s.encoder = s.encoder.model_copy(update={"model": model_path, "pooling": "cls", "max_length": 8192,
                                             "query_prefix": "", "passage_prefix": "", "runtime": "torch",
                                             "device": "cuda"})
    t = s.training
    t.query_max_len = t.passage_max_len = TRAIN_TOKENS
    t.batch_size, t.train_group_size, t.epochs = 8, 8, 1.0
    return s


def steps(n_train: int, batch_size: int, epochs: float, budget_s: float = BUDGET_S["finetune"],
          step_s: float = STEP_S_ESTIMATE) -> int:
    """Optimiser steps: one epoch's (``ceil(n_train / batch_size) * epochs``), capped by what ``budget_s`` allows
    at ``step_s`` seconds a step (at least 1)."""
    return max(1, min(math.ceil(n_train / batch_size * epochs), int(budget_s // step_s)))


def check_cuda() -> str:
    """The CUDA device's name.

    Raises:
        ChainUnavailable: torch sees no CUDA device.
    """
    import torch  # deferred: seconds to import

    if not torch.cuda.is_available():
        raise ChainUnavailable("no CUDA device: the GPU chain runs bge-m3 in fp16 on CUDA only (torch "
                               f"{torch.__version__}, CUDA build {torch.version.cuda}); --dry-run checks the plan "
                               "on a CPU")
    return torch.cuda.get_device_name(0)


def local_weights(model: str) -> str:
    """The local directory of ``model``: itself when it is a directory with a config, else its snapshot in the
    Hugging Face cache (never downloaded).

    Raises:
        ChainUnavailable: neither, with how to install the weights beforehand.
    """
    p = Path(model).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ChainUnavailable(f"{p} has no config.json: not a transformers checkpoint")
        return str(p)
    from huggingface_hub import snapshot_download  # deferred: only the real run and its checks need it
    from huggingface_hub.utils import LocalEntryNotFoundError

    try:
        path = snapshot_download(model, local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError) as exc:
        raise ChainUnavailable(
            f"the weights of {model} are not on local disk ({type(exc).__name__}): install them beforehand, on a "
            f"machine with the network (`hf download {model}` into the Hugging Face cache the GPU machine reads, "
            "HF_HOME), or give their directory with --model; the chain never downloads at run time") from exc
    if not any(Path(path).glob("*.safetensors")) and not any(Path(path).glob("pytorch_model*.bin")):
        raise ChainUnavailable(f"{path}: {model}'s snapshot holds no weights file (*.safetensors)")
    return path


def plan(args: argparse.Namespace) -> dict:
    """The run's plan (stages, budgets, settings, the corpus's counts, steps) and the problems found in it.

    Returns:
        ``{"stages", "total_budget_s", "deadline_s", "settings", "corpus", "max_steps", "problems"}``;
        ``problems`` is empty when the plan and the settings are right.
    """
    from newsmon.shared.config import PRODUCTION_MODEL
    from newsmon.shared.data import load_corpus

    problems = []
    total = sum(BUDGET_S.values())
    if total >= args.deadline:
        problems.append(f"the stages' budgets ({total} s) do not fit the deadline ({args.deadline} s)")
    if args.deadline > DEADLINE_S:
        problems.append(f"--deadline {args.deadline} s is over the issue's {DEADLINE_S} s")
    s = production_settings(Path(tempfile.gettempdir()) / "newsmon-gpu-chain-plan", args.data, args.model)
    enc, t = s.encoder, s.training
    want = {"pooling": "cls", "max_length": 8192, "query_prefix": "", "passage_prefix": "", "runtime": "torch",
            "device": "cuda"}
    problems += [f"encoder.{k} is {getattr(enc, k)!r}, production's is {v!r}" for k, v in want.items()
                 if getattr(enc, k) != v]
    if args.model != PRODUCTION_MODEL and not Path(args.model).expanduser().is_dir():
        problems.append(f"--model {args.model!r} is neither {PRODUCTION_MODEL} nor a directory")
    if max(t.query_max_len, t.passage_max_len) > enc.max_length:
        problems.append("training lengths exceed the encoder's max_length")
    try:
        corpus = load_corpus(s.data)
    except (FileNotFoundError, ValueError) as exc:
        problems.append(f"corpus: {exc}")
        counts = {}
    else:
        counts = {sp: sum(1 for a in corpus.split(sp) if a.labels) for sp in ("train", "validation", "test")}
        problems += [f"the corpus has no labelled {sp} article" for sp, n in counts.items() if n == 0]
    max_steps = args.max_steps or steps(counts.get("train", 0), t.batch_size, t.epochs)
    if max_steps * STEP_S_ESTIMATE > BUDGET_S["finetune"]:
        problems.append(f"{max_steps} steps at ~{STEP_S_ESTIMATE} s exceed the finetune budget "
                        f"({BUDGET_S['finetune']} s)")
    return {"stages": dict(BUDGET_S), "total_budget_s": total, "deadline_s": args.deadline,
            "settings": {"encoder": enc.model_dump(mode="json"), "fp16": enc.runtime == "torch"
                         and enc.device.startswith("cuda"),
                         "training": {k: getattr(t, k) for k in ("query_max_len", "passage_max_len", "batch_size",
                                                                 "train_group_size", "epochs", "learning_rate",
                                                                 "temperature", "in_batch_negatives")}},
            "corpus": {"path": str(s.data), **counts}, "max_steps": max_steps, "step_s_estimate": STEP_S_ESTIMATE,
            "problems": problems}


def _available(check) -> str:
    try:
        return f"yes: {check()}"
    except ChainUnavailable as exc:
        return f"no: {exc}"


def dry_run(args: argparse.Namespace) -> int:
    """Print the plan and what the real run would stop on; 0 when the plan and the settings are right, else 1."""
    p = plan(args)
    p["cuda"] = _available(check_cuda)
    p["weights"] = _available(lambda: local_weights(args.model))
    print(json.dumps(p, indent=2, default=str))
    return 1 if p["problems"] else 0


def _deadline(seconds: int) -> None:
    def stop(_signum, _frame):
        print(f"gpu_chain: the run passed its deadline of {seconds} s: stopped", file=sys.stderr, flush=True)
        os._exit(EXIT_DEADLINE)

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)


def run(args: argparse.Namespace) -> int:
    """The chain (see the module docstring) inside the record ``gpu_chain.<corpus>``; the exit status."""
    from record import BenchmarkRecord, run_name

    p = plan(args)
    if p["problems"]:
        print("gpu_chain: the plan is wrong:\n  " + "\n  ".join(p["problems"]), file=sys.stderr)
        return 1
    _deadline(args.deadline)
    t0 = time.perf_counter()
    try:
        device = check_cuda()
        model_path = local_weights(args.model)
    except ChainUnavailable as exc:
        print(f"gpu_chain: {exc}", file=sys.stderr)
        return EXIT_MISSING
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.data import load_corpus
    from newsmon.training_jobs.calibrate_memory import calibrate_memory
    from newsmon.training_jobs.nightly import run_nightly

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="newsmon-gpu-chain-"))
    s = production_settings(home, args.data, model_path)
    corpus = load_corpus(s.data)
    seconds: dict[str, float] = {}
    with BenchmarkRecord(run_name("gpu_chain", args.data)) as rec:
        rec.data.update(plan=p, device=device, model_path=model_path, home=str(home))
        clf = Classifier(s)
        try:
            seconds["preflight"] = time.perf_counter() - t0
            t = time.perf_counter()
            clf.add_articles([a for a in corpus.split("train") if a.labels], progress=True)
            seconds["memory_build"] = time.perf_counter() - t
            t = time.perf_counter()
            calibrate_memory(clf, corpus.split("validation"), written_by="memory build", corpus=str(corpus.path))
            seconds["calibrate_production"] = time.perf_counter() - t
        finally:
            clf.close()
        rep = run_nightly(s, corpus, max_steps=p["max_steps"])
        if rep.budget != "finetune":
            raise RuntimeError(f"the nightly job chose the {rep.budget} budget: CUDA was not seen")
        seconds.update(rep.seconds)
        seconds["total"] = time.perf_counter() - t0
        over = [k for k, b in BUDGET_S.items() if seconds.get(k, 0) > b]
        rows = [[k, round(seconds.get(k, 0), 1), b, "over" if k in over else "ok"] for k, b in BUDGET_S.items()]
        rows.append(["total", round(seconds["total"], 1), args.deadline, "over" if seconds["total"] > args.deadline
                     else "ok"])
        rec.data.update(seconds=seconds, rollout=rep.rollout, mining=rep.mining, candidate=rep.candidate)
        rec.table(f"Nightly chain on {device}: bge-m3 fp16 ({args.data})", ["stage", "seconds", "budget s", ""],
                  rows, note=f"{p['max_steps']} fine-tuning steps; gate: {rep.rollout['reason']}")
    return EXIT_OVER_BUDGET if over or seconds["total"] > args.deadline else 0


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from newsmon.shared.config import PRODUCTION_MODEL

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--model", default=PRODUCTION_MODEL,
                    help="bge-m3's id in the local Hugging Face cache, or its directory (never downloaded)")
    ap.add_argument("--max-steps", type=int, default=None,
                    help="fine-tuning steps (default: an epoch, capped by the finetune budget)")
    ap.add_argument("--deadline", type=int, default=DEADLINE_S, help="stop the run after this many seconds")
    ap.add_argument("--home", default=None, help="the run's home (default: a temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="check the plan and the settings (CPU), load nothing")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    return dry_run(args) if args.dry_run else run(args)


if __name__ == "__main__":
    sys.exit(main())
