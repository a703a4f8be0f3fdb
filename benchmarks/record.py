"""One record per benchmark run: figures as JSON under ``benchmarks/results/<name>/<UTC time>.json`` with what
ran (command, commit, date, machine, load), and the same tables printed for the person who ran it.

The docs' measurements page is generated from the latest record of each benchmark, so a figure in the docs is
always one a run wrote, with the run it came from::

    from record import BenchmarkRecord      # benchmarks import their siblings by name (run from the root)

    with BenchmarkRecord("scale") as rec:
        ...
        rec.table("Search at archive size", ["points", "p50 ms", "p99 ms"], rows, note="2 cores, no GPU")
        rec.data["points"] = 1_000_000          # any JSON-able figures beside the tables

A benchmark run on one corpus of several names its record :func:`run_name` (``<benchmark>.<corpus>``).

A record is written when the ``with`` block ends, also after an error (``"error"`` then says what it was), so a
failed or interrupted run leaves what it measured. ``NEWSMON_BENCHMARK_RESULTS`` moves the results folder (tests).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def results_dir() -> Path:
    """The results folder: ``NEWSMON_BENCHMARK_RESULTS`` or ``benchmarks/results`` of the repository."""
    return Path(os.environ.get("NEWSMON_BENCHMARK_RESULTS", RESULTS))


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


#: The instruction-set extensions whose presence picks ONNX Runtime's and BLAS's kernels (int8 dot products,
#: vector widths): two machines that differ in them may embed the same text into vectors a few ulps apart.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")


def _cpu() -> tuple[str | None, list[str]]:
    """(the CPU's model name, which of :data:`ISA_FLAGS` it has) from ``/proc/cpuinfo`` ((None, []) without it)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(200_000)
    except OSError:
        return None, []
    fields = dict(line.split(":", 1) for line in text.split("\n\n", 1)[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    return fields.get("model name"), [f for f in ISA_FLAGS if f in flags]


def machine() -> dict[str, Any]:
    """The machine a run is on: CPU count, memory (GiB), platform, Python, and the CPU's model and the
    instruction-set extensions that pick the encoder's and BLAS's kernels (:data:`ISA_FLAGS`)."""
    mem = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            mem = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    model, isa = _cpu()
    return {"cpus": os.cpu_count(), "memory_gib": mem, "platform": platform.platform(),
            "python": platform.python_version(), "processor": platform.machine(), "cpu_model": model,
            "cpu_isa": isa}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table of ``rows`` under ``columns`` (floats with up to 4 significant decimals)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class BenchmarkRecord:
    """The record of one benchmark run (a context manager; see the module docstring).

    Args:
        name: the benchmark's name (its folder under the results); argv: the command (default ``sys.argv``).

    Attributes:
        data: free JSON-able figures; tables: the tables added with :meth:`table`.
    """

    def __init__(self, name: str, argv: list[str] | None = None) -> None:
        self.name = name
        argv = list(sys.argv if argv is None else argv)
        if argv and argv[0].endswith(".py"):
            argv[0] = os.path.relpath(os.path.abspath(argv[0]), ROOT)
        self.command = "python " + shlex.join(argv) if argv else ""
        self.data: dict[str, Any] = {}
        self.tables: list[dict[str, Any]] = []
        self.path: Path | None = None
        self._t0 = 0.0
        self._started = datetime.now(UTC)
        self._load_before = None

    def __enter__(self) -> BenchmarkRecord:
        self._t0 = time.perf_counter()
        self._started = datetime.now(UTC)
        self._load_before = _load()
        self._commit = _git("rev-parse", "HEAD"), _git("status", "--porcelain", "--untracked-files=no")
        return self

    def table(self, title: str, columns: list[str], rows: list[list[Any]], note: str = "") -> None:
        """Add a table (printed now and kept in the record): ``rows`` of cells under ``columns``."""
        rows = [list(r) for r in rows]
        self.tables.append({"title": title, "columns": list(columns), "rows": rows, "note": note})
        print(f"\n{title}\n\n{markdown_table(list(columns), rows)}" + (f"\n\n{note}" if note else ""), flush=True)

    def __exit__(self, exc_type, exc, tb) -> None:
        # the commit the run started on (the code it imported); a checkout that moved while it ran is named too
        commit, dirty = getattr(self, "_commit", (None, None))
        now = _git("rev-parse", "HEAD"), _git("status", "--porcelain", "--untracked-files=no")
        record = {"benchmark": self.name, "command": self.command, "commit": commit,
                  "dirty": bool(dirty) if dirty is not None else None,
                  "date": self._started.isoformat(timespec="seconds"), "machine": machine(),
                  "load": {"before": self._load_before, "after": _load()},
                  "seconds": round(time.perf_counter() - self._t0, 1), "tables": self.tables, "data": self.data}
        if now != (commit, dirty):
            record["checkout_at_end"] = {"commit": now[0], "dirty": bool(now[1]) if now[1] is not None else None}
        if exc_type is not None:
            record["error"] = f"{exc_type.__name__}: {exc}"
        folder = results_dir() / self.name
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{self._started:%Y%m%dT%H%M%SZ}.json"
        self.path.write_text(json.dumps(record, indent=2, ensure_ascii=False, default=_jsonable) + "\n",
                             encoding="utf-8")
        print(f"\nrecord: {os.path.relpath(self.path, Path.cwd())}", flush=True)


def _jsonable(v: Any) -> Any:
    """numpy scalars and arrays, paths and sets as JSON values."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    return str(v)


def run_name(benchmark: str, data: str | os.PathLike) -> str:
    """The record name of a benchmark run on one corpus: ``<benchmark>.<corpus>`` (``dedup_quality.sentinews_sl``
    for ``--data ../shared/data/sentinews_sl`` or its ``articles.jsonl``), so each corpus keeps its latest record."""
    path = Path(data)
    corpus = path.parent.name if path.suffix in (".jsonl", ".json") else path.name
    return f"{benchmark}.{corpus}"


def run_on_corpus(benchmark: str, description: str, measure, default: str = "../shared/data/sentinews_sl") -> None:
    """The command line of a benchmark whose only option is ``--data``: ``measure(data, rec)`` inside the record
    ``<benchmark>.<corpus>`` (:func:`run_name`)."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", default=default)
    args = ap.parse_args()
    with BenchmarkRecord(run_name(benchmark, args.data)) as rec:
        measure(args.data, rec)


def latest(name: str) -> dict[str, Any] | None:
    """The newest record of benchmark ``name`` (None when it never ran)."""
    files = sorted((results_dir() / name).glob("*.json"))
    return json.loads(files[-1].read_text(encoding="utf-8")) if files else None


def all_latest() -> dict[str, dict[str, Any]]:
    """The newest record of every benchmark with results, by name."""
    base = results_dir()
    out = {}
    for folder in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        rec = latest(folder.name)
        if rec is not None:
            out[folder.name] = rec
    return out
