"""The ``store_pending`` stage's writes: each proposed article's embedding kept in the knowledge memory as a
*pending* point (no labels, the proposal in its payload) before its proposal is produced, so a moderator decision
never needs the model; then the near-copies' originals read again (see :mod:`newsmon.workers.copies`).

The items are the article pipeline's ``ArticleItem``s (:mod:`newsmon.workers.pipeline`); only collections that
exist are written (the pipeline refused the other languages first), so no collection is created here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from newsmon.shared.memory import MemoryRouter
from newsmon.shared.memory.common import TEXT_PAYLOAD_CHARS
from newsmon.workers.copies import is_moderated, recheck_copies

__all__ = ["pending_payload", "recheck_originals", "write_pending"]


def write_pending(router: MemoryRouter, fresh: list, reusing: list) -> None:
    """Write the pending points of a batch's articles: ``fresh`` (scored) with their own vectors, ``reusing``
    (near-copies that take their original's decided labels) with their original's. An article already moderated
    (labelled, or with a decision) is left as it is; one stored before gets the next proposal ``revision``. Sets
    ``stored`` on those written. One ``get`` and one ``upsert`` per language."""
    rows: dict[str, list[tuple[Any, np.ndarray]]] = {}
    for it in fresh:
        rows.setdefault(it.event.lang, []).append((it, it.vector))
    for it in reusing:
        d = it.duplicate
        if d.vector is not None:
            rows.setdefault(d.lang, []).append((it, d.vector))
    with router.write_lock:
        for lang, entries in rows.items():
            mem = router.memory(lang, create=False)
            existing = mem.get([it.event.article_id for it, _v in entries])
            keep = []
            for e, p in zip(entries, existing, strict=True):
                if p is None or (not p.labels and not is_moderated(p)):
                    keep.append(e)
                    e[0].revision = int(p.payload.get("revision") or 0) + 1 if p is not None else 0
            if keep:
                mem.upsert([it.event.article_id for it, _v in keep],
                           np.stack([np.asarray(v, dtype=np.float32) for _i, v in keep]),
                           [() for _ in keep], [pending_payload(lang, it) for it, _v in keep])
                for it, _v in keep:
                    it.stored = True


def recheck_originals(router: MemoryRouter, items: list, relabel: Callable[[tuple[str, ...]], tuple[str, ...]]
                      ) -> None:
    """Read the originals of the near-copies among ``items`` again (one ``get`` per language): a copy whose original
    has been decided since gets its labels and its stored point is rewritten
    (:func:`newsmon.workers.copies.recheck_copies`; ``relabel``: the label registry's names)."""
    by_lang: dict[str, list] = {}
    for it in items:
        if it.duplicate is not None:
            by_lang.setdefault(it.duplicate.lang, []).append(it)
    with router.write_lock:
        for lang, group in by_lang.items():
            mem = router.memory(lang, create=False)
            changed = recheck_copies(group, mem, relabel)
            if changed:
                vectors = [it.vector if it.vector is not None else it.duplicate.vector for it in changed]
                mem.upsert([it.event.article_id for it in changed], np.stack(vectors).astype(np.float32),
                           [() for _ in changed], [pending_payload(lang, it) for it in changed])


def pending_payload(lang: str, it: Any) -> dict:
    """The payload of a pending point: where the article came from, its text, the proposed labels and the
    proposal's revision; for a near-copy its original and the estimated Jaccard (see
    :mod:`newsmon.workers.copies`)."""
    ev, d = it.event, it.duplicate
    return {"lang": lang, "status": "pending", "title": ev.title, "outlet": ev.outlet, "country": ev.country,
            "published_at": ev.published_at.isoformat(), "section": ev.section,
            "duplicate_of": d.original_id if d else None, "duplicate_jaccard": float(d.jaccard) if d else None,
            "text": it.text[:TEXT_PAYLOAD_CHARS], "proposed_labels": [x.label for x in it.proposal.labels],
            "revision": it.revision}
