"""Calibration records: the scoring parameters chosen for one language memory and one model version, stored
next to the memory, and read by the workers, ``suggest`` and ``eval``.

A record (:class:`CalibrationRecord`) says which parameters were chosen (a
:class:`~newsmon.schemas.scoring.ScoringParams`, the type of the settings' ``scoring`` too), the figures behind the
choice (micro-F1, subset accuracy and the
objective with a bootstrap interval), what they were fitted on (memory articles scored leave-one-out, validation
articles) and when. Records live in one small collection of the knowledge memory itself, ``<prefix>_calibration``
(server mode: one point per language collection, a 1-d vector and the record as payload), so every replica reads
the same record from the Qdrant server; in embedded mode it is a JSON file beside the memory's collections.

Precedence (:func:`effective_scoring`): a setting given explicitly (``NEWSMON_SCORING__*`` or a CLI option) beats
the calibration record, which beats the defaults.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from functools import cached_property
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from newsmon.schemas.scoring import ScoringParams, legacy_params
from newsmon.shared.scoring.rules import get_rule, rules
from newsmon.shared.config import Settings
from newsmon.shared.memory.engines import open_records

#: Record layout version (bump when a field changes meaning): 2 stores the components and rules as lists
#: (version 1's flat rule fields are read into them).
RECORD_VERSION = 2


#: How to recover from a record that does not parse (said by the error, /readyz and the CLI).
RECOVER = ("run `newsmon tune` (or `newsmon memory build --data PATH --calibrate --recalibrate`) to write it again, "
           "or restore the file from a copy")


class CalibrationUnreadable(ValueError):
    """A stored calibration record that does not parse (a truncated file, say): a state of the deployment, fixed
    by writing the record again, not a fault of the article being scored. The workers pause on it, ``/readyz``
    names it, the API answers 503.

    Attributes:
        collection: the language collection; path: the file (embedded) or the point (server) holding it;
        recover: what to run (:data:`RECOVER`).
    """

    def __init__(self, collection: str, path: str, reason: str) -> None:
        self.collection, self.path, self.recover = collection, path, RECOVER
        super().__init__(f"the calibration record of {collection} at {path} does not parse ({reason[:300]}): "
                         f"{RECOVER}")


class CalibrationRecord(BaseModel):
    """The scoring parameters of one language memory of one model version, and the evidence behind them.

    Attributes:
        collection: the language collection it calibrates (``<prefix>_<lang>_<model version>``).
        language: ISO 639-1 code; model_version: the encoder's model id.
        params: the chosen :class:`ScoringParams` fields (k, tau, thresholds, components and decision rules).
        objective: what the search maximised (e.g. ``"micro_f1 + subset_accuracy"``).
        figures: the chosen parameters' figures on the calibration articles (fractions in [0, 1]):
            ``micro_f1``, ``subset_accuracy``, ``objective``, its bootstrap 90 % interval ``objective_lo`` /
            ``objective_hi``, and ``n`` articles.
        fit_on: what it was fitted on (``memory_articles`` scored leave-one-out, ``validation_articles``,
            ``corpus``), never the test split.
        written_by: ``tune``, ``memory build``, ``nightly`` or ``demo``; created_at: UTC time, in records written
            before records were made reproducible (None since: the same inputs give the same record, byte for byte;
            when a record was written is its file's or point's own time).
        models: the sha256 of the per-record models stored with it (:mod:`newsmon.shared.scoring.stored`: the score
            components' models it judged and the memory's label counts); None in records written before them (the
            workers then fit the models from the memory).
        labels: the labels of the memory it was fitted on, sorted; a decision rule for new labels serves every
            other label (confirmed since). None in records written before this field: such a rule is then off.
        selection: the selection report: per lever tried, in order, ``step``, ``kept``, ``why`` and its ``lift``
            (figure -> [lift, low, high] on the calibration articles:
            :mod:`newsmon.shared.scoring.calibration.selection`); None in records written before it.
        inputs: the SHA-256 of everything the calibration depended on (memory articles, model version, validation
            articles, settings, code: :mod:`newsmon.training_jobs.calibration_cache`); a calibration of the same
            inputs is reused instead of repeated. None in records written before this field.
    """

    version: int = RECORD_VERSION
    collection: str
    language: str
    model_version: str
    params: dict[str, Any]
    objective: str
    figures: dict[str, float] = Field(default_factory=dict)
    fit_on: dict[str, Any] = Field(default_factory=dict)
    written_by: str = "tune"
    created_at: datetime | None = None
    labels: list[str] | None = None
    models: str | None = None
    inputs: str | None = None
    selection: list[dict[str, Any]] | None = None

    @cached_property
    def known_labels(self) -> frozenset[str] | None:
        """:attr:`labels` as a set (computed once per record read), None when the record does not list them."""
        return frozenset(self.labels) if self.labels is not None else None

    def scoring(self) -> ScoringParams:
        """The record's parameters (a version-1 record's flat rule fields read as rules and components).

        Raises:
            pydantic.ValidationError: a parameter out of its range, or a rule or component that is not registered.
        """
        params = legacy_params(self.params)  # flat rule fields (layout 1) as rules and components; lists kept
        return ScoringParams(**{k: v for k, v in params.items() if k in ScoringParams.model_fields})


def effective_scoring(settings: Settings, record: CalibrationRecord | None) -> tuple[ScoringParams, str]:
    """The parameters that run: the record's, with every field set explicitly in ``settings.scoring`` (environment,
    ``.env`` or a CLI override) taking precedence (an explicit ``threshold`` also replaces the record's
    ``bucket_thresholds``, and an explicit ``threshold`` or ``bucket_thresholds`` its ``label_thresholds`` and a
    rule of it that decides in place of the thresholds (``REPLACES_THRESHOLDS``), which gives way to the rule that
    applies them (``APPLIES_THRESHOLDS``)).
    Returns (parameters, where they came from: ``"defaults"``, ``"settings"``, ``"calibration"`` or
    ``"calibration+settings"``)."""
    explicit = {k: getattr(settings.scoring, k) for k in settings.scoring.model_fields_set}
    if record is None:
        return settings.scoring, "settings" if explicit else "defaults"
    base = record.scoring()
    if "threshold" in explicit and "bucket_thresholds" not in explicit:
        explicit["bucket_thresholds"] = None  # an explicit threshold replaces the record's per-bucket ones too
    if {"threshold", "bucket_thresholds"} & set(explicit):
        explicit.setdefault("label_thresholds", None)  # ... and its per-label ones
        replacing = {r.name for r in base.rules if get_rule(r.name).REPLACES_THRESHOLDS}
        if "rules" not in explicit and replacing:
            applying = [r.name for r in rules() if r.APPLIES_THRESHOLDS]
            explicit["rules"] = [{"name": n} for n in applying] + [
                r for r in base.rules if r.name not in replacing | set(applying)]
    merged = ScoringParams(**{**base.model_dump(), **{k: v for k, v in explicit.items()}})
    return merged, "calibration+settings" if explicit else "calibration"


def record_id(record: CalibrationRecord) -> str:
    """A short id of a record for proposals, logs and its stored models: ``<collection>@<12 hex digits>``, the
    SHA-256 of what it says (every field but its models' digest, which is named after the id, and the time of an
    old record): the same calibration gives the same id on every run."""
    said = record.model_dump(mode="json", exclude={"models", "created_at"})
    digest = hashlib.sha256(json.dumps(said, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return f"{record.collection}@{digest[:12]}"


class CalibrationStore:
    """Calibration records of one deployment's knowledge memory.

    Embedded mode: one JSON file per language collection in ``<memory path>/calibration/`` (written atomically;
    readable while the workers hold the memory's lock). Server mode: one point per language collection in the
    collection ``<prefix>_calibration`` of the Qdrant server (a 1-d vector, the record as payload), so every
    replica reads the same record.

    Args:
        settings: memory settings (embedded path or Qdrant URL) and the collection prefix.
        client: a ``QdrantClient`` to use in server mode (the router's; not closed here), else one is opened.
        ttl_s: how long a read record is reused before it is read again (seconds): a worker sees a record
            written by ``newsmon tune`` within ``ttl_s`` without a read per batch.

    Raises:
        MemoryUnavailableError: the Qdrant server is unreachable (transient).
    """

    def __init__(self, settings: Settings, client: Any = None, ttl_s: float = 30.0) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, CalibrationRecord | None]] = {}
        self.directory = settings.memory_path / "calibration"
        self._mem = open_records(settings, f"{settings.memory.collection_prefix}_calibration", client)

    def write(self, record: CalibrationRecord) -> None:
        """Store ``record`` under its collection name (replacing the previous one)."""
        text = record.model_dump_json(indent=2, exclude={"created_at"} if record.created_at is None else None)
        with self._lock:
            if self._mem is not None:
                self._mem.upsert([record.collection], np.ones((1, 1), dtype=np.float32), [[]], [{"record": text}])
            else:
                self.directory.mkdir(parents=True, exist_ok=True)
                tmp = self.directory / f".{record.collection}.json.tmp"
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, self.directory / f"{record.collection}.json")
            self._cache[record.collection] = (time.monotonic(), record)

    def remove(self, collection: str) -> None:
        """Delete the record of ``collection``, if any: its scorer falls back to the settings' parameters."""
        with self._lock:
            if self._mem is not None:
                self._mem.delete([collection])
            else:
                (self.directory / f"{collection}.json").unlink(missing_ok=True)
            self._cache.pop(collection, None)

    def read(self, collection: str) -> CalibrationRecord | None:
        """The record of ``collection`` (None when it was never calibrated); reused for ``ttl_s`` seconds.

        Raises:
            CalibrationUnreadable: a stored record that does not parse (names the file or collection, and how to
                recover); nothing is cached, so the next read sees the record once it is fixed.
        """
        with self._lock:
            hit = self._cache.get(collection)
            if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
                return hit[1]
            text = self._read_text(collection)
            try:
                rec = CalibrationRecord.model_validate_json(text) if text is not None else None
            except ValueError as exc:
                reason = str(exc).splitlines()
                raise CalibrationUnreadable(collection, self.where(collection),
                                            " ".join(reason[:3]) if reason else type(exc).__name__) from None
            self._cache[collection] = (time.monotonic(), rec)
            return rec

    def where(self, collection: str) -> str:
        """Where the record of ``collection`` is stored: its file, or its point in the server's collection."""
        if self._mem is not None:
            return f"point {collection!r} of the calibration collection ({getattr(self._mem, 'collection', '?')})"
        return str(self.directory / f"{collection}.json")

    def _read_text(self, collection: str) -> str | None:
        if self._mem is not None:
            point = self._mem.get([collection])[0]
            return point.payload.get("record") if point is not None else None
        path = self.directory / f"{collection}.json"
        return path.read_text(encoding="utf-8") if path.exists() else None

    def close(self) -> None:
        """Close the server collection (nothing to close in embedded mode)."""
        if self._mem is not None:
            self._mem.close()


class ScratchCalibrations(CalibrationStore):
    """A calibration store that reads through to ``serving`` and keeps every write and removal to itself, in memory:
    what a job calibrates here is never seen by the workers reading ``serving`` (the gate judging production
    recalibrates it beside the candidate without changing what production serves, not even for a moment).

    A record written here hides the serving one of its collection; a removal hides it too (``read`` gives None);
    ``serving`` is never written, removed from nor closed here.

    Args:
        serving: the store the workers read (its records are the starting point).
    """

    def __init__(self, serving: CalibrationStore) -> None:  # noqa: D107 - every method that reads a file is its own
        self.ttl_s, self.directory = serving.ttl_s, serving.directory
        self._lock = threading.Lock()
        self._serving = serving
        self._own: dict[str, CalibrationRecord | None] = {}

    def write(self, record: CalibrationRecord) -> None:
        """Keep ``record`` here for its collection (``serving`` is not written)."""
        with self._lock:
            self._own[record.collection] = record

    def remove(self, collection: str) -> None:
        """Hide the record of ``collection``: ``read`` gives None (``serving`` keeps its record)."""
        with self._lock:
            self._own[collection] = None

    def read(self, collection: str) -> CalibrationRecord | None:
        """The record written here for ``collection``, else the serving store's (its errors, unchanged)."""
        with self._lock:
            if collection in self._own:
                return self._own[collection]
        return self._serving.read(collection)

    def where(self, collection: str) -> str:
        """Where ``read`` finds the record of ``collection``."""
        return "this job's scratch store (not served)" if collection in self._own else self._serving.where(collection)

    def close(self) -> None:
        """Nothing to close: ``serving`` is its owner's."""
