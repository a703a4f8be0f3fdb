"""The encoder's runtimes (torch and ONNX Runtime int8): the same vectors up to quantisation on real articles, the
setting honoured, distinct model versions, and the ONNX artefact built when it is missing or stale."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from newsmon.shared.config import BUNDLED_E5_SMALL, EncoderSettings, Settings
from newsmon.shared.encoder import Encoder, TorchBackend, encoder_identity, length_buckets, resolve_model, \
    resolve_runtime
from newsmon.shared.encoder_onnx import OnnxBackend, artefact_dirs, ensure_artefact, weights_key

pytestmark = pytest.mark.slow


def _articles(shared_data, n=12):
    rows = [json.loads(x) for x in (shared_data / "sentinews_sl" / "articles.jsonl").read_text().splitlines()[:n]]
    return [r["title"] + "\n" + r["text"] for r in rows]


@pytest.fixture(scope="module")
def torch_encoder(newsmon_home):
    enc = Encoder(EncoderSettings(runtime="torch", cache=False), newsmon_home)
    yield enc
    enc.close()


@pytest.fixture(scope="module")
def int8_encoder(newsmon_home):
    enc = Encoder(EncoderSettings(runtime="onnx-int8", cache=False), newsmon_home)
    yield enc
    enc.close()


def test_runtimes_agree_on_real_articles(torch_encoder, int8_encoder, shared_data):
    texts = _articles(shared_data)  # full Slovene articles, most of them cut at 512 tokens
    ref = torch_encoder.encode(texts, role="query")
    got = int8_encoder.encode(texts, role="query")
    assert got.shape == ref.shape == (len(texts), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = (got * ref).sum(axis=1)
    assert cos.min() >= 0.99, cos
    # the nearest article of each article is itself, and the ranking of the others is nearly the same
    sims_ref, sims_got = ref @ ref.T, got @ got.T
    assert (sims_got.argmax(axis=1) == np.arange(len(texts))).all()
    assert np.abs(sims_ref - sims_got).max() < 0.02


def test_an_int8_vector_depends_on_its_text_alone(int8_encoder, shared_data):
    """Dynamic int8 quantisation sets the activations' range per input tensor: run as one batch, a text's vector
    moved with its batch mates and their padding (cosine 0.997), so the same article got other neighbours in the
    stream's micro-batches, in eval and from the cache. Each text now runs alone."""
    texts = _articles(shared_data, 16)
    short = [t[:200] for t in texts[:4]]  # padded to a long text's length in a batch
    together = int8_encoder.encode([*texts, *short], role="query")
    alone = np.stack([int8_encoder.encode([t], role="query")[0] for t in [*texts[:3], *short[:2]]])
    assert np.array_equal(together[[0, 1, 2, 16, 17]], alone)
    reordered = int8_encoder.encode([short[1], texts[2], *texts[5:9]], role="query")
    assert np.array_equal(reordered[:2], alone[[4, 2]])


def test_the_runtime_setting_is_honoured(torch_encoder, int8_encoder, monkeypatch, newsmon_home):
    assert isinstance(torch_encoder.backend, TorchBackend) and torch_encoder.runtime == "torch"
    assert isinstance(int8_encoder.backend, OnnxBackend) and int8_encoder.runtime == "onnx-int8"
    assert int8_encoder.backend.path.name == "onnx-int8.onnx"
    # auto: torch on CUDA, onnx-int8 on a CPU
    assert resolve_runtime(EncoderSettings(device="cpu")) == "onnx-int8"
    assert resolve_runtime(EncoderSettings(device="cuda:1")) == "torch"
    assert resolve_runtime(EncoderSettings(device="cpu", runtime="torch")) == "torch"
    assert resolve_runtime(EncoderSettings(device="cuda", runtime="onnx-fp32")) == "onnx-fp32"
    monkeypatch.setenv("NEWSMON_ENCODER__RUNTIME", "torch")
    monkeypatch.setenv("NEWSMON_ENCODER__THREADS", "2")
    s = Settings()
    assert s.encoder.runtime == "torch" and s.encoder.threads == 2
    monkeypatch.setenv("NEWSMON_ENCODER__RUNTIME", "tensorrt")
    with pytest.raises(ValueError):
        Settings()


