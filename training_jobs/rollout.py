"""Safe rollout of a fine-tuned encoder: carry the memory into the new version's collections, calibrate the candidate
and production the same way, promote only when the candidate's calibrated ``newsmon`` row is not worse
(:mod:`newsmon.training_jobs.gate`).

The promoted model is recorded in ``<home>/models/promoted.json``: ``model_path``, ``model_version``,
``calibration`` (language -> the id of the calibration record the gate judged, which the workers load with the
model: :func:`newsmon.shared.promotion.promoted_calibration`), ``gate`` (``newsmon``), ``figures`` (both calibrated
rows), ``vectors`` (``transformed`` or ``re-embedded``), the ``previous`` record, and ``replaces``: the model version
and dimension whose collections were carried over, from which a worker started after the promotion catches up.
A record written before the gate judged the calibrated scorer holds ``rae`` parameters instead of ``calibration``:
its model is still followed, the ``rae`` parameters are not read. Encoders built by :func:`effective_encoder_settings`
follow it while ``encoder.follow_promoted`` is on, and running workers switch to it between two batches
(nothing is lost or committed twice: a batch is always finished and committed with one model). With a Qdrant
server, the alias ``<prefix>_<lang>`` is also switched to the new collection. Every rollout, promoted or refused, is appended
to ``<home>/models/rollouts.jsonl`` with its reason.

What no reader serves is deleted (:func:`discard_unserved`): a refused candidate's copy of the memory (a full copy
of every language memory: 3.3 GB on disk per million points at the archive-size benchmark, every refused night),
its calibration records and their stored models, and the stored models of production's recalibration when it is not
the record production serves. ``training.keep_refused`` keeps a refused candidate's for inspection.

Embedded mode: the engine locks its directory, so run the nightly job while the workers are stopped, or use a
Qdrant server.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from newsmon.shared.classifier import Classifier
from newsmon.shared.encoder_adapter import read_adapter, transform_vectors
from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus
from newsmon.shared.encoder import Encoder
from newsmon.shared.memory import MemoryRouter, copy_missing
from newsmon.shared.memory.engines import drop_collection
from newsmon.shared.scoring.records import CalibrationStore, record_id
from newsmon.shared.scoring.stored import ModelStore
from newsmon.shared.promotion import (atomic_write_json, effective_encoder_settings, promoted_file,
                                      read_promoted, settings_with_model)
from newsmon.training_jobs.gate import GATED, calibrated_row, judge

log = structlog.get_logger(__name__)


def models_dir(settings: Settings) -> Path:
    """``<home>/models``: fine-tuned candidates, the promotion record and the rollout log."""
    return Path(settings.home) / "models"


def candidate_settings(settings: Settings, candidate_path: str) -> Settings:
    """A copy of ``settings`` whose encoder is the candidate, not following ``promoted.json`` (which still names
    production while the candidate is judged)."""
    s = settings_with_model(settings, candidate_path)
    s.encoder.follow_promoted = False
    return s


def measure_calibrated(settings: Settings, corpus: Corpus, keep_records: bool = True) -> dict:
    """The calibrated ``newsmon`` row of the model ``settings`` name (:func:`newsmon.training_jobs.gate.calibrated_row`:
    calibrated on its memory plus the corpus's validation split, measured on its test split).

    With ``keep_records`` off (production's side of the gate), the calibration is kept in a scratch store
    (:class:`~newsmon.shared.scoring.records.ScratchCalibrations`) that reads the served records and is never
    written to them: judging production does not change what it serves, whatever the verdict, not even while the
    row is measured. The row's ``records`` still name the records it was measured with (their models are in the
    model store)."""
    validation = [a for a in corpus.split("validation") if a.labels]
    test = [a for a in corpus.split("test") if a.labels]
    clf = Classifier(settings, scratch_calibrations=not keep_records)
    try:
        return calibrated_row(clf, validation, test, str(corpus.path))
    finally:
        clf.close()


@dataclass
class RolloutDecision:
    """What the gate decided, with the calibrated ``newsmon`` rows it compared (test split; see
    :func:`newsmon.training_jobs.gate.calibrated_row`: ``uF1``, ``Acc``, ..., ``model_version``, ``records``)."""

    promoted: bool
    reason: str
    current: dict
    candidate: dict
    candidate_path: str
    reembedded: dict
    decided_at: str


def rollout(settings: Settings, candidate_path: str, corpus: Corpus) -> RolloutDecision:
    """Carry the memory into the candidate's collections (re-embedded, or for an adapter trained on the current
    version its stored vectors transformed by the adapter's matrix); calibrate the candidate and production the same
    way (:func:`newsmon.training_jobs.calibrate_memory.calibrate_memory`, as ``memory build --calibrate``) and measure
    both scorers on the same test articles; promote when the candidate's calibrated ``newsmon`` row is not worse
    (micro-F1 and subset accuracy, within ``training.tolerance``: :func:`newsmon.training_jobs.gate.judge`):
    switch aliases (server) and write ``promoted.json``, which names the candidate's calibration records. Otherwise
    production is left untouched (its aliases, ``promoted.json``, its collections; the candidate's collections and
    records stay unused). Both outcomes are logged to ``rollouts.jsonl``; a refusal is not an error.

    Raises:
        ValueError: the corpus has no labelled test article, or the memory no labelled article.
    """
    if not any(a.labels for a in corpus.split("test")):
        raise ValueError(f"the gate needs labelled test articles; {corpus.path} has none")
    current_enc = effective_encoder_settings(settings)
    reembedded, replaces, target, transform = _carry_memory(settings, current_enc, candidate_path)
    cur = measure_calibrated(settings, corpus, keep_records=False)  # production serves what it served
    cand_settings = candidate_settings(settings, candidate_path)
    cand = measure_calibrated(cand_settings, corpus)
    promoted, reason = judge({GATED: cur}, {GATED: cand}, settings.training.tolerance)
    now = datetime.now(UTC).isoformat()
    if promoted:
        if settings.memory.url:
            _switch_aliases(settings, target)
        atomic_write_json(promoted_file(settings), {
            "model_path": str(candidate_path), "model_version": cand["model_version"], "promoted_at": now,
            "replaces": replaces, "previous": read_promoted(settings), "gate": GATED,
            "calibration": cand["records"], "figures": {"candidate": cand, "current": cur},
            "vectors": "transformed" if transform else "re-embedded"})
    decision = RolloutDecision(promoted, reason, cur, cand, str(candidate_path), reembedded, now)
    models_dir(settings).mkdir(parents=True, exist_ok=True)
    with (models_dir(settings) / "rollouts.jsonl").open("a") as fh:
        fh.write(json.dumps(asdict(decision), default=float) + "\n")
    manifest = Path(candidate_path) / "newsmon_model.json"
    if manifest.exists():
        info = json.loads(manifest.read_text())
        info["evaluation"] = {"gate": GATED, "candidate": cand, "current": cur, "promoted": promoted,
                              "reason": reason}
        manifest.write_text(json.dumps(info, indent=2, default=float))
    log.info("rollout decided", promoted=promoted, reason=reason, calibration=cand["records"])
    # after the decision is logged: a clean-up that fails (a collection locked elsewhere) loses no verdict
    discard_unserved(settings, cur, None if promoted or settings.training.keep_refused else (cand_settings, target))
    return decision


def discard_unserved(settings: Settings, current: dict, refused: tuple[Settings, dict] | None) -> dict[str, list[str]]:
    """Delete what the gate made that no reader serves: the stored models of production's recalibration
    (``current``'s ``records``) where it is not the record its collection serves (the record production served
    before the rollout: a rollback to it keeps its models), and, for a ``refused`` candidate (its settings and
    ``{"model_version", "dim"}``), its collections, calibration records and stored models.

    Returns:
        what was deleted: ``{"collections": [...], "records": [...], "models": [...]}``.
    """
    gone: dict[str, list[str]] = {"collections": [], "records": [], "models": []}
    router = MemoryRouter(refused[0], refused[1]["model_version"], refused[1]["dim"]) if refused else None
    client = router.client() if router is not None else None
    records, models = CalibrationStore(settings, client, ttl_s=0), ModelStore(settings, client)
    try:
        for rec in sorted(set(current.get("records", {}).values())):
            served = records.read(rec.rsplit("@", 1)[0])
            if (served is None or record_id(served) != rec) and models.remove(rec):
                gone["models"].append(rec)
        if refused is not None and router is not None:
            cand_settings, target = refused
            for name in [router.collection(lang) for lang in router.languages(refresh=True)]:
                rec = records.read(name)
                if rec is not None:
                    models.remove(record_id(rec))
                    records.remove(name)
                    gone["records"].append(record_id(rec))
                if drop_collection(cand_settings, name, target["dim"], client):
                    gone["collections"].append(name)
    finally:
        records.close()
        models.close()
        if router is not None:
            router.close()
    log.info("rollout discarded what no reader serves", **gone)
    return gone


def _carry_memory(settings: Settings, current_enc, candidate_path: str) -> tuple[dict, dict, dict, bool]:
    """Fill the candidate's collections from the current version's (nothing is switched: production reads its own
    collections until the promotion): an adapter trained on the current version maps the stored vectors
    (``normalize(v @ step.T)``, no re-encoding), any other candidate re-embeds the stored text. Returns (counts,
    ``replaces`` record, the candidate's ``{"model_version", "dim"}``, whether transformed)."""
    old_enc = Encoder(current_enc, settings.home)
    new_enc = Encoder(settings.encoder.model_copy(update={"model": candidate_path}), settings.home)
    old_router = MemoryRouter(settings, old_enc.model_id, old_enc.dim)
    new_router = MemoryRouter(settings, new_enc.model_id, new_enc.dim)
    replaces = {"model_version": old_enc.model_id, "dim": old_enc.dim}
    target = {"model_version": new_enc.model_id, "dim": new_enc.dim}
    adapter = read_adapter(candidate_path)
    transform = None
    if adapter is not None and adapter.trained_on == old_enc.model_id:
        transform = partial(transform_vectors, adapter.step)
    try:
        counts = copy_missing(old_router, new_router, new_enc, progress=True, transform=transform)
    finally:
        old_router.close()
        new_router.close()
        old_enc.close()
        new_enc.close()
    return counts, replaces, target, transform is not None


def _switch_aliases(settings: Settings, target: dict) -> None:
    """Point ``<prefix>_<lang>`` at the new version's collection of each language (Qdrant server); ``target``:
    its ``{"model_version", "dim"}``."""
    from qdrant_client import models  # deferred: a slow import, server mode only

    router = MemoryRouter(settings, target["model_version"], target["dim"])
    try:
        _update_aliases(settings, router, models)
    finally:
        router.close()


def _update_aliases(settings: Settings, router: MemoryRouter, models: Any) -> None:
    ops = []
    for lang in router.languages(refresh=True):
        alias = f"{settings.memory.collection_prefix}_{lang}"
        ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=router.collection(lang), alias_name=alias)))
    router.client().update_collection_aliases(change_aliases_operations=ops)


