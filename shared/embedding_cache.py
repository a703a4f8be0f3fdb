"""The on-disk embedding cache of :class:`newsmon.shared.encoder.Encoder` (SQLite, keyed by the embedding space and
a hash of the text), so a second evaluation does not re-embed."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np


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
        """``(n, dim)`` float32 vectors of ``keys``, NaN rows for misses. A key given more than once (the same
        text twice in a corpus: reuters21578_en has 121 such articles) gets its vector at every position: it was
        filled at its last only, so every eval embedded those articles again and loaded the encoder for them."""
        out = np.full((len(keys), dim), np.nan, dtype=np.float32)
        pos: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            pos.setdefault(k, []).append(i)
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
                                  for k, v in zip(keys, vectors, strict=False)])
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()
