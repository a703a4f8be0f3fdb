"""Wire schemas of the events newsmon reads and writes on Kafka.

Conventions shared by every event:

* **Encoding.** A message value is one JSON object in UTF-8 (``model.model_dump_json()``); the key is the
  UTF-8 bytes of the field named by the model's ``kafka_key_field`` (``model.kafka_key()``). Keying by
  article id keeps every event of one article on one partition, in order.
* **Versions.** Every event carries ``schema_version`` (an integer, currently ``1``). A consumer reads only
  the versions it knows; anything else fails validation with
  ``unsupported schema_version X; this worker reads 1``. Producers always write the field;
  :func:`parse_event` refuses messages without it. Any change to a schema -- a new field included --
  bumps the version.
* **Time.** Timestamps are ISO 8601 strings with a UTC offset (naive timestamps are refused) and are
  normalised to UTC on validation, so they serialise as ``...Z``. Durations are milliseconds (``*_ms``).
* **Extra fields.** Models we produce ourselves (:class:`LabelProposal`, :class:`ModeratorDecision`,
  :class:`LabelEvent` and their parts) forbid unknown fields, so a typo fails loudly. :class:`ArticleEvent`
  comes from the upstream ingestion feed and *ignores* unknown fields (tolerant reader): the feed may carry
  metadata we do not use (author, section, ...), and a misspelt required field still fails as missing.
* **Topics.** Each model names its default topic in ``default_topic`` (the worker settings may override
  it). Messages a worker cannot process go, bytes untouched, to ``<topic>.dlq`` with the headers of
  :func:`dead_letter_headers`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "SCHEMA_VERSION",
    "ARTICLES_TOPIC",
    "LABEL_PROPOSALS_TOPIC",
    "MODERATOR_DECISIONS_TOPIC",
    "LABEL_EVENTS_TOPIC",
    "Event",
    "ArticleEvent",
    "NeighbourRef",
    "ProposedLabel",
    "Timings",
    "LabelProposal",
    "LabelDecision",
    "ModeratorDecision",
    "LabelEvent",
    "EVENT_MODELS",
]

SCHEMA_VERSION = 1
"""The one ``schema_version`` this code reads and writes."""

ARTICLES_TOPIC = "articles"
LABEL_PROPOSALS_TOPIC = "label-proposals"
MODERATOR_DECISIONS_TOPIC = "moderator-decisions"
LABEL_EVENTS_TOPIC = "label-events"

# ---------------------------------------------------------------------------------------------------------
# field types
# ---------------------------------------------------------------------------------------------------------

ArticleId = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^\S+$")]
"""An article id: 1..256 characters, no whitespace."""

Label = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"\S")]
"""A label name: 1..256 characters, not blank (inner spaces allowed)."""

Name = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"\S")]
"""A non-blank short name (outlet, moderator, model version, ...)."""


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]
"""A timezone-aware timestamp (naive input is an error), normalised to UTC."""

_HTTP_URL = TypeAdapter(HttpUrl)


def _check_http_url(value: str) -> str:
    if any(c.isspace() for c in value):
        raise PydanticCustomError("url_whitespace", "URL must not contain whitespace")
    try:
        _HTTP_URL.validate_python(value)
    except ValidationError as exc:
        raise PydanticCustomError("url", "{msg}", {"msg": exc.errors()[0]["msg"]}) from None
    return value  # kept as sent: no normalisation (trailing slash, escaping) of the producer's URL


Url = Annotated[
    str,
    AfterValidator(_check_http_url),
    WithJsonSchema({"type": "string", "format": "uri", "pattern": "^https?://", "maxLength": 2083}),
]
"""An absolute http or https URL, kept exactly as sent."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegativeMs = Annotated[float, Field(ge=0, allow_inf_nan=False)]

# ---------------------------------------------------------------------------------------------------------
# base
# ---------------------------------------------------------------------------------------------------------


def _schema_version_required(schema: dict[str, Any]) -> None:
    # the Python default (1) is for building events in code; on the wire the field is required
    required = schema.setdefault("required", [])
    if "schema_version" not in required:
        required.insert(0, "schema_version")


