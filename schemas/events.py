"""Wire schemas of the events newsmon reads and writes on Kafka: one module per event, gathered here.

* :class:`~newsmon.schemas.articles.ArticleEvent` -- topic ``articles``: ingestion -> classifier.
* :class:`~newsmon.schemas.proposals.LabelProposal` -- topic ``label-proposals``: classifier (and the HTTP
  API) -> moderation tool; what it carries of the scoring, :class:`~newsmon.schemas.proposals.Proposal`, is the
  one proposal type every path passes on, from the scorer to the wire.
* :class:`~newsmon.schemas.decisions.ModeratorDecision` -- topic ``moderator-decisions``: moderation tool ->
  memory updater.
* :class:`~newsmon.schemas.labels.LabelEvent` -- topic ``label-events``: taxonomy admin / HTTP API -> memory
  updater.

The conventions every event follows (encoding, keys, versions, time, extra fields, dead letters) are in
:mod:`newsmon.schemas.base`.
"""

from __future__ import annotations

from newsmon.schemas.articles import ARTICLES_TOPIC, ArticleEvent
from newsmon.schemas.base import Event, show_value
from newsmon.schemas.decisions import MODERATOR_DECISIONS_TOPIC, LabelDecision, ModeratorDecision
from newsmon.schemas.labels import LABEL_EVENTS_TOPIC, LabelDefinition, LabelEvent, LabelFilters
from newsmon.schemas.proposals import (LABEL_PROPOSALS_TOPIC, LabelProposal, NeighbourRef, Proposal, ProposedLabel,
                                       RuleEvidence, ScoringInfo, Timings)

__all__ = [
    "ARTICLES_TOPIC",
    "LABEL_PROPOSALS_TOPIC",
    "MODERATOR_DECISIONS_TOPIC",
    "LABEL_EVENTS_TOPIC",
    "Event",
    "ArticleEvent",
    "NeighbourRef",
    "RuleEvidence",
    "ProposedLabel",
    "ScoringInfo",
    "Timings",
    "Proposal",
    "LabelProposal",
    "LabelDecision",
    "ModeratorDecision",
    "LabelFilters",
    "LabelDefinition",
    "LabelEvent",
    "EVENT_MODELS",
    "show_value",
]

EVENT_MODELS: dict[str, type[Event]] = {
    m.__name__: m for m in (ArticleEvent, LabelProposal, ModeratorDecision, LabelEvent)
}
"""The top-level event models by class name (one JSON Schema file each)."""
