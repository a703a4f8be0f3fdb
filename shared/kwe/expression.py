"""A parsed keyword Boolean expression (KwE) and its direct matcher.

A :class:`KeywordExpression` is flat: a set of positive terms and a set of excluded terms. It matches a text when
at least one positive term occurs in it and no excluded term does (the semantics of the client-topic KwEs used in
media monitoring; see :mod:`.parser` for the written syntax). A :class:`Term` is a phrase of one or more
consecutive normalised words (:mod:`..text`); each word is matched exactly or, when written with a trailing
``*``, as a prefix (any ending, the empty one included: ``krk*`` matches ``krk``, ``krka``, ``krki``).

:meth:`KeywordExpression.match` scans the whole text for every term (O(words x terms)); it is the reference
that :class:`.index.KweIndex` (the fast path for many expressions) must agree with.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..text import Tokens, tokenize

__all__ = ["KeywordExpression", "KweMatch", "Term", "TermHit", "word_matches"]


def word_matches(word: str, pattern: str, prefix: bool) -> bool:
    """Whether one normalised text word matches one normalised rule word (a prefix when ``prefix``)."""
    return word.startswith(pattern) if prefix else word == pattern


@dataclass(frozen=True, slots=True)
class Term:
    """One term or phrase of an expression.

    Attributes:
        words: the normalised words, in order (a single word is a phrase of length 1).
        prefix: per word, whether it is a prefix (written with a trailing ``*``); ``len(prefix) == len(words)``.
        text: the term as written in the expression (quotes kept, the leading minus dropped).
        position: character offset of ``text`` in the expression (0-based).
        excluded: whether the term was written with a leading minus.
    """

    words: tuple[str, ...]
    prefix: tuple[bool, ...]
    text: str
    position: int
    excluded: bool = False

    @property
    def pattern(self) -> tuple[tuple[str, bool], ...]:
        """``((word, is_prefix), ...)``: what the term matches, independent of how it was written."""
        return tuple(zip(self.words, self.prefix))

    def occurrences(self, words: Sequence[str]) -> list[int]:
        """Start indices (into ``words``) of every occurrence of the phrase, by a full scan.

        Args:
            words: the normalised words of a text (:attr:`.text.Tokens.words`).

        Returns:
            Sorted 0-based word indices where the phrase starts; empty when it does not occur.
        """
        first, is_prefix = self.words[0], self.prefix[0]
        last_start = len(words) - len(self.words)
        return [i for i, w in enumerate(words) if i <= last_start
                and (w.startswith(first) if is_prefix else w == first) and self.occurs_at(words, i)]

    def occurs_at(self, words: Sequence[str], start: int) -> bool:
        """Whether the phrase occurs at word index ``start`` of ``words`` (False past the end)."""
        if start < 0 or start + len(self.words) > len(words):
            return False
        return all(word_matches(words[start + j], w, p) for j, (w, p) in enumerate(zip(self.words, self.prefix)))


@dataclass(frozen=True, slots=True)
class TermHit:
    """A positive term found in a text: the term and the word indices where each occurrence starts."""

    term: Term
    positions: tuple[int, ...]

    def evidence(self, tokens: Tokens) -> list[dict]:
        """Each occurrence as ``{"term", "words", "word_index", "start", "end"}`` (character offsets into
        ``tokens.text``, end exclusive; ``words`` is the text as it stands there)."""
        out = []
        for i in self.positions:
            last = i + len(self.term.words) - 1
            out.append({"term": self.term.text, "words": tokens.surface(i, last), "word_index": i,
                        "start": tokens.spans[i][0], "end": tokens.spans[last][1]})
        return out


@dataclass(frozen=True, slots=True)
class KweMatch:
    """An expression that matched a text, with the evidence.

    Attributes:
        expression: the matching expression.
        hits: the positive terms that occur, in the expression's order (no excluded term occurs).
        key: the key the expression was registered under in a :class:`.index.KweIndex` (``None`` otherwise).
    """

    expression: KeywordExpression
    hits: tuple[TermHit, ...]
    key: Hashable = None

    def evidence(self, tokens: Tokens) -> dict:
        """JSON-ready evidence: ``{"kwe": source, "hits": [per occurrence, see TermHit.evidence]}``."""
        return {"kwe": self.expression.source, "hits": [h for hit in self.hits for h in hit.evidence(tokens)]}


@dataclass(frozen=True, slots=True)
class KeywordExpression:
    """A parsed keyword Boolean expression (build it with :func:`.parser.parse_kwe`).

    Attributes:
        source: the expression as written.
        positives: the terms of which at least one must occur (non-empty, no two with the same pattern).
        excluded: the terms of which none may occur (no two with the same pattern).
    """

    source: str
    positives: tuple[Term, ...]
    excluded: tuple[Term, ...] = ()

    @property
    def terms(self) -> tuple[Term, ...]:
        """Positive terms, then excluded ones."""
        return self.positives + self.excluded

    def match(self, text: str | Tokens, key: Hashable = None) -> KweMatch | None:
        """Match this expression against one text by scanning it for every term.

        Args:
            text: the text, or its :func:`.text.tokenize` result (tokenise once when matching many expressions).
            key: copied into the result.

        Returns:
            A :class:`KweMatch` with every positive term that occurs, or ``None`` when no positive term occurs or
            an excluded term does.
        """
        words = (text if isinstance(text, Tokens) else tokenize(text)).words
        if any(term.occurrences(words) for term in self.excluded):
            return None
        hits = []
        for term in self.positives:
            found = term.occurrences(words)
            if found:
                hits.append(TermHit(term, tuple(found)))
        return KweMatch(self, tuple(hits), key) if hits else None

    def __str__(self) -> str:
        return self.source
