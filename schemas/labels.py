"""``LabelEvent``: a change to the label vocabulary (topic ``label-events``), from the taxonomy admin or the
HTTP API: a label defined by analysts' keyword Boolean expressions (KwEs), updated, added, retired or renamed."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from newsmon.schemas.base import NOT_BLANK, Event, Label, LanguageCode, Name, Part, UtcDatetime
from newsmon.schemas.examples import LABEL_EVENT_EXAMPLES

__all__ = ["LABEL_EVENTS_KEY", "LABEL_EVENTS_TOPIC", "LabelDefinition", "LabelEvent", "LabelFilters"]

LABEL_EVENTS_TOPIC = "label-events"
#: The Kafka key of every label event (:meth:`LabelEvent.kafka_key`): one partition, one order for the registry.
LABEL_EVENTS_KEY = b"label-registry"

Kwe = Annotated[str, StringConstraints(min_length=1, max_length=10_000, pattern=r"\S"), NOT_BLANK]
Value = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"\S"), NOT_BLANK]


class LabelFilters(Part):
    """Article metadata a label is limited to; an empty list sets no limit on that field. OR within a field,
    AND across fields; an article whose value for a limited field is unknown does not pass."""

    languages: list[LanguageCode] = Field(
        default_factory=list, max_length=50,
        description="ISO 639-1 codes of registered languages, e.g. sl, hr (the check of ArticleEvent.lang).")
    countries: list[Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")]] = Field(
        default_factory=list, max_length=250, description="ISO 3166-1 alpha-2 codes of the outlet, e.g. SI.")
    sources: list[Value] = Field(default_factory=list, max_length=1000,
                                 description="Outlets (ArticleEvent.outlet), compared case-insensitively.")
    sections: list[Value] = Field(default_factory=list, max_length=1000,
                                  description="Sections (ArticleEvent.section), compared case-insensitively.")


class LabelDefinition(Part):
    """How analysts define a label (client topic): KwEs, any of which may match, and metadata filters.

    KwE syntax (checked by the memory updater and the HTTP API, which refuse a bad expression with the
    character position of the error): ``OR`` between terms; a leading ``-`` (or en dash) excludes a term or
    phrase; ``"..."`` is a phrase of consecutive words; ``*`` at a word's end matches any ending, e.g.
    ``krka OR krke OR krki -"reka krk*"``. An expression matches when one of its positive terms occurs and
    none of its excluded ones do; case, Unicode form and Serbian Cyrillic/Latin script do not matter.
    """

    kwes: list[Kwe] = Field(min_length=1, max_length=100, description="Keyword Boolean expressions; any may match.")
    filters: LabelFilters = Field(default_factory=LabelFilters, description="Metadata limits.")
    require_rule_match: bool = Field(
        False, description="Propose the label only for articles one of its KwEs matches (a precision filter).")
    description: str | None = Field(None, max_length=2000, description="What the label means, for people.")


class LabelEvent(Event):
    """A change to the label vocabulary.

    Topic ``label-events`` (default), every event with the one key :data:`LABEL_EVENTS_KEY`, so all of them stay in
    the order they were produced, on one partition: the label registry is one state machine, and its changes
    depend on each other across labels (a rename ``a`` -> ``b`` then ``b`` -> ``c``: keyed by label they could
    land on two partitions and be applied the other way round, and the first refused as a rename into a name
    renamed away). A label change is rare (about a hundred a month), so one partition carries them all. Actions:

    * ``defined`` / ``updated`` (version 2): the label's definition (``definition``, required) is set or
      replaced; a defined label can be proposed from its first matching article (``source: rule``).
    * ``added`` (version 1): the label is (re-)activated.
    * ``retired``: never proposed again from the moment the event is consumed.
    * ``renamed``: ``new_label`` (required, different) takes over the old name's history and definition.

    ``new_label`` is only for ``renamed``, ``definition`` only for ``defined`` / ``updated``. Versions: 1; 2
    adds ``defined`` / ``updated`` and ``definition``. A producer writes the lowest version that can carry
    the event (version 1 for added / retired / renamed), so readers still on version 1 keep working.
    """

    default_topic: ClassVar[str] = LABEL_EVENTS_TOPIC
    kafka_key_field: ClassVar[str] = "label"  # the base class asks for one; kafka_key() below overrides it
    schema_versions: ClassVar[tuple[int, ...]] = (1, 2)
    json_examples: ClassVar[tuple[dict, ...]] = tuple(LABEL_EVENT_EXAMPLES)

    schema_version: int = Field(2, description="Version of this schema (1 or 2); see the model's description.")
    action: Literal["added", "retired", "renamed", "defined", "updated"]
    label: Label
    new_label: Label | None = Field(None, description="The new name; only, and always, for renamed.")
    definition: LabelDefinition | None = Field(
        None, description="The label's KwEs and filters; only, and always, for defined and updated (v2).")
    occurred_at: UtcDatetime = Field(description="When the change happened, UTC.")
    actor: Name | None = Field(None, description="Who made the change, if known.")

    def kafka_key(self) -> bytes:
        """:data:`LABEL_EVENTS_KEY` for every label event: the registry's changes in one order (class docstring)."""
        return LABEL_EVENTS_KEY

    def needs_version(self) -> int:
        """2 for ``defined`` / ``updated``, else 1."""
        return 2 if self.action in ("defined", "updated") else 1

    @model_validator(mode="after")
    def _consistent(self) -> LabelEvent:
        if self.action == "renamed":
            if self.new_label is None:
                raise PydanticCustomError("missing_new_label", "renamed needs new_label")
            if self.new_label == self.label:
                raise PydanticCustomError("same_new_label", "new_label must differ from label")
        elif self.new_label is not None:
            raise PydanticCustomError("unexpected_new_label", "new_label is only allowed for renamed, "
                                                              "not {action}", {"action": self.action})
        if self.action in ("defined", "updated") and self.definition is None:
            raise PydanticCustomError("missing_definition", "{action} needs definition", {"action": self.action})
        if self.action not in ("defined", "updated") and self.definition is not None:
            raise PydanticCustomError("unexpected_definition", "definition is only allowed for defined and "
                                      "updated, not {action}", {"action": self.action})
        self._check_declared_version()
        return self