class Event(BaseModel):
    """Base of the top-level events: ``schema_version`` and the Kafka topic / key conventions."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_schema_version_required)

    default_topic: ClassVar[str]
    """The topic the event goes to unless the worker settings say otherwise."""
    kafka_key_field: ClassVar[str]
    """The field whose UTF-8 bytes are the Kafka message key."""

    schema_version: Literal[1] = Field(
        1, description="Version of this schema. A reader refuses versions it does not know.")

    @field_validator("schema_version", mode="before")
    @classmethod
    def _known_version(cls, value: Any) -> Any:
        # strict: Literal[1] alone would let True and 1.0 through
        if type(value) is not int or value != SCHEMA_VERSION:
            raise PydanticCustomError(
                "unsupported_schema_version",
                "unsupported schema_version {version}; this worker reads {supported}",
                {"version": show_value(value), "supported": SCHEMA_VERSION},
            )
        return value

    def kafka_key(self) -> bytes:
        """The Kafka message key: the UTF-8 bytes of ``kafka_key_field``."""
        return str(getattr(self, self.kafka_key_field)).encode("utf-8")

    def to_bytes(self) -> bytes:
        """The Kafka message value: compact JSON in UTF-8."""
        return self.model_dump_json().encode("utf-8")


class _Part(BaseModel):
    """Base of the nested parts of the events we produce."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------------------
# articles
# ---------------------------------------------------------------------------------------------------------


class ArticleEvent(Event):
    """A news article to label.

    Topic ``articles`` (setting; this is the default), key ``article_id``. Produced by the ingestion feed,
    read by the proposal worker. Unknown fields are ignored (see the module docstring); ``title`` and
    ``body`` together must hold some non-whitespace text. The body size is not capped here: the worker
    bounds the raw message size before parsing.
    """

    model_config = ConfigDict(extra="ignore")
    default_topic: ClassVar[str] = ARTICLES_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"

    article_id: ArticleId = Field(description="Stable id of the article: 1..256 characters, no whitespace.")
    title: str | None = Field(None, description="Headline; null or empty when the outlet has none.")
    body: str = Field(description="Article text (plain text).")
    lang: str = Field(pattern=r"^[a-z]{2}$", description="Language, ISO 639-1 lower-case code (e.g. sl).")
    outlet: Name = Field(description="The publishing outlet (newspaper, site, broadcaster).")
    country: str = Field(pattern=r"^[A-Z]{2}$",
                         description="Country of the outlet, ISO 3166-1 alpha-2 upper-case code (e.g. SI).")
    published_at: UtcDatetime = Field(
        description="Publication time, ISO 8601 with a UTC offset (naive refused); normalised to UTC.")
    url: Url | None = Field(None, description="Where the article lives: an absolute http(s) URL.")

    @property
    def text(self) -> str:
        """What gets embedded: ``title + "\\n" + body``, or just ``body`` when the title is empty."""
        if self.title is None or not self.title.strip():
            return self.body
        return f"{self.title}\n{self.body}"

    @model_validator(mode="after")
    def _has_text(self) -> ArticleEvent:
        if not self.text.strip():
            raise PydanticCustomError("empty_text", "empty text: title and body hold no non-whitespace text")
        return self


# ---------------------------------------------------------------------------------------------------------
# label proposals
# ---------------------------------------------------------------------------------------------------------


class NeighbourRef(_Part):
    """A knowledge-memory article that supports a proposed label."""

    article_id: ArticleId = Field(description="Id of the memory article.")
    similarity: FiniteFloat = Field(description="Similarity of the memory article to the query article "
                                                "(cosine of the embeddings; higher is closer).")


class ProposedLabel(_Part):
    """One proposed label with its score and the neighbours that voted for it."""

    label: Label
    score: FiniteFloat = Field(description="Score of the label (higher is more likely); unitless.")
    neighbours: list[NeighbourRef] = Field(
        default_factory=list, description="Memory articles behind the score, most similar first.")


class Timings(_Part):
    """Where the time went for the batch the article was proposed in. All durations in milliseconds."""

    batch_size: int = Field(1, ge=1, description="Number of articles in the batch.")
    queue_ms: NonNegativeMs = Field(0.0, description="From the article's arrival at the worker to the batch start, ms.")
    dedup_ms: NonNegativeMs = Field(0.0, description="Near-duplicate check, ms (whole batch).")
    embed_ms: NonNegativeMs = Field(0.0, description="Encoding, ms (whole batch).")
    search_ms: NonNegativeMs = Field(0.0, description="Knowledge-memory search, ms (whole batch).")
    score_ms: NonNegativeMs = Field(0.0, description="Label scoring, ms (whole batch).")
    total_ms: NonNegativeMs = Field(0.0, description="From arrival to the proposal being produced, ms.")


