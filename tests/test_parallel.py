"""The calibration's folds side by side (newsmon.shared.parallel, issue 38's cost): the same models and scores as
one fold after the other, whatever the number of threads."""

from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest
from test_stacking import _context, _sources
from threadpoolctl import threadpool_info

from newsmon.shared import parallel
from newsmon.shared.parallel import run_jobs
from newsmon.shared.scoring import LabelVocab
from newsmon.shared.scoring.components import head_model, stacking
from newsmon.shared.scoring.components.head_model import one_blas_thread
from newsmon.shared.scoring.components.stacking import StackingComponent, StackingOptions


def test_results_come_back_in_job_order_and_a_failure_is_raised():
    def job(i: int) -> int:
        time.sleep(0.02 * (5 - i))  # the first jobs end last
        return i * i

    for n in (1, 2, 3):
        assert run_jobs([functools.partial(job, i) for i in range(5)], n) == [0, 1, 4, 9, 16]
    assert run_jobs([]) == []

    def bad() -> int:
        raise ValueError("fold 1 could not be fitted")

    with pytest.raises(ValueError, match="fold 1"):
        run_jobs([functools.partial(job, 0), bad, functools.partial(job, 2)], 2)


def test_the_workers_are_the_cores_at_most_two_and_at_most_the_jobs():
    assert parallel.workers(0) == 1 and parallel.workers(1) == 1
    assert parallel.workers(5) == min(parallel.MAX_WORKERS, len(__import__("os").sched_getaffinity(0)))


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_a_job_leaving_its_one_thread_context_leaves_blas_on_one_thread_for_the_others():
    """BLAS's thread count is process-wide: a job's own one-thread context, entered and left while another job
    runs, must not hand that job a second BLAS thread (its sums would change with the split)."""
    if not _blas_threads():
        pytest.skip("no BLAS library loaded")
    left = threading.Event()
    seen: list[list[int]] = []

    def short() -> None:
        with one_blas_thread():
            pass
        left.set()

    def long() -> None:
        assert left.wait(10), "the other job never ran"
        seen.append(_blas_threads())

    run_jobs([long, short], 2)
    assert seen and all(n == 1 for n in seen[0]), seen


@pytest.mark.slow  # cross-fitted boosted trees, twice
def test_stacking_folds_in_two_threads_equal_the_folds_in_turn(monkeypatch):
    labels, counts, gold, first, second = _sources(m=600)
    average = 0.5 * first + 0.5 * second
    opts = StackingOptions(candidates=12, iterations=60)
    got = {}
    for n in (1, 2):
        monkeypatch.setattr(stacking, "run_jobs", functools.partial(run_jobs, max_workers=n))
        ev, _model = StackingComponent().cross_fit(average, LabelVocab(labels), _context(labels, counts, first,
                                                                                           second), opts, gold)
        got[n] = ev.scored
    assert got[1] is not None and got[2] is not None
    for a, b in zip(got[1], got[2], strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got[1][2].std() > 0  # the models did learn something to compare


def test_head_model_folds_in_two_threads_equal_the_folds_in_turn(monkeypatch):
    rng = np.random.default_rng(5)
    words = np.array("gospodarstvo banka delnica vlada volitve nogomet tekma zdravnik bolnica cena".split())
    texts = [" ".join(rng.choice(words, rng.integers(3, 30))) for _ in range(300)]
    labels = [tuple(lb for lb, w in (("a", "banka"), ("b", "tekma"), ("c", "vlada")) if w in t or rng.random() < 0.1)
              for t in texts]
    got = {}
    for n in (1, 2):
        monkeypatch.setattr(head_model, "run_jobs", functools.partial(run_jobs, max_workers=n))
        got[n] = head_model.out_of_fold(texts, labels, 10.0)
    assert got[1].labels == got[2].labels == ["a", "b", "c"]
    assert np.array_equal(got[1].probs, got[2].probs) and got[1].probs.std() > 0
