"""``newsmon train tune``: an offline Optuna study of the ``rae`` baseline's k / tau / lambda / threshold on a
corpus's validation split. Not a stage of the nightly job (which has one tuner, the calibration, and one gate, the
calibrated ``newsmon`` row: :mod:`newsmon.training_jobs.nightly`); nothing it finds is served.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from pathlib import Path

from newsmon.shared.config import Settings, mask_url, reveal
from newsmon.shared.data import Corpus
from newsmon.shared.encoder import model_fingerprint, resolve_model
from newsmon.shared.evaluation import run_eval
from newsmon.shared.promotion import settings_with_model


def optuna_storage(settings: Settings) -> str:
    """The Optuna storage URL: ``training.optuna_storage`` or SQLite in the home directory."""
    url = reveal(settings.training.optuna_storage) if settings.training.optuna_storage else None
    if url:
        return url
    Path(settings.home).mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(settings.home) / 'optuna.db'}"


def tune(settings: Settings, corpus: Corpus, model: str, trials: int, resume: str | None = None) -> dict:
    """Optuna search of k / tau / lambda / threshold on the validation split with ``model`` (study stored in
    :func:`optuna_storage`); returns the best params with the validation subset accuracy and micro-F1.

    Each run is a new study named after the model, the data and the run (:func:`study_name`), so a run never
    reports the optimum another run found on other data. ``resume`` names an earlier study to continue; it
    must have been run on the same data (model and corpus fingerprints), else ``ValueError``.
    """
    import optuna  # deferred: a slow import

    s = settings_with_model(settings, model)
    storage = optuna_storage(settings)
    fingerprint = {"model": model_fingerprint(resolve_model(model, settings.home)), "data": corpus_fingerprint(corpus)}
    name = resume or study_name(model, fingerprint)
    if resume:
        try:
            earlier = optuna.load_study(study_name=resume, storage=storage).user_attrs
        except KeyError:
            raise ValueError(f"no Optuna study {resume!r} in {mask_url(storage)} to resume") from None
        if {k: earlier.get(k) for k in fingerprint} != fingerprint:
            raise ValueError(f"study {resume!r} was run on other data or another model ({earlier}); "
                             "start a new study instead of resuming it")
    report = run_eval(corpus, ["rae"], s, tune=trials, progress=False, tune_storage=storage, study_name=name)
    study = optuna.load_study(study_name=name, storage=storage)
    for key, value in fingerprint.items():
        study.set_user_attr(key, value)
    params = report["methods"]["rae_tuned"]["params"]
    return {"study": name, "storage": mask_url(storage), "trials_in_study": len(study.trials), **params}


def corpus_fingerprint(corpus: Corpus) -> str:
    """sha256 of what tuning sees of a corpus: every article's id, split, labels and text, in order."""
    h = hashlib.sha256()
    for a in corpus.articles:
        h.update(json.dumps([a.id, a.split, list(a.labels), a.text], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def study_name(model: str, fingerprint: dict[str, str]) -> str:
    """``newsmon-rae-<model folder>-<model and data hash, 12 hex>-<UTC time>-<6 random hex>``: one study per
    run, recognisable by model and data."""
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
    folder = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name)[:60]
    return f"newsmon-rae-{folder}-{digest}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
