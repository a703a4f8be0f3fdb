"""Arrays on disk, byte for byte the same for the same arrays: the score components' stored models (the calibration
record names their archive by its SHA-256, so a calibration repeated on the same inputs must write the same bytes).

An ``.npz`` file as :func:`numpy.load` reads it, written without what ``numpy.savez`` adds of the moment (each
zip entry's time stamp): entries in name order, time stamps fixed at 1980-01-01, no compression.
"""

from __future__ import annotations

import io
import threading
import zipfile
from pathlib import Path

import numpy as np

_EPOCH = (1980, 1, 1, 0, 0, 0)

#: One ``.npz`` read at a time in the process. numpy parses each array's header with ``ast.literal_eval``, and
#: CPython 3.11's conversion of a parse into AST objects keeps its recursion depth per interpreter, not per thread:
#: two threads parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch`` (CPython
#: gh-106905; a fresh clone's demo met it on 8 December, a worker's warm-up reading a record's models while the
#: main thread imported anyio, which parses its own source). Every stored model of this package is read under it.
NPZ_LOCK = threading.Lock()


def save_arrays(path: Path, **arrays: np.ndarray) -> None:
    """Write ``arrays`` (name -> array, no Python objects) to the ``.npz`` file ``path``.

    Raises:
        ValueError: an array of Python objects (it would need pickling)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for name in sorted(arrays):
            a = np.asarray(arrays[name])
            if a.dtype.hasobject:
                raise ValueError(f"array {name!r} holds Python objects; store strings as a fixed-width str array")
            buf = io.BytesIO()
            np.lib.format.write_array(buf, a, allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            z.writestr(info, buf.getvalue())


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file ``path`` (no pickles), every one read now, under :data:`NPZ_LOCK`.

    Raises:
        OSError, ValueError: a missing or unreadable file."""
    with NPZ_LOCK, np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in z.files}
