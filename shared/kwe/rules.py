"""A label's definition as analysts write it: keyword Boolean expressions plus article-metadata filters.

:class:`LabelRule` is the registry form (a pydantic model, JSON-ready; the workers build it from the definition a
``LabelEvent`` with the ``defined`` / ``updated`` actions carries, see :mod:`newsmon.workers.kwe_stage`): every KwE is
validated at construction, so a rule that exists can be matched. :class:`LabelRuleIndex` matches one article
against all label rules through one :class:`.index.KweIndex` and applies the filters.

A label matches an article when the article passes the label's filters and at least one of its KwEs matches.
Filters: each non-empty list restricts one metadata field to the values listed (OR within a field, AND across
fields); an article whose value for a restricted field is unknown does not pass. Languages are ISO 639-1 codes
(:func:`newsmon.schemas.base.check_language_code`, after lowering), countries ISO 3166-1 alpha-2 codes compared
upper-case, sources (outlets) and sections free text compared case-insensitively (``str.casefold``).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from newsmon.schemas.base import check_label, check_language_code

from ..text import Tokens, tokenize
from .expression import KeywordExpression, KweMatch
from .index import KweIndex
from .parser import parse_kwe

__all__ = ["ArticleMeta", "LabelRule", "LabelRuleIndex", "RuleFilters", "RuleMatch", "load_rules"]


@lru_cache(maxsize=65_536)
def _parsed(source: str) -> KeywordExpression:
    """``parse_kwe`` with a cache: a rule's KwEs are parsed at validation and again when indexed."""
    return parse_kwe(source)


def _valid_kwe(source: str) -> str:
    _parsed(source)  # raises KweSyntaxError (a ValueError: pydantic reports it with the KwE's index)
    return source


Kwe = Annotated[str, Field(min_length=1), AfterValidator(_valid_kwe)]


def _unique(values: Iterable[str], fold) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(fold(v.strip()) for v in values))
    if any(not v for v in out):
        raise ValueError("blank value")
    return out


class ArticleMeta(BaseModel):
    """The metadata of one article that filters look at (``None``: unknown)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    lang: str | None = None
    country: str | None = None
    source: str | None = None
    section: str | None = None


class RuleFilters(BaseModel):
    """Metadata limits of a label (empty tuple: no limit on that field)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    languages: tuple[Annotated[str, AfterValidator(check_language_code)], ...] = ()
    countries: tuple[Annotated[str, Field(pattern=r"^[A-Z]{2}$")], ...] = ()
    sources: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()

    @field_validator("languages", mode="before")
    @classmethod
    def _lower(cls, v: Iterable[str]) -> tuple[str, ...]:
        return _unique(v, str.lower)

    @field_validator("countries", mode="before")
    @classmethod
    def _upper(cls, v: Iterable[str]) -> tuple[str, ...]:
        return _unique(v, str.upper)

    @field_validator("sources", "sections", mode="before")
    @classmethod
    def _folded(cls, v: Iterable[str]) -> tuple[str, ...]:
        return _unique(v, str.casefold)

    def admits(self, meta: ArticleMeta | None) -> bool:
        """Whether an article with this metadata passes every restricted field (unknown values fail)."""
        meta = meta or ArticleMeta()
        checks = ((self.languages, meta.lang, str.lower), (self.countries, meta.country, str.upper),
                  (self.sources, meta.source, str.casefold), (self.sections, meta.section, str.casefold))
        return all(not allowed or (value is not None and fold(value.strip()) in allowed)
                   for allowed, value, fold in checks)


