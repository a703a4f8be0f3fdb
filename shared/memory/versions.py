"""Points between model versions: the copy that carries the knowledge memory over to a promoted model without
losing or reverting a decision.

Three writers meet at a model switch: the nightly job re-embeds the old version's collections into the new
ones (:func:`copy_missing` with the new encoder), and each worker catches up when it switches (the classifier
re-embeds what is missing, :func:`catch_up`; the memory updater, which has no encoder, carries decisions only).
Whoever copies, a point present on both sides keeps the **newer decision** (:func:`newer`, by ``decided_at``),
so the order in which the workers switch does not matter. The read-compare-write of each batch holds the new
router's ``write_lock`` (the workers of one process); across processes the memory updater writes a decision to
the replaced version before the promoted one, and :func:`catch_up` copies twice, so a decision written while a
catch-up runs is carried by its second pass.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from newsmon.shared.config import Settings
from newsmon.shared.memory.base import MemoryPoint
from newsmon.shared.memory.router import MemoryRouter, shared_router


def decision_time(payload: dict) -> datetime | None:
    """The ``decided_at`` of a stored point (timezone-aware), or None when it was never moderated."""
    raw = payload.get("decided_at")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw)
    except (TypeError, ValueError):
        return None


def newer(old: MemoryPoint, new: MemoryPoint) -> bool:
    """Whether ``old``'s state should replace ``new``'s: the later decision wins (a decision beats none); with
    no decision on either side, labels beat none (labelled by ``memory build`` meanwhile) and a higher proposal
    ``revision`` beats a lower one. Ties keep ``new``."""
    t_old, t_new = decision_time(old.payload), decision_time(new.payload)
    if t_old is not None or t_new is not None:
        return t_old is not None and (t_new is None or t_old > t_new)
    if bool(old.labels) != bool(new.labels):
        return bool(old.labels)
    return int(old.payload.get("revision") or 0) > int(new.payload.get("revision") or 0)


def copy_missing(old_router: MemoryRouter, new_router: MemoryRouter, encoder: Any = None, batch: int = 64,
                 progress: bool = False, transform: Callable[[np.ndarray], np.ndarray] | None = None
                 ) -> dict[str, int]:
    """Carry every point of ``old_router``'s collections over to ``new_router``'s: re-embed (from the text kept
    in each payload) and upsert the points the new version lacks, labels, payload and status kept; for points
    on both sides keep the newer decision (:func:`newer`; the new side's vector is kept).

    Args:
        encoder: anything with ``encode(texts, role="passage") -> (n, d) float32`` (the new model's encoder);
            None: decisions are carried, missing points only counted (the memory updater has no encoder).
        transform: instead of re-embedding, map the old points' stored ``(n, d)`` vectors to the new version's
            (an adapter promoted over the version it was trained on: ``normalize(v @ step.T)``, see
            :func:`newsmon.shared.encoder_adapter.transform_vectors`); points need no stored text then.

    Returns:
        points copied per language, and ``<lang>:relabelled`` (decisions carried), ``<lang>:missing`` (not
        copied: no encoder) and ``<lang>:no_text`` (skipped: no stored text) counts.
    """
    counts: dict[str, int] = {}
    for lang in old_router.languages(refresh=True):
        old = old_router.memory(lang)
        bar = tqdm(total=old.count(), desc=f"re-embedding memory [{lang}]", unit="art", disable=not progress)
        buf: list[MemoryPoint] = []
        for point in old.scroll(with_vectors=transform is not None):
            bar.update(1)
            if transform is None and not point.payload.get("text"):
                _add(counts, f"{lang}:no_text")
                continue
            buf.append(point)
            if len(buf) >= batch:
                _copy_batch(buf, new_router, lang, encoder, counts, transform)
                buf = []
        _copy_batch(buf, new_router, lang, encoder, counts, transform)
        bar.close()
    return counts


def _add(counts: dict[str, int], key: str, n: int = 1) -> None:
    if n:
        counts[key] = counts.get(key, 0) + n


def _copy_batch(buf: list[MemoryPoint], new_router: MemoryRouter, lang: str, encoder: Any,
                counts: dict[str, int], transform: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
    """One batch: re-embed the points missing on the new side (outside the lock: seconds on a CPU), then under
    the new router's write lock read the new side again and write what is missing or older there."""
    if not buf:
        return
    new = new_router.memory(lang)
    ids = [p.article_id for p in buf]
    vectors: dict[str, np.ndarray] = {}
    if encoder is not None or transform is not None:
        todo = [p for p, e in zip(buf, new.get(ids)) if e is None]
        if todo and transform is not None:
            vectors = dict(zip([p.article_id for p in todo], transform(np.stack([p.vector for p in todo]))))
        elif todo:
            vectors = dict(zip([p.article_id for p in todo],
                               encoder.encode([p.payload["text"] for p in todo], role="passage")))
    with new_router.write_lock:
        out: list[tuple[MemoryPoint, np.ndarray]] = []
        older: list[MemoryPoint] = []  # on both sides, the new one older: relabelled, its vector kept
        for p, e in zip(buf, new.get(ids)):
            if e is None and p.article_id in vectors:
                out.append((p, vectors[p.article_id]))
                _add(counts, lang)
            elif e is None:
                _add(counts, f"{lang}:missing")
            elif newer(p, e):
                older.append(p)
        if older:
            kept = new.get([p.article_id for p in older], with_vectors=True)
            out += [(p, e.vector) for p, e in zip(older, kept)]
            _add(counts, f"{lang}:relabelled", len(older))
        if out:
            new.upsert([p.article_id for p, _ in out], np.stack([v for _, v in out]), [p.labels for p, _ in out],
                       [p.payload for p, _ in out])


def catch_up(old_router: MemoryRouter, new_router: MemoryRouter, encoder: Any = None) -> dict[str, int]:
    """A worker's catch-up when it switches to ``new_router``'s version: :func:`copy_missing` twice (the second
    pass carries what another process wrote to the old version while the first one ran); the counts of both."""
    counts = copy_missing(old_router, new_router, encoder)
    for key, n in copy_missing(old_router, new_router, encoder).items():
        _add(counts, key, n)
    return counts


def replaced_router(settings: Settings, record: dict | None, current_version: str) -> MemoryRouter | None:
    """The router of the version a promotion replaced (``record["replaces"]``: model version and dimension, as
    written by the rollout), unless it is ``current_version``; None without one."""
    rep = (record or {}).get("replaces") or {}
    version, dim = rep.get("model_version"), rep.get("dim")
    if not version or not dim or version == current_version:
        return None
    return shared_router(settings, version, int(dim))
