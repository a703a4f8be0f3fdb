"""Run the suite as `make test` does: the tests not marked slow in one pytest process, then each module that has
slow tests in a pytest process of its own (its slow tests only), on ``--lanes`` processes at once.

Why lanes: most of the slow modules' time is spent waiting (on a broker's rebalance, a worker process, a server, a
time-out the test drills), not computing: on 2 cores (7 December) the 53 processes' 43.7 minutes ran in 22.9 minutes
on 2 lanes, the load average under 3, against 39.8 minutes one at a time. A process per module keeps each one's peak
memory its own (one process for all of them grew past 11 GB).

How the lanes share the machine:

- one queue, longest module first (:data:`EXPECTED_S`, measured; a module not in it counts :data:`UNKNOWN_S`), each
  lane taking the next module when it is free, so the lanes end close together;
- a module of :data:`HEAVY` (its process tree peaked above 4 GiB) never runs beside another of them, so two lanes
  stay under about 10 GiB together (13.4 GiB in use on the machine at the run's peak, its services included);
- ``--lanes`` is capped by the memory available (:data:`FIRST_LANE_MEMORY`, then :data:`LANE_MEMORY` a lane), so a
  machine with less memory runs fewer (2 lanes need 12 GiB available);
- each lane has its own Redis database (``NEWSMON_TEST_REDIS_URL``: DB 15, 14, ... unless it is set) and every
  lane the one test home (``NEWSMON_TEST_HOME``: the model is imported and the ONNX artefact built once, before the
  lanes start; the embedding cache is SQLite in WAL mode, safe across processes);
- a module's output is printed whole when it ends, under a line naming it, its lane, its wall time and its peak
  memory (``ru_maxrss``: the largest process of its tree, the workers and servers it starts included), so the log
  reads module by module.

Exit status 0 when every process passed, else 1 after a line naming the failed modules. Usage (the Makefile's
``make test``): ``python scripts/run_tests.py [--lanes N] [-- extra pytest arguments]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Never run by `make test` (it builds the container image, about 10 minutes: `make image-check`).
EXCLUDED = {"tests/test_image.py"}
#: Modules whose process tree peaked above 4 GiB (``ru_maxrss``, 7 December: 4.2-7.9 GiB; every other module
#: 1.9 GiB or less): never two of them at once.
HEAVY = frozenset({"tests/test_training.py", "tests/test_stream.py", "tests/test_stream_membership.py",
                   "tests/test_adapter.py", "tests/test_stream_decisions.py", "tests/test_model_switch.py",
                   "tests/test_languages.py", "tests/test_encoder_backends.py"})
#: Seconds a module's slow tests took on 2 lanes (7 December, AVX-512 machine; orders the queue, nothing else).
EXPECTED_S = {
    "tests/test_training.py": 230, "tests/test_stream.py": 198, "tests/test_durable.py": 197,
    "tests/test_stream_membership.py": 155, "tests/test_adapter.py": 150, "tests/test_startup.py": 145,
    "tests/test_stream_decisions.py": 139, "tests/test_model_switch.py": 98, "tests/test_demo.py": 89,
    "tests/test_console_tutorial.py": 71, "tests/test_tutorial.py": 68, "tests/test_truthful_answers.py": 62,
    "tests/test_languages.py": 58, "tests/test_encoder_backends.py": 57, "tests/test_stream_budget.py": 56,
    "tests/test_suggest_rules.py": 55, "tests/test_annif_peer.py": 54, "tests/test_stream_policy.py": 46,
}
UNKNOWN_S = 30
#: Memory the first lane may need (bytes): the largest module's peak (7.9 GiB, 7 December) and its temp files in
#: /dev/shm; each further lane runs light modules only while a heavy one runs (1.9 GiB at most) and needs LANE_MEMORY.
FIRST_LANE_MEMORY = 9 << 30
LANE_MEMORY = 3 << 30
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


@dataclass
class Result:
    """One pytest process: what it ran, where, how long, its peak memory and its exit status."""

    name: str
    lane: int
    seconds: float
    peak_gib: float
    status: int
    output: str


def available_memory() -> int:
    """Bytes of memory the kernel says are available (psutil's ``virtual_memory().available``)."""
    import psutil  # type: ignore[import-untyped]

    return int(psutil.virtual_memory().available)


def lane_count(asked: int) -> int:
    """``asked`` lanes, fewer when the memory available does not hold them (at least 1)."""
    return max(1, min(asked, 1 + max(0, available_memory() - FIRST_LANE_MEMORY) // LANE_MEMORY))


def slow_modules(extra: list[str]) -> list[str]:
    """The test modules that have slow tests (``pytest --collect-only -m slow``), less :data:`EXCLUDED`."""
    out = subprocess.run([*PYTEST, "--collect-only", "-m", "slow", *extra, "tests"], cwd=ROOT, text=True,
                         capture_output=True, check=False)
    found = sorted({line.split("::")[0] for line in out.stdout.splitlines() if "::" in line} - EXCLUDED)
    if out.returncode != 0 or not found:  # a module that fails to import is an error, not a module left out
        sys.exit(f"collecting the slow tests failed (pytest exit {out.returncode}, {len(found)} modules found):\n"
                 f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return found


def run(name: str, args: list[str], lane: int, env: dict[str, str]) -> Result:
    """Run one pytest process, its output to a temp file; its wall time and peak memory (``ru_maxrss``: the largest
    process of its tree, the workers and servers it starts included, not their sum)."""
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen([*PYTEST, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - t0
        log.seek(0)
        return Result(name, lane, seconds, usage.ru_maxrss / (1 << 20), proc.returncode, log.read())


def warm_home(env: dict[str, str]) -> None:
    """Import the model and build the encoder's artefacts in the test home once, before lanes share it."""
    code = ("from pathlib import Path; import os\n"
            "from newsmon.shared.config import EncoderSettings\nfrom newsmon.shared.encoder import Encoder\n"
            "Encoder(EncoderSettings(), Path(os.environ['NEWSMON_TEST_HOME'])).close()\n")
    if subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=False).returncode:
        sys.exit("run_tests: the encoder could not be prepared in the test home (its error above)")


class Queue:
    """The slow modules, longest first; a lane takes the first it may run (no second heavy module at once)."""

    def __init__(self, modules: list[str]) -> None:
        self.todo = sorted(modules, key=lambda m: (-EXPECTED_S.get(m, UNKNOWN_S), m))
        self.heavy_running = 0
        self.cond = threading.Condition()

    def take(self) -> str | None:
        with self.cond:
            while self.todo:
                for m in self.todo:
                    if m not in HEAVY or not self.heavy_running:
                        self.todo.remove(m)
                        self.heavy_running += m in HEAVY
                        return m
                self.cond.wait()
            return None

    def done(self, module: str) -> None:
        with self.cond:
            self.heavy_running -= module in HEAVY
            self.cond.notify_all()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lanes", type=int, default=int(os.environ.get("NEWSMON_TEST_LANES", "2")),
                    help="pytest processes at once (default 2, or NEWSMON_TEST_LANES); capped by the memory available")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments for every process (after --)")
    a = ap.parse_args()
    lanes = lane_count(a.lanes)
    if lanes < a.lanes:
        print(f"run_tests: {lanes} lane(s), not {a.lanes}: {available_memory() / (1 << 30):.1f} GiB available, "
              f"{FIRST_LANE_MEMORY >> 30} GiB for the first lane and {LANE_MEMORY >> 30} GiB for each other",
              flush=True)
    env = dict(os.environ)
    env.setdefault("NEWSMON_TEST_HOME", str(ROOT / ".newsmon-test"))
    t0 = time.monotonic()
    modules = slow_modules(a.pytest_args)
    warm_home(env)
    queue, results, lock = Queue(modules), [], threading.Lock()
    base_redis = os.environ.get("NEWSMON_TEST_REDIS_URL")

    def report(r: Result) -> None:
        with lock:
            results.append(r)
            verdict = "passed" if r.status == 0 else f"FAILED (exit {r.status})"
            print(f"\n== {r.name}: {verdict} in {r.seconds:.0f} s, lane {r.lane}, peak {r.peak_gib:.2f} GiB",
                  flush=True)
            print(r.output, end="", flush=True)

    def lane(i: int) -> None:
        lane_env = dict(env, NEWSMON_TEST_REDIS_URL=base_redis or f"redis://127.0.0.1:6379/{15 - i}")
        if i == 0:  # the fast tests first, in this lane; the other lanes start on the slow modules meanwhile
            report(run("the tests not marked slow", ["-m", "not slow", *a.pytest_args, "tests"], i, lane_env))
        while (m := queue.take()) is not None:
            try:
                report(run(m, ["-m", "slow", *a.pytest_args, m], i, lane_env))
            finally:
                queue.done(m)

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ran = {r.name for r in results}
    failed = [r.name for r in results if r.status != 0]
    failed += [m for m in ["the tests not marked slow", *modules] if m not in ran]  # a lane that died on its way
    total = time.monotonic() - t0
    print(f"\nrun_tests: {len(results)} pytest processes on {lanes} lane(s) in {total / 60:.1f} min; longest: "
          + ", ".join(f"{r.name} {r.seconds:.0f} s" for r in sorted(results, key=lambda r: -r.seconds)[:5]))
    if failed:
        print(f"FAILED modules: {' '.join(failed)} (each one's failing tests: its \"short test summary info\" above)")
        return 1
    print("all test modules passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
