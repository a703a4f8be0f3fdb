"""A linear adapter after pooling: a model version that is an encoder plus a ``d x d`` matrix.

An adapter model is a directory holding ``adapter.npz`` (``W``: ``(d, d)`` float32, relative to the base
encoder; ``step``: the matrix relative to the model it was trained on) and ``newsmon_model.json`` with
``"kind": "adapter"``, ``base_model`` (the ``encoder.model`` spec or directory of the base encoder) and
``trained_on`` (the model version whose vectors it was trained on). The adapted embedding of a text is
``normalize(W e(x))`` where ``e`` is the base encoder's normalised embedding; since the normalisation is a
positive scaling, adapters compose by matrix product (``W = step @ W_parent``) and the stored vectors of the
version it was trained on become the new version's by ``normalize(v @ step.T)`` (no re-encoding).

The adapted model's version is the base encoder's id with ``+adapter-<hash8>`` (sha256 of ``W`` and the base
id), so memories of the two never mix; the embedding cache keeps the base encoder's vectors (keyed by the base
id) and the adapter is applied after it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from newsmon.shared.scoring.arrays import load_arrays

ADAPTER_FILE = "adapter.npz"
MANIFEST = "newsmon_model.json"


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` scaled to unit L2 norm (zero rows stay zero), float32."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def transform_vectors(step: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """``normalize(vectors @ step.T)``: stored ``(n, d)`` vectors of the version an adapter was trained on,
    mapped into the adapter's version."""
    return normalize_rows(np.asarray(vectors, dtype=np.float32) @ np.asarray(step, dtype=np.float32).T)


@dataclass
class Adapter:
    """A loaded adapter: ``W`` relative to ``base_model``, ``step`` relative to ``trained_on``."""

    path: Path
    base_model: str
    W: np.ndarray
    step: np.ndarray
    trained_on: str
    manifest: dict

    @property
    def hash8(self) -> str:
        """First 8 hex digits of sha256(W bytes, base model spec)."""
        h = hashlib.sha256(np.ascontiguousarray(self.W, dtype=np.float32).tobytes())
        h.update(self.base_model.encode())
        return h.hexdigest()[:8]

    @property
    def suffix(self) -> str:
        """``+adapter-<hash8>``: appended to the base encoder's model version."""
        return f"+adapter-{self.hash8}"

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """``normalize(vectors @ W.T)``: base-encoder vectors ``(n, d)`` to this version's."""
        return transform_vectors(self.W, vectors)


def read_adapter(path: str | Path) -> Adapter | None:
    """The adapter stored in model directory ``path``, or None when it is not an adapter model (any other
    directory or a hub id).

    Raises:
        ValueError: the manifest says adapter but the matrix is missing or not square.
    """
    p = Path(path)
    manifest_path = p / MANIFEST
    if not p.is_dir() or not manifest_path.exists():
        return None
    try:
        info = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return None
    if info.get("kind") != "adapter":
        return None
    if not (p / ADAPTER_FILE).exists():
        raise ValueError(f"{p}: adapter model without {ADAPTER_FILE}")
    z = load_arrays(p / ADAPTER_FILE)  # under the process's one .npz lock (numpy parses headers as Python ASTs)
    W, step = z["W"].astype(np.float32), z["step"].astype(np.float32)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or step.shape != W.shape:
        raise ValueError(f"{p}: adapter matrices must be square and of one shape, got {W.shape}, {step.shape}")
    return Adapter(p, str(info["base_model"]), W, step, str(info.get("trained_on", "")), info)


def write_adapter(out_dir: str | Path, step: np.ndarray, current_model: str, trained_on: str,
                  extra: dict | None = None) -> Adapter:
    """Write an adapter model trained on the vectors of ``current_model`` (version ``trained_on``).

    Args:
        out_dir: the new model directory (created; an existing one is overwritten).
        step: ``(d, d)`` matrix learnt on the current model's vectors (apply as ``x @ step.T``).
        current_model: the current ``encoder.model`` (spec or directory); when it is itself an adapter model,
            the new one composes with it (``W = step @ W_current``, same base encoder).
        trained_on: the current model version (the stored vectors ``step`` maps).
        extra: more manifest fields (training report, mining quality).

    Returns:
        the written :class:`Adapter`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parent = read_adapter(current_model)
    step = np.asarray(step, dtype=np.float32)
    W = step @ parent.W if parent is not None else step
    base = parent.base_model if parent is not None else current_model
    np.savez(out / ADAPTER_FILE, W=W, step=step)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    adapter = Adapter(out, base, W, step, trained_on, {})
    info = {"kind": "adapter", "model_id": f"adapter-{stamp}-{adapter.hash8}", "base_model": base,
            "trained_on": trained_on, "parent_model": current_model, "trained_at": stamp, "evaluation": {},
            **(extra or {})}
    (out / MANIFEST).write_text(json.dumps(info, indent=2, default=float))
    adapter.manifest = info
    return adapter
