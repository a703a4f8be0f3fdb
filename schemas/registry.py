"""One registry by name (:class:`Registry`) for every kind of thing newsmon finds by name: decision rules and score
components (:mod:`newsmon.schemas.scoring`), label predictors (:mod:`newsmon.shared.predictors.base`) and memory
engines (:mod:`newsmon.shared.memory.engines`), in the manner of Annif's backend registry (``annif/backend``: a
module registers its class under its name; an unknown name is an error that lists the known ones).

It sits in the lowest layer (``newsmon.schemas`` imports nothing else of newsmon) so that the wire and the method
read the same registry: the wire validates a rule's or a component's name and options against it and generates
its JSON Schema's enums from it, without importing the method that registers the rules.

Plug-ins: a registry may name an entry-point group (``group``); the modules of a group are imported once per
process (:func:`load_entry_points`), when a registry of that group is first asked for a name it does not hold or
for all its names, or when the package that registers the built-ins says so.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar, cast

__all__ = ["NAME_PATTERN", "Registry", "load_entry_points"]

T = TypeVar("T")
C = TypeVar("C", bound=type)

#: A registered name: lower-case snake case, at most 64 characters (a name is written on the wire and in settings).
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"

_loaded: set[str] = set()
_loading = threading.RLock()


def load_entry_points(group: str) -> None:
    """Import the modules of the entry-point group ``group`` (they register what they define), once per process.

    The group counts as loaded from the start of the first call, so a module of the group that triggers this call
    again while it is being imported (the package of the built-ins is one) does not import the group twice.
    Thread-safe: a second thread waits for the first to finish."""
    with _loading:
        if group in _loaded:
            return
        _loaded.add(group)
        for ep in entry_points(group=group):
            ep.load()


def _owner(item: object) -> type:
    """The class that registered ``item``: the item itself when it is a class, else its type."""
    return item if isinstance(item, type) else type(item)


class Registry(Generic[T]):
    """Things of one kind, by name, in registration order.

    Args:
        kind: what the things are, in error messages (``"decision rule"``, ``"predictor"``).
        group: the entry-point group whose modules register more of them (None: no plug-ins).
        listing: the word before the known names in the unknown-name error (``"registered"``, ``"available"``).
        instances: :meth:`register` stores an instance of the class (one object serves every call: rules,
            components) instead of the class itself (predictors, made with their parameters).
    """

    def __init__(self, kind: str, *, group: str | None = None, listing: str = "registered",
                 instances: bool = False) -> None:
        self.kind = kind
        self.group = group
        self.listing = listing
        self.instances = instances
        self._items: dict[str, T] = {}

    def register(self, cls: C) -> C:
        """Class decorator: :meth:`add` ``cls`` (or an instance of it, see ``instances``) under ``cls.name``.

        Raises:
            ValueError: as :meth:`add`.
        """
        self.add(getattr(cls, "name", ""), cast(T, cls() if self.instances else cls))
        return cls

    def add(self, name: str, item: T) -> T:
        """Register ``item`` under ``name`` (again by the same class: replaced); returns ``item``.

        Raises:
            ValueError: no name, a name that is not lower-case snake case (:data:`NAME_PATTERN`), or one taken by
                another class.
        """
        if not name:
            raise ValueError(f"{_owner(item).__name__} has no name")
        if not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(f"{self.kind} name {name!r} must be lower-case snake case (a-z, 0-9, _), at most 64 "
                             "characters")
        taken = self._items.get(name)
        if taken is not None and _owner(taken) is not _owner(item):
            raise ValueError(f"{self.kind} {name!r} is already registered by {_owner(taken).__name__}")
        self._items[name] = item
        return item

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test's own rule or component, after the test); nothing when it is not registered."""
        self._items.pop(name, None)

    def load(self) -> None:
        """Import the plug-ins of :attr:`group` (once per process; nothing without a group)."""
        if self.group is not None:
            load_entry_points(self.group)

    def find(self, name: str, load: bool = True) -> T | None:
        """The thing registered as ``name``, or None (``load``: import the plug-ins first when it is not
        registered yet)."""
        if load and name not in self._items:
            self.load()
        return self._items.get(name)

    def get(self, name: str) -> T:
        """The thing registered as ``name``.

        Raises:
            KeyError: unknown name (the message lists the known ones).
        """
        item = self.find(name)
        if item is None:
            raise KeyError(f"unknown {self.kind} {name!r}; {self.listing}: {', '.join(self._items)}")
        return item

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order (plug-ins loaded first)."""
        self.load()
        return tuple(self._items)

    def values(self) -> tuple[T, ...]:
        """Every registered thing, in registration order (plug-ins loaded first)."""
        self.load()
        return tuple(self._items.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"
