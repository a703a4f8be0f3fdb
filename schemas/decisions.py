"""``ModeratorDecision``: a moderator's verdict on the labels of one article (topic ``moderator-decisions``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from newsmon.schemas.base import ArticleId, Event, Label, Name, Part, UtcDatetime, first_duplicate
from newsmon.schemas.examples import DECISION_EXAMPLES

__all__ = ["MODERATOR_DECISIONS_TOPIC", "LabelDecision", "ModeratorDecision"]

MODERATOR_DECISIONS_TOPIC = "moderator-decisions"


class LabelDecision(Part):
    """A moderator's verdict on one label: confirm or reject a proposed label, or add a missing one."""

    label: Label
    action: Literal["confirmed", "rejected", "added"]


class ModeratorDecision(Event):
    """A moderator's decisions on the labels of one article.

    Topic ``moderator-decisions`` (default), key ``article_id``. Produced by the moderation UI, read by the
    memory updater. ``decisions`` is non-empty and names each label once, compared in the labels' canonical form
    (:func:`~newsmon.schemas.base.canonical_label`): ``Politika`` and ``politika``, or ``Šport`` in NFC and NFD,
    are one label named twice, and the decision is refused. Versions: 1.
    """

    default_topic: ClassVar[str] = MODERATOR_DECISIONS_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"
    schema_versions: ClassVar[tuple[int, ...]] = (1,)
    json_examples: ClassVar[tuple[dict, ...]] = tuple(DECISION_EXAMPLES)

    article_id: ArticleId
    decisions: list[LabelDecision] = Field(min_length=1, description="One decision per label, each label once.")
    moderator: Name = Field(description="Who decided (user id or name).")
    decided_at: UtcDatetime = Field(description="When the decision was made, UTC.")

    @model_validator(mode="after")
    def _labels_once(self) -> ModeratorDecision:
        dup = first_duplicate(d.label for d in self.decisions)
        if dup is not None:
            raise PydanticCustomError("duplicate_label", "label {label} decided twice (labels compare in "
                                      "canonical form: NFC, lower case)", {"label": repr(dup)})
        return self

    @property
    def accepted_labels(self) -> list[str]:
        """Labels the article carries after moderation: confirmed and added, in decision order, unique."""
        return list(dict.fromkeys(d.label for d in self.decisions if d.action in ("confirmed", "added")))

    @property
    def rejected_labels(self) -> list[str]:
        """Proposed labels the moderator rejected, in decision order, unique."""
        return list(dict.fromkeys(d.label for d in self.decisions if d.action == "rejected"))
