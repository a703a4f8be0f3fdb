"""Conventions and field types shared by every wire event (see :mod:`newsmon.schemas.events`).

* **Encoding.** A message value is one JSON object in UTF-8 (``model.model_dump_json()``); the key is the
  UTF-8 bytes of the field named by the model's ``kafka_key_field`` (``model.kafka_key()``). Keying by
  article id keeps every event of one article on one partition, in order.
* **Versions.** Every event carries ``schema_version``, an integer per event type. Each model lists the
  versions it reads in ``schema_versions`` (e.g. ``(1, 2)``). An event built without an explicit version is
  written at the lowest version that can carry its content (:meth:`Event.needs_version`), so that consumers
  still on an older version keep reading every message that uses nothing newer (a proposal without the
  label-count rule is version 3, an article without ``section`` version 1). A reader refuses versions
  it does not know (``unsupported schema_version X; this worker reads 1, 2``) and a field or value that
  needs a higher version than the message declares. Producers always write the field; ``parse_event``
  refuses messages without it. Any change to a schema -- a new field included -- adds a version.
* **Time.** Timestamps are ISO 8601 strings with a UTC offset (naive timestamps are refused) and are
  normalised to UTC on validation, so they serialise as ``...Z``. Durations are milliseconds (``*_ms``).
* **Extra fields.** Models we produce ourselves (proposals, decisions, label events and their parts)
  forbid unknown fields, so a typo fails loudly. ``ArticleEvent`` comes from the upstream ingestion feed
  and *ignores* unknown fields (tolerant reader).
* **Topics.** Each model names its default topic in ``default_topic`` (the worker settings may override
  it). Messages a worker cannot process go, bytes untouched, to ``<topic>.dlq`` with the headers of
  :func:`~newsmon.schemas.dead_letters.dead_letter_headers`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

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

__all__ = ["ARTICLE_ID_MAX_LENGTH", "ARTICLE_ID_RULE", "ArticleId", "Event", "FiniteFloat", "LABEL_MAX_LENGTH",
           "LABEL_MAX_RAW_LENGTH", "Label", "LanguageCode", "Name", "NonNegativeMs", "Part", "Url", "UtcDatetime",
           "canonical_label", "check_article_id", "check_label", "check_language_code", "first_duplicate", "show_value"]

ARTICLE_ID_MAX_LENGTH = 256
#: Characters an article id may hold (after its first one, which is a letter or digit).
ARTICLE_ID_RULE = "1..256 characters: ASCII letters, digits and . _ - : / @ # + = ~, starting with a letter or digit"
_ARTICLE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-:/@#+=~]{0,%d}" % (ARTICLE_ID_MAX_LENGTH - 1))


def check_article_id(value: Any) -> str:
    """``value`` when it is a valid article id: the one id policy of every path (wire events, corpus lines,
    the knowledge memory, the near-duplicate index).

    An id is 1..256 ASCII characters: letters, digits and ``. _ - : / @ # + = ~``, the first a letter or digit.
    So an id is the same string for Kafka keys, Redis keys, Qdrant payload filters, URLs and file names, never
    needs quoting or Unicode normalisation, and cannot look like a command-line option. Ids are **refused, not
    repaired**: ``Delo 2019-03-04 #12`` (spaces) is an error that names the first offending character; the
    producer has to send a stable id such as ``delo-2019-03-04-12``, since an id changed by us would no longer
    match the producer's later decisions on the article.

    Raises:
        ValueError: not a valid id (the message says why).
    """
    if not isinstance(value, str):
        raise ValueError(f"article id must be a string, not {type(value).__name__}")
    if _ARTICLE_ID_RE.fullmatch(value):
        return value
    if not value:
        reason = "it is empty"
    elif len(value) > ARTICLE_ID_MAX_LENGTH:
        reason = f"it has {len(value)} characters"
    elif not value[0].isascii() or not value[0].isalnum():
        reason = f"it starts with {value[0]!r}"
    else:
        bad = next(c for c in value if not _ARTICLE_ID_RE.fullmatch("a" + c))
        reason = f"{bad!r} at position {value.index(bad) + 1} is not allowed"
    raise ValueError(f"article id {show_value(value)} is not valid: {reason} (an id is {ARTICLE_ID_RULE})")


def _article_id(value: str) -> str:
    try:
        return check_article_id(value)
    except ValueError as exc:
        raise PydanticCustomError("article_id", "{msg}", {"msg": str(exc)}) from None


ArticleId = Annotated[str, AfterValidator(_article_id),
                      WithJsonSchema({"type": "string", "minLength": 1, "maxLength": ARTICLE_ID_MAX_LENGTH,
                                      "pattern": "^[A-Za-z0-9][A-Za-z0-9._\\-:/@#+=~]*$",
                                      "description": f"Article id: {ARTICLE_ID_RULE}."})]
"""An article id (see :func:`check_article_id`)."""

LABEL_MAX_LENGTH = 256
_INVISIBLE = re.compile(r"[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        r"\u2060-\u206f\ufe00-\ufe0f\ufeff\U000e0000-\U000e0fff]")
_SPACES = re.compile(r"\s+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def canonical_label(value: str) -> str:
    """The one form of a label name (the label policy): what a reader sees as the same label is the same string.

    Steps: delete invisible characters (soft hyphen, zero-width spaces and joiners, word joiner, BOM,
    bidirectional marks, variation selectors); Unicode **NFC** (``S`` + combining caron U+030C -> ``Š``, so NFD
    and NFC input give one label); trim, and every run of whitespace -> one space; **lower case**
    (``str.lower``, not ``casefold``, which would turn ``ß`` into ``ss``). **Case policy:** labels are case
    insensitive and stored, proposed and compared in lower case: ``Politika``, ``POLITIKA`` and ``politika``
    are the label ``politika``. Applied by every path that takes a label: the wire events (decisions,
    proposals, label events), the corpus loader, label rules and the label registry.
    """
    text = unicodedata.normalize("NFC", _INVISIBLE.sub("", value))
    return _SPACES.sub(" ", text).strip().lower()


#: Control characters a label refuses: Unicode category Cc (C0, DEL, C1) except the ASCII whitespace (tab, line
#: feed, vertical tab, form feed, carriage return: a run of whitespace is one space in a label).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
#: The most characters a label may have before normalisation (4x the limit after it: invisible characters and
#: whitespace runs go); checked first, so that no normalisation ever runs on a megabyte of label.
LABEL_MAX_RAW_LENGTH = 4 * LABEL_MAX_LENGTH


def check_label(value: Any) -> str:
    """The label policy: the canonical form (:func:`canonical_label`) of a label name, or why it is refused.

    One function for every path that takes a label: the wire events (decisions, proposals, label events), the
    HTTP API's label paths, the corpus loader, label rules, the knowledge memory's label sets.

    Raises:
        ValueError: not a string; longer than 1024 characters as given; holding a control character (Unicode
            category Cc other than tab, line feed, vertical tab, form feed and carriage return: ``\\u0000``,
            ``\\u0007``, DEL, the C1 controls) or a lone surrogate; blank, or longer than 256 characters after
            normalisation. The message names the character and its position.
    """
    if not isinstance(value, str):
        raise ValueError(f"label must be a string, not {type(value).__name__}")
    if len(value) > LABEL_MAX_RAW_LENGTH:
        raise ValueError(f"label {show_value(value)} has {len(value)} characters (at most {LABEL_MAX_LENGTH})")
    bad = _CONTROL.search(value) or _SURROGATE.search(value)
    if bad is not None:
        kind = "a control character" if _CONTROL.match(bad.group()) else "a lone surrogate"
        raise ValueError(f"label {show_value(value)} holds {kind} U+{ord(bad.group()):04X} at position "
                         f"{bad.start()}: labels are printable text")
    label = canonical_label(value)
    if not label:
        raise ValueError(f"label {show_value(value)} is blank")
    if len(label) > LABEL_MAX_LENGTH:
        raise ValueError(f"label {show_value(value)} has {len(label)} characters (at most {LABEL_MAX_LENGTH})")
    return label


_NOT_CONTROL = r"[^\u0000-\u0008\u000e-\u001f\u007f-\u009f]*"
_LABEL_PATTERN = f"^{_NOT_CONTROL}\\S{_NOT_CONTROL}$"


def _label(value: str) -> str:
    try:
        return check_label(value)
    except ValueError as exc:
        raise PydanticCustomError("label", "{msg}", {"msg": str(exc)}) from None


Label = Annotated[str, AfterValidator(_label),
                  WithJsonSchema({"type": "string", "minLength": 1, "maxLength": LABEL_MAX_LENGTH,
                                  "pattern": _LABEL_PATTERN,
                                  "description": "Label name, no control characters; read in its canonical form: "
                                                 "NFC, trimmed, lower case (Politika and politika are one label)."})]
"""A label name in its canonical form (see :func:`canonical_label`): 1..256 characters, not blank."""


def _not_blank(value: str) -> str:
    """``value`` unless Python reads it as blank: the schema's ``\\S`` is checked by pydantic's Rust engine, whose
    whitespace (Unicode's White_Space) leaves out the separators U+001C-U+001F that ``str.strip`` removes, so a name of
    them passed the wire and then read as empty (a moderator's name in the console). Raises ValueError."""
    if not value.strip():
        raise ValueError("a name must not be blank (only whitespace or separator characters)")
    return value


#: The check every non-blank string of the wire carries beside its ``\S`` pattern (names, sections, keyword Boolean
#: expressions, filter values, memory versions): at least one character ``str.strip`` keeps (:func:`_not_blank`).
NOT_BLANK = AfterValidator(_not_blank)

Name = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"\S"), NOT_BLANK]
"""A non-blank short name (outlet, moderator, model version, ...): at least one character ``str.strip`` keeps."""


