"""The per-record models stored with the calibration record: each component's model round-trips through its
archive and gives the same evidence, both stores (a file beside the memory, chunks on the Qdrant server) keep it,
and the workers load it instead of fitting it from the memory (the model that runs is the one the calibration
judged)."""

from __future__ import annotations

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
                                   {"name": "label_tree", "options": {"weight": 0.5, "tree": "bonsai"}}])


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
    asked = []

    def articles(lang):
        asked.append(lang)
        return memory

    models = MemoryModels(articles, stored=lambda record: unpack(pack(cache)) if record == cache.record else None)
    got, counts = models.get("sl", cache.record, PARAMS, True)
    assert asked == [] and set(got) == {"label_keys", "head_model", "label_tree"} and counts == cache.counts
    got, _ = models.get("sl", "newsmon_sl_m@20260101T000000Z", PARAMS, False)  # a record without stored models
    assert asked == ["sl"] and set(got) == {"label_keys", "head_model", "label_tree"}
