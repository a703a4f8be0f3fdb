"""`make test`'s lanes (scripts/run_tests.py): the queue gives the longest module first, never runs two of the
memory-heavy modules at once, and the number of lanes follows the memory available."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIGHT = "tests/test_zz_light.py"  # not measured: counts UNKNOWN_S, not heavy


@pytest.fixture(scope="module")
def rt():
    spec = importlib.util.spec_from_file_location("run_tests", ROOT / "scripts" / "run_tests.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def test_the_queue_gives_the_longest_module_first(rt):
    q = rt.Queue([LIGHT, "tests/test_durable.py", "tests/test_training.py"])
    assert [q.take(), q.take(), q.take(), q.take()] == ["tests/test_training.py", "tests/test_durable.py", LIGHT, None]


def test_a_heavy_module_never_runs_beside_another_heavy_one(rt):
    a, b = sorted(rt.HEAVY, key=lambda m: -rt.EXPECTED_S[m])[:2]
    q = rt.Queue([a, b, LIGHT])
    assert q.take() == a
    assert q.take() == LIGHT  # b is longer, but heavy: the second lane takes the light module
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(q.take()))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not got  # only b is left: it waits for a
    q.done(a)
    waiter.join(10)
    assert got == [b] and q.take() is None


@pytest.mark.parametrize(("gib", "asked", "lanes"),
                         [(22, 2, 2), (12, 2, 2), (11, 2, 1), (6, 2, 1), (22, 1, 1), (22, 4, 4), (15, 4, 3)])
def test_the_lanes_follow_the_memory_available(rt, monkeypatch, gib, asked, lanes):
    monkeypatch.setattr(rt, "available_memory", lambda: gib << 30)
    assert rt.lane_count(asked) == lanes


def test_a_module_that_fails_to_import_stops_the_run_instead_of_being_left_out(rt, monkeypatch, tmp_path):
    """Collection errors (a test module that does not import) fail the run with pytest's output, before any lane
    starts: the module is never silently missing from the suite."""
    broken = tmp_path / "tests"
    broken.mkdir()
    (broken / "test_ok.py").write_text("import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n")
    (broken / "test_broken.py").write_text("import no_such_module_here\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    monkeypatch.setattr(rt, "ROOT", tmp_path)
    with pytest.raises(SystemExit) as exc:
        rt.slow_modules([])
    assert "collecting the slow tests failed" in str(exc.value) and "no_such_module_here" in str(exc.value)
    (broken / "test_broken.py").unlink()
    assert rt.slow_modules([]) == ["tests/test_ok.py"]
