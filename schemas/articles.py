"""``ArticleEvent``: a news article to label (topic ``articles``), from the ingestion feed."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from newsmon.schemas.base import NOT_BLANK, ArticleId, Event, LanguageCode, Name, Url, UtcDatetime
from newsmon.schemas.examples import ARTICLE_EXAMPLES

__all__ = ["ARTICLES_TOPIC", "ArticleEvent"]

ARTICLES_TOPIC = "articles"

Section = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"\S"), NOT_BLANK]


class ArticleEvent(Event):
    """A news article to label.

    Topic ``articles`` (setting; this is the default), key ``article_id``. Produced by the ingestion feed,
    read by the proposal worker. Unknown fields are ignored (tolerant reader); ``title`` and ``body``
    together must hold some non-whitespace text, and neither may hold a lone surrogate (no UTF-8
    form). The body size is not capped here: the worker bounds the
    raw message size before parsing.

    Versions: 1; 2 adds ``section`` (used by label rules limited to sections). As a tolerant reader, a
    version-1 message that carries ``section`` is read with it.
    """

    model_config = ConfigDict(extra="ignore")
    default_topic: ClassVar[str] = ARTICLES_TOPIC
    kafka_key_field: ClassVar[str] = "article_id"
    schema_versions: ClassVar[tuple[int, ...]] = (1, 2)
    json_examples: ClassVar[tuple[dict, ...]] = tuple(ARTICLE_EXAMPLES)

    schema_version: int = Field(2, description="Version of this schema (1 or 2).")
    article_id: ArticleId = Field(description="Stable id of the article: 1..256 ASCII letters, digits "
                                      "and . _ - : / @ # + = ~, starting with a letter or digit.")
    title: str | None = Field(None, description="Headline; null or empty when the outlet has none.")
    body: str = Field(description="Article text (plain text).")
    lang: LanguageCode = Field(description="Language, ISO 639-1 lower-case code of a registered language "
                                           "(e.g. sl); other codes (xx) are refused.")
    outlet: Name = Field(description="The publishing outlet (newspaper, site, broadcaster).")
    country: str = Field(pattern=r"^[A-Z]{2}$",
                         description="Country of the outlet, ISO 3166-1 alpha-2 upper-case code (e.g. SI).")
    published_at: UtcDatetime = Field(
        description="Publication time, ISO 8601 with a UTC offset (naive refused); normalised to UTC.")
    url: Url | None = Field(None, description="Where the article lives: an absolute http(s) URL.")
    section: Section | None = Field(None, description="The outlet's section (e.g. gospodarstvo, šport); "
                                                      "schema_version 2. Null when unknown.")

    @property
    def text(self) -> str:
        """What gets embedded: ``title + "\\n" + body``, or just ``body`` when the title is empty."""
        if self.title is None or not self.title.strip():
            return self.body
        return f"{self.title}\n{self.body}"

    def needs_version(self) -> int:
        """2 when ``section`` is set, else 1 (a version-1 message that carries ``section`` is still read)."""
        return 2 if self.section is not None else 1

    @model_validator(mode="after")
    def _has_text(self) -> ArticleEvent:
        if not self.text.strip():
            raise PydanticCustomError("empty_text", "empty text: title and body hold no non-whitespace text")
        for name, value in (("title", self.title or ""), ("body", self.body)):
            try:  # a lone surrogate (JSON's \ud800 escapes let it through) has no UTF-8 form: no tokenizer,
                value.encode("utf-8")  # embedding cache or payload can take it
            except UnicodeEncodeError as exc:
                raise PydanticCustomError("not_unicode", "{field}: not valid Unicode (a lone surrogate {char} at "
                                          "position {pos})", {"field": name, "char": f"U+{ord(value[exc.start]):04X}",
                                                              "pos": exc.start}) from None
        return self
