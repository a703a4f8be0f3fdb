"""Tests for newsmon.shared.memory: both adapters on real engines (qdrant-edge, qdrant-client local mode)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from newsmon.shared.memory import (
    EdgeMemory,
    KnowledgeMemory,
    KnowledgeMemoryError,
    LocalIndex,
    MemoryLockedError,
    MemoryPoint,
    MemoryRouter,
    MemoryUnavailableError,
    Neighbour,
    QdrantServerMemory,
    SearchFilter,
    collection_name,
    engine_of,
    open_memory,
    point_id,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DIM = 8
N_PARITY = 500
D_PARITY = 64


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(params=["edge", "server"])
def make_memory(request, tmp_path):
    """Factory: make_memory(dim, collection="c") -> an open memory of the parametrised kind."""
    opened: list = []

    def make(dim: int = DIM, collection: str = "c"):
        if request.param == "edge":
            mem = EdgeMemory(tmp_path / "edge", collection, dim)
        else:
            mem = QdrantServerMemory(QdrantClient(":memory:"), collection, dim, close_client=True)
        opened.append(mem)
        return mem

    yield make
    for mem in opened:
        mem.close()


# ---------------------------------------------------------------------------
# helpers


def test_collection_name_sanitises():
    assert collection_name("newsmon", "SL", "e5-small@1.2") == "newsmon_sl_e5-small_1_2"
    assert collection_name("nm", "en", "intfloat/multilingual-e5-small") == "nm_en_intfloat_multilingual-e5-small"
    long = collection_name("p", "sl", "x" * 300)
    assert len(long) <= 128 and long != collection_name("p", "sl", "x" * 299)
    assert all(c.isalnum() or c in "_-" for c in long)
    with pytest.raises(ValueError):
        collection_name("p", "", "v1")
    with pytest.raises(ValueError):
        collection_name("p", "sl", "///")


def test_point_id_is_deterministic_uuid():
    assert point_id("sl-test-1") == point_id("sl-test-1")
    assert point_id("sl-test-1") != point_id("sl-test-2")
    assert len(point_id("x")) == 36


# ---------------------------------------------------------------------------
# round trip, both adapters


def test_round_trip(make_memory):
    mem = make_memory()
    assert isinstance(mem, KnowledgeMemory)
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((4, DIM)).astype(np.float32) * 3.0
    ids = ["sl-test-1", "sl-test-2", "en/3", "pending-4"]
    labels = [["a", "b"], ["b"], ["c"], []]
    payloads = [{"lang": "sl", "title": "T1"}, {"lang": "sl"}, {"lang": "en", "n": 3}, None]
    mem.upsert(ids, vecs, labels, payloads)

    assert mem.count() == 4
    assert mem.count(SearchFilter()) == 3
    assert mem.count(SearchFilter(labelled=False)) == 1
    assert mem.count(SearchFilter(labelled=None)) == 4
    assert mem.count(SearchFilter(lang="sl")) == 2
    assert mem.count(SearchFilter(lang="en", labelled=None)) == 1
    assert mem.count(SearchFilter(labelled=None, exclude_ids=("sl-test-1", "nope"))) == 3

    got = mem.get(["en/3", "missing", "sl-test-1"])
    assert got[1] is None
    assert got[0] == MemoryPoint("en/3", ("c",), {"lang": "en", "n": 3}, None)
    assert got[2].labels == ("a", "b") and got[2].payload == {"lang": "sl", "title": "T1"}

    (p,) = mem.get(["sl-test-2"], with_vectors=True)
    assert p.vector.dtype == np.float32 and p.vector.shape == (DIM,)
    np.testing.assert_allclose(p.vector, vecs[1] / np.linalg.norm(vecs[1]), atol=1e-6)

    # label a pending point, relabel another; vector and payload stay
    mem.set_labels(["pending-4", "sl-test-1"], [["d"], ["a"]])
    assert mem.count(SearchFilter(labelled=False)) == 0
    (p4, p1) = mem.get(["pending-4", "sl-test-1"], with_vectors=True)
    assert p4.labels == ("d",) and p4.payload == {}
    assert p1.labels == ("a",) and p1.payload == {"lang": "sl", "title": "T1"}
    np.testing.assert_allclose(p1.vector, vecs[0] / np.linalg.norm(vecs[0]), atol=1e-6)
    # unlabelling makes it pending again
    mem.set_labels(["pending-4"], [[]])
    assert mem.count(SearchFilter(labelled=False)) == 1

    with pytest.raises(KeyError, match="unknown-id"):
        mem.set_labels(["sl-test-1", "unknown-id"], [["x"], ["y"]])
    assert mem.get(["sl-test-1"])[0].labels == ("a",)  # nothing changed

    # upsert replaces the whole point
    mem.upsert(["sl-test-2"], vecs[2:3], [["z"]], [{"lang": "en"}])
    assert mem.get(["sl-test-2"])[0] == MemoryPoint("sl-test-2", ("z",), {"lang": "en"}, None)
    assert mem.count() == 4

    mem.delete(["sl-test-2", "never-stored"])
    assert mem.count() == 3
    assert mem.get(["sl-test-2"]) == [None]

    # search: exact self-match first, labels and payload carried over
    (hits,) = mem.search(vecs[2:3], top_k=5, filter=SearchFilter(labelled=None))
    assert hits[0].article_id == "en/3" and hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    assert hits[0].labels == ("c",) and hits[0].payload == {"lang": "en", "n": 3}
    assert [h.similarity for h in hits] == sorted((h.similarity for h in hits), reverse=True)
    assert mem.search(np.empty((0, DIM), np.float32), top_k=3) == []


def test_ties_come_in_article_id_order_and_settle_the_top_k_cut(make_memory):
    # identical articles have identical cosines: which of them make the top k, and in which order, must not depend
    # on the engine's internal order (it differed between two identical searches on reuters21578_en)
    mem = make_memory()
    rng = np.random.default_rng(5)
    v = _unit(rng, 1, DIM)
    ids = [f"dup{i}" for i in (7, 3, 9, 1, 5, 0)]  # written in no particular order
    others = _unit(rng, 10, DIM)
    mem.upsert(ids + [f"o{i}" for i in range(10)], np.vstack([np.repeat(v, 6, axis=0), others]),
               [["x"]] * 16, [{"text": "same words"}] * 16)
    hits = mem.search(v, 3)[0]
    assert [h.article_id for h in hits] == ["dup0", "dup1", "dup3"]
    assert hits[0].similarity == hits[2].similarity
    # hybrid: the engine unites its dense and lexical candidates in one query (which tied ones it takes is its
    # own), but the answer comes in a deterministic order, ties by article id
    hybrid = mem.search(v, 3, texts=["same words"], lexical_k=2)[0]
    assert len(hybrid) >= 3 and [(-h.similarity, h.article_id) for h in hybrid] == sorted(
        (-h.similarity, h.article_id) for h in hybrid)


def test_filters_in_search(make_memory):
    mem = make_memory()
    rng = np.random.default_rng(2)
    vecs = _unit(rng, 6, DIM)
    ids = [f"a{i}" for i in range(6)]
    langs = ["sl", "sl", "en", "en", "sl", "en"]
    labels = [["x"], [], ["y"], [], ["x", "y"], ["z"]]
    mem.upsert(ids, vecs, labels, [{"lang": lang} for lang in langs])

    def result_ids(flt):
        (hits,) = mem.search(vecs[:1], top_k=10, filter=flt)
        return {h.article_id for h in hits}

    assert result_ids(None) == set(ids)
    assert result_ids(SearchFilter()) == {"a0", "a2", "a4", "a5"}
    assert result_ids(SearchFilter(labelled=False)) == {"a1", "a3"}
    assert result_ids(SearchFilter(lang="sl")) == {"a0", "a4"}
    assert result_ids(SearchFilter(lang="en", labelled=None)) == {"a2", "a3", "a5"}
    assert result_ids(SearchFilter(exclude_ids=("a0", "a4"))) == {"a2", "a5"}
    assert result_ids(SearchFilter(lang="de", labelled=None)) == set()
    assert result_ids(SearchFilter(labels=("x",))) == {"a0", "a4"}  # any of the labels (label rules' examples)
    assert result_ids(SearchFilter(labels=("z", "y"), lang="en")) == {"a2", "a5"}
    assert mem.count(SearchFilter(labels=("x", "z"))) == 3
    for hit in mem.search(vecs[:1], top_k=10)[0]:
        assert hit.labels == tuple(labels[ids.index(hit.article_id)])


def test_bad_input_raises_value_error(make_memory):
    mem = make_memory()
    ok = np.ones((2, DIM), np.float32)
    with pytest.raises(ValueError, match="2-D"):
        mem.upsert(["a", "b"], np.ones(DIM, np.float32), [[], []])
    with pytest.raises(ValueError, match="dimension"):
        mem.upsert(["a", "b"], np.ones((2, DIM + 1), np.float32), [[], []])
    with pytest.raises(ValueError, match="rows"):
        mem.upsert(["a", "b", "c"], ok, [[], [], []])
    with pytest.raises(ValueError, match="NaN"):
        bad = ok.copy()
        bad[1, 3] = np.nan
        mem.upsert(["a", "b"], bad, [[], []])
    with pytest.raises(ValueError, match="all-zero"):
        mem.upsert(["a", "b"], np.zeros((2, DIM)), [[], []])
    with pytest.raises(ValueError, match="label sets"):
        mem.upsert(["a", "b"], ok, [["x"]])
    with pytest.raises(ValueError, match="is a str"):
        mem.upsert(["a", "b"], ok, ["x", "y"])
    with pytest.raises(ValueError, match="payloads"):
        mem.upsert(["a", "b"], ok, [[], []], [{}])
    with pytest.raises(ValueError, match="reserved"):
        mem.upsert(["a", "b"], ok, [[], []], [{"labels": ["x"]}, {}])
    with pytest.raises(ValueError, match="duplicate"):
        mem.upsert(["a", "a"], ok, [[], []])
    with pytest.raises(ValueError, match="dtype"):
        mem.upsert(["a", "b"], np.array([["x"] * DIM] * 2), [[], []])
    with pytest.raises(ValueError, match="2-D"):
        mem.search(np.ones(DIM, np.float32), top_k=3)
    with pytest.raises(ValueError, match="dimension"):
        mem.search(np.ones((1, DIM - 1), np.float32), top_k=3)
    with pytest.raises(ValueError, match="inf"):
        mem.search(np.full((1, DIM), np.inf, np.float32), top_k=3)
    with pytest.raises(ValueError, match="top_k"):
        mem.search(ok, top_k=0)
    with pytest.raises(ValueError, match="label sets"):
        mem.set_labels(["a"], [["x"], ["y"]])
    assert mem.count() == 0  # nothing half-written


def test_reopen_with_other_dim_raises(make_memory):
    mem = make_memory(DIM, "dimcheck")
    mem.upsert(["a"], np.ones((1, DIM)), [["x"]])
    if isinstance(mem, EdgeMemory):
        directory = mem.directory
        mem.close()
        with pytest.raises(ValueError, match="dim"):
            EdgeMemory(directory.parent, "dimcheck", DIM + 1)
    else:
        with pytest.raises(ValueError, match="size"):
            QdrantServerMemory(mem._client, "dimcheck", DIM + 1)


def test_use_after_close_raises(make_memory):
    mem = make_memory()
    mem.close()
    mem.close()  # idempotent
    with pytest.raises(KnowledgeMemoryError, match="closed"):
        mem.count()


# ---------------------------------------------------------------------------
# search parity with exact brute force


@pytest.fixture(scope="module")
def parity_data():
    rng = np.random.default_rng(12345)
    base = _unit(rng, N_PARITY, D_PARITY)
    queries = _unit(rng, 25, D_PARITY)
    ids = [f"doc-{i}" for i in range(N_PARITY)]
    langs = ["sl" if i % 3 else "en" for i in range(N_PARITY)]
    labels = [[f"l{i % 7}"] if i % 5 else [] for i in range(N_PARITY)]
    return base, queries, ids, langs, labels


def _brute_force(base, queries, mask, k):
    sims = queries.astype(np.float64) @ base.astype(np.float64).T
    sims[:, ~mask] = -np.inf
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(sims, order, axis=1)


@pytest.mark.parametrize(
    "flt",
    [None, SearchFilter(lang="sl", exclude_ids=("doc-1", "doc-2", "doc-4"))],
    ids=["nofilter", "lang+labelled+exclude"],
)
def test_search_matches_brute_force_on_both_adapters(tmp_path, parity_data, flt):
    base, queries, ids, langs, labels = parity_data
    k = 10
    mask = np.ones(N_PARITY, bool)
    if flt is not None:
        excluded = set(flt.exclude_ids)
        mask = np.array(
            [langs[i] == flt.lang and bool(labels[i]) and ids[i] not in excluded for i in range(N_PARITY)]
        )
    order, sims = _brute_force(base, queries, mask, k)

    edge = EdgeMemory(tmp_path, "parity", D_PARITY)
    server = QdrantServerMemory(QdrantClient(":memory:"), "parity", D_PARITY, close_client=True)
    try:
        results = {}
        for name, mem in (("edge", edge), ("server", server)):
            mem.upsert(ids, base, labels, [{"lang": lang} for lang in langs])
            results[name] = mem.search(queries, top_k=k, filter=flt)
        for name, res in results.items():
            assert len(res) == len(queries)
            for qi, hits in enumerate(res):
                assert [h.article_id for h in hits] == [ids[j] for j in order[qi]], (name, qi)
                np.testing.assert_allclose([h.similarity for h in hits], sims[qi], atol=1e-5, err_msg=name)
                for h in hits:
                    j = ids.index(h.article_id)
                    assert h.labels == tuple(labels[j]) and h.payload == {"lang": langs[j]}
        for e_hits, s_hits in zip(results["edge"], results["server"]):
            assert [h.article_id for h in e_hits] == [h.article_id for h in s_hits]
            np.testing.assert_allclose(
                [h.similarity for h in e_hits], [h.similarity for h in s_hits], atol=1e-5
            )
    finally:
        edge.close()
        server.close()


# ---------------------------------------------------------------------------
# Edge-specific: persistence and the directory lock


def test_edge_persists_across_reopen(tmp_path):
    vecs = _unit(np.random.default_rng(3), 3, DIM)
    with EdgeMemory(tmp_path, "persist", DIM) as mem:
        mem.upsert(["a", "b", "c"], vecs, [["x"], [], ["y"]], [{"lang": "sl"}] * 3)
        mem.set_labels(["b"], [["z"]])
        mem.delete(["c"])
    assert (tmp_path / "persist").is_dir()

    with EdgeMemory(tmp_path, "persist", DIM) as mem:
        assert mem.count() == 2
        a, b, c = mem.get(["a", "b", "c"], with_vectors=True)
        assert c is None
        assert a.labels == ("x",) and b.labels == ("z",) and b.payload == {"lang": "sl"}
        np.testing.assert_allclose(b.vector, vecs[1], atol=1e-6)
        (hits,) = mem.search(vecs[:1], top_k=1)
        assert hits[0].article_id == "a"


def test_edge_second_open_raises_memory_locked(tmp_path):
    first = EdgeMemory(tmp_path, "locked", DIM)
    try:
        with pytest.raises(MemoryLockedError, match="one process"):
            EdgeMemory(tmp_path, "locked", DIM)
        # the first handle still works after the failed second open
        first.upsert(["a"], np.ones((1, DIM)), [["x"]])
        assert first.count() == 1
    finally:
        first.close()
    # once closed, the directory can be opened again
    with EdgeMemory(tmp_path, "locked", DIM) as again:
        assert again.count() == 1


@pytest.mark.slow  # a second process opens the memory
def test_edge_lock_across_processes(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        from newsmon.shared.memory import EdgeMemory, MemoryLockedError
        try:
            EdgeMemory({str(tmp_path)!r}, "xproc", {DIM})
        except MemoryLockedError:
            sys.exit(42)
        sys.exit(0)
        """
    )
    with EdgeMemory(tmp_path, "xproc", DIM):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              cwd=REPO_ROOT)
    assert proc.returncode == 42, proc.stderr


