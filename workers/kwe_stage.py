"""Label rules (analysts' keyword Boolean expressions) in the article path: the ``match_rules`` stage.

The label registry (:mod:`newsmon.workers.labels`) holds each label's :class:`~newsmon.schemas.LabelDefinition`.
:class:`RuleBook` compiles the active definitions (retired labels left out) into one
:class:`~newsmon.shared.kwe.LabelRuleIndex`, the term index in front of every KwE, rebuilt only when the
registry's version moves. :func:`apply_rules` (the stage: each article's :class:`~newsmon.schemas.Proposal` in, the
revised one out) runs :func:`match_rules`, which, for each article that is not a near-copy:

1. matches the article (title + body, one tokenisation) against every rule at once, with the article's
   metadata (language, country, outlet as source, section) for the filters;
2. gives every proposed label whose rule matched its evidence (``rule``: the first matching KwE and the words
   that matched);
3. drops a retrieval proposal of a label whose definition does not admit the article: its filters refuse the
   article's metadata, or ``require_rule_match`` is set and no KwE matched (the precision filter);
4. proposes each matched label that retrieval did not propose and that has fewer than
   ``labels.min_examples`` (default 3) confirmed examples in the knowledge memory (the label or an old name of
   it, any language), from its KwE alone: ``source: rule``, scored at the threshold the article was scored
   with (below every retrieval proposal; a KwE match carries no graded evidence), after the retrieval labels. From that
   many examples on, retrieval proposes the label and the KwE is its evidence;
5. lists each matched label with that many examples that retrieval did not propose among the proposal's
   ``candidates`` (below the threshold, ``source: rule``): a one-click addition for the moderator. With few
   examples retrieval rarely carries a label (on sentinews_sl, none of 20 labels with 3 examples, see
   ``benchmarks/kwe_cold_start.py``), so the KwE match stays in sight without lowering the labels' precision.

Near-copies are left alone: they keep what their original passes on (:mod:`newsmon.workers.copies`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from newsmon.schemas import ArticleEvent, LabelDefinition, Proposal, ProposedLabel, RuleEvidence
from newsmon.shared.scoring.reasons import quoted, rule_reason
from newsmon.shared.kwe import (ArticleMeta, KweSyntaxError, LabelRule, LabelRuleIndex, RuleFilters, RuleMatch,
                                parse_kwe)
from newsmon.shared.memory import MemoryRouter, SearchFilter
from newsmon.shared.text import Tokens, tokenize
from newsmon.workers.labels import RegistryState

log = structlog.get_logger(__name__)

__all__ = ["RuleBook", "RuleOutcome", "admitted_candidates", "apply_rules", "article_meta", "count_examples",
           "kwe_errors", "match_rules", "rule_evidence", "rule_of_definition", "with_rule_candidates"]

MAX_EVIDENCE_WORDS = 20  # RuleEvidence.matched max_length
MAX_EVIDENCE_CHARS = 300
MAX_CANDIDATES = 20  # LabelProposal.candidates max_length


def rule_of_definition(label: str, definition: LabelDefinition) -> LabelRule:
    """The matchable :class:`~newsmon.shared.kwe.LabelRule` of a label's wire definition.

    Raises:
        pydantic.ValidationError: a KwE does not parse (use :func:`kwe_errors` for the positions) or a filter
            value is invalid.
    """
    f = definition.filters
    return LabelRule(label=label, kwes=tuple(definition.kwes),
                     filters=RuleFilters(languages=f.languages, countries=f.countries, sources=f.sources,
                                         sections=f.sections),
                     require_rule_match=definition.require_rule_match)


def kwe_errors(kwes: Iterable[str]) -> list[tuple[int, KweSyntaxError]]:
    """``(index, error)`` of every KwE that does not parse (empty when all do); the error has ``reason``,
    ``position`` (0-based character offset) and ``expression``."""
    out = []
    for i, kwe in enumerate(kwes):
        try:
            parse_kwe(kwe)
        except KweSyntaxError as exc:
            out.append((i, exc))
    return out


def article_meta(ev: ArticleEvent) -> ArticleMeta:
    """The metadata label filters look at: language, country, outlet (as ``source``) and section."""
    return ArticleMeta(lang=ev.lang, country=ev.country, source=ev.outlet, section=ev.section)


def rule_evidence(match: RuleMatch, tokens: Tokens) -> RuleEvidence:
    """The evidence of a label's rule on one article: its first matching KwE and the article's words that
    matched its positive terms, as written in the text (distinct, in text order, at most 20)."""
    first = match.matches[0]
    hits = sorted(((start, word) for hit in first.hits for start, word in _surfaces(hit, tokens)))
    words = list(dict.fromkeys(w[:MAX_EVIDENCE_CHARS] for _, w in hits))[:MAX_EVIDENCE_WORDS]
    return RuleEvidence(kwe=first.expression.source, matched=words)


def _surfaces(hit, tokens: Tokens) -> list[tuple[int, str]]:
    n = len(hit.term.words)
    return [(i, tokens.surface(i, i + n - 1)) for i in hit.positions]


class RuleBook:
    """The active label rules of the registry as one :class:`~newsmon.shared.kwe.LabelRuleIndex`, rebuilt when
    the registry's version changes (a definition that no longer parses is skipped with a warning), then
    ``gc.freeze()``: without it a full cyclic-GC pass over a large index lands inside some match call."""

    def __init__(self) -> None:
        self._version: int | None = None
        self._index = LabelRuleIndex()

    def index(self, state: RegistryState) -> LabelRuleIndex:
        """The rule index of ``state`` (the cached one when its version is unchanged)."""
        if state.version != self._version:
            index = LabelRuleIndex()
            for label, definition in state.active_definitions().items():
                try:
                    index.put(rule_of_definition(label, definition))
                except ValueError as exc:
                    log.warning("label definition skipped: it does not compile", label=label, error=str(exc))
            self._index, self._version = index, state.version
            gc.freeze()  # the index's ~10^5 objects out of the cyclic GC's passes (see shared/kwe/index.py)
        return self._index


@dataclass
class RuleOutcome:
    """What :func:`match_rules` did to one article: ``matched`` the labels whose rule matched, ``dropped`` the
    retrieval proposals its definition refused, ``rule_only`` the labels proposed from their KwE alone,
    ``candidates`` the matched labels with enough examples that retrieval did not propose (best first)."""

    matched: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    rule_only: tuple[str, ...] = ()
    candidates: tuple[ProposedLabel, ...] = ()


def match_rules(articles: list[tuple[str, ArticleMeta, list[ProposedLabel]]], state: RegistryState,
                index: LabelRuleIndex, examples: Callable[[dict[str, tuple[str, ...]]], dict[str, int]],
                min_examples: int, rule_score: float | list[float]) -> list[tuple[list[ProposedLabel], RuleOutcome]]:
    """Apply the label rules to the retrieval proposals of each article (see the module docstring).

    Args:
        articles: per article (text, metadata, its retrieval proposals best first).
        state: the registry snapshot the batch is scored with; index: its rules (:meth:`RuleBook.index`).
        examples: label -> its names (:meth:`RegistryState.names_of`) in, label -> confirmed examples in the
            memory out (:func:`count_examples`); called once, for the labels that could be rule-only.
        min_examples: a label with fewer examples than this is proposed from its KwE alone.
        rule_score: the score of a rule-only proposal: the threshold the article was scored with (one for all
            articles, or one per article when calibration gives each language its own).

    Returns:
        Per article, its proposals after the rules and what changed (the rule candidates in the outcome).
    """
    active = state.active_definitions()
    if not active:
        return [(labels, RuleOutcome()) for _t, _m, labels in articles]
    found: list[tuple[Tokens, dict[str, RuleMatch]]] = []
    for text, meta, _labels in articles:
        tokens = tokenize(text)
        found.append((tokens, {m.label: m for m in index.match(tokens, meta)}))
    wanted = {lb for (_t, matches), (_x, _m, labels) in zip(found, articles)
              for lb in matches.keys() - {x.label for x in labels}}
    counts = examples({lb: state.names_of(lb) for lb in sorted(wanted)}) if wanted and min_examples > 0 else {}
    scores = rule_score if isinstance(rule_score, list) else [rule_score] * len(articles)
    out = []
    for (tokens, matches), (_text, meta, labels), score in zip(found, articles, scores):
        kept, dropped = [], []
        for x in labels:
            m, rule = matches.get(x.label), index.get(x.label)
            if m is not None:
                ev = rule_evidence(m, tokens)
                why = f"{x.reason}; its rule matched the text too ({quoted(ev.matched)})" if x.reason else None
                kept.append(x.model_copy(update={"rule": ev, "reason": why}))
            elif rule is not None and (rule.require_rule_match or not rule.filters.admits(meta)):
                dropped.append(x.label)
            else:
                kept.append(x)
        have = {x.label for x in labels}
        rule_only = [lb for lb in matches if lb not in have and counts.get(lb, 0) < min_examples]
        kept += [_rule_label(lb, score, rule_evidence(matches[lb], tokens), counts.get(lb, 0), min_examples, True)
                 for lb in rule_only]
        candidates = tuple(_rule_label(lb, score, rule_evidence(matches[lb], tokens), counts.get(lb, 0),
                                       min_examples, False)
                           for lb in matches if lb not in have and lb not in rule_only)[:MAX_CANDIDATES]
        out.append((kept, RuleOutcome(tuple(matches), tuple(dropped), tuple(rule_only), candidates)))
    return out


def apply_rules(articles: list[tuple[str, ArticleEvent, Proposal]], state: RegistryState, index: LabelRuleIndex,
                examples: Callable[[dict[str, tuple[str, ...]]], dict[str, int]], min_examples: int,
                default_threshold: float) -> list[tuple[Proposal, RuleOutcome]]:
    """The stage: the label rules applied to each article's proposal (per article: its text, its event, the
    scorer's :class:`~newsmon.schemas.Proposal`), by :func:`match_rules` (a rule-only label scores the threshold the
    proposal was scored with; ``default_threshold`` for one without ``scoring``), then its candidates
    (:func:`admitted_candidates`, :func:`with_rule_candidates`). Returns per article the revised proposal (a copy;
    its scoring, abstention and searched collections unchanged) and what the rules did."""
    metas = [article_meta(ev) for _text, ev, _p in articles]
    done = match_rules([(text, meta, p.labels) for (text, _ev, p), meta in zip(articles, metas)], state, index,
                       examples, min_examples,
                       [p.scoring.threshold if p.scoring is not None else default_threshold for _t, _e, p in articles])
    out = []
    for (_text, _ev, p), meta, (labels, outcome) in zip(articles, metas, done):
        candidates = with_rule_candidates(admitted_candidates(p.candidates, labels, outcome, index, meta), outcome)
        out.append((p.model_copy(update={"labels": labels, "candidates": candidates}), outcome))
    return out


def _rule_label(label: str, score: float, evidence: RuleEvidence, examples: int, min_examples: int,
                proposed: bool) -> ProposedLabel:
    """A label from its rule (``source = "rule"``): proposed from its KwE alone, or a rule candidate; with why."""
    return ProposedLabel(label=label, score=score, source="rule", rule=evidence,
                         reason=rule_reason(evidence.matched, examples, min_examples, proposed))


def admitted_candidates(candidates: list[ProposedLabel], labels: list[ProposedLabel], outcome: RuleOutcome,
                        index: LabelRuleIndex, meta: ArticleMeta) -> list[ProposedLabel]:
    """The labels below the threshold (``candidates``) that stay offered after :func:`match_rules`: not among
    the proposed ``labels`` now (a candidate whose KwE matched and that has too few examples is proposed
    rule-only, and a proposal holds each label once), and admitted by their label's definition as proposals
    are (its filters, and a KwE match when it requires one)."""
    proposed = {x.label for x in labels}
    out = []
    for x in candidates:
        rule = index.get(x.label)
        refused = rule is not None and ((rule.require_rule_match and x.label not in outcome.matched)
                                        or not rule.filters.admits(meta))
        if x.label not in proposed and not refused:
            out.append(x)
    return out


def with_rule_candidates(candidates: list[ProposedLabel], outcome: RuleOutcome) -> list[ProposedLabel]:
    """The retrieval ``candidates`` with the rule candidates of ``outcome`` (:func:`match_rules`, step 5): a
    retrieval candidate whose KwE matched gets the evidence, the other rule candidates are added; best first
    (a rule candidate scores the threshold, above every retrieval candidate), at most 20."""
    by_rule = {c.label: c for c in outcome.candidates}
    out = [x.model_copy(update={"rule": by_rule[x.label].rule}) if x.label in by_rule else x for x in candidates]
    have = {x.label for x in out}
    out += [c for c in outcome.candidates if c.label not in have]
    return sorted(out, key=lambda x: -x.score)[:MAX_CANDIDATES]


def count_examples(router: MemoryRouter, names: dict[str, tuple[str, ...]], enough: int) -> dict[str, int]:
    """Confirmed examples per label in the knowledge memory: labelled points carrying the label or one of its
    old names, summed over every language collection of ``router``'s model version (one count per language
    and label; a label stops being counted at ``enough``)."""
    langs = router.languages()
    out = {}
    for label, aliases in names.items():
        total = 0
        for lang in langs:
            total += router.memory(lang).count(SearchFilter(labelled=True, labels=aliases))
            if total >= enough:
                break
        out[label] = total
    return out
