"""The label registry: label definitions (KwEs and filters), retired labels and renames (old -> new).

Label events (defined / updated / added / retired / renamed) arrive on the ``label-events`` topic and are
consumed by the memory-updater worker, which writes them here; classifier workers read the registry before
scoring each batch, and the HTTP API reads it to answer ``GET /v1/labels/{label}`` (it changes it only by
publishing label events, so the topic stays the single path of truth).

* ``defined`` / ``updated``: the label's :class:`~newsmon.schemas.LabelDefinition` is stored (replacing any
  earlier one) and the label is active (a retired label defined again comes back).
* ``retired``: never proposed again from the moment its event is consumed: it is removed from the neighbours'
  label sets and its rules stop matching (the definition is kept, so ``added`` brings the label back whole).
* ``renamed``: memory articles still carrying the old name count as evidence for the new one (the mapping is
  applied to the neighbours' label sets before RAE-XMC scoring), and the old name's definition moves to the
  new name (merged into the new name's own definition when it has one: its KwEs appended, its filters and
  options kept).
* ``added``: the label is (re-)activated.

Invariants, for every sequence of events in any order (``tests/test_label_registry_properties.py`` checks them
with hypothesis on both stores): **a rename never loses history** -- names that once stood for one label stand
for one label from then on (``luka`` renamed to ``luka koper``: the examples of both count for ``luka koper``
whatever comes later); the renames have no chains (old -> current name) and no definition or retirement sits on
a name renamed away; a refused event changes nothing. So these are refused (:class:`LabelConflict`, 409 in the
API, the event dead-lettered by the memory updater) by :func:`conflict`, the one check of both stores and the
API:

* any event on a name that was renamed away other than renaming it back (define, retire, add, rename it): its
  history belongs to the new name; act on that one;
* a rename into a name that was renamed away, except the undo (``a`` -> ``b``, then ``b`` -> ``a``): it would
  detach that name's history from where it went (``pristanisce`` -> ``luka`` after ``luka`` -> ``luka koper``
  used to drop the first rename: ``luka koper`` lost its old examples to a new ``luka``);
* renaming a label to itself, or renaming a retired label (add it back first: which of two statuses the merged
  label should have is the moderator's call).

Labels are kept and compared in their canonical form (:func:`~newsmon.schemas.base.canonical_label`: NFC, lower
case), on writes and on reads: retiring ``Šport`` (NFC) retires ``Šport`` written in NFD and ``ŠPORT``, also on
neighbours stored before the label policy.

Every change increments the registry's ``version``, so a reader rebuilds its rule index only when something
changed. Two stores: in-process (embedded mode, both workers in one process) and Redis (shared by every
replica).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import NamedTuple, cast

import redis
import structlog

from newsmon.schemas import LabelDefinition, LabelEvent
from newsmon.schemas.base import canonical_label as _canon

log = structlog.get_logger(__name__)

__all__ = ["LabelConflict", "LabelRegistry", "RedisLabelRegistry", "RegistryState", "apply_event", "conflict",
           "merge_definitions", "open_registry", "refusal", "replay"]

MAX_KWES = 100  # LabelDefinition.kwes max_length


class LabelConflict(ValueError):
    """A label change that contradicts the registry (see :func:`conflict`)."""


class RegistryState(NamedTuple):
    """The registry as of one moment (``snapshot()``); a tuple, so ``state[0]`` / ``state[1]`` still read the
    renames and the retired labels.

    Attributes:
        renamed: old name -> current name (chains resolved); retired: the retired labels; definitions: label ->
        its definition (retired labels' kept too); version: increases with every change.
    """

    renamed: dict[str, str]
    retired: frozenset[str]
    definitions: dict[str, LabelDefinition]
    version: int

    def active_definitions(self) -> dict[str, LabelDefinition]:
        """The definitions of the labels that are not retired (the rules that match)."""
        return {lb: d for lb, d in self.definitions.items() if lb not in self.retired}

    def names_of(self, label: str) -> tuple[str, ...]:
        """``label`` and every old name renamed to it (the names its examples carry in the memory)."""
        return (label, *sorted(old for old, new in self.renamed.items() if new == label))

    def knows(self, label: str) -> bool:
        """Whether the registry has any record of ``label`` (defined, retired, renamed from or to)."""
        return (label in self.definitions or label in self.retired or label in self.renamed
                or label in self.renamed.values())


def merge_definitions(kept: LabelDefinition | None, moved: LabelDefinition) -> LabelDefinition:
    """The definition a rename leaves on the new name: ``moved`` when the new name had none, else ``kept`` with
    ``moved``'s KwEs appended (duplicates dropped; at most 100, the rest logged and dropped)."""
    if kept is None:
        return moved
    kwes = list(dict.fromkeys([*kept.kwes, *moved.kwes]))
    if len(kwes) > MAX_KWES:
        log.warning("rename: KwEs beyond 100 dropped", dropped=kwes[MAX_KWES:])
        kwes = kwes[:MAX_KWES]
    return kept.model_copy(update={"kwes": kwes})


class LabelRegistry:
    """In-process registry. ``apply(labels)`` maps a label set through renames and drops retired labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._renamed: dict[str, str] = {}
        self._retired: set[str] = set()
        self._definitions: dict[str, LabelDefinition] = {}
        self._version = 0

    # -- writes (memory updater) -------------------------------------------------------------------
    def define(self, label: str, definition: LabelDefinition) -> None:
        """Set (or replace) the definition of ``label`` and activate it.

        Raises:
            LabelConflict: ``label`` was renamed to another name.
        """
        label = _canon(label)
        with self._lock:
            _check("defined", label, self._renamed)
            self._definitions[label] = definition
            self._retired.discard(label)
            self._version += 1

    def retire(self, label: str) -> None:
        """Never propose ``label`` (or anything renamed to it) again; its rules stop matching.

        Raises:
            LabelConflict: ``label`` was renamed to another name.
        """
        with self._lock:
            _check("retired", label, self._renamed)
            self._retired.add(_canon(label))
            self._version += 1

    def add(self, label: str) -> None:
        """(Re-)activate ``label``: a retired label can come back (with its definition, if it had one).

        Raises:
            LabelConflict: ``label`` was renamed to another name.
        """
        with self._lock:
            _check("added", label, self._renamed)
            self._retired.discard(_canon(label))
            self._version += 1

    def rename(self, old: str, new: str) -> None:
        """``old`` becomes ``new``; earlier renames to ``old`` follow (a -> old -> new gives a -> new), and the
        definition of ``old`` moves to ``new`` (:func:`merge_definitions`).

        Raises:
            LabelConflict: refused by :func:`conflict` (``old`` renamed away or retired, ``new`` renamed away
                elsewhere, ``old == new``).
        """
        old, new = _canon(old), _canon(new)
        with self._lock:
            _check("renamed", old, self._renamed, self._retired, new)
            self._renamed = _renamed_after(self._renamed, old, new)
            moved = self._definitions.pop(old, None)
            if moved is not None:
                self._definitions[new] = merge_definitions(self._definitions.get(new), moved)
            self._version += 1

    # -- reads (classifier, API) -------------------------------------------------------------------
    def snapshot(self) -> RegistryState:
        """The registry as of now."""
        with self._lock:
            return RegistryState(dict(self._renamed), frozenset(self._retired), dict(self._definitions),
                                 self._version)

    def apply(self, labels: Iterable[str], snapshot: RegistryState | None = None) -> tuple:
        """Map ``labels`` (canonical form first) through renames, drop retired ones; order kept, duplicates
        removed."""
        state = snapshot or self.snapshot()
        renamed, retired = state[0], state[1]
        out = []
        for lb in labels:
            lb = _canon(lb)
            lb = renamed.get(lb, lb)
            if lb not in retired and lb not in out:
                out.append(lb)
        return tuple(out)


def conflict(action: str, label: str, renamed: dict[str, str], retired: Iterable[str] = (),
             new_label: str | None = None) -> str | None:
    """Why the registry refuses ``action`` (``defined``, ``updated``, ``retired``, ``added``, ``renamed``) on
    ``label`` (to ``new_label``) given its ``renamed`` and ``retired`` (canonical names), or None when it
    applies. The one check of both stores and the API (see the module docstring)."""
    label = _canon(label)
    if action == "renamed":
        new = _canon(new_label or "")
        if new == label:
            return f"label {label!r} cannot be renamed to itself"
        if label in renamed:
            return (f"label {label!r} was renamed to {renamed[label]!r}: its history belongs to that name; "
                    "rename that one")
        if new in renamed and renamed[new] != label:
            return (f"label {new!r} was renamed to {renamed[new]!r}: renaming {label!r} into it would detach "
                    f"its history from {renamed[new]!r}; choose another name")
        if label in set(retired):
            return f"label {label!r} is retired: add it back before renaming it"
        return None
    if label in renamed:
        verb = {"defined": "define", "updated": "define", "retired": "retire", "added": "add"}.get(action, action)
        return (f"label {label!r} was renamed to {renamed[label]!r}: its history belongs to the new name; "
                f"{verb} that one, or choose another name")
    return None


def apply_event(registry: LabelRegistry, ev: LabelEvent) -> None:
    """Apply one label event to ``registry``: how the memory updater writes it, and how :func:`replay` foresees it.

    Raises:
        LabelConflict: the registry refuses it (:func:`conflict`); nothing changed.
    """
    if ev.action in ("defined", "updated"):
        registry.define(ev.label, cast(LabelDefinition, ev.definition))
    elif ev.action == "retired":
        registry.retire(ev.label)
    elif ev.action == "renamed":
        registry.rename(ev.label, cast(str, ev.new_label))
    else:
        registry.add(ev.label)


def replay(state: RegistryState, events: Iterable[LabelEvent]) -> RegistryState:
    """``state`` once ``events`` are applied in order, as the registry applies them (a refused one changes
    nothing: the memory updater dead-letters it). In memory; ``state`` is not changed."""
    reg = LabelRegistry()
    reg._renamed, reg._retired = dict(state.renamed), set(state.retired)
    reg._definitions, reg._version = dict(state.definitions), state.version
    for ev in events:
        try:
            apply_event(reg, ev)
        except LabelConflict:
            continue
    return reg.snapshot()


def refusal(state: RegistryState, event: LabelEvent, pending: Iterable[LabelEvent] = ()) -> str | None:
    """Why the registry will refuse ``event`` once the ``pending`` events (published before it, not applied yet)
    are applied to ``state``, or None when it will apply it: :func:`conflict` on :func:`replay`'s state. The one
    check of every path that changes a label before it publishes the event (the API's ``/v1`` routes and the
    console's, through ``newsmon.api.changes``), so a change the registry would refuse is answered 409 with this
    reason instead of being published and dead-lettered."""
    after = replay(state, pending)
    return conflict(event.action, event.label, after.renamed, after.retired, event.new_label)


def _check(action: str, label: str, renamed: dict[str, str], retired: Iterable[str] = (),
           new_label: str | None = None) -> None:
    why = conflict(action, label, renamed, retired, new_label)
    if why is not None:
        raise LabelConflict(why)


def _renamed_after(renamed: dict[str, str], old: str, new: str) -> dict[str, str]:
    out = dict(renamed)
    out[old] = new
    for k, v in list(out.items()):
        if v == old:
            out[k] = new
    out.pop(new, None)
    return out


class RedisLabelRegistry(LabelRegistry):
    """The registry in Redis, shared by replicas: hash ``<ns>:renamed`` old -> new, set ``<ns>:retired``, hash
    ``<ns>:definitions`` label -> definition JSON, counter ``<ns>:version``. Every write is one transaction that
    also increments the version; :meth:`snapshot` reads the definitions again only when the version moved.

    Raises:
        redis.exceptions.ConnectionError: Redis unreachable (callers retry).
    """

    def __init__(self, url: str, namespace: str = "newsmon:labels") -> None:
        super().__init__()
        self.r = redis.Redis.from_url(url)
        self.ns = namespace
        self._keys = {k: f"{namespace}:{k}" for k in ("renamed", "retired", "definitions", "version")}
        self._cached: tuple[int, dict[str, LabelDefinition]] | None = None

    def define(self, label: str, definition: LabelDefinition) -> None:
        k, label = self._keys, _canon(label)

        def change(pipe, current_renamed, _retired):
            _check("defined", label, current_renamed)
            pipe.hset(k["definitions"], label, definition.model_dump_json())
            pipe.srem(k["retired"], label)

        self._transaction(change)

    def retire(self, label: str) -> None:
        def change(pipe, current_renamed, _retired):
            _check("retired", label, current_renamed)
            pipe.sadd(self._keys["retired"], _canon(label))

        self._transaction(change)

    def add(self, label: str) -> None:
        def change(pipe, current_renamed, _retired):
            _check("added", label, current_renamed)
            pipe.srem(self._keys["retired"], _canon(label))

        self._transaction(change)

    def rename(self, old: str, new: str) -> None:
        k, old, new = self._keys, _canon(old), _canon(new)

        def change(pipe, current_renamed, current_retired):
            _check("renamed", old, current_renamed, current_retired, new)
            pipe.delete(k["renamed"])
            pipe.hset(k["renamed"], mapping=_renamed_after(current_renamed, old, new))
            moved = self._read_definition(old)
            if moved is not None:
                pipe.hdel(k["definitions"], old)
                pipe.hset(k["definitions"], new, merge_definitions(self._read_definition(new), moved)
                          .model_dump_json())

        self._transaction(change)

    def _read_definition(self, label: str) -> LabelDefinition | None:
        raw = self.r.hget(self._keys["definitions"], label)
        return None if raw is None else LabelDefinition.model_validate_json(raw)

    def _transaction(self, change) -> None:
        """Run ``change(pipe, renamed, retired)`` in a MULTI with the version increment, retried when a key it read
        changed meanwhile (WATCH); a :class:`LabelConflict` it raises leaves Redis as it was."""
        k = self._keys
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(k["renamed"], k["retired"], k["definitions"], k["version"])
                    current = {a.decode(): b.decode() for a, b in pipe.hgetall(k["renamed"]).items()}
                    retired = {x.decode() for x in pipe.smembers(k["retired"])}
                    pipe.multi()
                    change(pipe, current, retired)
                    pipe.incr(k["version"])
                    pipe.execute()
                    return
                except redis.WatchError:  # changed between WATCH and EXEC: try again
                    continue

    def snapshot(self) -> RegistryState:
        k = self._keys
        with self.r.pipeline(transaction=True) as pipe:
            pipe.get(k["version"])
            pipe.hgetall(k["renamed"])
            pipe.smembers(k["retired"])
            version, renamed, retired = pipe.execute()
        version = int(version or 0)
        if self._cached is not None and self._cached[0] == version:
            definitions = self._cached[1]
        else:  # something changed: everything again, from one moment
            with self.r.pipeline(transaction=True) as pipe:
                for cmd, key in (("get", "version"), ("hgetall", "renamed"), ("smembers", "retired"),
                                 ("hgetall", "definitions")):
                    getattr(pipe, cmd)(k[key])
                version, renamed, retired, raw = pipe.execute()
            version, definitions = int(version or 0), _decode_definitions(raw)
            self._cached = (version, definitions)
        return RegistryState({a.decode(): b.decode() for a, b in renamed.items()},
                             frozenset(x.decode() for x in retired), dict(definitions), version)

    def clear(self) -> None:
        """Forget everything (tests, demo)."""
        self.r.delete(*self._keys.values())
        self._cached = None


def _decode_definitions(raw: dict) -> dict[str, LabelDefinition]:
    out = {}
    for label, value in raw.items():
        try:
            out[label.decode()] = LabelDefinition.model_validate_json(value)
        except ValueError as exc:  # written by another version: skip it rather than stop every classifier
            log.warning("label definition in Redis not readable; skipped", label=label.decode(), error=str(exc))
    return out


def open_registry(redis_url: str | None, namespace: str = "newsmon:labels") -> LabelRegistry:
    """Redis-backed when ``redis_url`` is set, else in-process."""
    return RedisLabelRegistry(redis_url, namespace) if redis_url else LabelRegistry()
