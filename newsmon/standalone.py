"""Where the broker of a standalone process is: ``newsmon serve``, ``newsmon worker all`` and ``newsmon demo`` start
an embedded broker on a free loopback port when no Kafka is configured (:func:`newsmon.broker.kafka_or_embedded`);
while one runs, its address is recorded in its home (``<home>/standalone.json``: the broker's ``bootstrap``, the
process's ``pid``, the ``command``, and the broker's ``journal`` file when it keeps one, :mod:`newsmon.journal`), so
that ``newsmon publish`` run beside it, with the same ``NEWSMON_HOME``, publishes to that broker without being told
its port, and waits until what it published is in that journal.

The record is written when the broker is up and removed when the process ends its broker; a record whose process
is gone (killed) is treated as absent and said so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from newsmon.shared.config import Settings

__all__ = ["RECORD", "announced", "standalone_broker"]

RECORD = "standalone.json"


def _record(settings: Settings) -> Path:
    return Path(settings.home).expanduser() / RECORD


@contextmanager
def announced(settings: Settings, broker: Any, command: str) -> Iterator[None]:
    """Record ``broker``'s address (a :class:`~newsmon.broker.TansuBroker`, or None for a configured Kafka: nothing
    is recorded) in the home for the life of the block; the record is removed at the end unless another process
    has replaced it meanwhile."""
    if broker is None:
        yield
        return
    path = _record(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    journal = getattr(broker, "journal", None)  # kafka_or_embedded's BrokerJournal, or None (in memory)
    me = {"bootstrap": broker.bootstrap, "pid": os.getpid(), "command": command,
          "journal": str(journal.path) if journal is not None else None}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(me), encoding="utf-8")
    tmp.replace(path)
    try:
        yield
    finally:
        try:
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass


def standalone_broker(settings: Settings) -> tuple[dict | None, str]:
    """(the record of the standalone process running in ``settings.home``, or None; why not, in words when None)."""
    path = _record(settings)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        pid, bootstrap = int(rec["pid"]), str(rec["bootstrap"])
    except FileNotFoundError:
        return None, f"no `newsmon serve` (or `worker all`, `demo --serve`) is running with the home {path.parent}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{path} is not a record of a running `newsmon serve` ({exc})"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None, (f"the `newsmon {rec.get('command', 'serve')}` recorded in {path} (pid {pid}) is no longer "
                      "running; start it again")
    except PermissionError:
        pass  # alive, another user's
    return {**rec, "bootstrap": bootstrap, "pid": pid}, ""
