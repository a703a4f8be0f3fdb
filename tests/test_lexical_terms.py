"""The lexical fusion reads the candidates' stored lexical vectors (the knowledge memory returns them with each
neighbour, and leaves their texts out of the hits) and scores exactly as when it tokenises their stored texts
again: same neighbours, same fused scores."""

from __future__ import annotations

import numpy as np

from newsmon.shared.data import load_corpus
from newsmon.shared.memory import EdgeMemory, SearchFilter
from newsmon.shared.scoring.lexical import TermVectors, fuse
from newsmon.shared.scoring.retrieval import Retrieval


def test_fusion_on_stored_terms_equals_fusion_on_texts(tmp_path, shared_data):
    articles = [a for a in load_corpus(shared_data / "sentinews_sl").articles if a.labels][:400]
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((len(articles), 16)).astype(np.float32)
    mem = EdgeMemory(tmp_path, "c", 16)
    mem.upsert([a.id for a in articles], vecs, [a.labels for a in articles],
               [{"lang": "sl", "text": a.text} for a in articles])
    queries = [a.text for a in articles[:12]]
    hits = mem.search(vecs[:12] + 0.3 * rng.standard_normal((12, 16)).astype(np.float32), 30,
                      SearchFilter(labelled=True), texts=queries, lexical_k=40)
    assert all(nb.terms is not None for row in hits for nb in row), "every neighbour carries its stored terms"
    # as arrays: an eval's leave-one-out search holds millions of hits at once (Python lists: ~70 bytes a term)
    assert all(nb.terms[0].dtype == np.int32 and nb.terms[1].dtype == np.float32 for row in hits for nb in row)
    assert all("text" not in nb.payload for row in hits for nb in row), "texts stay in the memory"
    stored = Retrieval.from_neighbours(hits)
    texts = {p.article_id: p.payload["text"] for p in mem.get(sorted({nb.article_id for row in hits for nb in row}))}
    from_text = Retrieval(stored.ids, stored.sims, stored.labels, stored.titles,
                          [[texts.get(str(i), "") for i in row] for row in stored.ids])  # no stored terms
    a = fuse(stored, queries, 0.5, 20, TermVectors())
    b = fuse(from_text, queries, 0.5, 20, TermVectors())
    assert (a.ids == b.ids).all()
    np.testing.assert_allclose(a.sims, b.sims, atol=1e-5)
    assert a.terms is not None and b.terms is None
    mem.close()
