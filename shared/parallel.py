"""Independent jobs of the calibration (its folds' model fits) run side by side in threads, with the same results
as one after the other.

The calibration's cross-fitting fits one model per fold; stacking's boosted trees and the head model's logistic
regressions (liblinear's primal solver) run here: each fit is independent of the others and spends its time in
compiled code that releases the GIL, so two threads on two cores take about half the wall time. The label tree's
folds do not: liblinear's dual solver draws its coordinate order from one random generator of the whole process,
which two fits at once would reseed under each other.

Same inputs, same outputs: every job keeps its own single-threaded compiled code: every BLAS and OpenMP library is
held at one thread for the whole pool (a process-wide setting, such as OpenBLAS's own threads: so one job leaving
its own one-thread context, e.g. :func:`~newsmon.shared.scoring.components.head_model.one_blas_thread`, cannot hand
a second thread to another job still running) and again inside each worker thread (a per-thread setting, such as
OpenMP's and a BLAS built on it, which the calling thread's limit does not reach); jobs share no mutable state, and
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
    with threadpool_limits(limits=1):
        if n == 1:
            return [job() for job in jobs]
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="newsmon-fold") as pool:
            futures = [pool.submit(_on_one_thread, job) for job in jobs]
            return [f.result() for f in futures]


def _on_one_thread(job: Callable[[], T]) -> T:
    """``job()`` with every BLAS and OpenMP library on one thread in this worker thread too: a library whose
    thread count is per thread (OpenMP's, and a BLAS built on OpenMP) does not see the limit the calling thread set."""
    with threadpool_limits(limits=1):
        return job()