_TWO_LETTERS = re.compile(r"^[a-z]{2}$")


def check_language_code(code: Any) -> str:
    """``code`` when it is an ISO 639-1 language code: two lower-case letters that name a language in the IANA
    language subtag registry (via ``langcodes``), e.g. ``sl``, ``hr``, ``sr``, ``sq``, ``mk``, ``en``.

    Refused: other shapes (``SL``, ``slv``, ``sl-SI``) and two letters that name no language (``xx``, the
    private-use ``qa``..``qt``). The one check for every path that names a language (the ``lang`` of article
    events and corpus lines, memory collections, ``suggest --lang``), so a code that is not a language never
    creates a knowledge-memory collection.

    Raises:
        ValueError: not an ISO 639-1 code (the message says why).
    """
    if not isinstance(code, str) or not _TWO_LETTERS.match(code):
        raise ValueError(f"language {show_value(code)} is not an ISO 639-1 code (two lower-case letters, e.g. sl)")
    import langcodes  # deferred: loading its registry is slow, and `newsmon --help` need not pay for it

    if not langcodes.tag_is_valid(code):
        raise ValueError(f"language {code!r} is not an ISO 639-1 code: no language has this code")
    return code


def _language_code(value: str) -> str:
    try:
        return check_language_code(value)
    except ValueError as exc:
        raise PydanticCustomError("language_code", "{msg}", {"msg": str(exc)}) from None