class LabelProposal(Event):
    """Labels proposed for one article.

    Topic ``label-proposals`` (default), key ``article_id``. Produced by the proposal worker, read by the
    moderation UI. ``labels`` are ordered best first and hold each label once; empty when nothing scored
    above the threshold.
    """

    default_topic: ClassVar[str] = LABEL_PROPOSALS_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"

    article_id: ArticleId
    labels: list[ProposedLabel] = Field(description="Proposed labels, best first, each label once.")
    duplicate_of: ArticleId | None = Field(
        None, description="Id of an earlier article this one near-duplicates, if any.")
    model_version: Name = Field(description="Version of the encoder / scoring model used.")
    memory_version: Name = Field(description="Version of the knowledge memory searched.")
    timings: Timings = Field(default_factory=Timings)
    produced_at: UtcDatetime = Field(description="When the proposal was produced, UTC.")

    @model_validator(mode="after")
    def _labels_once(self) -> LabelProposal:
        dup = _first_duplicate(p.label for p in self.labels)
        if dup is not None:
            raise PydanticCustomError("duplicate_label", "label {label} proposed twice", {"label": repr(dup)})
        return self


# ---------------------------------------------------------------------------------------------------------
# moderator decisions
# ---------------------------------------------------------------------------------------------------------


class LabelDecision(_Part):
    """A moderator's verdict on one label: confirm or reject a proposed label, or add a missing one."""

    label: Label
    action: Literal["confirmed", "rejected", "added"]


class ModeratorDecision(Event):
    """A moderator's decisions on the labels of one article.

    Topic ``moderator-decisions`` (default), key ``article_id``. Produced by the moderation UI, read by the
    memory updater. ``decisions`` is non-empty and names each label once.
    """

    default_topic: ClassVar[str] = MODERATOR_DECISIONS_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"

    article_id: ArticleId
    decisions: list[LabelDecision] = Field(min_length=1, description="One decision per label, each label once.")
    moderator: Name = Field(description="Who decided (user id or name).")
    decided_at: UtcDatetime = Field(description="When the decision was made, UTC.")

    @model_validator(mode="after")
    def _labels_once(self) -> ModeratorDecision:
        dup = _first_duplicate(d.label for d in self.decisions)
        if dup is not None:
            raise PydanticCustomError("duplicate_label", "label {label} decided twice", {"label": repr(dup)})
        return self

    @property
    def accepted_labels(self) -> list[str]:
        """Labels the article carries after moderation: confirmed and added, in decision order, unique."""
        return list(dict.fromkeys(d.label for d in self.decisions if d.action in ("confirmed", "added")))

    @property
    def rejected_labels(self) -> list[str]:
        """Proposed labels the moderator rejected, in decision order, unique."""
        return list(dict.fromkeys(d.label for d in self.decisions if d.action == "rejected"))


# ---------------------------------------------------------------------------------------------------------
# label vocabulary events
# ---------------------------------------------------------------------------------------------------------


class LabelEvent(Event):
    """A change to the label vocabulary.

    Topic ``label-events`` (default), key ``label`` (the old name for a rename), so the history of one
    label stays ordered on one partition. ``new_label`` is required for ``renamed`` (and must differ from
    ``label``) and must be absent otherwise.
    """

    default_topic: ClassVar[str] = LABEL_EVENTS_TOPIC
    kafka_key_field: ClassVar[str] = "label"

    action: Literal["added", "retired", "renamed"]
    label: Label
    new_label: Label | None = Field(None, description="The new name; only, and always, for renamed.")
    occurred_at: UtcDatetime = Field(description="When the change happened, UTC.")
    actor: Name | None = Field(None, description="Who made the change, if known.")

    @model_validator(mode="after")
    def _rename_consistent(self) -> LabelEvent:
        if self.action == "renamed":
            if self.new_label is None:
                raise PydanticCustomError("missing_new_label", "renamed needs new_label")
            if self.new_label == self.label:
                raise PydanticCustomError("same_new_label", "new_label must differ from label")
        elif self.new_label is not None:
            raise PydanticCustomError("unexpected_new_label", "new_label is only allowed for renamed, "
                                                              "not {action}", {"action": self.action})
        return self


EVENT_MODELS: dict[str, type[Event]] = {
    m.__name__: m for m in (ArticleEvent, LabelProposal, ModeratorDecision, LabelEvent)
}
"""The top-level event models by class name (one JSON Schema file each)."""


def show_value(value: Any) -> str:
    """A short JSON-ish rendering of a value for error messages."""
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _first_duplicate(items) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None
