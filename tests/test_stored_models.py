"""The per-record models stored with the calibration record: each component's model round-trips through its
archive and gives the same evidence, both stores (a file beside the memory, chunks on the Qdrant server) keep it,
and the workers load it instead of fitting it from the memory (the model that runs is the one the calibration
judged)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from test_head_model import house_style_corpus
from test_label_tree import corpus

from newsmon.shared.config import Settings
from newsmon.shared.scoring import MemoryArticles, MemoryModels, Queries, ScoringParams, get_component
from newsmon.shared.scoring.models import ModelCache
from newsmon.shared.scoring.stored import ModelStore, pack, unpack


def _memory() -> MemoryArticles:
    texts, labels = house_style_corpus(240, seed=21)
    more, extra = corpus(240, 22)
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((240, 8)).astype(np.float32)
    return MemoryArticles(vecs, [a + " " + b for a, b in zip(texts, more)], [a + b for a, b in zip(labels, extra)])


PARAMS = ScoringParams(components=[{"name": "label_keys", "options": {"weight": 0.5}},
                                   {"name": "head_model", "options": {"weight": 0.5, "c": 10.0}},
                                   {"name": "label_tree", "options": {"weight": 0.25}}])


@dataclass
class StoredMemory:
    """A :class:`~newsmon.shared.scoring.models.MemorySource` over articles at hand and the models stored with one
    record (a copy through the archive format at each read, as the store gives them). ``memory`` None: reading the
    memory fails the test; ``any_record``: the stored models whatever record is asked for; ``asked``: the languages
    whose articles were read."""

    stored: ModelCache | None
    memory: MemoryArticles | None = None
    any_record: bool = False
    asked: list[str] = field(default_factory=list)

    def articles(self, lang: str) -> MemoryArticles:
        if self.memory is None:
            raise AssertionError("the workers must not read the memory for a stored model")
        self.asked.append(lang)
        return self.memory

    def collection(self, lang: str) -> str:
        return f"newsmon_{lang}_m"

    def stored_models(self, record: str) -> ModelCache | None:
        if self.stored is None or not (self.any_record or record == self.stored.record):
            return None
        return unpack(pack(self.stored))


def _cache(memory: MemoryArticles) -> ModelCache:
    cache = ModelCache("newsmon_sl_m@20261202T000000Z")
    cache.fill(memory, [(s.name, s.parsed()) for s in PARAMS.components] + [("", None)])
    return cache


def _evidence(cache: ModelCache, queries: Queries) -> dict:
    out = {}
    for s in PARAMS.components:
        ev = get_component(s.name).evidence(cache.get(PARAMS)[s.name], queries, s.parsed())
        out[s.name] = (ev.labels, np.asarray(getattr(ev, "probs", getattr(ev, "scores", getattr(ev, "cosines", None)))))
    return out


def test_every_components_model_round_trips_through_the_archive():
    memory = _memory()
    cache = _cache(memory)
    again = unpack(pack(cache))
    assert again.record == cache.record and again.counts == cache.counts == memory.label_counts()
    assert set(again.models) == set(cache.models)
    q = Queries(memory.texts[:7], memory.vectors[:7])
    want, got = _evidence(cache, q), _evidence(again, q)
    for name in want:
        assert want[name][0] == got[name][0], name
        assert np.allclose(want[name][1], got[name][1]), name


def test_every_stored_array_is_parsed_under_the_one_npz_lock(monkeypatch, tmp_path):
    """numpy parses each array's header with ``ast.literal_eval``, and CPython 3.11's AST conversion is not
    thread-safe (gh-106905): a worker's warm-up reading a record's models while the demo's main thread imported anyio
    (which parses its own source) died with ``SystemError: AST constructor recursion depth mismatch``. Every read of
    a stored model (each component's, the encoder adapter's) parses under ``NPZ_LOCK``, one at a time."""
    import ast

    from newsmon.shared.encoder_adapter import read_adapter, write_adapter
    from newsmon.shared.scoring.arrays import NPZ_LOCK

    parsed: list[bool] = []
    real = ast.literal_eval
    monkeypatch.setattr(ast, "literal_eval", lambda s: parsed.append(NPZ_LOCK.locked()) or real(s))
    cache = _cache(_memory())
    again = unpack(pack(cache))  # every component's archive read back
    assert set(again.models) == set(cache.models)
    rng = np.random.default_rng(1)
    write_adapter(tmp_path / "adapter", rng.standard_normal((8, 8)).astype(np.float32) * 0.01, "base", "v1")
    assert read_adapter(tmp_path / "adapter") is not None
    assert len(parsed) >= 10 and all(parsed)


@pytest.mark.parametrize("mode", ["embedded", "server"])
def test_both_stores_keep_the_models_and_check_them(tmp_path, mode):
    s = Settings(home=tmp_path)
    client = None
    if mode == "server":
        from qdrant_client import QdrantClient

        client = QdrantClient(path=str(tmp_path / "qdrant"))  # local mode speaks the server's client API
        s.memory.url = "http://qdrant.invalid:6333"
    cache = _cache(_memory())
    store = ModelStore(s, client=client)
    digest = store.write(cache)
    got = ModelStore(s, client=client).read(cache.record, digest)  # another process reads them
    assert set(got.models) == set(cache.models) and got.counts == cache.counts
    assert ModelStore(s, client=client).read("newsmon_sl_m@20260101T000000Z") is None
    with pytest.raises(ValueError, match="not the ones"):
        store.read(cache.record, "0" * 64)
    if client is not None:
        client.close()


def test_the_workers_load_the_stored_models_instead_of_fitting_them():
    memory = _memory()
    cache = _cache(memory)
    source = StoredMemory(cache, memory)
    models = MemoryModels(source)
    got, counts = models.get("sl", cache.record, PARAMS, True)
    assert source.asked == [] and set(got) == {"label_keys", "head_model", "label_tree"} and counts == cache.counts
    got, _ = models.get("sl", "newsmon_sl_m@20260101T000000Z", PARAMS, False)  # a record without stored models
    assert source.asked == ["sl"] and set(got) == {"label_keys", "head_model", "label_tree"}


class _VectorsGiven:
    """The encoder's identity only: these tests write vectors themselves and never embed."""

    adapter = None
    model_id, dim = "test-model", 8

    def encode(self, *_a, **_k):
        raise AssertionError("nothing here embeds")

    def close(self) -> None:
        pass


