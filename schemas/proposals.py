"""``LabelProposal``: the labels proposed for one article (topic ``label-proposals``), for the moderation tool."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from newsmon.schemas.base import (ArticleId, Event, FiniteFloat, Label, Name, NonNegativeMs, Part, UtcDatetime,
                                  first_duplicate, NOT_BLANK)
from newsmon.schemas.examples import PROPOSAL_EXAMPLES
from newsmon.schemas.scoring import RuleName, ScoringInfo

__all__ = ["LABEL_PROPOSALS_TOPIC", "LabelProposal", "NeighbourRef", "Proposal", "ProposedLabel", "RuleEvidence",
           "ScoringInfo", "Timings"]  # ScoringInfo: newsmon.schemas.scoring, re-exported

LABEL_PROPOSALS_TOPIC = "label-proposals"

MemoryVersion = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"\S"), NOT_BLANK]
Title = Annotated[str, StringConstraints(max_length=300)]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=1000)]
Abstention = Annotated[str, StringConstraints(min_length=1, max_length=500)]


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
    decided_by: RuleName | None = Field(
        None, description="For a label from retrieval, the name of the decision rule that proposed it (one of "
                          "scoring.rules), e.g. threshold (its score is above its threshold), set_vote (the "
                          "neighbours' label-set vote proposed its whole set), tail_support or new_label_support "
                          "(enough close neighbours carry it, whatever its score), floor (the best label of an "
                          "article no other rule proposed anything for), label_count (one of the article's n best "
                          "labels, n predicted from its neighbours' label counts; v4); a deployment may add rules; "
                          "null for a candidate, a label from a rule or a near-copy, and before version 3; v3.")
    threshold: FiniteFloat | None = Field(
        None, description="The label's own threshold for this article (by label frequency or its own, when the "
                          "calibration set those; else the scoring's threshold; with the label-count rule its "
                          "minimum score); null when not known; v3.")
    reason: Reason | None = Field(
        None, description="Why the label is proposed (for a candidate: why it is not), in words a moderator reads: "
                          "the evidence and the rule, e.g. \"its score 0.83 is above its threshold 0.60; 3 of the "
                          "75 nearest memory articles carry it, the closest at 0.91\", \"its rule matched the text "
                          "(“Krka”) ...\", \"a moderator decided it on ..., which this article nearly copies ...\"; "
                          "null before version 7; v7.")


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


class Proposal(Part):
    """What is proposed for one article, before it is put on the wire: the one proposal type of every path.

    The scorer (:meth:`newsmon.shared.scoring.Scorer.propose`) returns one per article; the article pipeline
    (:mod:`newsmon.workers.pipeline`: the classifier worker, ``POST /v1/suggest``, ``newsmon suggest``) passes it
    on through its stages (the label rules revise ``labels`` and ``candidates``; a near-copy of a decided article
    gets one made of the original's decided labels, :func:`newsmon.workers.copies.duplicate_proposal`) and the
    :class:`LabelProposal` it produces is this proposal with the article's envelope (:meth:`LabelProposal.of`).
    Its fields are the :class:`LabelProposal` fields of the same names, and ``searched``.
    """

    labels: list[ProposedLabel] = Field(default_factory=list, description="Proposed labels, best first.")
    candidates: list[ProposedLabel] = Field(
        default_factory=list, max_length=20, description="The best labels below the threshold, best first.")
    scoring: ScoringInfo | None = Field(None, description="The parameters used and where they came from (null for "
                                        "a near-copy, whose labels its original passes on).")
    abstained: Abstention | None = Field(None, description="Why no label was proposed from retrieval on purpose.")
    searched: tuple[str, ...] = Field(
        (), description="The knowledge-memory collections the neighbours were searched in (the wire's "
                        "memory_version joins them with '+'); empty when the neighbours were given (offline) or "
                        "for a near-copy.")

    @property
    def label_set(self) -> set[str]:
        """The proposed labels' names."""
        return {x.label for x in self.labels}


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
    ``scoring.label_count``); 5 adds the head model's weight (``scoring.head_weight``); 6 gives ``scoring`` its one
    shape (the settings' and the calibration record's: ``components`` and ``rules`` as lists of names and options,
    ``source`` and ``note``; the flat rule fields of versions 3 to 5 are read into it), any registered rule name in
    ``decided_by``, and ``abstained``; 7 adds per label ``reason`` (why, in words). Versions 1 to 6 are still read
    (new fields at their defaults).
    """

    default_topic: ClassVar[str] = LABEL_PROPOSALS_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"
    schema_versions: ClassVar[tuple[int, ...]] = (1, 2, 3, 4, 5, 6, 7)
    json_examples: ClassVar[tuple[dict, ...]] = tuple(PROPOSAL_EXAMPLES)

    schema_version: int = Field(7, description="Version of this schema (1 to 7).")
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
    scoring: ScoringInfo | None = Field(None, description="The parameters used and where they came from (v2; null "
                                        "in version 1 and for a near-copy, whose labels its original passes on).")
    abstained: Abstention | None = Field(
        None, description="Why no label was proposed from retrieval on purpose (e.g. the text has too few real "
                          "words, or the nearest memory article is too far); null otherwise; v6.")
    timings: Timings = Field(default_factory=Timings)
    produced_at: UtcDatetime = Field(description="When the proposal was produced, UTC.")

    @classmethod
    def of(cls, proposal: Proposal, *, article_id: str, model_version: str, memory_version: str,
           produced_at: datetime, revision: int = 0, duplicate_of: str | None = None,
           timings: Timings | None = None, max_labels: int | None = None) -> LabelProposal:
        """``proposal`` on the wire: its labels (the first ``max_labels``; None: all), candidates, scoring and
        abstention, with the article's envelope (the other arguments, the fields of the same names; timings:
        the defaults when None). ``memory_version``: ``"+".join(proposal.searched)`` when the caller has nothing
        better.

        Raises:
            pydantic.ValidationError: the envelope is invalid, or a label is both proposed and a candidate.
        """
        return cls(article_id=article_id, revision=revision, labels=proposal.labels[:max_labels],
                   candidates=proposal.candidates, duplicate_of=duplicate_of, model_version=model_version,
                   memory_version=memory_version, scoring=proposal.scoring, abstained=proposal.abstained,
                   timings=timings if timings is not None else Timings(), produced_at=produced_at)

    @model_serializer(mode="wrap")
    def _written_in_one_shape(self, handler: Any) -> dict[str, Any]:
        # a proposal read from versions 3 to 5 holds its scoring in the version-6 shape, and is written so
        data = handler(self)
        if isinstance(data, dict) and data.get("scoring") is not None and data.get("schema_version", 6) < 6:
            data["schema_version"] = 6
        return data

    @model_validator(mode="after")
    def _labels_once(self) -> LabelProposal:
        dup = first_duplicate(p.label for p in [*self.labels, *self.candidates])
        if dup is not None:
            raise PydanticCustomError("duplicate_label", "label {label} proposed twice (labels and candidates "
                                      "hold each label once)", {"label": repr(dup)})
        self._check_declared_version()
        return self

    def needs_version(self) -> int:
        """7 when a label has a ``reason``; 6 when ``scoring`` has the components-and-rules shape or ``abstained``
        is set; else what the content of a proposal of versions 1 to 5 needs: 5 for the head model's weight, 4 for
        the label-count rule, 3 for the decision rules' fields, 2 for any version-2 field, else 1."""
        every = [*self.labels, *self.candidates]
        if any(p.reason is not None for p in every):
            return 7
        sc = self.scoring
        if self.abstained is not None or (sc is not None and sc._legacy is None):
            return 6
        legacy = sc._legacy if sc is not None else 1
        if legacy >= 4 or any(p.decided_by == "label_count" for p in every):
            return max(legacy, 4)
        if legacy >= 3 or any(p.decided_by is not None or p.threshold is not None for p in every):
            return 3
        v2 = (self.revision or self.candidates or sc is not None
              or any(p.source != "retrieval" or p.rule is not None or any(n.title is not None for n in p.neighbours)
                     for p in self.labels))
        return 2 if v2 else 1
