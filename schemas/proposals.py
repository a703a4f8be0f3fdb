"""``LabelProposal``: the labels proposed for one article (topic ``label-proposals``), for the moderation tool."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from newsmon.schemas.base import (ArticleId, Event, FiniteFloat, Label, Name, NonNegativeMs, Part, UtcDatetime,
                                  first_duplicate)
from newsmon.schemas.examples import PROPOSAL_EXAMPLES

__all__ = ["LABEL_PROPOSALS_TOPIC", "LabelProposal", "NeighbourRef", "ProposedLabel", "RuleEvidence", "ScoringInfo",
           "Timings"]

LABEL_PROPOSALS_TOPIC = "label-proposals"

MemoryVersion = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"\S")]
Title = Annotated[str, StringConstraints(max_length=300)]


class NeighbourRef(Part):
    """A knowledge-memory article that supports a proposed label."""

    article_id: ArticleId = Field(description="Id of the memory article.")
    similarity: FiniteFloat = Field(description="Similarity of the memory article to the query article "
                                                "(cosine of the embeddings; higher is closer).")
    title: Title | None = Field(None, description="Headline of the memory article, or the start of its text when "
                                                  "it has none (at most 300 characters), so a moderator sees why "
                                                  "the label was proposed; v2.")


class RuleEvidence(Part):
    """The keyword Boolean expression (KwE) of a label's definition that matched the article."""

    kwe: str = Field(min_length=1, max_length=10_000, description="The expression, as the analyst wrote it.")
    matched: list[Annotated[str, StringConstraints(min_length=1, max_length=300)]] = Field(
        default_factory=list, max_length=20,
        description="The article's words or phrases that matched its positive terms, as they appear in the text.")


DecidingRule = Literal["threshold", "set_vote", "tail_support", "new_label_support", "floor", "label_count"]
"""The decision rules of the product's predictor that propose a label from retrieval (``ProposedLabel.decided_by``)."""


class ProposedLabel(Part):
    """One label with its score and its evidence: the neighbours that voted for it and/or the rule that matched.

    ``source`` says where the label comes from: ``retrieval`` (the knowledge memory's neighbours; a matching
    rule, if any, is in ``rule``), ``rule`` (the label's KwE alone, for a label with too few confirmed
    examples in the memory yet) or ``duplicate`` (copied from the original of a near-copy, ``neighbours``
    holding that original).
    """

    label: Label
    score: FiniteFloat = Field(description="Score of the label (higher is more likely); unitless.")
    neighbours: list[NeighbourRef] = Field(
        default_factory=list, description="Memory articles behind the score, most similar first.")
    source: Literal["retrieval", "rule", "duplicate"] = Field(
        "retrieval", description="Where the label comes from (see the model's description); v2.")
    rule: RuleEvidence | None = Field(None, description="The label rule that matched the article, if any; v2.")
    decided_by: DecidingRule | None = Field(
        None, description="For a label from retrieval, the decision rule that proposed it: threshold (its score "
                          "is above its threshold), set_vote (the neighbours' label-set vote proposed its whole "
                          "set; it replaces the threshold's decision for that article), tail_support or "
                          "new_label_support (enough close neighbours carry it, whatever its score), floor (the "
                          "best label of an article no other rule proposed anything for), label_count (one of the "
                          "article's n best labels at or above the label-count rule's minimum score, n predicted from "
                          "its neighbours' label counts; it replaces the threshold's decision; v4); null for a "
                          "candidate, a label from a rule or a near-copy, and in proposals before version 3; v3.")
    threshold: FiniteFloat | None = Field(
        None, description="The label's own threshold for this article (by label frequency or its own, when the "
                          "calibration set those; else the scoring's threshold; with the label-count rule its "
                          "minimum score); null when not known; v3.")


class ScoringInfo(Part):
    """The parameters a proposal was scored with, so the moderation tool and audits can tell runs apart."""

    predictor: Name = Field(description="The scoring method: newsmon (RAE-XMC with the calibrated decision rules).")
    top_k: int = Field(ge=1, description="Neighbours retrieved from the knowledge memory (k).")
    tau: FiniteFloat = Field(gt=0, description="Softmax temperature over the similarities.")
    threshold: FiniteFloat = Field(description="A label is proposed when its score is above this, unless "
                                               "bucket_thresholds or per-label thresholds replace it (each label's "
                                               "own is its threshold field, v3) or another rule proposes it "
                                               "(decided_by).")
    calibration: Name | None = Field(None, description="Id of the calibration record the parameters come from; "
                                                       "null when they come from the settings.")
    floor: FiniteFloat | None = Field(None, description="Floor rule: the best label is proposed when no label passes "
                                                        "the threshold and its score reaches this; null: off; v3.")
    set_vote: FiniteFloat | None = Field(None, description="Label-set vote: the neighbours' exact label set holding "
                                                           "at least this share of the weight is proposed; null: "
                                                           "off; v3.")
    tail_support: int = Field(0, ge=0, description="Tail rule: a label carried by this many close neighbours is "
                                                   "proposed (0: off); v3.")
    new_label_support: int = Field(0, ge=0, description="New-label rule: a label confirmed after the calibration "
                                                        "and carried by this many close neighbours is proposed "
                                                        "(0: off); v3.")
    label_lambda: FiniteFloat = Field(0.0, ge=0, description="Weight lambda of the label keys (label prototypes) "
                                                             "mixed into the scores (0: off); v3.")
    bucket_thresholds: list[FiniteFloat] | None = Field(None, description="One threshold per label-frequency bucket "
                                                                    "(<= 10, 11-99, 100-499, >= 500 memory articles) "
                                                                    "replacing threshold; null: one threshold; v3.")
    label_thresholds: int = Field(0, ge=0, description="How many labels had a threshold of their own (the "
                                                      "calibration record's label_thresholds; 0: none); v3.")
    label_count: FiniteFloat | None = Field(None, description="Label-count rule: each article gets its n best labels "
                                                              "whose score reaches this, n the softmax-weighted mean "
                                                              "label count of its k neighbours, rounded; it replaces "
                                                              "the thresholds; null: off; v4.")
    head_weight: FiniteFloat = Field(0.0, ge=0, le=1, description="Weight beta of the head model (a logistic "
                                                                  "regression per label on 100 or more memory "
                                                                  "articles) mixed into those labels' scores (0: "
                                                                  "off); v5.")


