"""The static checks' cost and their baselines' size: ``ruff check .`` and ``mypy -p newsmon`` as
``tests/test_static.py`` runs them (mypy without a cache, as in CI's fresh clone, then with it), wall and CPU
seconds and peak memory; and what the baselines in ``pyproject.toml`` hold now (findings by ruff rule, mypy
errors by package), counted by running both without them.

    nice -n 10 .venv/bin/python benchmarks/static_checks.py

Needs the strict editable install (``make install``) and the ``test`` extras (ruff, mypy)."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path

from record import BenchmarkRecord

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(args: list[str], config: Path | None = None) -> tuple[subprocess.CompletedProcess, dict[str, float]]:
    """Run ``args`` from the repository root: the result and its wall and CPU seconds and peak RSS (MiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return res, {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_mib": round(after.ru_maxrss / 1024)}


def without_mypy_baseline(directory: Path) -> Path:
    """A config file with pyproject.toml's mypy settings less the per-module ``disable_error_code`` entries."""
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    lines = ["[tool.mypy]"] + [f"{k} = {json.dumps(v)}" for k, v in mypy.items() if k != "overrides"]
    for override in mypy["overrides"]:
        if "disable_error_code" not in override:
            lines += ["[[tool.mypy.overrides]]"] + [f"{k} = {json.dumps(v)}" for k, v in override.items()]
    path = directory / "pyproject.toml"
    path.write_text("\n".join(lines).replace("$MYPY_CONFIG_FILE_DIR", str(ROOT)) + "\n", encoding="utf-8")
    return path


def mypy_by_package(report: str) -> Counter:
    """Errors of a mypy report per package (``newsmon.shared``, ..., ``newsmon`` for the top layer)."""
    out: Counter = Counter()
    for path in re.findall(r"^build/__editable__[^/]*/(\S+?)\.py:\d+: error:", report, flags=re.M):
        parts = path.split("/")
        out["newsmon." + parts[1] if parts[1] in {"schemas", "shared", "training_jobs", "workers"} else "newsmon"] += 1
    return out


def main() -> None:
    mypy = [sys.executable, "-m", "mypy", "-p", "newsmon"]
    with BenchmarkRecord("static_checks") as rec, tempfile.TemporaryDirectory() as tmp:
        _, ruff_t = timed([str(BIN / "ruff"), "check", ".", "--no-cache"])
        _, cold = timed([*mypy, "--cache-dir", f"{tmp}/cache"])
        _, warm = timed([*mypy, "--cache-dir", f"{tmp}/cache"])
        rec.table("Run time", ["check", "wall s", "CPU s", "peak MiB"],
                  [["ruff check . (no cache)", ruff_t["wall_s"], ruff_t["cpu_s"], ruff_t["peak_mib"]],
                   ["mypy -p newsmon, no cache", cold["wall_s"], cold["cpu_s"], cold["peak_mib"]],
                   ["mypy -p newsmon, warm cache", warm["wall_s"], warm["cpu_s"], warm["peak_mib"]]],
                  note="peak memory: the largest child so far")
        res, _ = timed([str(BIN / "ruff"), "check", ".", "--config",
                        'lint.per-file-ignores = {"tests/test_*.py" = ["F811"]}', "--output-format", "json"])
        rules = Counter(f["code"] for f in json.loads(res.stdout))
        rec.table("ruff findings the baseline holds, by rule", ["rule", "findings"],
                  [[code, n] for code, n in rules.most_common()] + [["total", sum(rules.values())]])
        config = without_mypy_baseline(Path(tmp))
        res, _ = timed([*mypy, "--config-file", str(config), "--cache-dir", f"{tmp}/cache"])
        packages = mypy_by_package(res.stdout)
        rec.table("mypy errors the baseline holds, by package", ["package", "errors"],
                  [[p, n] for p, n in packages.most_common()] + [["total", sum(packages.values())]])
        rec.data.update(ruff=ruff_t, mypy_cold=cold, mypy_warm=warm, ruff_rules=dict(rules),
                        mypy_packages=dict(packages))


if __name__ == "__main__":
    main()