# ---------------------------------------------------------------------------
# factory and server errors


def _memory_settings(tmp_path, **memory):
    from newsmon.shared.config import Settings

    return Settings(home=tmp_path / "home", memory={"path": tmp_path, **memory})


def test_open_memory_without_url_is_edge(tmp_path):
    mem = open_memory(_memory_settings(tmp_path), "nm_sl_v1", DIM)
    try:
        assert isinstance(mem, EdgeMemory)
        assert (tmp_path / "nm_sl_v1").is_dir()
    finally:
        mem.close()
    mem = open_memory(_memory_settings(tmp_path, url=""), "nm_sl_v1", DIM)
    assert isinstance(mem, EdgeMemory)
    mem.close()
    mem = open_memory(_memory_settings(tmp_path, engine="edge"), "nm_sl_v1", DIM)
    assert isinstance(mem, EdgeMemory) and isinstance(mem, LocalIndex)  # its process keeps its index
    mem.close()


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_open_memory_unreachable_server_is_unavailable(tmp_path):
    # Port 9 (discard) on localhost: nothing listens, connection refused at once.
    for memory in ({"url": "http://127.0.0.1:9"}, {"url": "http://127.0.0.1:9", "engine": "server"}):
        with pytest.raises(MemoryUnavailableError):
            open_memory(_memory_settings(tmp_path, **memory), "c", DIM)


