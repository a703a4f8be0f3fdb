"""The workers' state on local disk where no Redis is configured (embedded mode, ``newsmon serve`` on its own): the
label registry and the decisions parked for their article, in ``<home>/state/``, so that a restart or a kill of
the process keeps them.

* :class:`FileLabelRegistry`: the in-process registry (:class:`~newsmon.workers.labels.LabelRegistry`), its state
  written to ``labels.json`` after every change, before the memory updater commits the label event (atomically:
  a temporary file, fsync, rename, fsync of the folder), and read back at start. The ``label-events`` topic is
  its log: what the file does not hold yet is still on the topic, uncommitted.
* :class:`SqliteDecisionPark`: the park (:class:`~newsmon.workers.parking.DecisionPark`) in ``parked.sqlite``
  (one row per parked message, committed before the decision's offset is).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import structlog

from newsmon.schemas import LabelDefinition
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.parking import DecisionPark, Entry, ParkedMessage

log = structlog.get_logger(__name__)

__all__ = ["FileLabelRegistry", "SqliteDecisionPark", "write_atomically"]


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` so that a crash leaves the old or the new content, never a mix: a temporary
    file beside it, fsync, rename, fsync of the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileLabelRegistry(LabelRegistry):
    """The in-process registry kept in a JSON file (see the module docstring).

    Args:
        path: the file (``<home>/state/labels.json``); read when it exists.

    Raises:
        ValueError: the file exists and does not parse (it names the file; move it away to start empty, or
            restore it from a copy).
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self._renamed = dict(data["renamed"])
                self._retired = set(data["retired"])
                self._definitions = {k: LabelDefinition.model_validate(v) for k, v in data["definitions"].items()}
                self._version = int(data["version"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"the label registry at {self.path} does not parse ({type(exc).__name__}: {exc}); "
                                 "move it away to start with an empty registry") from None
            log.info("label registry read", path=str(self.path), definitions=len(self._definitions),
                     renamed=len(self._renamed), retired=len(self._retired), version=self._version)

    def _save(self) -> None:
        state = self.snapshot()
        write_atomically(self.path, json.dumps({
            "version": state.version, "renamed": state.renamed, "retired": sorted(state.retired),
            "definitions": {k: v.model_dump(mode="json") for k, v in sorted(state.definitions.items())}},
            ensure_ascii=False))

    def define(self, label: str, definition: LabelDefinition) -> None:
        super().define(label, definition)
        self._save()

    def retire(self, label: str) -> None:
        super().retire(label)
        self._save()

    def add(self, label: str) -> None:
        super().add(label)
        self._save()

    def rename(self, old: str, new: str) -> None:
        super().rename(old, new)
        self._save()


class SqliteDecisionPark(DecisionPark):
    """The park in a SQLite file (see the module docstring); same behaviour as the in-process one.

    Args:
        path: the file (``<home>/state/parked.sqlite``); max_decisions, expiry_s: as :class:`DecisionPark`.
    """

    def __init__(self, path: Path, max_decisions: int, expiry_s: float) -> None:
        super().__init__(max_decisions, expiry_s)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS "
                               "parked (id TEXT PRIMARY KEY, article_id TEXT, parked_at REAL, message TEXT)")
        self._db_lock = threading.Lock()

    def park(self, msg: ParkedMessage) -> bool:
        with self._db_lock:
            if self._db.execute("SELECT 1 FROM parked WHERE id = ?", (msg.id,)).fetchone():
                return True
            if self._db.execute("SELECT COUNT(*) FROM parked").fetchone()[0] >= self.max_decisions:
                return False
            self._db.execute("INSERT INTO parked VALUES (?, ?, ?, ?)", (msg.id, msg.article_id, msg.parked_at,
                                                                         msg.to_json()))
            return True

    def entries(self) -> list[Entry]:
        with self._db_lock:
            rows = self._db.execute("SELECT article_id, id, parked_at FROM parked ORDER BY parked_at, id").fetchall()
        return [Entry(a, i, t + self.expiry_s) for a, i, t in rows]

    def get(self, ids: list[str]) -> list[ParkedMessage]:
        with self._db_lock:
            found = {i: m for i, m in self._db.execute(
                f"SELECT id, message FROM parked WHERE id IN ({','.join('?' * len(ids))})", ids)} if ids else {}
        return [ParkedMessage.from_json(found[i]) for i in ids if i in found]

    def remove(self, ids: list[str]) -> None:
        if ids:
            with self._db_lock:
                self._db.executemany("DELETE FROM parked WHERE id = ?", [(i,) for i in ids])

    def __len__(self) -> int:
        with self._db_lock:
            return int(self._db.execute("SELECT COUNT(*) FROM parked").fetchone()[0])
