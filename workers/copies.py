"""Near-copies and their originals: what an original passes on, and the revised proposals of its copies when a
moderator decides on it.

A near-copy (MinHash LSH, :mod:`newsmon.shared.dedup`) is proposed its original's labels without a model call,
and its pending point records ``duplicate_of`` (the original's id), ``duplicate_jaccard``, the labels it was
proposed (``proposed_labels``) and the proposal's ``revision``. What an original passes on
(:func:`inherited_labels`): once moderated, exactly its confirmed and added labels (none for a reviewed article,
never the rejected proposal); unmoderated, its own proposal (or its corpus labels).

When a decision changes what an original passes on, the memory updater revises every unmoderated copy proposed
from the old state (:func:`revise_copies`): the copy's point gets the new labels and ``revision`` + 1, and a
:class:`~newsmon.schemas.LabelProposal` with that revision goes to the proposals topic (the moderation tool keeps
the highest revision per article). A copy the classifier stores while the decision lands is checked from the
other side: the classifier reads its original again after storing the copy (see
:meth:`newsmon.workers.pipeline.ArticlePipeline.store_pending`), so one of the two always sees the other.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from newsmon.schemas import LabelProposal, NeighbourRef, ProposedLabel
from newsmon.shared.memory import MemoryPoint, MemoryRouter, SearchFilter


def is_moderated(point: MemoryPoint) -> bool:
    """Whether a moderator decided on the article (a decision was applied to its point)."""
    return bool(point.payload.get("decided_at"))


def inherited_labels(original: MemoryPoint) -> tuple[str, ...]:
    """The labels an original passes on to its near-copies (before the label registry is applied): its stored
    labels once moderated (possibly none) or when labelled from a corpus, else the labels it was proposed."""
    if original.labels or is_moderated(original):
        return tuple(original.labels)
    return tuple(original.payload.get("proposed_labels") or ())


def duplicate_labels(original_id: str, labels: tuple[str, ...], jaccard: float) -> list[ProposedLabel]:
    """The proposed labels of a near-copy: each of ``labels`` scored by the estimated Jaccard similarity, with the
    original as its one neighbour (``source = "duplicate"``)."""
    return [ProposedLabel(label=lb, score=float(jaccard), source="duplicate",
                          neighbours=[NeighbourRef(article_id=original_id, similarity=float(jaccard))])
            for lb in labels]


def revise_copies(router: MemoryRouter, lang: str, original: MemoryPoint, labels: tuple[str, ...], key: str
                  ) -> list[LabelProposal]:
    """Revised proposals for the unmoderated near-copies of ``original`` (in ``lang``'s collection of
    ``router``) proposed with labels other than ``labels`` (what the original passes on now, mapped through the
    label registry); their points are updated (``proposed_labels``, ``revision`` + 1, ``revised_for = key``).

    ``key`` identifies the decision (its ``decided_at`` as sent). A copy already revised for the same key is
    proposed again with the same revision and labels: the decision was redelivered, and its revision may never
    have been acknowledged (at-least-once). Call it under ``router.write_lock``. One filtered scroll.
    """
    mem = router.memory(lang)
    flt = SearchFilter(labelled=None, duplicate_of=original.article_id)
    out: list[LabelProposal] = []
    changed: list[tuple[MemoryPoint, dict]] = []
    for copy in mem.scroll(flt, with_vectors=True):
        if is_moderated(copy):
            continue  # its own decision stands
        revision = int(copy.payload.get("revision") or 0)
        if list(copy.payload.get("proposed_labels") or ()) != list(labels):
            revision += 1
            changed.append((copy, {**copy.payload, "proposed_labels": list(labels), "revision": revision,
                                   "revised_for": key}))
        elif copy.payload.get("revised_for") != key:
            continue  # proposed with these labels already
        jaccard = float(copy.payload.get("duplicate_jaccard") or 1.0)
        out.append(LabelProposal(
            article_id=copy.article_id, revision=revision, labels=duplicate_labels(original.article_id, labels,
                                                                                   jaccard),
            duplicate_of=original.article_id, model_version=router.model_version,
            memory_version=router.collection(lang), produced_at=datetime.now(timezone.utc)))
    if changed:
        mem.upsert([c.article_id for c, _ in changed], np.stack([c.vector for c, _ in changed]),
                   [() for _ in changed], [p for _, p in changed])
    return out