def test_the_engine_setting_and_the_url_agree_or_fail_in_one_line(tmp_path, monkeypatch):
    """``memory.engine`` names a registered engine; unset, a URL picks the server as before the setting (an
    upgraded deployment keeps its engine); an engine and a URL that contradict each other fail at start, in one
    line naming the settings to change."""
    from pydantic import ValidationError

    from newsmon.shared.config import Settings

    assert _memory_settings(tmp_path, url="http://q:6333").memory.engine_name() == "server"
    assert _memory_settings(tmp_path).memory.engine_name() == "edge"
    assert engine_of(_memory_settings(tmp_path, url="http://q:6333")).shared_records
    monkeypatch.setenv("NEWSMON_MEMORY__ENGINE", "server")
    with pytest.raises(ValidationError, match="NEWSMON_MEMORY__ENGINE=server needs NEWSMON_MEMORY__URL") as err:
        Settings(home=tmp_path)
    monkeypatch.setenv("NEWSMON_MEMORY__URL", "http://q:6333")
    assert Settings(home=tmp_path).memory_mode() == {"mode": "server", "url": "http://q:6333"}
    monkeypatch.setenv("NEWSMON_MEMORY__ENGINE", "edge")
    with pytest.raises(ValidationError, match="unset the URL, or set NEWSMON_MEMORY__ENGINE=server") as err:
        Settings(home=tmp_path)
    assert len(err.value.errors()) == 1 and "\n" not in err.value.errors()[0]["msg"]
    monkeypatch.setenv("NEWSMON_MEMORY__ENGINE", "nope")
    with pytest.raises(ValueError, match=r"NEWSMON_MEMORY__ENGINE=nope: unknown memory engine; registered: edge, "
                       r"server"):
        engine_of(Settings(home=tmp_path))