class LabelRule(BaseModel):
    """A label's definition: its KwEs (any may match), metadata filters and the precision option.

    Attributes:
        label: the label (client topic) name in canonical form (NFC, trimmed, lower case), non-empty.
        kwes: keyword Boolean expressions (:mod:`.parser` grammar), at least one; each is parsed at construction.
        filters: metadata limits (:class:`RuleFilters`).
        require_rule_match: when True, the label is only proposed for articles its rule matches (a precision
            filter on retrieval proposals).

    Raises:
        pydantic.ValidationError: a KwE does not parse (the error's ``loc`` is ``("kwes", i)`` and its message
            holds the reason and the character position), or another field is invalid.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(min_length=1)
    kwes: tuple[Kwe, ...] = Field(min_length=1)
    filters: RuleFilters = RuleFilters()
    require_rule_match: bool = False

    @field_validator("label")
    @classmethod
    def _canonical_label(cls, v: str) -> str:
        return check_label(v)  # the label policy of the wire: NFC, trimmed, lower case

    @property
    def expressions(self) -> tuple[KeywordExpression, ...]:
        """The parsed KwEs, in order."""
        return tuple(_parsed(k) for k in self.kwes)


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """A label whose rule matched an article: the rule and every KwE of it that matched (in the rule's order)."""

    rule: LabelRule
    matches: tuple[KweMatch, ...]

    @property
    def label(self) -> str:
        return self.rule.label

    def evidence(self, tokens: Tokens) -> dict:
        """JSON-ready: ``{"label", "kwes": [{"kwe", "hits": [{"term", "words", "word_index", "start", "end"}]}]}``."""
        return {"label": self.rule.label, "kwes": [m.evidence(tokens) for m in self.matches]}


class LabelRuleIndex:
    """All label rules, matched together against one article (one :class:`.index.KweIndex` under the hood).

    Not thread-safe for changes during matching (see :mod:`.index`).
    """

    def __init__(self, rules: Iterable[LabelRule] = ()):
        self._rules: dict[str, LabelRule] = {}
        self._index = KweIndex()
        for rule in rules:
            self.put(rule)

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, label: str) -> bool:
        return label in self._rules

    def get(self, label: str) -> LabelRule | None:
        """The rule of ``label``, or ``None``."""
        return self._rules.get(label)

    def labels(self) -> list[str]:
        """The labels with a rule, in the order they were put."""
        return list(self._rules)

    def put(self, rule: LabelRule) -> None:
        """Define or replace the rule of ``rule.label``."""
        self.remove(rule.label)
        self._rules[rule.label] = rule
        for i, expression in enumerate(rule.expressions):
            self._index.add((rule.label, i), expression)

    def remove(self, label: str) -> bool:
        """Drop the rule of ``label`` (retirement); False when it had none."""
        rule = self._rules.pop(label, None)
        if rule is None:
            return False
        for i in range(len(rule.kwes)):
            self._index.remove((rule.label, i))
        return True

    def match(self, text: str | Tokens, meta: ArticleMeta | None = None) -> list[RuleMatch]:
        """The labels whose rule matches an article, in the order the rules were put.

        Args:
            text: the article text (title + body) or its :func:`..text.tokenize` result.
            meta: the article's metadata for the filters (``None``: all unknown; labels with filters then fail).

        Returns:
            One :class:`RuleMatch` per matching label.
        """
        tokens = text if isinstance(text, Tokens) else tokenize(text)
        per_label: dict[str, list[KweMatch]] = {}
        for m in self._index.match(tokens):
            label, _ = m.key
            per_label.setdefault(label, []).append(m)
        out = []
        for label, matches in per_label.items():
            rule = self._rules[label]
            if rule.filters.admits(meta):
                out.append(RuleMatch(rule, tuple(sorted(matches, key=_kwe_number))))
        return out


def _kwe_number(m: KweMatch) -> Hashable:
    return m.key[1]


def load_rules(path: str | Path) -> list[LabelRule]:
    """Read label rules from a JSONL file (one :class:`LabelRule` object a line; blank lines skipped).

    Raises:
        ValueError: a line is not JSON or not a valid rule (all bad lines listed with their 1-based numbers), or
            a label occurs twice.
        FileNotFoundError: no such file.
    """
    rules: list[LabelRule] = []
    errors: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rule = LabelRule.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            errors.append(f"line {number}: {exc}")
            continue
        if rule.label in seen:
            errors.append(f"line {number}: label {rule.label!r} defined twice")
        seen.add(rule.label)
        rules.append(rule)
    if errors:
        raise ValueError(f"{path}: {len(errors)} bad rule line(s):\n" + "\n".join(errors))
    return rules
