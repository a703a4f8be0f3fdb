"""The label registry: retired labels and renames (old -> new), applied to every proposal.

Label events (added / retired / renamed) arrive on the ``label-events`` topic and are consumed by the
memory-updater worker, which writes them here; classifier workers read the registry before scoring each
batch. A renamed label keeps its history: memory articles still carrying the old name count as evidence for
the new one (the mapping is applied to the neighbours' label sets before RAE-XMC scoring). A retired label
is removed from the neighbours' label sets, so it is never proposed again from the moment its event is
consumed.

Labels are kept and compared in their canonical form (:func:`~newsmon.schemas.base.canonical_label`: NFC, lower
case), on writes and on reads: retiring ``Šport`` (NFC) retires ``Šport`` written in NFD and ``ŠPORT``, also on
neighbours stored before the label policy.

Two stores: in-process (embedded mode, both workers in one process) and Redis (shared by every replica).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import redis

from newsmon.schemas.base import canonical_label as _canon


class LabelRegistry:
    """In-process registry. ``apply(labels)`` maps a label set through renames and drops retired labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._renamed: dict[str, str] = {}
        self._retired: set[str] = set()

    # -- writes (memory updater) -------------------------------------------------------------------
    def retire(self, label: str) -> None:
        """Never propose ``label`` (or anything renamed to it) again."""
        with self._lock:
            self._retired.add(_canon(label))

    def add(self, label: str) -> None:
        """(Re-)activate ``label``: a retired label can come back."""
        with self._lock:
            self._retired.discard(_canon(label))

    def rename(self, old: str, new: str) -> None:
        """``old`` becomes ``new``; earlier renames to ``old`` follow (a -> old -> new gives a -> new)."""
        old, new = _canon(old), _canon(new)
        with self._lock:
            self._renamed[old] = new
            for k, v in list(self._renamed.items()):
                if v == old:
                    self._renamed[k] = new
            self._renamed.pop(new, None)

    # -- reads (classifier) ------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, str], frozenset[str]]:
        """(renames, retired) as of now."""
        with self._lock:
            return dict(self._renamed), frozenset(self._retired)

    def apply(self, labels: Iterable[str], snapshot: tuple[dict[str, str], frozenset[str]] | None = None) -> tuple:
        """Map ``labels`` (canonical form first) through renames, drop retired ones; order kept, duplicates
        removed."""
        renamed, retired = snapshot or self.snapshot()
        out = []
        for lb in labels:
            lb = _canon(lb)
            lb = renamed.get(lb, lb)
            if lb not in retired and lb not in out:
                out.append(lb)
        return tuple(out)


class RedisLabelRegistry(LabelRegistry):
    """The registry in Redis (hash ``<ns>:renamed`` old -> new, set ``<ns>:retired``), shared by replicas.

    Raises:
        redis.exceptions.ConnectionError: Redis unreachable (callers retry).
    """

    def __init__(self, url: str, namespace: str = "newsmon:labels") -> None:
        super().__init__()
        self.r = redis.Redis.from_url(url)
        self.ns = namespace

    def retire(self, label: str) -> None:
        self.r.sadd(f"{self.ns}:retired", _canon(label))

    def add(self, label: str) -> None:
        self.r.srem(f"{self.ns}:retired", _canon(label))

    def rename(self, old: str, new: str) -> None:
        old, new = _canon(old), _canon(new)
        key = f"{self.ns}:renamed"
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    current = {k.decode(): v.decode() for k, v in pipe.hgetall(key).items()}
                    pipe.multi()
                    pipe.hset(key, old, new)
                    for k, v in current.items():
                        if v == old:
                            pipe.hset(key, k, new)
                    pipe.hdel(key, new)
                    pipe.execute()
                    return
                except redis.WatchError:  # the hash changed between WATCH and EXEC: try again
                    continue

    def snapshot(self) -> tuple[dict[str, str], frozenset[str]]:
        with self.r.pipeline(transaction=False) as pipe:
            pipe.hgetall(f"{self.ns}:renamed")
            pipe.smembers(f"{self.ns}:retired")
            renamed, retired = pipe.execute()
        return ({k.decode(): v.decode() for k, v in renamed.items()}, frozenset(x.decode() for x in retired))

    def clear(self) -> None:
        """Forget everything (tests, demo)."""
        self.r.delete(f"{self.ns}:renamed", f"{self.ns}:retired")


def open_registry(redis_url: str | None, namespace: str = "newsmon:labels") -> LabelRegistry:
    """Redis-backed when ``redis_url`` is set, else in-process."""
    return RedisLabelRegistry(redis_url, namespace) if redis_url else LabelRegistry()