def test_a_registered_engine_is_what_the_router_and_the_records_open(tmp_path):
    """The router, the calibration records and the stored models open their collections through the engine the
    setting names (a registered factory), not through a test of the URL."""
    from newsmon.shared.memory import ENGINES, MemoryEngine
    from newsmon.shared.scoring.records import CalibrationStore

    opened: list[str] = []
    client = QdrantClient(":memory:")

    def open_(settings, collection, dim, given, index):
        opened.append(collection)
        assert given is client
        return QdrantServerMemory(given, collection, dim, index=index)

    ENGINES.add("probe", MemoryEngine("probe", open_, lambda s, c: [x.name for x in c.get_collections().collections],
                                      lambda s: "probe", lambda s: "the probe", connect=lambda s: client,
                                      shared_records=True))
    try:
        s = _memory_settings(tmp_path, engine="probe")
        router = MemoryRouter(s, "v1", DIM)
        router.memory("sl").upsert(["a"], np.ones((1, DIM)), [["x"]])
        assert router.languages(refresh=True) == ["sl"] and not isinstance(router.memory("sl"), LocalIndex)
        CalibrationStore(s, router.client())
        assert opened == [collection_name("newsmon", "sl", "v1"), "newsmon_calibration"]
    finally:
        ENGINES.remove("probe")
        client.close()


