"""Reading labelled corpora: one JSONL layout for every corpus (../shared/README.md).

``{"id": str, "title": str|null, "text": str (title + body), "labels": [str], "lang": ISO 639-1,
"split": "train"|"validation"|"test", "source": str}``, one article a line, the file in UTF-8.

The wire's rules hold here too: ``id`` follows the one article-id policy
(:func:`~newsmon.schemas.base.check_article_id`: ``Delo 2019-03-04 #12`` is a bad line), ``labels`` are read in
their canonical form (:func:`~newsmon.schemas.base.canonical_label`: NFC, lower case; labels that become equal,
``Šport`` in NFC and NFD, are one label) and ``lang`` is an ISO 639-1 code. A line that is not valid UTF-8 (a
line saved in cp1250) is a bad line, never read with replacement characters. ``title`` and ``text`` are read
cleaned (:func:`~newsmon.shared.text.clean_text`, the one normalisation of every stage: HTML decoded and removed,
invisible characters, NFC), so a corpus article and the same article from the stream are the same text.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from newsmon.schemas.base import ArticleId, Label, LanguageCode
from newsmon.shared.text import clean_text

Split = Literal["train", "validation", "test"]


class Article(BaseModel):
    """One labelled article of a corpus file."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: ArticleId  # the wire's id policy
    title: str | None = None
    text: str = Field(min_length=1)
    labels: tuple[Label, ...]  # canonical form (NFC, lower case), as on the wire
    lang: LanguageCode  # ISO 639-1, the same check as the wire's ArticleEvent
    split: Split
    source: str | None = None

    @field_validator("title", "text")
    @classmethod
    def _cleaned(cls, v: str | None) -> str | None:
        return None if v is None else clean_text(v)  # the one normalisation, as for the stream's articles

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("text is blank (once cleaned: markup and invisible characters removed)")
        return v

    @field_validator("labels", mode="before")
    @classmethod
    def _drop_blank_labels(cls, v):
        if isinstance(v, (list, tuple)):
            return [x for x in v if not isinstance(x, str) or x.strip()]
        return v

    @field_validator("labels")
    @classmethod
    def _unique_labels(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v))  # labels equal in canonical form are merged, first position kept


@dataclass
class BadLine:
    """A line that could not be used: 1-based ``line`` number and the ``reason``."""

    line: int
    reason: str


@dataclass
class Corpus:
    """Articles of one corpus file, in file order, with the lines that were skipped."""

    path: Path
    articles: list[Article]
    bad_lines: list[BadLine] = field(default_factory=list)

    def split(self, name: Split) -> list[Article]:
        """The articles of one split, in file order."""
        return [a for a in self.articles if a.split == name]

    def bad_line_report(self, most: int = 50) -> list[str]:
        """One message per skipped line (``line N: reason``), at most ``most`` of them plus a count of the rest;
        every command that reads a corpus prints these (the CLI on stderr, the demo before streaming)."""
        out = [f"line {b.line}: {b.reason}" for b in self.bad_lines[:most]]
        if len(self.bad_lines) > most:
            out.append(f"... and {len(self.bad_lines) - most} more bad lines")
        return out

    def summary(self) -> dict:
        """Counts per split, distinct labels and skipped lines (for run summaries)."""
        per_split = Counter(a.split for a in self.articles)
        return {"path": str(self.path), "articles": len(self.articles), **{k: per_split.get(k, 0) for k in
                ("train", "validation", "test")}, "labels": len({lb for a in self.articles for lb in a.labels}),
                "bad_lines": len(self.bad_lines)}


def resolve_corpus_file(path: str | Path) -> Path:
    """A corpus folder (holding ``articles.jsonl``) or a JSONL file -> the file.

    Raises:
        FileNotFoundError: neither exists.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "articles.jsonl"
    if not p.is_file():
        raise FileNotFoundError(f"no corpus at {path} (expected a JSONL file or a folder with articles.jsonl)")
    return p


def load_corpus(path: str | Path, limit: int | None = None) -> Corpus:
    """Read and validate a JSONL corpus.

    Each line is validated with :class:`Article`; a bad line (not UTF-8, invalid JSON, a missing or blank field,
    a wrong type, an id outside the id policy, a duplicate id) is recorded with its 1-based line number and
    reason and skipped. A UTF-8 byte-order mark at the start of the file is ignored.

    Args:
        path: JSONL file or a folder with ``articles.jsonl``.
        limit: stop after this many valid articles (for slices).

    Raises:
        FileNotFoundError: see :func:`resolve_corpus_file`.
    """
    file = resolve_corpus_file(path)
    articles: list[Article] = []
    bad: list[BadLine] = []
    seen: set[str] = set()
    with file.open("rb") as fh:
        for no, raw in enumerate(fh, start=1):
            art = _parse_line(no, raw, bad)
            if art is None:
                continue
            if art.id in seen:
                bad.append(BadLine(no, f"duplicate id {art.id!r}"))
                continue
            seen.add(art.id)
            articles.append(art)
            if limit is not None and len(articles) >= limit:
                break
    return Corpus(file, articles, bad)


def _parse_line(no: int, raw: bytes, bad: list[BadLine]) -> Article | None:
    """The article of one raw line, or None (a blank line, or a bad one appended to ``bad``)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad.append(BadLine(no, f"not UTF-8: byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line "
                               f"({exc.reason}); the corpus must be UTF-8 (was it saved as cp1250?)"))
        return None
    if no == 1:
        line = line.removeprefix("\ufeff")
    if not line.strip():
        return None
    try:
        return Article.model_validate(json.loads(line))
    except json.JSONDecodeError as exc:
        bad.append(BadLine(no, f"invalid JSON: {exc.msg} at column {exc.colno}"))
    except ValidationError as exc:
        bad.append(BadLine(no, "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}"
                                         for e in exc.errors())))
    return None
