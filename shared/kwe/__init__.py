"""Keyword Boolean expressions (KwEs): client topics as media-monitoring analysts define them.

* :mod:`.parser`: :func:`parse_kwe` (the grammar and its decisions) and :class:`KweSyntaxError`;
* :mod:`.expression`: :class:`KeywordExpression`, :class:`Term`, the direct matcher and its evidence;
* :mod:`.index`: :class:`KweIndex`, a term index in front of many expressions;
* :mod:`.rules`: :class:`LabelRule` (a label's KwEs and metadata filters) and :class:`LabelRuleIndex`.

Rules and articles share one normalisation and word segmentation (:mod:`..text`).
"""

from .expression import KeywordExpression, KweMatch, Term, TermHit
from .index import KweIndex
from .parser import KweSyntaxError, parse_kwe
from .rules import ArticleMeta, LabelRule, LabelRuleIndex, RuleFilters, RuleMatch, load_rules

__all__ = ["ArticleMeta", "KeywordExpression", "KweIndex", "KweMatch", "KweSyntaxError", "LabelRule",
           "LabelRuleIndex", "RuleFilters", "RuleMatch", "Term", "TermHit", "load_rules", "parse_kwe"]
