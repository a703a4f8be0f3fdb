"""A benchmark record names the commit its run started on (the code it imported), and the checkout at its end
when that moved while it ran (a record of the calibration stability benchmark named a commit made during its run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import record  # noqa: E402  (the benchmarks' own module, not a package)


@pytest.fixture
def checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    state = {"rev-parse": "a" * 40, "status": ""}
    monkeypatch.setattr(record, "_git", lambda *args: state[args[0]])
    monkeypatch.setattr(record, "results_dir", lambda: tmp_path)
    return state


def test_the_record_names_the_commit_the_run_started_on(checkout: dict[str, str]):
    with record.BenchmarkRecord("probe", ["probe.py"]) as rec:
        checkout["rev-parse"], checkout["status"] = "b" * 40, " M shared/x.py"
    got = json.loads(Path(rec.path).read_text())
    assert (got["commit"], got["dirty"]) == ("a" * 40, False)
    assert got["checkout_at_end"] == {"commit": "b" * 40, "dirty": True}


def test_a_checkout_that_did_not_move_is_named_once(checkout: dict[str, str]):
    with record.BenchmarkRecord("probe", ["probe.py"]) as rec:
        pass
    got = json.loads(Path(rec.path).read_text())
    assert got["commit"] == "a" * 40 and "checkout_at_end" not in got


def test_the_record_names_the_cpu_model_and_the_kernels_it_picks(checkout: dict[str, str], monkeypatch, tmp_path):
    # two machines that differ in their vector extensions may embed the same text a few ulps apart (ONNX Runtime's
    # int8 kernels): the record says which CPU made its figures
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Probe CPU 9000\n"
                    "flags\t\t: fpu avx2 fma avx512f avx512_vnni sse4_2\n\n"
                    "processor\t: 1\nmodel name\t: Probe CPU 9000\nflags\t\t: fpu avx2\n\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                        *a, **k))
    with record.BenchmarkRecord("probe", ["probe.py"]) as rec:
        pass
    got = json.loads(Path(rec.path).read_text())["machine"]
    assert got["cpu_model"] == "Probe CPU 9000"
    assert got["cpu_isa"] == ["avx2", "fma", "avx512f", "avx512_vnni"]
