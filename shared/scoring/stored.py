"""The per-record models, stored: the calibration job writes the score components' models it judged (and the
memory's label counts) beside each calibration record, and the workers load them instead of fitting them from the
memory (nothing proportional to the memory at worker start or on the request path, and the model that runs is the
one that was measured). The same models pack to the same bytes (:func:`pack`).

One archive per record (a tar of ``manifest.json``, ``label_counts.json`` and one folder per model, as each
component's ``save`` writes it). Embedded mode: ``<memory path>/calibration/models/<record id>.tar``, written
atomically. Server mode: the archive in chunks of points of the collection ``<prefix>_models`` of the Qdrant server
(ids ``<record id>/<i>``, a 1-d vector, the chunk base64 in the payload) after its manifest point
``<record id>``, so every replica reads the same models.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from newsmon.shared.config import Settings
from newsmon.shared.memory.engines import open_records
from newsmon.shared.scoring.components import get_component
from newsmon.shared.scoring.models import ModelCache

#: Archive layout version.
FORMAT = 1
#: Bytes of the archive per point in server mode (before base64).
CHUNK = 4 * 1024 * 1024


def pack(cache: ModelCache) -> bytes:
    """The models and label counts of ``cache`` as one tar archive."""
    with tempfile.TemporaryDirectory(prefix="newsmon-models-") as tmp:
        root = Path(tmp)
        entries = []
        for i, ((name, key), model) in enumerate(sorted(cache.models.items(), key=lambda kv: repr(kv[0]))):
            folder = root / f"m{i}"
            folder.mkdir()
            get_component(name).save(model, folder)
            entries.append({"component": name, "key": list(key), "folder": folder.name})
        (root / "manifest.json").write_text(json.dumps({"format": FORMAT, "record": cache.record,
                                                        "models": entries}), encoding="utf-8")
        (root / "label_counts.json").write_text(json.dumps(cache.counts, sort_keys=True), encoding="utf-8")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(root.rglob("*")):
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False, filter=_timeless)
        return buf.getvalue()


def _timeless(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """An archive entry without what the moment and the machine add (time, owner, permission bits): the same models
    pack to the same bytes, so a calibration repeated on the same inputs names the same archive."""
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    info.mode = 0o755 if info.isdir() else 0o644
    info.pax_headers = {}
    return info


def unpack(data: bytes) -> ModelCache:
    """The :class:`ModelCache` an archive of :func:`pack` holds.

    Raises:
        ValueError: an archive of another layout version, or one that does not unpack.
    """
    with tempfile.TemporaryDirectory(prefix="newsmon-models-") as tmp:
        root = Path(tmp)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(root, filter="data")
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"stored models of layout {manifest.get('format')}; this version reads {FORMAT}")
        cache = ModelCache(manifest["record"])
        for entry in manifest["models"]:
            cache.models[(entry["component"], tuple(entry["key"]))] = get_component(entry["component"]).load(
                root / entry["folder"])
        cache.counts = json.loads((root / "label_counts.json").read_text(encoding="utf-8"))
        return cache


class ModelStore:
    """The stored models of one deployment's calibration records (see the module docstring).

    Args:
        settings: memory settings (embedded path or Qdrant URL) and the collection prefix.
        client: a ``QdrantClient`` to use in server mode (not closed here), else one is opened.
    """

    def __init__(self, settings: Settings, client: Any = None) -> None:
        self.directory = settings.memory_path / "calibration" / "models"
        self._mem = open_records(settings, f"{settings.memory.collection_prefix}_models", client)

    def write(self, cache: ModelCache) -> str:
        """Store ``cache`` under its record id; returns the archive's sha256 (the record names it)."""
        data = pack(cache)
        digest = hashlib.sha256(data).hexdigest()
        if self._mem is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = self.directory / f".{cache.record}.tar.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self.directory / f"{cache.record}.tar")
            return digest
        chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        ids = [f"{cache.record}/{i}" for i in range(len(chunks))]
        self._mem.upsert(ids, np.ones((len(ids), 1), dtype=np.float32), [[] for _ in ids],
                         [{"data": base64.b64encode(c).decode("ascii")} for c in chunks])
        self._mem.upsert([cache.record], np.ones((1, 1), dtype=np.float32), [[]],
                         [{"chunks": len(chunks), "sha256": digest}])
        return digest

    def read(self, record: str, sha256: str | None = None) -> ModelCache | None:
        """The models stored for ``record`` (None when there are none).

        Raises:
            ValueError: the archive is not the one the record names (``sha256``), or does not unpack.
        """
        data = self._read_bytes(record)
        if data is None:
            return None
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"the stored models of {record} are not the ones its calibration record names")
        return unpack(data)

    def _read_bytes(self, record: str) -> bytes | None:
        if self._mem is None:
            path = self.directory / f"{record}.tar"
            return path.read_bytes() if path.exists() else None
        head = self._mem.get([record])[0]
        if head is None:
            return None
        parts = self._mem.get([f"{record}/{i}" for i in range(int(head.payload["chunks"]))])
        if any(p is None for p in parts):
            raise ValueError(f"the stored models of {record} are incomplete")
        return b"".join(base64.b64decode(p.payload["data"]) for p in parts)

    def remove(self, record: str) -> bool:
        """Delete the models stored for ``record`` (a record no reader serves: a refused candidate's); True when
        there were some."""
        if self._mem is None:
            path = self.directory / f"{record}.tar"
            there = path.exists()
            path.unlink(missing_ok=True)
            return there
        head = self._mem.get([record])[0]
        if head is None:
            return False
        self._mem.delete([record] + [f"{record}/{i}" for i in range(int(head.payload["chunks"]))])
        return True

    def close(self) -> None:
        """Close the server collection (nothing to close in embedded mode)."""
        if self._mem is not None:
            self._mem.close()
