"""Label predictors behind one interface (:class:`Predictor`: ``fit``, ``scores``, ``decide``), found by name
(:func:`get_predictor`), for ``eval``: RAE-XMC (``rae``), zero-shot 1-NN (``zshot``), ML-KNN (``mlknn``) and the
TF-IDF baselines (``svm``, ``logreg``), and the product's own ``newsmon`` (a thin adapter of the scorer,
:mod:`newsmon.shared.scoring`).
"""

# The method modules register their predictors on import; this order is the order of the eval report.
from newsmon.shared.predictors.rae import RaeXmcPredictor, rae_xmc_scores, tune_rae  # noqa: I001
from newsmon.shared.predictors.one_nn import OneNnPredictor, one_nn_scores
from newsmon.shared.predictors.mlknn import MLKNN, MlKnnPredictor, neighbour_counts
from newsmon.shared.predictors.tfidf import TfidfLogRegPredictor, TfidfOneVsAll, TfidfSvmPredictor
from newsmon.shared.predictors.newsmon import NewsmonPredictor
from newsmon.shared.predictors.base import (PREDICTORS, Predictor, QueryBatch, TrainingSet, available,
                                            get_predictor, predictor_class, register)
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval

__all__ = ["MLKNN", "PREDICTORS", "LabelVocab", "MlKnnPredictor", "NewsmonPredictor", "OneNnPredictor", "Predictor",
           "QueryBatch", "RaeXmcPredictor", "Retrieval", "TfidfLogRegPredictor", "TfidfOneVsAll", "TfidfSvmPredictor",
           "TrainingSet", "available", "get_predictor", "neighbour_counts", "one_nn_scores", "predictor_class",
           "rae_xmc_scores", "register", "tune_rae"]
