"""Which encoder is in production: the promotion record written by the nightly job's rollout gate.

``<home>/models/promoted.json`` holds the promoted model's path and version, the calibration records the rollout
gate judged it with (``calibration``: language -> record id, :func:`promoted_calibration`) and the figures that
justified it. While ``encoder.follow_promoted`` is on (the default), encoders and workers use that model instead of
``encoder.model`` (and its collections' calibration records); workers check the record between batches and switch
without losing a message.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from newsmon.shared.config import EncoderSettings, Settings


def promoted_file(settings: Settings) -> Path:
    """``<home>/models/promoted.json``."""
    return Path(settings.home) / "models" / "promoted.json"


def read_promoted(settings: Settings) -> dict | None:
    """The promotion record, or None when no fine-tuned model was promoted (or it is unreadable)."""
    try:
        return json.loads(promoted_file(settings).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def promoted_calibration(record: dict | None) -> dict[str, str]:
    """The calibration records a promotion names: language -> record id
    (:func:`newsmon.shared.scoring.records.record_id`), the records the gate judged and the workers load with the
    promoted model (they are stored under the promoted version's collections). Empty without a promotion, and for a
    record written before the gate judged the calibrated scorer (it holds ``rae`` parameters, which nothing reads:
    the workers then load whatever record the promoted version's collections have)."""
    named = (record or {}).get("calibration")
    return {str(k): str(v) for k, v in named.items()} if isinstance(named, dict) else {}


def effective_encoder_settings(settings: Settings) -> EncoderSettings:
    """``settings.encoder`` with ``model`` replaced by the promoted model, when there is one and
    ``encoder.follow_promoted`` is on."""
    rec = read_promoted(settings) if settings.encoder.follow_promoted else None
    if rec and Path(rec["model_path"]).exists():
        return settings.encoder.model_copy(update={"model": rec["model_path"]})
    return settings.encoder


def settings_with_model(settings: Settings, model: str) -> Settings:
    """A deep copy of ``settings`` whose encoder is ``model`` (a directory or id), for evaluating or tuning a
    model that is not (yet) in production."""
    s = settings.model_copy(deep=True)
    s.encoder = settings.encoder.model_copy(update={"model": model})
    return s


def atomic_write_json(path: Path, data: dict) -> None:
    """Write JSON to ``path`` atomically (temp file + rename): readers never see half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, default=float)
    os.replace(tmp, path)
