"""Near-copies and their originals: what an original passes on, and the revised proposals of its copies when a
moderator decides on it.

A near-copy (MinHash LSH, :mod:`newsmon.shared.dedup`) is linked ``duplicate_of`` its original, and its pending
point records ``duplicate_of`` (the original's id), ``duplicate_jaccard``, the labels it was proposed
(``proposed_labels``) and the proposal's ``revision``. Only **decided** labels are passed on
(:func:`inherited_labels`): an original a moderator decided on passes on exactly its confirmed and added labels
(none for a reviewed article, never the rejected proposal), and a corpus article its archive's labels; the copy
then takes them without a model call (``source = "duplicate"``, scored by the estimated Jaccard). An original
nobody decided on passes on nothing: its labels are only a proposal, so the copy is scored as any article (its own
scores, neighbours and candidates), and revised once the original is decided.

When a decision changes what an original passes on, the memory updater revises every unmoderated copy proposed
from the old state (:func:`revise_copies`): the copy's point gets the new labels and ``revision`` + 1, and a
:class:`~newsmon.schemas.LabelProposal` with that revision goes to the proposals topic (the moderation tool keeps
the highest revision per article). A copy the classifier stores while the decision lands is checked from the
other side: the classifier reads its original again after storing the copy (see
:meth:`newsmon.workers.pipeline.ArticlePipeline.store_pending`), so one of the two always sees the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from newsmon.schemas import LabelProposal, NeighbourRef, Proposal, ProposedLabel
from newsmon.shared.memory import KnowledgeMemory, MemoryPoint, MemoryRouter, SearchFilter
from newsmon.shared.scoring.reasons import duplicate_reason
from newsmon.shared.scoring.retrieval import display_title


@dataclass
class Duplicate:
    """The earlier article an incoming one is a near-copy of (MinHash LSH): as stored in the memory (``point``),
    or an earlier article of the same batch, not stored yet (``item``, an ``ArticleItem``; nobody decided on it,
    so the copy is scored on its own)."""

    original_id: str
    jaccard: float
    lang: str
    point: MemoryPoint | None
    item: Any = None

    @property
    def vector(self) -> np.ndarray | None:
        """The original's embedding (the point of a copy that takes its decided labels reuses it)."""
        return self.point.vector if self.point is not None else self.item.vector

    @property
    def decided(self) -> bool:
        """Whether the original's labels were decided (:func:`inherited_labels`): only then does the copy take
        them; an original of the same batch is never decided."""
        return self.point is not None and inherited_labels(self.point) is not None


def link_copies(items: list, hits: dict, found: dict) -> None:
    """Set ``duplicate`` on the ``items`` (``ArticleItem``) the near-duplicate index found a copy of (``hits``:
    ``id(item)`` -> ``(original id, Jaccard)``): an original read from the memory (``found``: id -> ``(lang,
    point)``), or an earlier item of the same batch that is not itself a copy (the index holds it before the
    memory does: two copies in one batch)."""
    earlier: dict[str, Any] = {}
    for it in items:
        hit = hits.get(id(it))
        if hit is not None and hit[0] in found:
            it.duplicate = Duplicate(hit[0], hit[1], *found[hit[0]])
        elif hit is not None and hit[0] in earlier:
            first = earlier[hit[0]]
            it.duplicate = Duplicate(hit[0], hit[1], first.event.lang, None, first)
        if it.duplicate is None:
            earlier.setdefault(it.event.article_id, it)


def is_moderated(point: MemoryPoint) -> bool:
    """Whether a moderator decided on the article (a decision was applied to its point)."""
    return bool(point.payload.get("decided_at"))


def inherited_labels(original: MemoryPoint) -> tuple[str, ...] | None:
    """The labels an original passes on to its near-copies (before the label registry is applied): its stored
    labels once a moderator decided (possibly none) or when labelled from a corpus; None while nobody decided on
    it (its labels are only a proposal, which is never passed on)."""
    if original.labels or is_moderated(original):
        return tuple(original.labels)
    return None


def duplicate_proposal(original_id: str, labels: tuple[str, ...], jaccard: float, original: MemoryPoint) -> Proposal:
    """The proposal of a near-copy that takes its original's decided labels: each of ``labels`` (decided on the
    original, whose point is ``original``) scored by the estimated Jaccard similarity, with the original as its one
    neighbour (its headline, or the start of its text) and the decision it comes from as its ``reason`` (``source =
    "duplicate"``); no candidates and no scoring (no model call)."""
    title = display_title(original.payload)
    why = duplicate_reason(original_id, title, jaccard, is_moderated(original))
    return Proposal(labels=[ProposedLabel(label=lb, score=float(jaccard), source="duplicate", reason=why,
                                          neighbours=[NeighbourRef(article_id=original_id, similarity=float(jaccard),
                                                                   title=title)])
                            for lb in labels])


def recheck_copies(items: list, mem: KnowledgeMemory, relabel) -> list:
    """Read the originals of near-copies ``items`` (``ArticleItem``, originals in ``mem``) again, after their
    pending points were written: a copy whose original has been decided since it was read, with labels other
    than the copy's, takes them (its ``duplicate`` now holds the decided original). Returns the stored copies that
    changed (their points must be written again). ``relabel``: the label registry's names."""
    changed = []
    for it, original in zip(items, mem.get([it.duplicate.original_id for it in items], with_vectors=True), strict=True):
        inherited = inherited_labels(original) if original is not None else None
        if original is None or inherited is None:
            continue  # not decided: the copy keeps its own proposal
        d, labels = it.duplicate, relabel(inherited)
        if not d.decided or list(labels) != [x.label for x in it.proposal.labels]:
            d.point = original
            it.proposal = duplicate_proposal(d.original_id, labels, d.jaccard, original)
            changed += [it] if it.stored else []
    return changed


def revise_copies(router: MemoryRouter, lang: str, original: MemoryPoint, labels: tuple[str, ...], key: str
                  ) -> list[LabelProposal]:
    """Revised proposals for the unmoderated near-copies of ``original`` (in ``lang``'s collection of
    ``router``) proposed with labels other than ``labels`` (what the original passes on now, mapped through the
    label registry); their points are updated (``proposed_labels``, ``revision`` + 1, ``revised_for = key``).

    ``labels`` are decided labels (:func:`inherited_labels` is not None). ``key`` identifies the decision (its
    ``decided_at`` as sent). A copy already revised for the same key is
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
        out.append(LabelProposal.of(
            duplicate_proposal(original.article_id, labels, jaccard, original), article_id=copy.article_id,
            revision=revision, duplicate_of=original.article_id, model_version=router.model_version,
            memory_version=router.collection(lang), produced_at=datetime.now(timezone.utc)))
    if changed:
        mem.upsert([c.article_id for c, _ in changed], np.stack([c.vector for c, _ in changed]),
                   [() for _ in changed], [p for _, p in changed])
    return out