class Timings(Part):
    """Where the time went for the batch the article was proposed in. All durations in milliseconds."""

    batch_size: int = Field(1, ge=1, description="Number of articles in the batch.")
    queue_ms: NonNegativeMs = Field(0.0, description="From the article's arrival at the worker to the batch start, ms.")
    dedup_ms: NonNegativeMs = Field(0.0, description="Near-duplicate check, ms (whole batch).")
    embed_ms: NonNegativeMs = Field(0.0, description="Encoding, ms (whole batch).")
    search_ms: NonNegativeMs = Field(0.0, description="Knowledge-memory search, ms (whole batch).")
    score_ms: NonNegativeMs = Field(0.0, description="Label rules: KwE matching and counting the examples of "
                                    "rule-matched labels, ms (whole batch); RAE-XMC scoring is in search_ms.")
    total_ms: NonNegativeMs = Field(0.0, description="From arrival to the proposal being produced, ms.")


class LabelProposal(Event):
    """Labels proposed for one article.

    Topic ``label-proposals`` (default), key ``article_id``. Produced by the proposal worker (and returned
    by the HTTP API's ``/v1/suggest``), read by the moderation tool. ``labels`` are ordered best first and
    hold each label once; empty when nothing scored above the threshold. ``candidates`` holds the best
    labels below the threshold, for the moderator's convenience (never the same label as ``labels``).

    **Revisions.** An article can get more than one proposal: ``revision`` is 0 for the first, and a later
    proposal for the same ``article_id`` with a higher revision replaces it (e.g. a near-copy's proposal is
    revised when a moderator decides on its original). Keep the highest revision per article; a repeat of a
    revision already seen (at-least-once delivery) carries the same content and can be ignored.

    Versions: 1; 2 adds ``revision``, ``candidates``, ``scoring``, and per label ``source``, ``rule`` and the
    neighbours' ``title``; 3 adds per label ``decided_by`` and ``threshold``, and the calibrated decision rules in
    ``scoring`` (``floor``, ``set_vote``, ``tail_support``, ``new_label_support``, ``label_lambda``,
    ``bucket_thresholds``, ``label_thresholds``); 4 adds the label-count rule (``decided_by`` ``label_count``,
    ``scoring.label_count``); 5 adds the head model's weight (``scoring.head_weight``). Versions 1 to 4 are still
    read (new fields at their defaults).
    """

    default_topic: ClassVar[str] = LABEL_PROPOSALS_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"
    schema_versions: ClassVar[tuple[int, ...]] = (1, 2, 3, 4, 5)
    json_examples: ClassVar[tuple[dict, ...]] = tuple(PROPOSAL_EXAMPLES)

    schema_version: int = Field(5, description="Version of this schema (1 to 5).")
    article_id: ArticleId
    revision: int = Field(0, ge=0, description="0 for the first proposal of the article; higher replaces lower.")
    labels: list[ProposedLabel] = Field(description="Proposed labels, best first, each label once.")
    candidates: list[ProposedLabel] = Field(
        default_factory=list, max_length=20, description="The best labels below the threshold, best first.")
    duplicate_of: ArticleId | None = Field(
        None, description="Id of an earlier article this one near-duplicates, if any.")
    model_version: Name = Field(description="Version of the encoder / scoring model used.")
    memory_version: MemoryVersion = Field(
        description="The knowledge-memory collections searched, joined by '+' (one unless the article's "
                    "language memory is too small and other languages were searched too).")
    scoring: ScoringInfo | None = Field(None, description="The parameters used (v2; null in version 1).")
    timings: Timings = Field(default_factory=Timings)
    produced_at: UtcDatetime = Field(description="When the proposal was produced, UTC.")

    @model_validator(mode="after")
    def _labels_once(self) -> LabelProposal:
        dup = first_duplicate(p.label for p in [*self.labels, *self.candidates])
        if dup is not None:
            raise PydanticCustomError("duplicate_label", "label {label} proposed twice (labels and candidates "
                                      "hold each label once)", {"label": repr(dup)})
        self._check_declared_version()
        return self

    def needs_version(self) -> int:
        """5 when any version-5 field is set, else 4 when any version-4 field is, else 3 when any version-3 field
        is, else 2 when any version-2 field is, else 1."""
        every = [*self.labels, *self.candidates]
        sc = self.scoring
        if sc is not None and sc.head_weight:
            return 5
        if any(p.decided_by == "label_count" for p in every) or (sc is not None and sc.label_count is not None):
            return 4
        if any(p.decided_by is not None or p.threshold is not None for p in every) or (sc is not None and (
                sc.floor is not None or sc.set_vote is not None or sc.tail_support or sc.new_label_support
                or sc.label_lambda or sc.bucket_thresholds is not None or sc.label_thresholds)):
            return 3
        v2 = (self.revision or self.candidates or sc is not None
              or any(p.source != "retrieval" or p.rule is not None or any(n.title is not None for n in p.neighbours)
                     for p in self.labels))
        return 2 if v2 else 1
