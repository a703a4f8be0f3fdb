"""Offline evaluation: every registered predictor on a labelled corpus, reported like RAE-XMC's Table 7.

The train split is the knowledge memory (and the training set of the text baselines); the validation split is
used only by ``tune`` (methods with ``tunable``: RAE-XMC); every figure is on the test split. :func:`run_eval`
is a loop over the requested methods of :mod:`newsmon.shared.predictors`: fit on the train split, score the
test split, apply the method's decision rule, compute the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import structlog

from newsmon.shared.config import Settings
from newsmon.shared.data import Article, Corpus
from newsmon.shared.evaluation.neighbours import retrieve_neighbours
from newsmon.shared.evaluation.report import ratios_to_peer, ratios_to_svm, write_outputs
from newsmon.shared.evaluation.usage import peak_rss_mib, release_free_heap, reset_peak
from newsmon.shared.metrics import FREQUENT_MIN, RARE_MAX, evaluate, f1_by_frequency
from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.predictors import LabelVocab, Predictor, QueryBatch, TrainingSet, available, predictor_class

log = structlog.get_logger(__name__)

#: Neighbours retrieved when a method is tuned: the top of --tune's search space for k.
TUNE_TOP_K_MAX = 100


class EvalInputError(ValueError):
    """The corpus or the options cannot be evaluated (unknown method, a missing split)."""


@dataclass
class Labels:
    """The gold labels of the three splits over one vocabulary (train labels first).

    Attributes:
        vocab: ``L`` labels; train / val / test: ``(n, L)`` 0/1 CSR (val None without validation articles);
        train_counts: ``(L,)`` training occurrences per label; n_train_labels: labels seen in training.
    """

    vocab: LabelVocab
    train: sp.csr_matrix
    val: sp.csr_matrix | None
    test: sp.csr_matrix
    train_counts: np.ndarray
    n_train_labels: int


def _resize(m, n_cols: int):
    """A CSR label matrix widened to ``n_cols`` columns (the vocabulary grew after it was encoded)."""
    return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], n_cols))


def label_matrices(train: Sequence[Article], val: Sequence[Article], test: Sequence[Article]) -> Labels:
    """Encode the splits' labels (the train labels in sorted order, so that the figures do not depend on the order
    the corpus lists its articles in); labels seen only in validation / test get columns after the train labels."""
    vocab = LabelVocab(sorted({lb for a in train for lb in a.labels}))
    n_train_labels = len(vocab)
    for split in (val, test):
        vocab.extend(sorted({lb for a in split for lb in a.labels} - set(vocab.index)))
    Y_train = vocab.encode([a.labels for a in train])
    Y_val = vocab.encode([a.labels for a in val]) if val else None
    Y_test = vocab.encode([a.labels for a in test])
    L = len(vocab)
    counts = np.zeros(L)
    Y_train = _resize(Y_train, L)
    counts[:n_train_labels] = np.asarray(Y_train.sum(axis=0)).ravel()[:n_train_labels]
    return Labels(vocab, Y_train, _resize(Y_val, L) if Y_val is not None else None, _resize(Y_test, L), counts,
                  n_train_labels)


def _method_entry(name: str, labels: Labels, scores: np.ndarray, pred: np.ndarray, seconds: float,
                  params: dict) -> dict:
    """One method's report entry: metrics (see :func:`newsmon.shared.metrics.evaluate`), F1 per frequency
    bucket, seconds and parameters."""
    return {"name": name, "metrics": evaluate(labels.test, pred, scores, labels.train_counts), "seconds": seconds,
            "params": params, "f1_by_frequency": f1_by_frequency(labels.test, pred, labels.train_counts)}


def _predictors(methods: Sequence[str], settings: Settings, mlknn_k: int, rae: dict | None = None,
                peers: Sequence[str] = ()) -> list[Predictor]:
    """The requested predictors in registry order, with their parameters from ``settings`` (``rae``: RAE-XMC's
    ``top_k`` / ``tau`` / ``lam`` / ``threshold`` instead), then each peer's rows
    (:data:`newsmon.shared.predictors.annif_peer.PEERS`).

    Raises:
        EvalInputError: an unknown method or peer.
    """
    from newsmon.shared.predictors.annif_peer import PEERS  # deferred: only --peers needs it

    unknown = set(methods) - set(available())
    if unknown:
        raise EvalInputError(f"unknown methods {sorted(unknown)}; choose from {','.join(available())}")
    if set(peers) - set(PEERS):
        raise EvalInputError(f"unknown peers {sorted(set(peers) - set(PEERS))}; choose from {','.join(PEERS)}")
    keys = ("top_k", "tau", "lam", "threshold")
    overrides = {"mlknn": {"k": mlknn_k}, "rae": {k: v for k, v in (rae or {}).items() if k in keys}}
    own = [predictor_class(n).from_settings(settings, **overrides.get(n, {})) for n in available() if n in methods]
    return own + [cls.from_settings(settings) for peer in PEERS if peer in peers for cls in PEERS[peer]]


def _splits(corpus: Corpus, tune: int) -> tuple[list[Article], list[Article], list[Article]]:
    train, val, test = corpus.split("train"), corpus.split("validation"), corpus.split("test")
    if not train or not test:
        raise EvalInputError(f"{corpus.path}: need train and test articles (found {len(train)} / {len(test)})")
    if tune and not val:
        raise EvalInputError("--tune needs validation articles")
    return train, val, test


def run_eval(corpus: Corpus, methods: Sequence[str], settings: Settings, tune: int = 0,
             mlknn_k: int = 10, out_dir: Path | None = None, progress: bool = True,
             tune_storage: str | None = None, study_name: str | None = None, rae: dict | None = None,
             peers: Sequence[str] = ()) -> dict:
    """Evaluate ``methods`` (registered predictor names, see :func:`newsmon.shared.predictors.available`) and
    ``peers`` (``annif``: :mod:`newsmon.shared.predictors.annif_peer`) on ``corpus``; returns the JSON-able report
    (``corpus``, ``methods`` (each with ``wall_s`` and ``peak_rss_mib``), ``timings``, ``encoder`` when a method
    retrieves, ``label_groups``, ``ratio_to_svm``, ``ratio_to_peer``).

    Args:
        tune: Optuna trials for each tunable method (0: off); its tuned copy is reported as ``<name>_tuned``.
        mlknn_k: ML-KNN's k; tune_storage / study_name: Optuna storage URL and study name (None: in memory);
        rae: RAE-XMC's parameters (``top_k``, ``tau``, ``lam``, ``threshold``) instead of the settings'.

    Raises:
        EvalInputError: an unknown method or peer, or a corpus without train or test articles.
    """
    predictors = _predictors(methods, settings, mlknn_k, rae, peers)
    train, val, test = _splits(corpus, tune)
    started = time.perf_counter()
    labels = label_matrices(train, val, test)
    report: dict = {"corpus": corpus.summary(), "methods": {}, "timings": {}}
    train_set = TrainingSet([a.text for a in train], labels.train, labels.vocab, validation_labels=labels.val,
                            ids=[a.id for a in train], validation_ids=[a.id for a in val],
                            validation_texts=[a.text for a in val])
    test_q = QueryBatch([a.text for a in test], [a.lang for a in test])
    val_q = QueryBatch([a.text for a in val], [a.lang for a in val])
    dense = [p for p in predictors if p.needs_retrieval]
    if dense:
        tuning = bool(tune) and any(p.tunable for p in dense)
        with_val = (tuning or any(p.needs_validation_retrieval for p in dense)) and bool(val)
        top_k = max([p.neighbours_needed() for p in dense] + ([TUNE_TOP_K_MAX] if tuning else []))
        loo_k = max((p.neighbours_needed() for p in dense if p.needs_training_retrieval), default=0)
        lexical_k = max(p.lexical_neighbours_needed() for p in dense)
        nb = retrieve_neighbours(settings, train, test, val, top_k, with_val, loo_k or None, progress, report,
                                 lexical_k)
        train_set.retrieval = nb.train_loo
        train_set.validation = nb.validation
        train_set.vectors, train_set.validation_vectors = nb.train_vecs, nb.val_vecs
        test_q.vectors, test_q.retrieval = nb.test_vecs, nb.test
        val_q.vectors, val_q.retrieval = nb.val_vecs, nb.validation
    for p in predictors:
        _evaluate_one(p, train_set, test_q, val_q, labels, report, tune, progress,
                      {"storage": tune_storage, "study_name": study_name})
    report["timings"]["total_s"] = time.perf_counter() - started
    c = labels.train_counts
    report["label_groups"] = {"frequent": int((c >= FREQUENT_MIN).sum()), "rare": int((c <= RARE_MAX).sum()),
                              "all": int(len(labels.vocab))}
    report["ratio_to_svm"] = ratios_to_svm(report["methods"])
    report["ratio_to_peer"] = ratios_to_peer(report["methods"])
    if out_dir is not None:
        write_outputs(report, Path(out_dir))
    return report


def ablation_rows(p: Predictor, test_q: QueryBatch, labels: Labels) -> dict[str, dict]:
    """For a calibrated predictor (``newsmon``): one report entry per calibration step (the base k / tau /
    threshold, then each decision rule tried on top, kept or not), scored on the test split, so the table shows
    what each lever adds. Empty for other methods."""
    steps = getattr(getattr(p, "calibration", None), "steps", None) or []
    out = {}
    for i, step in enumerate(steps):
        t0 = time.perf_counter()
        scores, proposed = p.with_params(ScoringParams(**step["params"])).score_and_decide(test_q)
        tag = "kept" if step["kept"] else "not kept"
        name = f"{p.display_name}: {step['step']}" + ("" if i == 0 else f" ({tag})")
        extra = {"new_label_replay": step["replay"]} if "replay" in step else {}
        extra.update({k: step[k] for k in ("lift_interval", "why", "lift") if k in step})
        out[f"{p.name}_step{i}"] = _method_entry(name, labels, scores, proposed, time.perf_counter() - t0,
                                                 {**step["params"], "calibration_objective": step["objective"],
                                                  **extra})
    return out


def _usage(p: Predictor, seconds: float, cpu_seconds: float, peak_reset: bool) -> dict:
    """A row's cost: ``wall_s``, ``cpu_s`` (user + system CPU seconds, every thread: what the load changes least)
    and ``peak_rss_mib`` of its own processes for a method that runs outside this process
    (:meth:`Predictor.usage`), else of this process during the row (its peak since start where the peak could not
    be reset), and ``measured_in`` saying which."""
    own = p.usage()
    if own is not None:
        return {"wall_s": own["wall_s"], "cpu_s": own.get("cpu_s"), "peak_rss_mib": own["peak_rss_mib"],
                "measured_in": "peer processes"}
    return {"wall_s": seconds, "cpu_s": cpu_seconds, "peak_rss_mib": peak_rss_mib(),
            "measured_in": "eval process" + ("" if peak_reset else " (peak since start)")}


def _evaluate_one(p: Predictor, train_set: TrainingSet, test_q: QueryBatch, val_q: QueryBatch, labels: Labels,
                  report: dict, tune: int, progress: bool, study: dict) -> None:
    """Fit, score and decide with one predictor (and its tuned copy when ``tune`` and it is tunable); add the
    entries to ``report["methods"]``. The memory freed before it is handed back first
    (:func:`~newsmon.shared.evaluation.usage.release_free_heap`), so its peak RSS starts from what is in use."""
    release_free_heap()
    t0, cpu0 = time.perf_counter(), time.process_time()
    if progress:
        log.info(f"evaluating {p.display_name}", labels=labels.n_train_labels)
    peak_reset = reset_peak()
    try:
        p.fit(train_set)
        scores, decided = p.score_and_decide(test_q)
    except Exception as exc:  # noqa: BLE001 - a method that cannot be fitted on this corpus; the others still run
        reason = str(exc) or type(exc).__name__
        log.warning(f"{p.display_name} skipped", reason=reason)
        report["methods"][p.name] = {"name": p.display_name, "error": reason, "metrics": None, "params": {},
                                     "seconds": time.perf_counter() - t0, "f1_by_frequency": []}
        return
    entry = _method_entry(p.display_name, labels, scores, decided, time.perf_counter() - t0, p.params)
    report["methods"][p.name] = {**entry, **_usage(p, entry["seconds"], time.process_time() - cpu0, peak_reset)}
    for key, entry in ablation_rows(p, test_q, labels).items():
        report["methods"][key] = entry
    if tune and p.tunable:
        t0 = time.perf_counter()
        tuned, found = p.tune(val_q, labels.val, tune, **study)
        scores = tuned.scores(test_q)
        report["methods"][f"{p.name}_tuned"] = _method_entry(f"{p.display_name} (tuned)", labels, scores,
                                                             tuned.decide(scores), time.perf_counter() - t0, found)
