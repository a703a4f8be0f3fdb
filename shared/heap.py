"""The serving processes' garbage-collection policy: once their long-lived state is loaded, it is frozen out of the
cyclic collector.

A scoring batch allocates thousands of short-lived container objects (a search hit's payload dict and label tuple,
its lexical vector's arrays, the neighbours). CPython's collector (3.11: three generations, a full collection once
the objects that survived the young generations reach a quarter of the old generation) then walks every tracked
object the process holds, the encoder's, the vocabularies' and the models' included, and finds nothing to free: a
pause of tens of milliseconds in one batch of every few dozen, the tail of the batch latency
(``benchmarks/scale.py``). :func:`freeze_long_lived` moves everything alive into the permanent generation
(:func:`gc.freeze`, Python's documented remedy for a process whose start-up state lives until it exits), so a full
collection walks only what was allocated since. It is called where a serving process has its long-lived state: the
scorer's model source after it loads a calibration record's models (the first batch, and each record change;
:class:`newsmon.shared.scoring.models.MemoryModels`). Objects frozen are never freed by the collector (reference
counting still frees them), so it collects once first.
"""

from __future__ import annotations

import gc
import time

import structlog

log = structlog.get_logger(__name__)


def freeze_long_lived(why: str) -> int:
    """Collect every generation, then freeze what is alive (:func:`gc.freeze`); returns the objects frozen in all
    (:func:`gc.get_freeze_count`). ``why``: what was loaded, for the log line. Never raises."""
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("long-lived objects frozen out of the cyclic collector", why=why, frozen=frozen,
             seconds=round(time.perf_counter() - t0, 3))
    return frozen