def test_server_memory_reuses_existing_collection():
    client = QdrantClient(":memory:")
    try:
        first = QdrantServerMemory(client, "shared", DIM)
        first.upsert(["a"], np.ones((1, DIM)), [["x"]])
        second = QdrantServerMemory(client, "shared", DIM)
        assert second.count() == 1
        first.close()  # does not close a client it does not own
        assert second.get(["a"])[0].labels == ("x",)
    finally:
        client.close()


def test_scroll_returns_every_point(make_memory):
    rng = np.random.default_rng(3)
    mem = make_memory(dim=DIM)
    ids = [f"a{i}" for i in range(700)]
    mem.upsert(ids, _unit(rng, 700, DIM), [("x",) if i % 2 else () for i in range(700)],
               [{"lang": "sl", "n": i} for i in range(700)])
    got = list(mem.scroll(batch=128, with_vectors=True))
    assert sorted(p.article_id for p in got) == sorted(ids)
    assert all(p.vector is not None and p.vector.shape == (DIM,) for p in got)
    labelled = list(mem.scroll(SearchFilter(labelled=True)))
    assert len(labelled) == 350 and all(p.labels == ("x",) for p in labelled)


# ---------------------------------------------------------------------------
# the router: collections per language, one server client, the language list once per batch


def _router_settings(tmp_path, url=None):
    from newsmon.shared.config import Settings

    s = Settings(home=tmp_path / "home")
    s.memory.path = tmp_path / "memory"
    s.memory.url = url
    return s


def test_router_uses_one_server_client_for_every_collection_and_listing(tmp_path, monkeypatch):
    import newsmon.shared.memory.engines as engines_mod

    made: list = []

    class Client(QdrantClient):
        closed = False

        def close(self, *args, **kwargs):
            Client.closed = True
            super().close(*args, **kwargs)

    def connect(url, api_key):
        made.append(url)
        return Client(":memory:")  # qdrant-client's local mode speaks the server API

    monkeypatch.setattr(engines_mod, "connect", connect)
    router = MemoryRouter(_router_settings(tmp_path, url="http://qdrant.test:6333"), "v1", DIM)
    router.memory("sl").upsert(["a"], np.ones((1, DIM)), [["x"]])
    router.memory("en").upsert(["b"], np.ones((1, DIM)), [["y"]])
    for _ in range(3):
        assert router.languages(refresh=True) == ["en", "sl"]
    assert router.find_many(["b", "a"]) == {"a": ("sl", router.memory("sl").get(["a"])[0]),
                                            "b": ("en", router.memory("en").get(["b"])[0])}
    assert made == ["http://qdrant.test:6333"]
    router.close()
    assert Client.closed and router.closed


def test_router_lists_language_collections_once_per_batch(tmp_path):
    s = _router_settings(tmp_path)
    router, other = MemoryRouter(s, "v1", DIM), MemoryRouter(s, "v1", DIM)
    try:
        assert router.languages() == []
        other.memory("en").upsert(["b"], np.ones((1, DIM)), [["y"]])  # another writer creates a collection
        assert router.languages() == []  # the list of this batch
        router.new_batch()
        assert router.languages() == ["en"]
        router.memory("sl")  # a collection opened here is always listed
        assert router.languages() == ["en", "sl"]
    finally:
        router.close()
        other.close()


def test_router_find_many_one_get_per_language(tmp_path):
    router = MemoryRouter(_router_settings(tmp_path), "v1", DIM)
    try:
        rng = np.random.default_rng(7)
        router.memory("sl").upsert(["a", "both"], _unit(rng, 2, DIM), [["x"], ["sl-label"]])
        router.memory("en").upsert(["b", "both"], _unit(rng, 2, DIM), [["y"], ["en-label"]])
        found = router.find_many(["a", "b", "both", "missing", "a"], with_vectors=True)
        assert set(found) == {"a", "b", "both"}
        assert found["a"][0] == "sl" and found["b"][0] == "en"
        assert found["both"][0] == "en" and found["both"][1].labels == ("en-label",)  # first language wins
        assert found["a"][1].vector.shape == (DIM,)
        assert router.find("missing") is None and router.find("a")[0] == "sl"
    finally:
        router.close()