def test_a_record_without_stored_models_is_fitted_on_a_bounded_sample(tmp_path):
    """A worker that meets a record without stored models reads at most the calibration's
    ``max_memory_articles`` labelled articles (not the whole memory: archive size is a million), fits the missing
    models on them, and estimates the memory's label counts from the sample, scaled to the memory's labelled
    count."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.memory import MemoryRouter

    s = Settings(home=tmp_path / "home")
    s.memory.path = tmp_path / "memory"
    s.calibration.max_memory_articles = 100
    enc = _VectorsGiven()
    clf = Classifier(s, encoder=enc, router=MemoryRouter(s, enc.model_id, enc.dim))
    try:
        rng = np.random.default_rng(5)
        n = 300
        labels = [["common"] + (["half"] if i % 2 else []) for i in range(n)]
        clf.memory("sl").upsert([f"sl-{i}" for i in range(n)], rng.standard_normal((n, enc.dim)).astype(np.float32),
                                labels, [{"lang": "sl", "text": f"novica {i} o vremenu"} for i in range(n)])
        clf.memory("sl").upsert(["pending"], rng.standard_normal((1, enc.dim)).astype(np.float32), [[]],
                                [{"lang": "sl", "text": "brez oznak"}])
        sample = clf.samples.articles("sl")  # what the models are fitted on (the classifier's MemorySource)
        assert len(sample) == 100 and sample.total == n and len(set(sample.ids)) == 100
        counts = sample.label_counts()
        assert counts["common"] == n and abs(counts["half"] - n / 2) <= 0.2 * n
        whole = clf.samples.memory_articles("sl")
        assert len(whole) == n and whole.total is None and whole.label_counts() == {"common": n, "half": n // 2}
        got, counts = clf.models.get("sl", "newsmon_sl_m@20260101T000000Z",
                                     ScoringParams(components=[{"name": "label_keys", "options": {"weight": 0.5}}]),
                                     True)
        assert set(got) == {"label_keys"} and counts["common"] == n
    finally:
        clf.close()


def test_the_long_lived_state_is_frozen_out_of_the_collector_whenever_the_models_change(monkeypatch):
    """A serving process's full garbage collections walked every object it holds (encoder, vocabularies, models)
    and freed nothing: a pause of tens of ms in one batch of every few dozen, the tail of the batch latency at archive
    size. The model source freezes what is alive once a record's models are in (the first batch, each record
    change, a fill), not on every batch; what was frozen is left out of every generation the collector walks."""
    import gc

    from newsmon.shared import heap
    from newsmon.shared.scoring import models as models_module

    memory = _memory()
    cache = _cache(memory)
    froze: list[str] = []
    monkeypatch.setattr(models_module, "freeze_long_lived", lambda why: froze.append(why) or 0)
    models = MemoryModels(StoredMemory(cache, memory))
    models.get("sl", cache.record, PARAMS, True)
    models.get("sl", cache.record, PARAMS, True)  # the same record: nothing new to freeze
    assert len(froze) == 1 and cache.record in froze[0]
    models.get("sl", "newsmon_sl_m@20260101T000000Z", PARAMS, False)  # another record, its models fitted
    assert len(froze) == 2
    models.get("sl", "newsmon_sl_m@20260101T000000Z", PARAMS, False)
    assert len(froze) == 2

    held = [{"state": i} for i in range(1000)]  # long-lived containers, tracked by the collector
    try:
        assert any(o is held for o in gc.get_objects())
        frozen = heap.freeze_long_lived("test")
        # a frozen object freed since by reference counting (another thread's frame) leaves the permanent generation
        assert frozen >= len(held) and len(held) <= gc.get_freeze_count() <= frozen
        assert not any(o is held for g in range(3) for o in gc.get_objects(generation=g))
        young = [{"batch": 1}]  # allocated afterwards: collected as usual
        assert any(o is young for g in range(3) for o in gc.get_objects(generation=g))
    finally:
        gc.unfreeze()


def test_a_warmed_up_scorer_loads_nothing_more_for_its_first_batch(monkeypatch):
    """A started worker's first batch loaded its record's models and froze what the process holds out of the
    collector (about 640 ms for the first batch at a million points against about 210 warm,
    ``benchmarks/scale_restart.py``). The worker warms its scorer up before the first consume (``warm_up``): what it
    loads is what the first batch asks for, so that batch loads and freezes nothing more."""
    from newsmon.shared.memory import Neighbour
    from newsmon.shared.scoring import OneRecord, Resolved, Retrieval, Scorer
    from newsmon.shared.scoring import models as models_module

    memory = _memory()
    cache = _cache(memory)
    froze: list[str] = []
    monkeypatch.setattr(models_module, "freeze_long_lived", lambda why: froze.append(why) or 0)
    source = StoredMemory(cache)  # reading the memory fails the test
    loads: list[str] = []
    real_load = MemoryModels._load
    monkeypatch.setattr(MemoryModels, "_load", lambda self, lang, record: loads.append(record) or real_load(
        self, lang, record))
    res = Resolved(PARAMS, cache.record, None, "calibration")
    scorer = Scorer(OneRecord(res, MemoryModels(source)))
    assert scorer.warm_up("sl") == res
    assert loads == [cache.record] and len(froze) == 1
    rng = np.random.default_rng(5)
    hits = [[Neighbour(f"m{j}", 0.9 - 0.01 * j, tuple(memory.labels[j])) for j in range(10)] for _ in range(4)]
    (g,) = scorer.score(["Vlada sprejela proračun"] * 4, ["sl"] * 4, rng.standard_normal((4, 8)).astype(np.float32),
                        retrieval=Retrieval.from_neighbours(hits))
    assert g.decision.scores.shape[0] == 4 and set(g.evidence) == {"label_keys", "head_model", "label_tree"}
    assert loads == [cache.record] and len(froze) == 1  # the first batch loaded and froze nothing more
