"""The scorer (:class:`Scorer`): one object turns articles into scored proposals with their evidence, from one
parameter model (:class:`~newsmon.schemas.scoring.ScoringParams`), for every path that proposes or measures.

Layout: :mod:`.retrieval` (neighbours, vocabulary, proposals), :mod:`.lexical` (hybrid retrieval's fusion),
:mod:`.rae_xmc` (the base score), :mod:`.components` (score components, one module each), :mod:`.rules`
(decision rules, one module each), :mod:`.decision` (scores -> decision -> evidence), :mod:`.scorer` (the
assembly), :mod:`.models` (the components' per-memory models), :mod:`.records` (calibration records) and
:mod:`.calibration` (the search of the parameters).

Components and rules of a deployment register when their module is imported: name the modules in the entry-point
group ``newsmon.scoring`` of the deployment's package; they are imported with this package.
"""

from importlib.metadata import entry_points

from newsmon.schemas.scoring import ScoringInfo, ScoringParams  # noqa: I001
from newsmon.shared.scoring.retrieval import LabelScore, LabelVocab, Proposal, Retrieval
from newsmon.shared.scoring.components import (MemoryArticles, Queries, ScoreComponent, get_component,
                                               register_component)
from newsmon.shared.scoring.rules import DecisionRule, DecisionState, get_rule, register_rule
from newsmon.shared.scoring.decision import Decision, decide, explain, neighbours_needed, retrieval_size
from newsmon.shared.scoring.scorer import CANDIDATES, Resolved, Scorer
from newsmon.shared.scoring.models import FittedModels, MemoryModels

for _ep in entry_points(group="newsmon.scoring"):  # a deployment's components and rules (this package is one)
    if _ep.value != __name__:
        _ep.load()

__all__ = ["CANDIDATES", "Decision", "DecisionRule", "DecisionState", "FittedModels", "LabelScore", "LabelVocab",
           "MemoryArticles", "MemoryModels", "Proposal", "Queries", "Resolved", "Retrieval", "ScoreComponent",
           "Scorer", "ScoringInfo", "ScoringParams", "decide", "explain", "get_component", "get_rule",
           "neighbours_needed", "register_component", "register_rule", "retrieval_size"]
