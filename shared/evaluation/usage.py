"""What one eval row cost: wall time and peak resident memory (RSS) of the process that computed it.

The peak of this process during one row comes from Linux's high-water mark: :func:`reset_peak` writes ``5`` to
``/proc/self/clear_refs`` (which resets ``VmHWM`` to the current RSS, Linux >= 4.0) and :func:`peak_rss_mib` reads
``VmHWM`` from ``/proc/self/status``. Where the reset is not allowed, the peak is the process's since it started
(``resource.getrusage``), and :func:`reset_peak` says so by returning False. A row computed in other processes
(the Annif peer) reports their own peak instead (:meth:`newsmon.shared.predictors.base.Predictor.usage`).

Before a row, :func:`release_free_heap` hands the memory the earlier work freed back to the system (the embedded
memory's search leaves about 900 MB of free heap on sentinews_sl that glibc keeps mapped), so the RSS a row's peak
starts from is what the process still uses, not what it once used.
"""

from __future__ import annotations

import ctypes
import gc
import resource
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak() -> bool:
    """Reset this process's peak RSS to its current RSS; False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB since the last :func:`reset_peak` (or since it started)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def release_free_heap() -> bool:
    """Collect garbage, then return the C heap's free memory to the system (glibc's ``malloc_trim(0)``); False
    where there is no such call (another C library): the garbage is still collected."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
