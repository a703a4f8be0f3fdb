"""The adapter's training options (no encoder: synthetic clustered vectors): the label-set objective trains, keeps
the best validation epoch, and is deterministic; the settings reach the configuration."""

from __future__ import annotations

import numpy as np
import pytest

from newsmon.shared.config import Settings
from newsmon.training_jobs.train_adapter import (
    AdapterConfig,
    config_from_settings,
    labelset_batches,
    labelset_f1,
    train_adapter,
)


def _clusters(n: int, seed: int) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """``n`` normalised 16-d vectors in 4 label clusters whose directions overlap (so retrieval confuses them),
    with a second label on a third of them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, 16))
    centres[1] = centres[0] + 0.6 * rng.standard_normal(16)
    y = rng.integers(0, 4, n)
    x = centres[y] + 1.2 * rng.standard_normal((n, 16))
    labels = [(f"c{c}",) + (("extra",) if i % 3 == 0 else ()) for i, c in enumerate(y)]
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def test_labelset_batches_shapes():
    x, labels = _clusters(60, 0)
    b = labelset_batches(labels, x, neighbours=10)
    m = len(b["query"])
    assert 0 < m <= 60 and b["nbr"].shape == (m, 10)
    assert b["carries"].shape[:2] == (m, 10) and b["gold"].shape == b["valid"].shape == (m, b["carries"].shape[2])
    assert not np.any(b["nbr"] == b["query"][:, None])  # itself never its own neighbour
    assert np.all(b["gold"] <= b["valid"]) and np.all(b["gold"].any(1))  # every query has a gold label nearby
    # a neighbour carries exactly the query-local labels it has
    i, j = 0, 0
    local = sorted({lb for a in b["nbr"][i] for lb in labels[a]})
    assert {local[k] for k in np.flatnonzero(b["carries"][i, j])} == set(labels[b["nbr"][i, j]])


def test_labelset_objective_trains_and_is_deterministic():
    x, labels = _clusters(200, 1)
    vx, vlabels = _clusters(60, 2)
    batches = labelset_batches(labels, x, neighbours=20)
    cfg = AdapterConfig(objective="labelset", neighbours=20, max_epochs=8, patience=8, learning_rate=5e-3,
                        decay=0.001, batch=64)
    a = train_adapter(x, batches, vx, vlabels, labels, cfg)
    b = train_adapter(x, batches, vx, vlabels, labels, cfg)
    assert np.array_equal(a.W, b.W) and a.history == b.history and a.best_epoch == b.best_epoch
    assert a.history[0] == pytest.approx(labelset_f1(vx, vlabels, x, labels, 20, cfg.temperature))
    assert max(a.history) == a.history[a.best_epoch] >= a.history[0]
    assert a.losses[-1] < a.losses[0]  # the objective falls
    if a.best_epoch == 0:
        assert np.array_equal(a.W, np.eye(16, dtype=np.float32))


def test_adapter_settings_reach_the_config():
    s = Settings()
    s.training.adapter_objective = "labelset"
    s.training.adapter_neighbours = 30
    s.training.adapter_patience = 4
    s.training.adapter_rank = 8
    cfg = config_from_settings(s)
    assert (cfg.objective, cfg.neighbours, cfg.patience, cfg.rank) == ("labelset", 30, 4, 8)
    assert config_from_settings(Settings()).objective == "infonce"  # the default is unchanged
    assert Settings().calibration.adapted_memory_articles is False


def test_low_rank_adapter_trains_and_is_deterministic():
    x, labels = _clusters(200, 3)
    vx, vlabels = _clusters(60, 4)
    from newsmon.training_jobs.mining import mine_pair_indices

    triples = mine_pair_indices(labels, x, top=100, n_neg=5, positive="weighted", n_pos=4)
    cfg = AdapterConfig(rank=2, max_epochs=6, patience=6, learning_rate=1e-2, batch=64)
    a = train_adapter(x, triples, vx, vlabels, labels, cfg)
    b = train_adapter(x, triples, vx, vlabels, labels, cfg)
    assert np.array_equal(a.W, b.W) and a.history == b.history
    # W - I has rank <= 2 (the identity when no epoch beat it)
    assert np.linalg.matrix_rank(a.W - np.eye(16, dtype=np.float32), tol=1e-5) <= 2
    assert a.losses[-1] < a.losses[0]
