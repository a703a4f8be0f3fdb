"""The embedding cache answers a text given more than once at every position (reuters21578_en has 121 articles
whose text another article has: they were answered at their last position only, so every eval embedded them again
and loaded the encoder for them)."""

from __future__ import annotations

import numpy as np

from newsmon.shared.embedding_cache import EmbeddingCache


def test_a_key_given_twice_is_answered_at_both_positions(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    vecs = np.arange(12, dtype=np.float32).reshape(3, 4)
    cache.put(["a", "b", "c"], vecs)
    keys = ["a", "x", "b", "a"] + [f"k{i}" for i in range(600)] + ["a", "c"]  # across the query chunks of 500
    got = cache.get(keys, 4)
    cache.close()
    for i in (0, 3, 604):
        assert np.array_equal(got[i], vecs[0])
    assert np.array_equal(got[2], vecs[1]) and np.array_equal(got[605], vecs[2])
    assert np.isnan(got[1]).all() and np.isnan(got[4:604]).all()
