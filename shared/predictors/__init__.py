"""Label predictors behind one interface (:class:`Predictor`: ``fit``, ``scores``, ``decide``), found by name
(:func:`get_predictor`): RAE-XMC (``rae``), zero-shot 1-NN (``zshot``), ML-KNN (``mlknn``) and the TF-IDF
baselines (``svm``, ``logreg``), and the product's own ``newsmon`` (calibrated decision rules); plus the
retrieval types and RAE-XMC scoring that the live classifier uses.
"""

# The method modules register their predictors on import; this order is the order of the eval report.
from newsmon.shared.predictors.rae_xmc import RaeXmcPredictor, rae_xmc_scores, tune_rae  # noqa: I001
from newsmon.shared.predictors.one_nn import OneNnPredictor, one_nn_scores
from newsmon.shared.predictors.mlknn import MLKNN, MlKnnPredictor, neighbour_counts
from newsmon.shared.predictors.tfidf import TfidfLogRegPredictor, TfidfOneVsAll, TfidfSvmPredictor
from newsmon.shared.predictors.newsmon import NewsmonPredictor
from newsmon.shared.predictors.rules import Decision, newsmon_decide, newsmon_decision
from newsmon.shared.predictors.base import (Predictor, QueryBatch, TrainingSet, available, get_predictor,
                                            predictor_class, register)
from newsmon.shared.predictors.retrieval import DECIDING_RULES, LabelScore, LabelVocab, Proposal, Retrieval, explain

__all__ = ["DECIDING_RULES", "Decision", "MLKNN", "LabelScore", "LabelVocab", "MlKnnPredictor", "NewsmonPredictor", "OneNnPredictor", "Predictor",
           "Proposal",
           "QueryBatch", "RaeXmcPredictor", "Retrieval", "TfidfLogRegPredictor", "TfidfOneVsAll",
           "TfidfSvmPredictor", "TrainingSet", "available", "explain", "get_predictor", "neighbour_counts", "newsmon_decide",
           "newsmon_decision",
           "one_nn_scores", "predictor_class", "rae_xmc_scores", "register", "tune_rae"]
