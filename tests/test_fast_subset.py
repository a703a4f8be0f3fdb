"""The fast subset (``make test-fast``: ``pytest -m "not slow"``) stays what docs/contributing/testing.md says: the
modules tests/conftest.py marks slow exist, and the tests on the real weights or a broker are left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import SLOW_FIXTURES, SLOW_MODULES

REPO = Path(__file__).resolve().parents[1]


def test_every_module_marked_slow_exists():
    assert SLOW_MODULES and all((REPO / "tests" / name).is_file() for name in SLOW_MODULES), sorted(
        n for n in SLOW_MODULES if not (REPO / "tests" / n).is_file())


def test_the_fast_subset_leaves_out_the_weights_the_broker_and_the_slow_modules():
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m",
                          "not slow", "tests/test_classifier.py", "tests/test_stream.py", "tests/test_helm.py",
                          "tests/test_registry.py"], cwd=REPO, capture_output=True, text=True, timeout=300)
    kept = [line for line in out.stdout.splitlines() if "::" in line]
    assert kept and all(line.startswith("tests/test_registry.py::") for line in kept), out.stdout[-3000:]
    assert {"encoder", "tansu"} <= SLOW_FIXTURES
