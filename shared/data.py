"""Reading labelled corpora: one JSONL layout for every corpus (../shared/README.md).

``{"id": str, "title": str|null, "text": str (title + body), "labels": [str], "lang": ISO 639-1,
"split": "train"|"validation"|"test", "source": str}``, one article a line.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from newsmon.schemas.base import LanguageCode

Split = Literal["train", "validation", "test"]


class Article(BaseModel):
    """One labelled article of a corpus file."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1)
    title: str | None = None
    text: str = Field(min_length=1)
    labels: tuple[str, ...]
    lang: LanguageCode  # ISO 639-1, the same check as the wire's ArticleEvent
    split: Split
    source: str | None = None

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("text is blank")
        return v

    @field_validator("labels")
    @classmethod
    def _clean_labels(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        out = tuple(dict.fromkeys(x.strip() for x in v if x.strip()))
        return out


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

    Each line is validated with :class:`Article`; a bad line (invalid JSON, a missing or blank field, a
    wrong type, a duplicate id) is recorded with its 1-based line number and reason and skipped.

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
    with file.open(encoding="utf-8", errors="replace") as fh:
        for no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                art = Article.model_validate(json.loads(line))
            except json.JSONDecodeError as exc:
                bad.append(BadLine(no, f"invalid JSON: {exc.msg} at column {exc.colno}"))
                continue
            except ValidationError as exc:
                reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors())
                bad.append(BadLine(no, reasons))
                continue
            if art.id in seen:
                bad.append(BadLine(no, f"duplicate id {art.id!r}"))
                continue
            seen.add(art.id)
            articles.append(art)
            if limit is not None and len(articles) >= limit:
                break
    return Corpus(file, articles, bad)
