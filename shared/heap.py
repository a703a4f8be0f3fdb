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
scorer's model source after it loads a calibration record's models (the classifier's warm-up before its first
consume, and each record change;
:class:`newsmon.shared.scoring.models.MemoryModels`). Objects frozen are never freed by the collector (reference
counting still frees them), so it collects once first.
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable

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


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None under another C library)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim(0)``, which also returns the wholly
    free pages inside the heap, not only its top); False where there is no such call. No garbage collection: a few
    milliseconds on a heap of a few GB.

    Why: a calibration step allocates and frees millions of small objects and arrays (per-article rows, label
    tuples, the fused neighbours' lists); glibc keeps the pages they leave free, so a process's resident memory
    grows by every step's churn and never comes down: the eval row of sentinews_sl grew from 854 to 1,580 MiB while
    what it held alive grew by less than 200 MiB, and stayed below 900 MiB with the free pages handed back. The
    calibration trims after each step (:meth:`~newsmon.shared.scoring.calibration.run.CalibrationRun.record`) and
    after each grid of its searches."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
