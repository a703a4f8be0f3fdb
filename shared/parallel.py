"""Independent jobs of the calibration (its folds' model fits) run side by side in threads, with the same results
as one after the other.

The calibration's cross-fitting fits one model per fold (stacking's boosted trees, the head model's and the label
tree's liblinear fits); each fit is independent of the others and spends its time in compiled code that releases
the GIL (scikit-learn's tree growing, liblinear), so two threads on two cores take about half the wall time.

Same inputs, same outputs: every job keeps its own single-threaded compiled code (OpenMP's thread count is set per
thread, inside the job, by the component's own context: :func:`~newsmon.shared.scoring.components.stacking.
one_thread`; BLAS's is process-wide and held at one thread here for the whole pool, so one job leaving its own
one-thread context cannot hand a second BLAS thread to another job still running), jobs share no mutable state, and
the results come back in job order. So the models and scores are bit for bit those of a sequential run whatever
the number of workers (``tests/test_parallel.py`` compares them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from threadpoolctl import threadpool_limits

T = TypeVar("T")

#: The most jobs run at once (the cores this process may use, at most this many).
MAX_WORKERS = 2


def workers(jobs: int) -> int:
    """How many threads :func:`run_jobs` uses for ``jobs`` jobs: the cores this process may use (its CPU
    affinity), at most :data:`MAX_WORKERS` and at most ``jobs``; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_WORKERS, cores, jobs))


def run_jobs(jobs: Sequence[Callable[[], T]], max_workers: int | None = None) -> list[T]:
    """The results of ``jobs`` (functions without arguments, independent of each other), in their order.

    Args:
        jobs: the jobs; max_workers: threads (default :func:`workers`); 1 runs them one after the other in this
            thread.

    Raises:
        whatever a job raises (the first failing job's error, in job order; the others are waited for)."""
    n = workers(len(jobs)) if max_workers is None else max(1, min(max_workers, len(jobs)))
    with threadpool_limits(limits=1, user_api="blas"):
        if n == 1:
            return [job() for job in jobs]
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="newsmon-fold") as pool:
            futures = [pool.submit(job) for job in jobs]
            return [f.result() for f in futures]
