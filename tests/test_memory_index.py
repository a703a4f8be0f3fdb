"""The embedded knowledge memory's HNSW index (shared/memory/edge.py, index_build.py): rebuilt into a new generation
by a child process while the memory serves reads and writes; writes made meanwhile survive the swap and are
searchable at once; a crash's leftovers are removed; the offline build; exact search for measuring recall."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from newsmon.shared.memory import EdgeMemory, KnowledgeMemoryError, SearchFilter
from newsmon.shared.memory.edge import GENERATION_FILE
from newsmon.shared.memory.index_build import IndexParams

DIM = 32
SMALL = IndexParams(m=8, ef_construct=32, ef=64, min_points=100, rebuild_unindexed=100)


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, DIM))
    x = centres[rng.integers(0, 20, n)] + 0.5 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _fill(mem: EdgeMemory, n: int, prefix: str = "a") -> np.ndarray:
    vecs = _vectors(n)
    ids = [f"{prefix}{i}" for i in range(n)]
    mem.upsert(ids, vecs, [[f"l{i % 7}"] for i in range(n)],
               [{"lang": "sl", "text": f"article {i} about topic {i % 7} and harbour {i % 3}"} for i in range(n)])
    return vecs


@pytest.mark.slow  # the index builder as a child process, 3,000 points
def test_rebuild_swaps_to_a_new_generation_and_keeps_every_write_made_meanwhile(tmp_path):
    mem = EdgeMemory(tmp_path, "c", DIM, SMALL)
    vecs = _fill(mem, 3000)
    assert mem.needs_index() and mem.generation == 0
    result: dict = {}
    seen: list[float] = []

    def rebuild() -> None:
        result.update(mem.rebuild_index())

    t = threading.Thread(target=rebuild)
    t.start()
    k = 0
    while t.is_alive() and k < 400:  # decisions and new articles while the index is built elsewhere
        t0 = time.perf_counter()
        mem.set_labels([f"a{k}"], [["decided"]])
        mem.upsert([f"new{k}"], vecs[k:k + 1], [["fresh"]], [{"lang": "sl", "text": f"fresh article {k}"}])
        hits = mem.search(vecs[k:k + 1], 5, SearchFilter(labels=("decided",)))[0]
        assert any(h.article_id == f"a{k}" for h in hits), "a decision is searchable at once during the rebuild"
        seen.append(time.perf_counter() - t0)
        k += 1
        time.sleep(0.01)
    t.join(timeout=300)
    assert not t.is_alive() and result, "the rebuild finished"
    assert k > 0, "writes happened while the index was being built"
    assert mem.generation == 1 and result["generation"] == 1
    assert result["replayed"] >= 1
    assert mem.count() == 3000 + k
    for j in range(k):  # every write of the rebuild's time is in the new generation
        assert mem.get([f"a{j}"])[0].labels == ("decided",)
        assert mem.get([f"new{j}"])[0].labels == ("fresh",)
    st = mem.index_status()
    assert st["indexed"] >= 3000 and st["generation"] == 1
    deadline = time.monotonic() + 30  # the replaced generation is closed and removed after RETIRE_AFTER_S
    while (tmp_path / "c" / "segments").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (tmp_path / "c" / "segments").exists() and (tmp_path / "c" / "gen-1").is_dir()
    mem.close()
    again = EdgeMemory(tmp_path, "c", DIM, SMALL)  # the new generation is what a restart opens
    assert again.generation == 1 and again.count() == 3000 + k
    assert again.get(["a0"])[0].labels == ("decided",)
    again.close()


@pytest.mark.slow  # the index builder as a child process, 3,000 points
def test_indexed_search_matches_exact_search(tmp_path):
    mem = EdgeMemory(tmp_path, "c", DIM, SMALL)
    vecs = _fill(mem, 3000)
    mem.rebuild_index()
    queries = _vectors(40, seed=5)
    approx = mem.search(queries, 20)
    exact = mem.search(queries, 20, exact=True)
    recall = np.mean([len({h.article_id for h in a} & {h.article_id for h in e}) / 20
                      for a, e in zip(approx, exact, strict=True)])
    assert recall >= 0.95
    hybrid = mem.search(vecs[:2], 10, SearchFilter(labelled=True), texts=["article 1 about topic 1"] * 2,
                        lexical_k=5)
    assert hybrid[0] and hybrid[0][0].article_id == "a0"
    mem.close()


def test_a_failed_build_leaves_the_live_generation_and_a_crash_leftover_is_removed(tmp_path, monkeypatch):
    mem = EdgeMemory(tmp_path, "c", DIM, SMALL)
    _fill(mem, 300)
    monkeypatch.setattr("newsmon.shared.memory.index_build.sys.executable", "/bin/false")
    with pytest.raises(KnowledgeMemoryError, match="index builder of .* failed"):
        mem.rebuild_index()
    assert mem.generation == 0 and mem.count() == 300 and mem._journal is None
    mem.set_labels(["a1"], [["after"]])  # still writable, nothing journaled
    assert not (tmp_path / "c" / "gen-1").exists()
    mem.close()
    (tmp_path / "c" / "gen-7").mkdir()  # what a crash in the middle of a rebuild leaves
    again = EdgeMemory(tmp_path, "c", DIM, SMALL)
    assert not (tmp_path / "c" / "gen-7").exists() and again.get(["a1"])[0].labels == ("after",)
    again.close()


def test_one_rebuild_at_a_time_and_small_memories_are_not_indexed(tmp_path):
    mem = EdgeMemory(tmp_path, "c", DIM, IndexParams(min_points=1000))
    _fill(mem, 200)
    assert not mem.needs_index()
    mem._rebuild_lock.acquire()
    with pytest.raises(KnowledgeMemoryError, match="already running"):
        mem.rebuild_index()
    mem._rebuild_lock.release()
    mem.close()


def test_offline_optimize_records_the_index(tmp_path):
    mem = EdgeMemory(tmp_path, "c", DIM, SMALL)
    _fill(mem, 500)
    mem.optimize()
    st = mem.index_status()
    assert st["indexed"] == 500 and st["unindexed"] == 0 and st["generation"] == 0
    assert (tmp_path / "c" / GENERATION_FILE).exists()
    mem.close()
    again = EdgeMemory(tmp_path, "c", DIM, SMALL)
    assert again.index_status()["indexed"] == 500 and again.count() == 500
    again.close()


def test_index_params_refuse_bad_values():
    with pytest.raises(ValueError, match="quantization"):
        IndexParams(quantization="pq")
    with pytest.raises(ValueError, match="ef"):
        IndexParams(ef=0)


@pytest.mark.slow  # the index builder as a child process
def test_the_maintainer_rebuilds_due_memories_only(tmp_path):
    from newsmon.shared.memory.maintain import IndexMaintainer

    due = EdgeMemory(tmp_path, "due", DIM, SMALL)
    _fill(due, 300)
    small = EdgeMemory(tmp_path, "small", DIM, IndexParams(min_points=10_000))
    _fill(small, 300)
    stop = threading.Event()
    maintainer = IndexMaintainer(lambda: [due, small, object()], 3600, stop)
    done = maintainer.run_once()
    assert [d["collection"] for d in done] == ["due"] and done[0]["generation"] == 1
    assert due.generation == 1 and small.generation == 0
    assert maintainer.run_once() == []  # nothing outside the index any more
    stop.set()
    due.close()
    small.close()


def test_memory_index_command_builds_the_index_offline(tmp_path, encoder, newsmon_home):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from newsmon.shared.config import Settings
    from newsmon.shared.memory import MemoryRouter

    env = {k: v for k, v in os.environ.items() if not k.startswith("NEWSMON_")}
    env.update(NEWSMON_HOME=str(newsmon_home), NEWSMON_MEMORY__PATH=str(tmp_path / "memory"))
    repo = Path(__file__).resolve().parents[1]
    empty = subprocess.run([sys.executable, "-m", "newsmon.cli", "memory", "index"], cwd=repo, env=env,
                           text=True, capture_output=True, timeout=300)
    assert empty.returncode == 2 and "has no collection" in empty.stderr and "memory import" in empty.stderr
    assert "demo-memory" in empty.stderr
    look = subprocess.run([sys.executable, "-m", "newsmon.cli", "memory", "index", "--status"], cwd=repo, env=env,
                          text=True, capture_output=True, timeout=300)
    assert look.returncode == 0 and "has no collection" in look.stdout, look.stderr
    s = Settings(home=newsmon_home)
    s.memory.path = tmp_path / "memory"
    router = MemoryRouter(s, encoder.model_id, encoder.dim)
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((400, encoder.dim)).astype(np.float32)
    router.memory("sl").upsert([f"a{i}" for i in range(400)], vecs, [["x"]] * 400, [{"lang": "sl"}] * 400)
    router.close()
    proc = subprocess.run([sys.executable, "-m", "newsmon.cli", "memory", "index"], cwd=repo, env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (status,) = out.values()
    assert status["indexed"] == 400 and status["unindexed"] == 0 and status["points"] == 400
    assert "searched exactly" in status["note"]  # 400 points: below memory.index.min_points
    proc = subprocess.run([sys.executable, "-m", "newsmon.cli", "memory", "index", "--status"], cwd=repo, env=env,
                          text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0 and json.loads(proc.stdout) == out | {k: {kk: vv for kk, vv in v.items()
                                                                         if kk != "seconds"} for k, v in out.items()}


@pytest.mark.slow  # an optimisation of 20,000 points as a process, killed
def test_a_killed_optimisation_leaves_nothing_behind(tmp_path):
    """Issue 42 item 4: a SIGKILL of ``newsmon memory index`` (the offline :meth:`EdgeMemory.optimize`) while the
    engine builds segments left ``temp_segments/segment_builder_*`` (133 MB at 60k points), through reopening and
    later successful builds; reopening deletes it, and so does the next optimisation before it starts."""
    slow = IndexParams(m=16, ef_construct=200, ef=64, min_points=100, rebuild_unindexed=100)
    mem = EdgeMemory(tmp_path, "c", DIM, slow)
    _fill(mem, 20_000)
    mem.close()
    temp = tmp_path / "c" / "temp_segments"
    code = ("import sys; from newsmon.shared.memory import EdgeMemory; from newsmon.shared.memory.index_build import "
            f"IndexParams; EdgeMemory(sys.argv[1], 'c', {DIM}, IndexParams(**{vars(slow)!r})).optimize()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while not list(temp.glob("segment_builder_*")):
            assert proc.poll() is None, "the optimisation ended before it was caught building"
            assert time.monotonic() < deadline, "no segment builder within 120 s"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    assert list(temp.glob("segment_builder_*")), "the kill left the builder's segment (what is cleaned up)"
    mem = EdgeMemory(tmp_path, "c", DIM, slow)
    try:
        assert not list(temp.glob("*")), "reopening deleted the killed build's segments"
        assert mem.index_status()["points"] == 20_000
        (temp / "segment_builder_left").mkdir(parents=True)  # as if another kill came in between
        (temp / "segment_builder_left" / "x").write_bytes(b"0" * 1000)
        mem.optimize()
        assert not (temp / "segment_builder_left").exists(), "an optimisation deletes earlier leftovers first"
        assert mem.search(_vectors(1), 5)[0], "the memory answers after the build"
    finally:
        mem.close()


def test_the_settings_and_the_adapters_default_to_the_same_index():
    # the index parameters have two defaults (the settings a worker reads, the adapters' own for a memory opened
    # without settings, e.g. a benchmark's or the builder child's); the measured ones must be the same in both
    from newsmon.shared.config import Settings

    assert Settings().memory.index.params() == IndexParams()


@pytest.mark.slow  # the index builder as a child process
def test_a_rebuilt_generation_is_read_into_the_page_cache_before_the_swap(tmp_path, monkeypatch):
    """The builder's process closes the new generation, which drops its files from the page cache: the rebuild's
    thread reads them in before the worker swaps to it (``memory.read_ahead_mb``)."""
    from newsmon.shared.memory import edge

    calls: list[tuple[int, list]] = []
    real = edge.read_in

    def recorded(paths):
        calls.append((mem.generation, list(paths)))
        return real(paths)

    monkeypatch.setattr(edge, "read_in", recorded)
    mem = EdgeMemory(tmp_path, "c", DIM, SMALL, read_ahead_mb=64)
    try:
        _fill(mem, 1000)
        mem.rebuild_index()
        assert mem.generation == 1 and len(calls) == 1
        live_then, paths = calls[0]
        target = mem.shard_directory
        assert live_then == 0  # read before the swap
        assert paths and all(target in p.parents for p in paths)
        assert any("vector_storage" in p.parts for p in paths) and not any("wal" in p.parts for p in paths)
        assert sum(p.stat().st_size for p in paths) > 1000 * DIM * 4  # the dense vectors at least
    finally:
        mem.close()
