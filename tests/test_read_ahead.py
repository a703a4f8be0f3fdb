"""The embedded memory's files read into the page cache in the background when a collection opens."""

from __future__ import annotations

import threading

import numpy as np

from newsmon.shared.config import Settings
from newsmon.shared.memory import edge, engines
from newsmon.shared.memory.read_ahead import files_within, read_ahead, read_in


def _tree(root):
    files = {"wal/open-1": 50, "segments/a/payload_storage/page_0.dat": 30, "segments/a/vector_storage/matrix.dat": 40,
             "segments/a/vector_index/links.bin": 20, "edge_config.json": 5}
    for rel, size in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes(range(size)))
    return files


def test_the_search_path_first_no_write_ahead_log_and_a_budget(tmp_path):
    _tree(tmp_path)
    names = [p.relative_to(tmp_path).as_posix() for p in files_within(tmp_path, 10**6)]
    assert names == ["segments/a/vector_index/links.bin", "segments/a/vector_storage/matrix.dat",
                     "segments/a/payload_storage/page_0.dat", "edge_config.json"]
    # 20 + 40 fit in 65 bytes; the payload's 30 would pass it, the 5 bytes after it still fit
    assert [p.name for p in files_within(tmp_path, 65)] == ["links.bin", "matrix.dat", "edge_config.json"]


def test_every_byte_of_the_files_is_read_and_a_vanished_file_is_skipped(tmp_path):
    _tree(tmp_path)
    paths = files_within(tmp_path, 10**6)
    assert read_in(paths) == 20 + 40 + 30 + 5
    paths[0].unlink()
    assert read_in(paths) == 40 + 30 + 5


def test_a_budget_of_zero_starts_nothing(tmp_path):
    assert read_ahead(tmp_path, 0) is None
    t = read_ahead(tmp_path / "missing", 16)  # a directory removed meanwhile ends the thread quietly
    assert isinstance(t, threading.Thread)
    t.join(10)
    assert not t.is_alive()


def test_opening_an_embedded_collection_reads_its_shard_ahead(tmp_path, monkeypatch):
    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(edge, "read_ahead", lambda d, mb: seen.append((str(d), mb)))
    s = Settings(home=tmp_path / "home")
    s.memory.read_ahead_mb = 123
    mem = engines.open_memory(s, "newsmon_sl_test", 4)
    try:
        mem.upsert(["a"], np.ones((1, 4), np.float32), [("x",)], [{"text": "t"}])
        assert seen == [(str(mem.shard_directory), 123)]
        assert mem.read_ahead_mb == 123  # and its rebuilt generations before each swap (tests/test_memory_index.py)
    finally:
        mem.close()


def test_the_thread_writes_nothing_on_stdout_before_logging_is_configured(tmp_path, capsys):
    """A command's JSON output (``newsmon suggest --json``) must not get the thread's line: structlog's defaults,
    before a command configures logging, print every level to stdout."""
    import structlog

    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        _tree(tmp_path)
        t = read_ahead(tmp_path, 16)
        assert t is not None
        t.join(10)
        assert capsys.readouterr().out == ""
    finally:
        structlog.configure(**saved)
