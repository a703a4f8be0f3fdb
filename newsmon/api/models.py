"""Request and response bodies of the HTTP API that are not wire events (those are the wire's own models:
``ArticleEvent`` in, ``LabelProposal`` out, ``LabelDefinition`` and ``LabelEvent`` for labels)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from newsmon.schemas import LabelDefinition, LabelEvent, ModeratorDecision, RuleEvidence
from newsmon.schemas.base import NOT_BLANK, ArticleId, Label, LanguageCode

__all__ = ["DecisionSent", "ErrorBody", "LabelChange", "LabelTest", "LabelTestResult", "LabelView", "RenameBody",
           "SuggestText", "TestedArticle", "suggestion_id"]


def suggestion_id(text: str) -> str:
    """The article id a text sent without one gets (``newsmon suggest``, ``POST /v1/suggest`` with ``text``):
    ``suggest-`` and the first 12 hex digits of the SHA-256 of its UTF-8 text (the same text, the same id)."""
    return "suggest-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


class SuggestText(BaseModel):
    """The minimal request of ``POST /v1/suggest``: a text, and its language when known.

    It is proposed as the article event ``{"schema_version": 1, "article_id": <article_id or suggest-<hash>>,
    "title": <title>,
    "body": <text>, "lang": <lang>, "outlet": "api", "country": "ZZ", "published_at": <now>}`` (label rules
    with a country, outlet or section filter do not match it: those fields are unknown). Without ``lang`` the
    language is detected among the memory's languages.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "Krka je lani povečala prihodke od prodaje.", "lang": "sl"}]})

    text: Annotated[str, NOT_BLANK] = Field(min_length=1, pattern=r"\S",
                                            description="The article: title and body, plain text.")
    lang: LanguageCode | None = Field(None, description="ISO 639-1 code; default: detected among the knowledge "
                                                        "memory's languages.")
    title: str | None = Field(None, description="Headline, when it is not part of `text`.")
    article_id: ArticleId | None = Field(None, description="Id of the proposal (and of the article stored as "
                                                           "pending, for decisions); default `suggest-<hash>`.")

    def event(self, lang: str) -> dict:
        """The article event (JSON object) this request stands for, in language ``lang``."""
        return {"schema_version": 1, "article_id": self.article_id or suggestion_id(self.text), "title": self.title,
                "body": self.text,
                "lang": lang, "outlet": "api", "country": "ZZ", "published_at": datetime.now(UTC).isoformat()}


class ErrorBody(BaseModel):
    """Every 4xx / 5xx answer: ``detail`` says what is wrong in one readable line; ``errors`` lists each problem
    (for a KwE: ``loc``, ``reason``, ``position`` (0-based character offset) and ``expression``)."""

    detail: str
    errors: list[dict] = Field(default_factory=list)


class LabelView(BaseModel):
    """A label as the registry knows it.

    ``status``: ``active``, ``retired``, or ``renamed`` (the name was renamed to ``renamed_to``; its history
    and definition are there). ``examples``: confirmed examples in the knowledge memory (under the name or an
    old name); with fewer than ``labels.min_examples`` the label is proposed from its KwE alone.
    """

    label: Label
    status: Literal["active", "retired", "renamed"]
    definition: LabelDefinition | None = None
    renamed_to: Label | None = None
    renamed_from: list[Label] = Field(default_factory=list)
    examples: int = Field(ge=0)
    registry_version: int = Field(ge=0, description="The registry's version this view was read at.")


class LabelChange(BaseModel):
    """A label change: the `LabelEvent` published, where the broker stored it, and whether the memory updater
    applied it before the answer.

    `200` with `applied: true`: applied; `GET /v1/labels/{label}` shows it and the next proposals use it. `202`
    with `applied: false`: published, not applied within `api.apply_wait_s` (the memory updater is behind or
    down; it applies the event when it reads it). `200` with `event: null`: nothing to change (retiring a retired
    label, the same definition again); no event is published.
    """

    event: LabelEvent | None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    applied: bool = True
    note: str | None = Field(None, description="Why nothing was published, when `event` is null.")


class DecisionSent(BaseModel):
    """A moderator decision published to the decisions topic (`POST /v1/decisions`), where the broker stored
    it, and whether the memory updater applied it before the answer (`200`, `applied: true`: the article is
    evidence for the next proposals) or not within `api.apply_wait_s` (`202`, `applied: false`: a decision for an
    article the memory does not hold yet, or an updater that is behind)."""

    decision: ModeratorDecision
    topic: str
    partition: int
    offset: int
    applied: bool


class RenameBody(BaseModel):
    """``POST /v1/labels/{label}/rename``: the new name."""

    model_config = ConfigDict(extra="forbid")

    new_label: Label


class LabelTest(BaseModel):
    """``POST /v1/labels/{label}/test``: what to test and on what.

    ``definition``: the KwEs and filters to test (default: the label's stored definition). ``text``: test this
    text (with ``title``, ``lang``, ``country``, ``outlet``, ``section`` as its metadata for the filters: a filter
    on a field left unknown does not pass); without it, the latest ``articles`` articles of the articles topic
    (default ``api.test_articles``).
    """

    model_config = ConfigDict(extra="forbid")

    definition: LabelDefinition | None = None
    text: str | None = Field(None, min_length=1)
    title: str | None = None
    lang: LanguageCode | None = None
    country: str | None = Field(None, pattern=r"^[A-Z]{2}$")
    outlet: str | None = None
    section: str | None = None
    articles: int | None = Field(None, ge=1, le=100_000)


class TestedArticle(BaseModel):
    """One article the rule matched, with the evidence."""

    article_id: str | None = None
    title: str | None = None
    lang: str | None = None
    outlet: str | None = None
    published_at: str | None = None
    rule: RuleEvidence


class LabelTestResult(BaseModel):
    """What the rule matched: ``matched`` (with the metadata filters), and, among the ``tested`` articles, the
    ones matched. ``kwe_matched`` counts the matches before the filters (so a filter that refuses everything
    shows)."""

    label: Label
    definition: LabelDefinition
    tested: int
    kwe_matched: int
    matched: list[TestedArticle]
