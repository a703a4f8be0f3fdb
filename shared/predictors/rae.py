"""The research baseline ``rae`` of ``eval``: simplified RAE-XMC, ``p = softmax(s / tau) . (lambda * Y)`` over the
top-k retrieved neighbours (RAE-XMC eq. 8) with the research defaults, and an Optuna search of k, tau, lambda
and the threshold (:func:`tune_rae`). The formula is :func:`newsmon.shared.scoring.rae_xmc.rae_xmc_scores`, the
base of the product's scorer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet, register
from newsmon.shared.scoring.rae_xmc import neighbour_weights, rae_xmc_scores  # noqa: F401 - re-exported
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval

#: Research defaults (RAE-XMC): k neighbours, softmax temperature tau, lambda, proposal threshold.
DEFAULTS = {"top_k": 50, "tau": 0.04, "lam": 1.0, "threshold": 0.5}


@register
class RaeXmcPredictor(Predictor):
    """RAE-XMC over retrieved neighbours: scores :func:`rae_xmc_scores`, proposes where ``p > threshold``.

    Args:
        top_k: neighbours k; tau: softmax temperature; lam: lambda; threshold: proposal threshold.
    """

    name = "rae"
    display_name = "RAE-XMC"
    needs_retrieval = True
    tunable = True

    def __init__(self, top_k: int = DEFAULTS["top_k"], tau: float = DEFAULTS["tau"], lam: float = DEFAULTS["lam"],
                 threshold: float = DEFAULTS["threshold"]) -> None:
        self.top_k, self.tau, self.lam, self.threshold = top_k, tau, lam, threshold
        self.vocab = LabelVocab()

    def fit(self, train: TrainingSet) -> RaeXmcPredictor:
        """Keep the vocabulary: the memory itself is the model (no training)."""
        self.vocab = train.vocab
        return self

    def scores(self, queries: QueryBatch) -> np.ndarray:
        """``(m, L)`` float32 RAE-XMC scores of ``queries.retrieval``."""
        r = queries.retrieval
        rows = r.label_matrix(self.vocab)
        return rae_xmc_scores(r.sims, rows, self.top_k, self.tau, self.lam, len(self.vocab))

    def decide(self, scores: np.ndarray) -> np.ndarray:
        return scores > self.threshold

    @property
    def params(self) -> dict[str, Any]:
        return {"top_k": self.top_k, "tau": self.tau, "lam": self.lam, "threshold": self.threshold}

    def neighbours_needed(self) -> int:
        return self.top_k

    @classmethod
    def from_settings(cls, settings: Any, **params: Any) -> RaeXmcPredictor:
        """k / tau / threshold from ``settings.scoring`` (lambda 1), overridden by ``params``."""
        sc = settings.scoring
        return cls(**{"top_k": sc.top_k, "tau": sc.tau, "threshold": sc.threshold, **params})

    def tune(self, validation: QueryBatch, Y_val: sp.csr_matrix, n_trials: int, **study: Any
             ) -> tuple[RaeXmcPredictor, dict[str, Any]]:
        """:func:`tune_rae` on ``validation.retrieval`` (``study``: ``storage``, ``study_name``, ``seed``);
        returns the tuned predictor and ``{top_k, tau, lam, threshold, trials, validation_Acc,
        validation_uF1}``."""
        best, val_acc, val_f1 = tune_rae(validation.retrieval, Y_val, self.vocab, n_trials, **study)
        tuned = RaeXmcPredictor(**best)
        tuned.vocab = self.vocab
        return tuned, {**best, "trials": n_trials, "validation_Acc": val_acc, "validation_uF1": val_f1}


def tune_rae(val_retrieval: Retrieval, Y_val, vocab: LabelVocab, n_trials: int, seed: int = 13,
             storage: str | None = None, study_name: str | None = None) -> tuple[dict, float, float]:
    """Optuna (TPE) search of top-k, tau, lambda and threshold on the validation split.

    Objective: subset accuracy (micro-F1 is recorded as a trial attribute beside it). The search space:
    k in [1, K] (K = neighbours retrieved), tau in [0.005, 1] (log), lambda in [0.5, 2], threshold in
    [0.05, 0.95]; the research defaults are the first trial.

    Args:
        val_retrieval: the validation articles' top-K neighbours; Y_val: their ``(n, L)`` 0/1 labels.
        storage: Optuna storage URL (``sqlite:///...``, ``postgresql://...``); None = in memory.
        study_name: name of the study in the storage (an existing one is continued).

    Returns:
        (best params: top_k, tau, lam, threshold; best subset accuracy, micro-F1 of the best trial).
    """
    import optuna  # deferred: a slow import, only --tune and the nightly job need it
    from sklearn.metrics import accuracy_score, f1_score  # deferred: scikit-learn is slow to import; tuning only

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    Yt = np.asarray(Y_val.todense()).astype(bool)
    label_rows = val_retrieval.label_matrix(vocab)
    K = val_retrieval.k

    def objective(trial: optuna.Trial) -> float:
        k = trial.suggest_int("top_k", 1, K)
        tau = trial.suggest_float("tau", 0.005, 1.0, log=True)
        lam = trial.suggest_float("lam", 0.5, 2.0)
        thr = trial.suggest_float("threshold", 0.05, 0.95)
        p = rae_xmc_scores(val_retrieval.sims, label_rows, k, tau, lam, len(vocab)) > thr
        p = p[:, :Yt.shape[1]]
        trial.set_user_attr("micro_f1", float(f1_score(Yt, p, average="micro", zero_division=0)))
        return float(accuracy_score(Yt, p))

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed),
                                storage=storage, study_name=study_name, load_if_exists=True)
    # start from the research defaults so the search can only keep or improve them on validation
    study.enqueue_trial({"top_k": min(DEFAULTS["top_k"], K), "tau": DEFAULTS["tau"], "lam": DEFAULTS["lam"],
                         "threshold": DEFAULTS["threshold"]})
    study.optimize(objective, n_trials=n_trials, show_progress_bar=False)
    best = study.best_trial
    return dict(best.params), float(best.value), float(best.user_attrs["micro_f1"])