def test_model_versions_and_cache_keys_differ(torch_encoder, int8_encoder, newsmon_home):
    path = resolve_model(BUNDLED_E5_SMALL, newsmon_home)
    assert int8_encoder.model_id == f"{torch_encoder.model_id}+onnx-int8-v1"
    assert torch_encoder.space("query") != int8_encoder.space("query")
    # the version without loading the weights (workers, the nightly job) is the loaded encoder's
    assert encoder_identity(path, EncoderSettings(runtime="torch")) == torch_encoder.model_id
    assert encoder_identity(path, EncoderSettings(runtime="onnx-int8")) == int8_encoder.model_id
    from newsmon.shared.classifier import model_identity
    from newsmon.shared.memory import collection_name

    s = Settings(home=newsmon_home)
    s.encoder.runtime = "onnx-int8"
    assert model_identity(s) == (int8_encoder.model_id, 384)
    assert collection_name("newsmon", "sl", int8_encoder.model_id) != \
        collection_name("newsmon", "sl", torch_encoder.model_id)


def test_the_artefact_is_built_when_missing_and_rebuilt_when_stale(tmp_path, newsmon_home, shared_data,
                                                                   int8_encoder, monkeypatch):
    path = resolve_model(BUNDLED_E5_SMALL, newsmon_home)
    home = tmp_path / "home"
    where = artefact_dirs(path, home)[-1]
    assert not where.exists()
    enc = Encoder(EncoderSettings(runtime="onnx-int8", cache=False, model=path), home)  # builds it (real export)
    manifest = json.loads((where / "onnx-int8.json").read_text())
    assert enc.backend.path == where / "onnx-int8.onnx" and manifest["source"] == weights_key(path)
    texts = _articles(shared_data, 4)
    assert ((enc.encode(texts) * int8_encoder.encode(texts)).sum(axis=1) > 0.999).all()  # the same recipe
    # missing again (deleted) or stale (built from other weights): built anew
    import newsmon.shared.encoder_onnx as onnx_mod

    built = []

    def fake_build(model_path, runtime, key, out_dir):
        built.append(key)
        (out_dir / f"{runtime}.onnx").write_bytes(b"")
        (out_dir / f"{runtime}.json").write_text(json.dumps({"source": key, "format": "onnx-int8-v1"}))
        return out_dir / f"{runtime}.onnx"

    monkeypatch.setattr(onnx_mod, "build_artefact", fake_build)
    assert ensure_artefact(path, "onnx-int8", home) == where / "onnx-int8.onnx" and built == []  # valid: kept
    (where / "onnx-int8.onnx").unlink()
    ensure_artefact(path, "onnx-int8", home)
    (where / "onnx-int8.json").write_text(json.dumps({**manifest, "source": "other-weights@0"}))
    ensure_artefact(path, "onnx-int8", home)
    assert built == [weights_key(path)] * 2


def test_read_only_folders_without_an_artefact_say_what_to_do(tmp_path, newsmon_home, monkeypatch):
    import newsmon.shared.encoder_onnx as onnx_mod

    path = resolve_model(BUNDLED_E5_SMALL, newsmon_home)
    monkeypatch.setattr(onnx_mod, "_writable", lambda d: False)  # a read-only root file system (tests run as root)
    with pytest.raises(PermissionError, match="build-onnx"):
        ensure_artefact(path, "onnx-int8", tmp_path / "home")


def test_build_onnx_command_reports_the_artefact(int8_encoder, newsmon_home, monkeypatch):
    from newsmon.cli import app

    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    r = CliRunner().invoke(app, ["model", "build-onnx"])
    assert r.exit_code == 0, r.output
    out = r.output.replace("\n", "")  # rich wraps long paths
    assert str(int8_encoder.backend.path) in out and "MB" in out
    r = CliRunner().invoke(app, ["model", "build-onnx", "--runtime", "onnx-int4"])
    assert r.exit_code == 2 and "onnx-int8" in r.output