def test_hybrid_search_unites_lexical_neighbours_with_the_dense_ones(make_memory):
    # the article sharing the query's rare words is far in the dense space: only the lexical vector finds it
    mem = make_memory()
    rng = np.random.default_rng(3)
    V = _unit(rng, 30, DIM)
    q = V[0]
    far = int(np.argmin(V @ q))
    texts = [f"splošna novica številka {i} o vremenu" for i in range(30)]
    texts[far] = "Krka in Pivovarna Laško poročata dobiček"
    mem.upsert([f"a{i}" for i in range(30)], V, [["x"]] * 30, [{"text": t} for t in texts])
    assert mem.lexical
    dense = mem.search(q[None], 5)[0]
    assert f"a{far}" not in {n.article_id for n in dense}
    hybrid = mem.search(q[None], 5, texts=["dobiček Krka"], lexical_k=3)[0]
    ids = [n.article_id for n in hybrid]
    assert f"a{far}" in ids and ids[:5] == [n.article_id for n in dense]  # the dense top-5 first (by cosine)
    sims = [n.similarity for n in hybrid]
    assert sims == sorted(sims, reverse=True) and hybrid[-1].similarity == pytest.approx(float(V[far] @ q), abs=1e-4)
    assert len(hybrid) <= 8
    # a query without words, or lexical_k 0: the dense hits only
    assert [n.article_id for n in mem.search(q[None], 5, texts=["..."], lexical_k=3)[0]] == ids[:5]
    with pytest.raises(ValueError, match="texts"):
        mem.search(q[None], 5, texts=["a", "b"], lexical_k=3)
    with pytest.raises(ValueError, match="lexical_k"):
        mem.search(q[None], 5, texts=["a"], lexical_k=-1)


def test_edge_collection_made_before_the_lexical_vector_gets_it(tmp_path):
    import qdrant_edge as qe

    (tmp_path / "old").mkdir()
    old = qe.EdgeShard.create(str(tmp_path / "old"), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)))
    old.close()
    rng = np.random.default_rng(4)
    V = _unit(rng, 3, DIM)
    mem = EdgeMemory(tmp_path, "old", DIM)
    try:
        assert mem.lexical
        mem.upsert(["a", "b", "c"], V, [["x"]] * 3, [{"text": t} for t in ("Krka dobiček", "vreme", "šport")])
        hits = mem.search(V[1:2], 1, texts=["Krka"], lexical_k=1)[0]
        assert {n.article_id for n in hits} == {"b", "a"}
    finally:
        mem.close()
    mem = EdgeMemory(tmp_path, "old", DIM)  # reopens with the lexical vector in its stored config
    try:
        assert mem.count() == 3 and "a" in {n.article_id for n in mem.search(V[1:2], 1, texts=["Krka"],
                                                                             lexical_k=1)[0]}
    finally:
        mem.close()


def test_hybrid_answers_are_united_and_a_point_deleted_meanwhile_is_left_out():
    # the embedded engine answers a hybrid batch as dense / lexical request pairs; the lexical hits the dense ones
    # lack get their cosine from a second search, which does not find a point deleted in between
    from newsmon.shared.memory.common import Hit, split_hybrid, with_cosines

    def h(pid, score=0.0):
        return Hit(pid, {"article_id": pid}, score, None)

    answers = [[h("a", 0.9), h("b", 0.8)], [h("b", 5.0), h("c", 4.0), h("d", 3.0)],  # query 0: dense, lexical
               [h("e", 0.7)],                                                          # query 1: dense only
               [h("f", 0.6)], [h("f", 2.0)]]                                           # query 2: nothing missing
    dense, extra = split_hybrid(answers, [True, False, True], 2, 2)
    assert [[x.id for x in row] for row in dense] == [["a", "b"], ["e"], ["f"]]
    assert {i: [x.id for x in hits] for i, hits in extra.items()} == {0: ["c"]}  # the lexical top 2: b, c
    united = with_cosines([h("c", 4.0), h("d", 3.0)], [h("c", 0.5)])  # "d" was deleted between the two batches
    assert united == [Hit("c", {"article_id": "c"}, 0.5, None)]


def test_a_tie_at_either_cut_of_a_hybrid_search_is_settled_by_article_id_whatever_the_engine_answered_first():
    # the engine answers up to TIE_MARGIN more hits than asked; of hits with equal scores at the top-k cut, the one
    # with the lower article id is kept, in whatever order the engine listed them (dense and lexical alike)
    from newsmon.shared.memory.common import Hit, split_hybrid

    def h(pid, score):
        return Hit(pid, {"article_id": pid}, score, None)

    for dense in ([h("a", 0.9), h("x", 0.8), h("c", 0.8)], [h("a", 0.9), h("c", 0.8), h("x", 0.8)]):
        for lexical in ([h("z", 5.0), h("q", 5.0)], [h("q", 5.0), h("z", 5.0)]):
            rows, extra = split_hybrid([dense, lexical], [True], 2, 1)
            assert [x.id for x in rows[0]] == ["a", "c"]
            assert [x.id for x in extra[0]] == ["q"]