LanguageCode = Annotated[str, AfterValidator(_language_code),
                         WithJsonSchema({"type": "string", "pattern": "^[a-z]{2}$",
                                         "description": "ISO 639-1 language code (a registered language)."})]
"""An ISO 639-1 language code: two lower-case letters naming a language (see :func:`check_language_code`)."""


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


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


def _schema_version_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    # the model's example messages (newsmon.schemas.examples), for the teams that produce and consume them
    examples = getattr(model, "json_examples", ())
    if examples:
        schema["examples"] = [dict(e) for e in examples]
    # the Python default is for building events in code; on the wire the field is required
    required = schema.setdefault("required", [])
    if "schema_version" not in required:
        required.insert(0, "schema_version")
    versions = list(getattr(model, "schema_versions", ()))
    prop = schema.get("properties", {}).get("schema_version")
    if prop is not None and versions:
        prop.clear()
        prop.update({"type": "integer", "enum": versions, "default": max(versions), "title": "Schema Version",
                     "description": "Version of this schema; this release reads "
                                    f"{', '.join(map(str, versions))} and writes the lowest of them that carries "
                                    "the message's content."})


class Event(BaseModel):
    """Base of the top-level events: ``schema_version`` and the Kafka topic / key conventions.

    Subclasses set ``schema_versions`` (the versions this code reads, ascending) and re-declare the field
    with the highest as its default. :meth:`needs_version` lets a subclass say which version its content
    needs; an event built without an explicit ``schema_version`` is set to it (the lowest version that carries
    the content), and a parsed message keeps the version it declares.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_schema_version_schema)

    default_topic: ClassVar[str]
    """The topic the event goes to unless the worker settings say otherwise."""
    kafka_key_field: ClassVar[str]
    """The field whose UTF-8 bytes are the Kafka message key."""
    schema_versions: ClassVar[tuple[int, ...]] = (1,)
    """The ``schema_version`` values this code reads, ascending; it writes the lowest that carries an event."""
    json_examples: ClassVar[tuple[dict, ...]] = ()
    """Realistic messages as a producer sends them (:mod:`newsmon.schemas.examples`): the JSON Schema's
    ``examples``, each validated against the model by the tests."""

    schema_version: int = Field(1, description="Version of this schema. A reader refuses versions it does "
                                               "not know.")

    @field_validator("schema_version", mode="before")
    @classmethod
    def _known_version(cls, value: Any) -> Any:
        # strict: an int type alone would let True and 1.0 through
        if type(value) is not int or value not in cls.schema_versions:
            raise PydanticCustomError(
                "unsupported_schema_version",
                "unsupported schema_version {version}; this worker reads {supported}",
                {"version": show_value(value), "supported": ", ".join(map(str, cls.schema_versions))},
            )
        return value

    @model_validator(mode="after")
    def _written_at_lowest_version(self) -> Event:
        if "schema_version" not in self.model_fields_set:
            self.schema_version = self.needs_version()
        return self

    def needs_version(self) -> int:
        """The lowest ``schema_version`` that can carry this event's content (version 1 unless a subclass
        says otherwise); validation refuses an event that declares a lower one."""
        return 1

    def _check_declared_version(self) -> None:
        need = self.needs_version()
        if self.schema_version < need:
            raise PydanticCustomError(
                "schema_version_too_low", "schema_version {declared} cannot carry this content; it needs "
                "schema_version {need}", {"declared": self.schema_version, "need": need})

    def kafka_key(self) -> bytes:
        """The Kafka message key: the UTF-8 bytes of ``kafka_key_field``."""
        return str(getattr(self, self.kafka_key_field)).encode("utf-8")

    def to_bytes(self) -> bytes:
        """The Kafka message value: compact JSON in UTF-8."""
        return self.model_dump_json().encode("utf-8")


class Part(BaseModel):
    """Base of the nested parts of the events we produce (unknown fields refused)."""

    model_config = ConfigDict(extra="forbid")


def show_value(value: Any) -> str:
    """A short JSON-ish rendering of a value for error messages (at most 40 characters)."""
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def first_duplicate(items) -> str | None:
    """The first item that occurs a second time in ``items``, or None."""
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None