def degrade(model_path: str, out_dir: Path, noise: float = 0.5, seed: int = 0, blind: bool = False) -> Path:
    """A deliberately worse copy of a model (Gaussian noise on every weight matrix), for gate drills. Noise alone
    leaves a model that still tells texts apart by their words (each token keeps an embedding of its own: a random
    projection of the bag of words, which retrieves topics well); ``blind`` also gives every token the same input
    embedding (their mean), so the vectors depend only on a text's length: its neighbours are chance."""
    import torch  # deferred: seconds to import; only gate drills use this
    from safetensors.torch import load_file, save_file  # deferred: needs torch

    shutil.copytree(model_path, out_dir, dirs_exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    weights = load_file(str(Path(model_path) / "model.safetensors"))
    for k, v in weights.items():
        if v.ndim == 2:
            weights[k] = v + noise * v.std() * torch.randn(v.shape, generator=g)
        if blind and k.endswith("word_embeddings.weight"):
            weights[k] = weights[k].mean(dim=0, keepdim=True).expand_as(weights[k]).contiguous()
    save_file(weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    info_path = out_dir / "newsmon_model.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    info["model_id"] = f"{info.get('model_id', 'model')}-degraded"
    info_path.write_text(json.dumps(info, indent=2))
    return out_dir


__all__ = ["RolloutDecision", "candidate_settings", "degrade", "discard_unserved", "measure_calibrated", "models_dir", "promoted_file",
           "read_promoted", "rollout"]
