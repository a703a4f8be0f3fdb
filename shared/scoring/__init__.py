"""The scorer (:class:`Scorer`): one object turns articles into proposals with their evidence (the wire's
:class:`newsmon.schemas.Proposal`), from one parameter model (:class:`~newsmon.schemas.scoring.ScoringParams`), for
every path that proposes or measures.

Layout: :mod:`.retrieval` (neighbours, vocabulary, the evidence's working form), :mod:`.lexical` (hybrid
retrieval's fusion), :mod:`.rae_xmc` (the base score), :mod:`.components` (score components, one module each),
:mod:`.rules` (decision rules, one module each), :mod:`.decision` (scores -> decision -> evidence), :mod:`.scorer`
(the assembly), :mod:`.wire` (the evidence as the one proposal type), :mod:`.models` (the components' per-memory
models), :mod:`.records` (calibration records) and :mod:`.calibration` (the search of the parameters).

Components and rules of a deployment register when their module is imported: name the modules in the entry-point
group ``newsmon.scoring`` of the deployment's package; they are imported with this package, once
(:func:`newsmon.schemas.registry.load_entry_points`).
"""

from newsmon.schemas.registry import load_entry_points  # noqa: I001
from newsmon.schemas.scoring import ENTRY_POINTS, ScoringInfo, ScoringParams
from newsmon.shared.scoring.retrieval import LabelScore, LabelVocab, Retrieval
from newsmon.shared.scoring.components import (MemoryArticles, Queries, ScoreComponent, get_component,
                                               register_component)
from newsmon.shared.scoring.rules import DecisionRule, DecisionState, get_rule, register_rule
from newsmon.shared.scoring.decision import Decision, decide, explain, neighbours_needed, retrieval_size
from newsmon.shared.scoring.scorer import CANDIDATES, OneRecord, RecordSource, Resolved, Scorer
from newsmon.shared.scoring.models import FittedModels, MemoryModels

# A deployment's components and rules (the modules of the entry-point group, this package one of them), imported
# once per process, right after the built-ins: the registries keep that order.
load_entry_points(ENTRY_POINTS)

__all__ = ["CANDIDATES", "Decision", "DecisionRule", "DecisionState", "FittedModels", "LabelScore", "LabelVocab",
           "MemoryArticles", "MemoryModels", "OneRecord", "Queries", "RecordSource", "Resolved",
           "Retrieval", "ScoreComponent", "Scorer", "ScoringInfo", "ScoringParams", "decide", "explain",
           "get_component", "get_rule", "neighbours_needed", "register_component", "register_rule", "retrieval_size"]
