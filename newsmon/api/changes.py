"""Label changes, one way for every path: the ``/v1`` label routes and the console's label routes call
:meth:`LabelChanges.submit`, which decides whether the label registry will apply the change and only then publishes
it as a :class:`~newsmon.schemas.LabelEvent`.

The decision is :func:`newsmon.workers.labels.refusal` (the registry's own check, :func:`~newsmon.workers.labels.
conflict`) on the registry's current state with the changes this process published and the memory updater has not
applied yet replayed onto it, under one lock: two changes sent at once are serialised, so renaming ``a`` to ``b``
and ``a`` to ``c`` together gives one ``200``/``202`` and one ``409`` with the reason, never two "published"
answers of which one is then dead-lettered as ``label_conflict``.

A published change stays "pending" until the memory updater's group has committed past its offset (applied, or
dead-lettered for a reason no check here could see) or this process saw it applied. Another API replica's changes
are not known here until they are applied: two replicas changing one label in the same moment can still both
publish (the updater dead-letters the second).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from confluent_kafka import KafkaException

from newsmon.api.models import LabelChange
from newsmon.schemas import LabelDefinition, LabelEvent
from newsmon.workers.labels import RegistryState, refusal, replay

if TYPE_CHECKING:
    from newsmon.api.service import ApiService

log = structlog.get_logger(__name__)

__all__ = ["LabelChanges"]


@dataclass(frozen=True)
class _Published:
    event: LabelEvent
    partition: int
    offset: int


class LabelChanges:
    """The label changes of one API process: the lock that serialises them and the published ones not applied yet.

    Args:
        service: the API's service (the registry's state, the broker, the updater's committed offsets).
    """

    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self._lock = threading.Lock()
        self._published: list[_Published] = []

    def submit(self, action: str, label: str, actor: str | None = None, *,
               definition: LabelDefinition | None = None, new_label: str | None = None) -> LabelChange:
        """Change ``label`` (canonical): ``action`` ``defined`` (a definition: ``defined`` or ``updated``, as the
        registry's state says), ``renamed`` (to ``new_label``) or ``retired``; ``actor``: who.

        Returns:
            The :class:`LabelChange`: ``event`` None with a ``note`` when nothing changes (the same definition, a
            retired label retired, the same rename again: ``200``); else the published event and ``applied`` (True
            when the registry shows it within ``api.apply_wait_s``: ``200``; else ``202``).

        Raises:
            ApiError: 404 renaming or retiring a label nothing knows; 409 a change the registry will refuse (the
                reason; "not applied yet" when a pending change is the cause); 422 an invalid event; 503 the broker
                did not acknowledge.
        """
        from newsmon.api.service import ApiError

        with self._lock:
            state = self.svc.state()
            pending = [p.event for p in self._still_pending()]
            after = replay(state, pending) if pending else state
            if action != "defined" and not after.knows(label) and not self.svc.examples(label, after):
                raise ApiError(404, f"unknown label {label!r}: no definition, rename or retirement, and no example "
                                    "in the knowledge memory")
            note = _nothing_to_do(action, label, after, definition, new_label)
            if note is not None:
                return LabelChange(event=None, note=note)
            if action == "defined" and label in after.definitions:
                action = "updated"
            event = self.svc.event(action, label, actor, definition=definition, new_label=new_label)
            why = refusal(after, event)
            if why is not None:
                if pending and refusal(state, event) is None:
                    why += " (by a change published before this one and not applied yet)"
                raise ApiError(409, why)
            change = self.svc.publish(event)
            published = _Published(event, change.partition or 0, change.offset or 0)
            self._published.append(published)
        change.applied = self.svc.wait_applied(event)
        if change.applied:
            with self._lock:
                self._published = [p for p in self._published if p is not published]
        return change

    def _still_pending(self) -> list[_Published]:
        """The published changes the memory updater's group has not committed past (all of them when the broker
        does not answer: the check stays on the safe side)."""
        if not self._published:
            return []
        try:
            committed = self.svc.updater_committed()
        except KafkaException as exc:
            log.warning("label changes: the updater's offsets not read; every published change counted pending",
                        error=str(exc))
            return list(self._published)
        self._published = [p for p in self._published if p.offset >= committed.get(p.partition, -1)]
        return list(self._published)


def _nothing_to_do(action: str, label: str, state: RegistryState, definition: LabelDefinition | None,
                   new_label: str | None) -> str | None:
    """Why the change changes nothing (no event is published), or None."""
    if action == "renamed" and state.renamed.get(label) == new_label:
        return f"{label!r} is already renamed to {new_label!r}"
    if action == "retired" and label in state.retired:
        return f"{label!r} is already retired"
    if action == "defined" and label not in state.renamed and state.definitions.get(label) == definition \
            and label not in state.retired:
        return f"{label!r} already has this definition"
    return None
