"""Safe rollout of a fine-tuned encoder: evaluate, re-embed the memory into the new version's collections,
promote only when not worse.

The promoted model is recorded in ``<home>/models/promoted.json`` (model path, model version, figures, the
previous record, and ``replaces``: the model version and dimension whose collections were re-embedded, from
which a worker started after the promotion catches up); encoders built by :func:`effective_encoder_settings`
follow it while ``encoder.follow_promoted`` is on, and running workers switch to it between two batches
(nothing is lost or committed twice: a batch is always finished and committed with one model). With a Qdrant
server, the alias ``<prefix>_<lang>`` is also switched to the new collection. Every rollout, promoted or refused, is appended
to ``<home>/models/rollouts.jsonl`` with its reason.

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

import structlog

from newsmon.shared.encoder_adapter import read_adapter, transform_vectors
from newsmon.shared.config import Settings
from newsmon.shared.data import Corpus
from newsmon.shared.encoder import Encoder, resolve_model
from newsmon.shared.evaluation import run_eval
from newsmon.shared.memory import MemoryRouter, copy_missing
from newsmon.shared.promotion import (atomic_write_json, effective_encoder_settings, promoted_file,
                                      read_promoted, settings_with_model)

log = structlog.get_logger(__name__)


def models_dir(settings: Settings) -> Path:
    """``<home>/models``: fine-tuned candidates, the promotion record and the rollout log."""
    return Path(settings.home) / "models"


def evaluate_model(settings: Settings, model: str, corpus: Corpus, progress: bool = True,
                   rae: dict | None = None) -> dict:
    """RAE-XMC on the test split with ``model``; returns the ``all`` metrics (uF1, Acc, ...) and the ranking
    metrics.

    Args:
        rae: k / tau / lambda / threshold chosen for this model (``top_k``, ``tau``, ``lam``, ``threshold``;
            e.g. from the nightly job's tuning on validation); None = ``settings.scoring``'s k, tau and threshold.
            A model whose vectors changed needs its own: the softmax temperature and threshold depend on the
            similarity scale.
    """
    s = settings_with_model(settings, model)
    report = run_eval(corpus, ["rae"], s, progress=progress, rae=rae)
    m = report["methods"]["rae"]["metrics"]
    return {**m["all"], **m.get("ranking", {}), "model_version": report["encoder"]["model"]}


@dataclass
class RolloutDecision:
    """What the gate decided, with the figures it compared (test split, RAE-XMC)."""

    promoted: bool
    reason: str
    current: dict
    candidate: dict
    candidate_path: str
    reembedded: dict
    decided_at: str


def rollout(settings: Settings, candidate_path: str, corpus: Corpus, candidate_rae: dict | None = None,
            current_rae: dict | None = None) -> RolloutDecision:
    """Compare the candidate with the current model on the same test articles; when micro-F1 and subset
    accuracy are not worse beyond ``training.tolerance``: carry the memory into the candidate's collections
    (re-embedded, or for an adapter trained on the current version its stored vectors transformed by the
    adapter's matrix), switch aliases (server), write ``promoted.json``. Otherwise production is left untouched.
    Both outcomes are logged to ``rollouts.jsonl``; a refusal is not an error.

    Args:
        candidate_rae, current_rae: RAE-XMC parameters tuned for each model (see :func:`evaluate_model`);
            None = ``settings.scoring``'s for that side.
    """
    tol = settings.training.tolerance
    current_enc = effective_encoder_settings(settings)
    current_path = resolve_model(current_enc.model, settings.home)
    cur = evaluate_model(settings, current_path, corpus, rae=current_rae)
    cand = evaluate_model(settings, candidate_path, corpus, rae=candidate_rae)
    worse = [m for m in ("uF1", "Acc") if cand[m] < cur[m] - tol]
    now = datetime.now(UTC).isoformat()
    reembedded: dict = {}
    if worse:
        reason = "refused: " + ", ".join(f"{m} {100 * cand[m]:.1f} < current {100 * cur[m]:.1f} - tolerance "
                                         f"{100 * tol:.1f}" for m in worse)
        promoted = False
    else:
        reembedded, replaces, transform = _carry_memory(settings, current_enc, candidate_path)
        previous = read_promoted(settings)
        atomic_write_json(promoted_file(settings), {
            "model_path": str(candidate_path), "model_version": cand["model_version"], "promoted_at": now,
            "replaces": replaces, "previous": previous, "figures": {"candidate": cand, "current": cur},
            "rae": candidate_rae or {}, "vectors": "transformed" if transform else "re-embedded"})
        reason = (f"promoted: uF1 {100 * cand['uF1']:.1f} vs {100 * cur['uF1']:.1f}, Acc {100 * cand['Acc']:.1f} "
                  f"vs {100 * cur['Acc']:.1f} (tolerance {100 * tol:.1f})")
        promoted = True
    decision = RolloutDecision(promoted, reason, cur, cand, str(candidate_path), reembedded, now)
    models_dir(settings).mkdir(parents=True, exist_ok=True)
    with (models_dir(settings) / "rollouts.jsonl").open("a") as fh:
        fh.write(json.dumps(asdict(decision), default=float) + "\n")
    manifest = Path(candidate_path) / "newsmon_model.json"
    if manifest.exists():
        info = json.loads(manifest.read_text())
        info["evaluation"] = {"candidate": cand, "current": cur, "promoted": promoted, "reason": reason}
        manifest.write_text(json.dumps(info, indent=2, default=float))
    log.info("rollout decided", promoted=promoted, reason=reason)
    return decision


def _carry_memory(settings: Settings, current_enc, candidate_path: str) -> tuple[dict, dict, bool]:
    """Fill the candidate's collections from the current version's: an adapter trained on the current version
    maps the stored vectors (``normalize(v @ step.T)``, no re-encoding), any other candidate re-embeds the
    stored text; switch the aliases (server). Returns (counts, ``replaces`` record, whether transformed)."""
    old_enc = Encoder(current_enc, settings.home)
    new_enc = Encoder(settings.encoder.model_copy(update={"model": candidate_path}), settings.home)
    old_router = MemoryRouter(settings, old_enc.model_id, old_enc.dim)
    new_router = MemoryRouter(settings, new_enc.model_id, new_enc.dim)
    replaces = {"model_version": old_enc.model_id, "dim": old_enc.dim}
    adapter = read_adapter(candidate_path)
    transform = None
    if adapter is not None and adapter.trained_on == old_enc.model_id:
        transform = partial(transform_vectors, adapter.step)
    try:
        counts = copy_missing(old_router, new_router, new_enc, progress=True, transform=transform)
        if settings.memory.url:
            _switch_aliases(settings, new_router)
    finally:
        old_router.close()
        new_router.close()
        old_enc.close()
        new_enc.close()
    return counts, replaces, transform is not None


def _switch_aliases(settings: Settings, router: MemoryRouter) -> None:
    """Point ``<prefix>_<lang>`` at the new version's collection of each language (Qdrant server)."""
    from qdrant_client import models  # deferred: a slow import, server mode only

    ops = []
    for lang in router.languages(refresh=True):
        alias = f"{settings.memory.collection_prefix}_{lang}"
        ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=router.collection(lang), alias_name=alias)))
    router.client().update_collection_aliases(change_aliases_operations=ops)


def degrade(model_path: str, out_dir: Path, noise: float = 0.5, seed: int = 0) -> Path:
    """A deliberately worse copy of a model (Gaussian noise on every weight matrix), for gate drills."""
    import torch  # deferred: seconds to import; only gate drills use this
    from safetensors.torch import load_file, save_file  # deferred: needs torch

    shutil.copytree(model_path, out_dir, dirs_exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    weights = load_file(str(Path(model_path) / "model.safetensors"))
    for k, v in weights.items():
        if v.ndim == 2:
            weights[k] = v + noise * v.std() * torch.randn(v.shape, generator=g)
    save_file(weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    info_path = out_dir / "newsmon_model.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    info["model_id"] = f"{info.get('model_id', 'model')}-degraded"
    info_path.write_text(json.dumps(info, indent=2))
    return out_dir


__all__ = ["RolloutDecision", "degrade", "evaluate_model", "models_dir", "promoted_file", "read_promoted", "rollout"]