def test_the_top_k_cut_reads_a_payload_only_where_a_tie_at_the_cut_needs_its_article_id():
    # the engine's bindings build a hit's payload anew on every read (a dict per hit: thousands a batch at archive
    # size); the cut needs the article id of the hits tied with the n-th only, and keeps the same hits as a sort by
    # (score, article id) whatever the engine's order
    from newsmon.shared.memory.common import ranked_neighbours, top_hits

    class Counted:
        reads = 0

        def __init__(self, pid, score):
            self.id, self.score, self._payload, self.vector = pid, score, {"article_id": pid}, None

        @property
        def payload(self):
            Counted.reads += 1
            return dict(self._payload)

    rng = np.random.default_rng(3)
    for trial in range(200):
        scores = np.round(rng.uniform(0.5, 0.9, 40), 2 if trial % 2 else 6)  # many ties, or almost none
        hits = [Counted(f"p{i:03d}", float(x)) for i, x in enumerate(scores)]
        rng.shuffle(hits)
        n = int(rng.integers(1, 45))
        Counted.reads = 0
        kept = top_hits(hits, n)
        ranked = sorted(hits, key=lambda h: (-h.score, h.id))
        cut = ranked[min(n, len(ranked)) - 1].score
        tie_at_cut = n < len(ranked) and ranked[n].score == cut
        assert Counted.reads == (sum(h.score == cut for h in hits) if tie_at_cut else 0)
        assert {h.id for h in kept} == {h.id for h in ranked[:n]}
        assert [nb.article_id for nb in ranked_neighbours(kept)] == [h.id for h in ranked[:n]]


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_a_dropped_collection_is_gone_and_its_neighbours_stay(tmp_path, engine):
    """A refused candidate's copy of the memory is deleted for good (the rollout's clean-up); the other collections
    keep every point; an embedded collection open elsewhere is not deleted."""
    from newsmon.shared.config import Settings
    from newsmon.shared.memory.engines import drop_collection
    from newsmon.shared.memory.router import stored_collections

    s = Settings(home=tmp_path)
    client = None
    if engine == "server":
        s.memory.url = "http://qdrant.invalid:6333"
        client = QdrantClient(path=str(tmp_path / "qdrant"))  # local mode speaks the server's client API
    vecs = _unit(np.random.default_rng(5), 2, DIM)
    for name in ("newsmon_en_cand", "newsmon_en_prod"):
        mem = open_memory(s, name, DIM, client)
        mem.upsert(["a", "b"], vecs, [["x"], ["y"]])
        mem.close()
    if engine == "edge":
        held = EdgeMemory(s.memory_path, "newsmon_en_cand", DIM)
        with pytest.raises(MemoryLockedError):
            drop_collection(s, "newsmon_en_cand", DIM, client)
        held.close()
        assert "newsmon_en_cand" in stored_collections(s)
    assert drop_collection(s, "newsmon_en_cand", DIM, client) is True
    assert stored_collections(s, client) == ["newsmon_en_prod"]
    assert drop_collection(s, "newsmon_en_cand", DIM, client) is False  # already gone: nothing to do
    prod = open_memory(s, "newsmon_en_prod", DIM, client)
    assert prod.count() == 2
    prod.close()
    if client is not None:
        client.close()


def test_a_search_without_payloads_answers_the_same_hits_and_reads_the_kept_ones_later(make_memory):
    # the scorer keeps 50 of 200 candidates: it searches without payloads (the engine reads a point's whole
    # payload, its text included, for any field) and reads the kept ones' only. The hits, their order and the ties
    # (near-copies: equal cosines, settled by article id at the cut and in the order) are a full search's.
    mem = make_memory()
    rng = np.random.default_rng(11)
    v, others = _unit(rng, 1, DIM), _unit(rng, 30, DIM)
    ids = [f"dup{i}" for i in (7, 3, 9, 1, 5, 0)] + [f"o{i:02d}" for i in range(30)]
    texts = ["same words"] * 6 + [f"novica {i} o vremenu" for i in range(30)]
    mem.upsert(ids, np.vstack([np.repeat(v, 6, axis=0), others]), [[f"l{i % 4}"] for i in range(36)],
               [{"text": t, "title": f"T {i}"} for i, t in enumerate(texts)])
    queries = np.vstack([v, others[:3]])
    mem.search(queries, 3)  # qdrant-client's local mode scores its first search after a write in the last digits apart
    for hybrid in ({}, {"texts": ["same words", *texts[6:9]], "lexical_k": 4}):
        for k in (3, 8, 20):
            full = mem.search(queries, k, **hybrid)
            lean = mem.search(queries, k, **hybrid, payloads=False)
            for f_row, l_row in zip(full, lean, strict=True):
                assert [n.similarity for n in l_row] == [n.similarity for n in f_row]
                read = mem.points([n.point[1] for n in l_row if n.point is not None])
                for n, f in zip(l_row, f_row, strict=True):
                    got = n if n.point is None else read[n.point[1]]
                    assert (got.article_id, tuple(got.labels), got.payload) == (f.article_id, f.labels, f.payload)
                    assert "text" not in got.payload and got.payload["title"]
                    assert (n.terms is None) == (f.terms is None)
                    if n.terms is not None:
                        assert all(np.array_equal(a, b) for a, b in zip(n.terms, f.terms, strict=True))
                    if n.point is not None:
                        assert n.point[0] == mem.collection and (n.article_id, n.labels) == ("", ())
                        assert sum(x.similarity == n.similarity for x in l_row) == 1  # a tied hit carries its own
    lean = mem.search(v, 10, payloads=False)[0]
    assert [n.article_id for n in lean[:6]] == ["dup0", "dup1", "dup3", "dup5", "dup7", "dup9"]
    pending = [n.point[1] for n in lean if n.point is not None]
    assert len(pending) == 4
    mem.delete([mem.points(pending[:1])[pending[0]].article_id])  # deleted between the search and the read
    assert set(mem.points(pending)) == set(pending[1:])


