"""Calibrations cached by what they depend on, so an unchanged memory is not calibrated again.

A calibration (:func:`newsmon.training_jobs.calibrate_memory.calibrate_memory`) is a function of: the language memory's
labelled articles (ids, labels, texts), the model version (encoder, runtime, adapter), the validation articles of
the language, the settings it reads (``calibration``, ``memory.min_language_articles``, ``labels``) and the code
(the package version, the source of ``shared/scoring`` and of the calibration job). :func:`calibration_inputs` is
the SHA-256 of all of them; the record carries it (``CalibrationRecord.inputs``).

Before calibrating a language, the job looks for a calibration of the same inputs: the language's current record
(and its stored models), else an entry of the home's cache, ``<home>/calibrations/<inputs>.json`` (the record and
its ablation steps) and ``<inputs>.tar`` (its models, as :mod:`newsmon.shared.scoring.stored` packs them); the
cache keeps the newest :data:`KEEP` entries. The demo rebuilds its memory from the same articles on every run,
and ``memory build --calibrate`` on the same corpus fills another memory with the same articles: both find the
entry and only copy it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import structlog

from newsmon.shared.classifier import Classifier
from newsmon.shared.data import Article
from newsmon.shared.memory import SearchFilter
from newsmon.shared.scoring.records import CalibrationRecord, record_id
from newsmon.shared.scoring.stored import pack, unpack

log = structlog.get_logger(__name__)

#: Entries the home's calibration cache keeps (the newest; older ones are removed when one is added).
KEEP = 16


@lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the package version and of the source of the scoring package (``shared/scoring``, every
    ``.py`` file by relative path) and of the calibration job's modules: any change to the code that scores
    or calibrates gives another digest."""
    import newsmon.shared.scoring as scoring

    try:
        h = hashlib.sha256(version("newsmon").encode())
    except PackageNotFoundError:  # a source tree that is not installed
        h = hashlib.sha256(b"unknown")
    root = Path(scoring.__file__).parent
    files = [(f"scoring/{p.relative_to(root)}", p) for p in sorted(root.rglob("*.py"))]
    here = Path(__file__).parent
    files += [(p.name, p) for p in (here / "calibrate_memory.py", here / "calibration_cache.py")]
    for name, path in files:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def memory_digest(clf: Classifier, lang: str) -> str:
    """SHA-256 of ``lang``'s labelled memory articles: id, sorted labels and text of each, by id (one scroll of
    the payloads, no vectors: they follow from the texts and the model version)."""
    rows = sorted((p.article_id, sorted(p.labels), str(p.payload.get("text") or ""))
                  for p in clf.memory(lang).scroll(SearchFilter(labelled=True)))
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def calibration_inputs(clf: Classifier, lang: str, validation: Sequence[Article]) -> str:
    """The SHA-256 of everything ``lang``'s calibration depends on (see the module docstring)."""
    s = clf.settings
    calibration = s.calibration.model_dump(mode="json")
    if getattr(clf.encoder, "adapter", None) is None:  # read for adapted models only: production's stays reusable
        calibration.pop("adapted_memory_articles", None)
    parts = {"memory": memory_digest(clf, lang), "model_version": clf.model_version,
             "validation": sorted((a.id, a.text, sorted(a.labels)) for a in validation),
             "settings": {"calibration": calibration, "labels": s.labels.model_dump(
                 mode="json"), "min_language_articles": s.memory.min_language_articles},
             "code": code_digest()}
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def current(clf: Classifier, lang: str, inputs: str) -> CalibrationRecord | None:
    """The language's stored record when it was made from ``inputs`` and its models are there, else None."""
    try:
        record = clf.calibrations.read(clf.collection(lang))
        if record is None or record.inputs != inputs:
            return None
        if record.models is not None and clf.model_store.read(record_id(record), record.models) is None:
            return None
    except ValueError:  # a record or models that do not parse: calibrate again
        return None
    return record


def steps(clf: Classifier, inputs: str) -> list[dict]:
    """The ablation steps the home cache keeps for ``inputs`` (empty when it has none)."""
    try:
        return list(json.loads((_folder(clf) / f"{inputs}.json").read_text(encoding="utf-8")).get("steps") or [])
    except (OSError, ValueError):
        return []


def _folder(clf: Classifier) -> Path:
    return Path(clf.settings.home).expanduser() / "calibrations"


def restore(clf: Classifier, lang: str, inputs: str) -> tuple[CalibrationRecord, list[dict]] | None:
    """Install the home cache's calibration of ``inputs`` as ``lang``'s record (its models stored beside it, as
    a fresh calibration's are); returns (record, ablation steps), or None when the cache has none (or a broken
    one)."""
    folder = _folder(clf)
    entry, archive = folder / f"{inputs}.json", folder / f"{inputs}.tar"
    if not entry.exists():
        return None
    try:
        saved = json.loads(entry.read_text(encoding="utf-8"))
        record = CalibrationRecord.model_validate(saved["record"])
        record = record.model_copy(update={"collection": clf.collection(lang)})
        if record.models is not None:
            if not archive.exists():
                return None
            cache = unpack(archive.read_bytes())
            cache.record = record_id(record)
            record.models = clf.model_store.write(cache)
    except (OSError, ValueError, KeyError) as exc:
        log.warning("calibration cache entry unreadable: calibrating again", entry=str(entry), error=str(exc))
        return None
    clf.calibrations.write(record)
    os.utime(entry)  # recently used: kept longest
    return record, list(saved.get("steps") or [])


def save(clf: Classifier, record: CalibrationRecord, steps: list[dict]) -> None:
    """Add ``record`` (with its ``inputs``), its ablation ``steps`` and its stored models to the home cache,
    then remove all but the newest :data:`KEEP` entries. A failure to write is logged, never raised."""
    if record.inputs is None:
        return
    folder = _folder(clf)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if record.models is not None:
            cache = clf.model_store.read(record_id(record), record.models)
            if cache is None:
                return
            _write(folder / f"{record.inputs}.tar", pack(cache))
        _write(folder / f"{record.inputs}.json", json.dumps(
            {"record": record.model_dump(mode="json"), "steps": steps}, ensure_ascii=False,
            default=lambda o: o.item() if hasattr(o, "item") else str(o)).encode())
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
            old.with_suffix(".tar").unlink(missing_ok=True)
    except (OSError, ValueError) as exc:
        log.warning("calibration not cached", folder=str(folder), error=str(exc))


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
