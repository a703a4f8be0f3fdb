"""A lazy encoder (``Encoder(..., lazy=True)``, what ``eval`` opens): texts in the embedding cache are answered
without loading the model, its tokenizer, transformers or torch; the first text that is not loads them and gets
the vector an eager encoder gives."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from newsmon.shared.config import EncoderSettings
from newsmon.shared.encoder import Encoder, model_shape, resolve_model

pytestmark = pytest.mark.slow

_CHILD = r"""
import json, sys
import numpy as np
from newsmon.shared.config import EncoderSettings
from newsmon.shared.encoder import Encoder
home, texts = sys.argv[1], json.loads(sys.argv[2])
enc = Encoder(EncoderSettings(), home, lazy=True)
cached = enc.encode(texts[:2], role="query")
loaded_before = [m for m in ("transformers", "torch", "onnxruntime") if m in sys.modules]
held = enc._backend is not None or enc._tokenizer is not None
fresh = enc.encode(texts[2:], role="query")
print(json.dumps({"loaded": loaded_before, "held": held, "after": enc._backend is not None,
                  "cached": cached.tolist(), "fresh": fresh.tolist(), "dim": enc.dim, "max_length": enc.max_length,
                  "model_id": enc.model_id}))
"""


def test_a_lazy_encoder_answers_cached_texts_without_the_model(tmp_path, newsmon_home):
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(newsmon_home / "models")  # the weights and the ONNX artefact, a cache of its own
    eager = Encoder(EncoderSettings(), home)
    texts = ["Vlada je sprejela nov proračun.", "Stavka delavcev se nadaljuje.",
             "Občina bo zgradila novo šolo.", "Tekma se je končala neodločeno."]
    try:
        want = eager.encode(texts[:2], role="query")  # into the cache
        cache_off = Encoder(EncoderSettings(cache=False), home)
        want_fresh = cache_off.encode(texts[2:], role="query")
    finally:
        eager.close()
    out = subprocess.run([sys.executable, "-c", _CHILD, str(home), json.dumps(texts)], capture_output=True,
                         text=True, check=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [] and not got["held"]  # the cached texts needed neither the model nor torch
    assert np.array_equal(np.asarray(got["cached"], dtype=np.float32), want)
    assert got["after"] and np.allclose(np.asarray(got["fresh"], dtype=np.float32), want_fresh, atol=1e-6)
    assert (got["dim"], got["max_length"], got["model_id"]) == (eager.dim, eager.max_length, eager.model_id)


def test_model_shape_reads_the_config_as_transformers_does(newsmon_home):
    from transformers import AutoConfig

    path = resolve_model(EncoderSettings().model, newsmon_home)
    config = AutoConfig.from_pretrained(path)
    assert model_shape(path) == (config.model_type, config.max_position_embeddings, config.hidden_size)
