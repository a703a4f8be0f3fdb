"""Request and response bodies of the HTTP API that are not wire events (those are the wire's own models:
``ArticleEvent`` in, ``LabelProposal`` out, ``LabelDefinition`` and ``LabelEvent`` for labels)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from newsmon.schemas import LabelDefinition, LabelEvent, RuleEvidence
from newsmon.schemas.base import Label, LanguageCode

__all__ = ["ErrorBody", "LabelChange", "LabelTest", "LabelTestResult", "LabelView", "RenameBody", "TestedArticle"]


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
    """A label change accepted (202): the ``LabelEvent`` published, and where the broker stored it. The workers
    apply it when the memory updater consumes it (usually within a second); ``GET /v1/labels/{label}`` shows
    it from then on."""

    event: LabelEvent
    topic: str
    partition: int
    offset: int


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
