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
    are one label named twice, and the decision is refused.

    **Undo.** With ``undoes`` set (version 2) the event takes back the decision made on the article at that time
    (its ``decided_at`` as sent; the console's undo): the article returns to what it was before it (undecided, or
    the decision before), as long as no later decision replaced it; ``decisions`` restates the decision taken back.
    A decision that was undone is never applied again (a redelivered one is stale). Versions: 1; 2 adds ``undoes``.
    """

    default_topic: ClassVar[str] = MODERATOR_DECISIONS_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"
    schema_versions: ClassVar[tuple[int, ...]] = (1, 2)
    json_examples: ClassVar[tuple[dict, ...]] = tuple(DECISION_EXAMPLES)

    schema_version: int = Field(2, description="Version of this schema (1 or 2).")
    article_id: ArticleId
    decisions: list[LabelDecision] = Field(min_length=1, description="One decision per label, each label once.")
    moderator: Name = Field(description="Who decided (user id or name).")
    decided_at: UtcDatetime = Field(description="When the decision was made, UTC.")
    undoes: UtcDatetime | None = Field(None, description="Set on an undo: the decided_at of the decision on this "
                                       "article it takes back (see the model's description); v2.")

    @model_validator(mode="after")
    def _labels_once(self) -> ModeratorDecision:
        dup = first_duplicate(d.label for d in self.decisions)
        if dup is not None:
            raise PydanticCustomError("duplicate_label", "label {label} decided twice (labels compare in "
                                      "canonical form: NFC, lower case)", {"label": repr(dup)})
        if self.undoes is not None and self.undoes >= self.decided_at:
            raise PydanticCustomError("undo_before_decision", "undoes {undoes} is not before decided_at: an undo "
                                      "takes back an earlier decision", {"undoes": self.undoes.isoformat()})
        self._check_declared_version()
        return self

    def needs_version(self) -> int:
        """2 for an undo (``undoes``), else 1."""
        return 2 if self.undoes is not None else 1

    @property
    def accepted_labels(self) -> list[str]:
        """Labels the article carries after moderation: confirmed and added, in decision order, unique."""
        return list(dict.fromkeys(d.label for d in self.decisions if d.action in ("confirmed", "added")))

    @property
    def rejected_labels(self) -> list[str]:
        """Proposed labels the moderator rejected, in decision order, unique."""
        return list(dict.fromkeys(d.label for d in self.decisions if d.action == "rejected"))