def test_the_scorer_reads_the_payloads_of_the_neighbours_it_keeps_only(tmp_path):
    # the neighbour source searches the candidates without payloads, the scorer's fusion keeps k of them, and only
    # those are read: the same neighbours, labels, titles and scores as fusing a full search's candidates
    from newsmon.shared.classifier import MemoryNeighbours
    from newsmon.shared.scoring.lexical import fuse

    settings = _router_settings(tmp_path)
    router = MemoryRouter(settings, "v1", DIM)
    try:
        rng = np.random.default_rng(12)
        V = _unit(rng, 60, DIM)
        texts = [f"novica {i % 7} o {('vremenu', 'volitvah', 'nogometu')[i % 3]}" for i in range(60)]
        router.memory("sl").upsert([f"a{i:02d}" for i in range(60)], V, [[f"l{i % 5}"] for i in range(60)],
                                   [{"text": t, "title": f"Naslov {i}"} for i, t in enumerate(texts)])
        router.memory("en").upsert(["e0", "e1"], V[:2], [["en"]] * 2, [{"text": "news", "title": "E"}] * 2)
        settings.memory.min_language_articles = 10
        source = MemoryNeighbours(settings, router)
        read: list[int] = []
        points = router.points
        router.points = lambda handles: (read.append(len(handles)), points(handles))[1]
        Q, qt = V[:4] + 0.1 * _unit(rng, 4, DIM), texts[:4]
        for langs in (["sl"] * 4, ["sl", "sl", "hr", None]):  # hr: no memory of its own, every memory merged
            keep = lambda r: fuse(r, qt, 0.3, 5)  # noqa: E731
            read.clear()
            lean, searched = source.search(Q, langs, 20, texts=qt, lexical_k=6, keep=keep)
            full, searched_full = source.search(Q, langs, 20, texts=qt, lexical_k=6)
            want = keep(full)
            assert searched == searched_full and lean.ids.tolist() == want.ids.tolist()
            assert np.array_equal(lean.sims, want.sims) and np.array_equal(lean.cosines, want.cosines)
            assert lean.labels == want.labels and lean.titles == want.titles
            assert 0 < sum(read) <= 4 * 5 and len(read) == 1  # the kept ones, in one read
    finally:
        router.close()


def test_a_kept_neighbour_deleted_before_its_read_is_left_out_and_the_rest_move_up():
    # between the search (without payloads) and the read of the kept neighbours a moderator may delete an article:
    # the neighbour goes, the row's later ones move up, the freed slot is empty, and no other row changes
    from newsmon.shared.scoring.retrieval import Retrieval

    def nb(point, sim):
        return Neighbour("", sim, (), {}, None, ("c", point))

    found = Retrieval.from_neighbours([[nb("p1", 0.9), nb("p2", 0.8), nb("p3", 0.7)], [nb("p4", 0.6)]], 3)
    assert found.ids[0, 0] == ("c", "p1") and found.ids[1, 1] == ""
    assert found.labels == [[(), (), ()], [(), (), ()]] and found.titles == [[None] * 3, [None] * 3]  # not read yet
    asked = []

    def read(points):
        asked.append(list(points))
        return {("c", p): MemoryPoint(f"a-{p}", (f"l-{p}",), {"title": f"T {p}"}) for p in ("p1", "p3", "p4")}

    got = found.with_articles(read)
    assert asked == [[("c", "p1"), ("c", "p2"), ("c", "p3"), ("c", "p4")]]  # one read
    assert got.ids.tolist() == [["a-p1", "a-p3", ""], ["a-p4", "", ""]]
    assert np.array_equal(got.sims, np.float32([[0.9, 0.7, -np.inf], [0.6, -np.inf, -np.inf]]))
    assert got.labels == [[("l-p1",), ("l-p3",), ()], [("l-p4",), (), ()]]
    assert got.titles == [["T p1", "T p3", None], ["T p4", None, None]]
    assert got.with_articles(read) is got and len(asked) == 1  # nothing held by its point: nothing read



def test_a_lexical_hit_tied_with_a_dense_one_is_ordered_by_article_id_without_payloads(make_memory, monkeypatch):
    # the approximate dense search may miss a copy that the lexical search then brings: the union holds two hits of
    # one cosine, neither tied within its own request's answer, so neither read yet; the article id orders them, as
    # in a search with payloads (the engine's union is made up here: a small memory is searched exactly)
    from newsmon.shared.memory.common import Hit

    mem = make_memory()
    v = _unit(np.random.default_rng(13), 1, DIM)
    mem.upsert(["dupB", "dupA"], np.vstack([v, v]), [["x"], ["y"]], [{"text": "vreme"}, {"text": "Krka dobiček"}])
    union = [[Hit(point_id("dupB"), None, 0.9, None), Hit(point_id("dupA"), None, 0.9, None)]]  # dense, then lexical
    monkeypatch.setattr(mem, "_query", lambda *args, **kwargs: [list(union[0])])
    lean = mem.search(v, 1, texts=["Krka dobiček"], lexical_k=1, payloads=False)[0]
    assert [(n.article_id, n.labels, n.point) for n in lean] == [("dupA", ("y",), None), ("dupB", ("x",), None)]