def test_length_buckets():
    lengths = [512, 40, 500, 60, 512, 300, 390]
    got = length_buckets(lengths, batch_size=2)
    assert sorted(i for b in got for i in b) == list(range(len(lengths)))
    assert got == [[0, 4], [2, 6], [5], [3], [1]]
    assert all(len(b) <= 2 for b in got)
    # within a pass, no text is shorter than 0.75 x its longest
    assert all(min(lengths[i] for i in b) >= 0.75 * max(lengths[i] for i in b) for b in got)
    assert length_buckets(lengths, batch_size=16, ratio=0.0) == [[0, 4, 2, 6, 5, 3, 1]]


def test_windows_hand_computed():
    """An article longer than the room is cut into the first ``room`` tokens (what truncation keeps), then the prefix
    and the next tokens, up to ``max_chunks`` windows."""
    from newsmon.shared.long_text import windows

    ids = [7, 8, 1, 2, 3, 4, 5, 6, 9]  # 7, 8: the prefix's tokens
    assert windows(ids, [7, 8], 5, 3) == [[7, 8, 1, 2, 3], [7, 8, 4, 5, 6], [7, 8, 9]]
    assert windows(ids, [7, 8], 5, 2) == [[7, 8, 1, 2, 3], [7, 8, 4, 5, 6]]
    assert windows(ids[:5], [7, 8], 5, 3) == [[7, 8, 1, 2, 3]]  # within the room: one window, as truncation
    with pytest.raises(ValueError, match="no room for text after the prefix"):
        windows(ids, [7, 8], 2, 3)


def test_long_articles_in_windows(int8_encoder, newsmon_home, shared_data):
    """With ``max_chunks`` > 1 an article longer than 512 tokens is embedded in windows and its vector is their
    token-weighted mean (it moves: the rest of the article counts); an article within 512 tokens keeps its vector
    exactly; the model version says so (+chunks4), so the memories and cached vectors of the two never mix."""
    texts = _articles(shared_data, 12)
    tokens = [len(int8_encoder.tokenizer("query: " + t)["input_ids"]) for t in texts]
    long_, short = [t for t, n in zip(texts, tokens) if n > 600], [t for t, n in zip(texts, tokens) if n < 500]
    assert long_ and short, tokens
    chunked = Encoder(EncoderSettings(runtime="onnx-int8", cache=False, max_chunks=4), newsmon_home)
    try:
        assert chunked.model_id == int8_encoder.model_id + "+chunks4"
        assert encoder_identity(resolve_model(BUNDLED_E5_SMALL, newsmon_home),
                                EncoderSettings(runtime="onnx-int8", max_chunks=4)) == chunked.model_id
        assert chunked.space("query") != int8_encoder.space("query")
        same = (chunked.encode(short, "query") * int8_encoder.encode(short, "query")).sum(axis=1)
        assert np.allclose(same, 1.0, atol=1e-6), same
        got = chunked.encode(long_, "query")
        moved = (got * int8_encoder.encode(long_, "query")).sum(axis=1)
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        assert (moved < 0.9999).all() and (moved > 0.9).all(), moved
        # the mean of the windows' own vectors, weighted by their tokens
        from newsmon.shared.long_text import special_tokens, windows

        head, tail = special_tokens(chunked.tokenizer)
        ids = chunked.tokenizer("query: " + long_[0], add_special_tokens=False, verbose=False)["input_ids"]
        parts = windows(ids, chunked.tokenizer("query: ", add_special_tokens=False)["input_ids"], 510, 4)
        vecs = np.stack([int8_encoder.backend.embed(np.asarray([head + w + tail]), np.ones((1, len(w) + 2),
                                                                                         dtype=np.int64))[0]
                         for w in parts])
        mean = (vecs * np.asarray([len(w) for w in parts])[:, None]).sum(axis=0)
        assert float(got[0] @ (mean / np.linalg.norm(mean))) > 0.99999
    finally:
        chunked.close()
