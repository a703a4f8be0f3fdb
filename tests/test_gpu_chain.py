"""The GPU chain's preparation (``benchmarks/gpu_chain.py``, issue 41 item 4), on a CPU: the dry run checks the plan
(every stage budgeted, the budgets within the 10 minutes) and the production settings (bge-m3, CLS, 8192 tokens, no
prefixes, fp16 on CUDA) on the real corpus and loads no model; a wrong plan is refused; the real run stops at once,
saying what is missing, without CUDA or without the weights (never downloaded). The run itself is for a GPU
machine: its figures go to ``benchmarks/results/gpu_chain.*``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_chain.py"


@pytest.fixture(scope="module")
def chain():
    spec = importlib.util.spec_from_file_location("gpu_chain", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow  # the script as a process
def test_dry_run_checks_the_plan_and_the_settings(shared_data):
    out = _run("--dry-run", "--data", str(shared_data / "sentinews_sl"))
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["problems"] == []
    assert set(plan["stages"]) == {"preflight", "memory_build", "calibrate_production", "mining", "finetune",
                                   "calibrate_and_gate"}
    assert sum(plan["stages"].values()) == plan["total_budget_s"] < plan["deadline_s"] == 600
    enc = plan["settings"]["encoder"]
    assert (enc["model"], enc["pooling"], enc["max_length"], enc["runtime"], enc["device"]) == (
        "BAAI/bge-m3", "cls", 8192, "torch", "cuda")
    assert enc["query_prefix"] == enc["passage_prefix"] == "" and plan["settings"]["fp16"] is True
    assert plan["settings"]["training"]["passage_max_len"] == 512
    assert plan["corpus"]["train"] == 1150 and plan["corpus"]["test"] == 133
    assert plan["max_steps"] == 140  # an epoch is 144 steps of 8; the finetune budget allows 210 / 1.5
    assert plan["cuda"].startswith(("yes: ", "no: no CUDA device"))
    assert plan["weights"].startswith(("yes: ", "no: the weights of BAAI/bge-m3 are not on local disk"))


@pytest.mark.slow  # the script as a process
def test_a_plan_over_the_deadline_is_refused(shared_data):
    out = _run("--dry-run", "--data", str(shared_data / "sentinews_sl"), "--deadline", "500", "--max-steps", "400")
    assert out.returncode == 1
    problems = json.loads(out.stdout)["problems"]
    assert any("do not fit the deadline (500 s)" in p for p in problems)
    assert any("400 steps" in p and "finetune budget" in p for p in problems)


@pytest.mark.slow  # the script as a process (without CUDA)
def test_the_run_stops_without_cuda_or_weights(chain, tmp_path, shared_data):
    import torch

    if torch.cuda.is_available():
        assert chain.check_cuda() == torch.cuda.get_device_name(0)
    else:
        with pytest.raises(chain.ChainUnavailable, match="no CUDA device"):
            chain.check_cuda()
        out = _run("--data", str(shared_data / "sentinews_sl"))
        assert out.returncode == chain.EXIT_MISSING
        assert "gpu_chain: no CUDA device" in out.stderr and "--dry-run" in out.stderr
    with pytest.raises(chain.ChainUnavailable, match="not on local disk.*hf download"):
        chain.local_weights("newsmon-tests/no-such-model")
    with pytest.raises(chain.ChainUnavailable, match="no config.json"):
        chain.local_weights(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert chain.local_weights(str(tmp_path)) == str(tmp_path)


def test_steps_fit_the_budget(chain):
    assert chain.steps(1150, 8, 1.0) == 140
    assert chain.steps(80, 8, 1.0) == 10
    assert chain.steps(80, 8, 2.0) == 20
    assert chain.steps(0, 8, 1.0) == 1
