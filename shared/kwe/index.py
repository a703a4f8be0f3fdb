"""A term index in front of many keyword Boolean expressions.

Matching one article against every expression one by one costs O(expressions x terms x words). The index inverts
this: every distinct term pattern (a phrase of words, each exact or a prefix) is stored once, and posted under one
of its words, the *anchor*: its longest word (longer words are rarer, so fewer candidates to verify: the phrase
``"je krka"`` posted under ``je`` would be verified at every ``je``), an exact word counting two letters more than
a prefix (an exact word needs one lookup, a prefix one per article word that starts with it). Two tables:

* exact anchors: ``dict`` word -> patterns;
* prefix anchors (``krk*``): ``dict`` prefix -> patterns, plus the sorted set of prefix lengths in use.

For one article (tokenised once, :func:`..text.tokenize`), the distinct words are looked up: each word ``w`` in
the exact table, and each of its prefixes ``w[:n]`` for the lengths ``n`` in use in the prefix table. A pattern
whose anchor matches is verified at those positions (the other words of the phrase, before and after the anchor;
at once rejected when one of its exact words is not in the article);
every verified pattern gives its owners (expression, term) a hit. An expression matches when it has a positive hit
and no excluded one. The cost is O(distinct words x prefix lengths) dictionary lookups plus the verification of the
candidates, independent of the number of expressions that cannot match. ``benchmarks/kwe_match.py`` measures it
at 10,000 expressions; the result equals :meth:`.expression.KeywordExpression.match` on every expression (tests
check this on random rules and articles).

Concurrency: :meth:`KweIndex.match` only reads; :meth:`KweIndex.add` and :meth:`KweIndex.remove` mutate and must
not run while another thread matches. A registry that changes rules while serving builds a new index (or copies)
and swaps the reference. A long-lived process should call ``gc.freeze()`` after building a large index, so full
cyclic-GC passes skip its ~10^5 objects (without it one pass, ~100 ms at 10,000 expressions, lands in some match
call; see the benchmark).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator

from ..text import Tokens, tokenize
from .expression import KeywordExpression, KweMatch, TermHit
from .parser import parse_kwe

__all__ = ["KweIndex"]

_Owner = tuple[int, int, bool]  # (slot of the expression, index of the term in it, excluded)


class KweIndex:
    """Keyword Boolean expressions under keys, matched together against one text at a time.

    Args:
        items: initial ``(key, expression)`` pairs; an expression is a :class:`.expression.KeywordExpression` or
            its source text (parsed with :func:`.parser.parse_kwe`).

    Raises:
        KweSyntaxError: an expression given as text does not parse.
    """

    def __init__(self, items: Iterable[tuple[Hashable, KeywordExpression | str]] = ()):
        self._slot_of: dict[Hashable, int] = {}
        self._slots: dict[int, tuple[Hashable, KeywordExpression]] = {}
        self._next_slot = 0
        self._pattern_id: dict[tuple[tuple[str, bool], ...], int] = {}
        # pattern id -> (words, prefix flags, anchor index, owners, the exact words other than the anchor)
        self._patterns: dict[int, tuple[tuple[str, ...], tuple[bool, ...], int, list[_Owner], tuple[str, ...]]] = {}
        self._next_pattern = 0
        self._exact: dict[str, list[int]] = {}
        self._prefix: dict[str, list[int]] = {}
        self._prefix_lengths: list[int] = []
        self._length_count: Counter[int] = Counter()
        for key, expression in items:
            self.add(key, expression)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slot_of

    def __iter__(self) -> Iterator[tuple[Hashable, KeywordExpression]]:
        """``(key, expression)`` pairs in the order they were added."""
        return iter(self._slots.values())

    def get(self, key: Hashable) -> KeywordExpression | None:
        """The expression under ``key``, or ``None``."""
        slot = self._slot_of.get(key)
        return None if slot is None else self._slots[slot][1]

    def add(self, key: Hashable, expression: KeywordExpression | str) -> KeywordExpression:
        """Add (or replace) the expression under ``key``; returns the parsed expression.

        Raises:
            KweSyntaxError: ``expression`` is text that does not parse (the index is left unchanged).
        """
        parsed = parse_kwe(expression) if isinstance(expression, str) else expression
        self.remove(key)
        slot = self._next_slot
        self._next_slot += 1
        self._slot_of[key] = slot
        self._slots[slot] = (key, parsed)
        for number, term in enumerate(parsed.positives):
            self._post(term.words, term.prefix, (slot, number, False))
        for number, term in enumerate(parsed.excluded):
            self._post(term.words, term.prefix, (slot, number, True))
        return parsed

    def remove(self, key: Hashable) -> bool:
        """Remove the expression under ``key``; False when there is none."""
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return False
        _, expression = self._slots.pop(slot)
        for term in expression.terms:
            pid = self._pattern_id[term.pattern]
            owners = self._patterns[pid][3]
            owners[:] = [o for o in owners if o[0] != slot]
            if not owners:
                self._unpost(pid, term.pattern)
        return True

    def match(self, text: str | Tokens) -> list[KweMatch]:
        """All expressions that match ``text``, in the order they were added, with their evidence.

        Args:
            text: the article text, or its :func:`..text.tokenize` result (tokenise once, match many times).

        Returns:
            One :class:`.expression.KweMatch` (``key`` set) per matching expression; equal to
            ``[e.match(text, key) for key, e in index if e.match(text)]``.
        """
        words = (text if isinstance(text, Tokens) else tokenize(text)).words
        found = self._find_patterns(words)
        hits: dict[int, list[tuple[int, TermHit]]] = {}
        excluded: set[int] = set()
        for pid, starts in found.items():
            starts.sort()
            positions = tuple(starts)
            for slot, number, is_excluded in self._patterns[pid][3]:
                if is_excluded:
                    excluded.add(slot)
                else:
                    term = self._slots[slot][1].positives[number]
                    hits.setdefault(slot, []).append((number, TermHit(term, positions)))
        out = []
        for slot in sorted(hits.keys() - excluded):
            key, expression = self._slots[slot]
            out.append(KweMatch(expression, tuple(hit for _, hit in sorted(hits[slot], key=_first)), key))
        return out

    def _find_patterns(self, words: tuple[str, ...]) -> dict[int, list[int]]:
        """Pattern id -> start positions of its verified occurrences in ``words``."""
        positions: dict[str, list[int]] = {}
        for i, word in enumerate(words):
            positions.setdefault(word, []).append(i)
        found: dict[int, list[int]] = {}
        exact, prefix, lengths = self._exact, self._prefix, self._prefix_lengths
        for word, where in positions.items():
            pids = exact.get(word)
            if pids:
                self._verify(pids, where, words, positions, found)
            size = len(word)
            for n in lengths:
                if n > size:
                    break
                pids = prefix.get(word[:n])
                if pids:
                    self._verify(pids, where, words, positions, found)
        return found

    def _verify(self, pids: list[int], where: list[int], words: tuple[str, ...], present: dict, found: dict) -> None:
        """Add to ``found`` the start positions of ``pids`` whose anchor stands at the positions ``where``
        (``present``: the article's distinct words, to skip a phrase at once when one of its exact words is absent)."""
        for pid in pids:
            pwords, pprefix, anchor, _, required = self._patterns[pid]
            if len(pwords) == 1:
                found.setdefault(pid, []).extend(where)
                continue
            if required and not all(w in present for w in required):
                continue
            ok = [i - anchor for i in where if _phrase_at(words, i - anchor, pwords, pprefix)]
            if ok:
                found.setdefault(pid, []).extend(ok)

    def _post(self, words: tuple[str, ...], prefix: tuple[bool, ...], owner: _Owner) -> None:
        pattern = tuple(zip(words, prefix))
        pid = self._pattern_id.get(pattern)
        if pid is None:
            pid = self._next_pattern
            self._next_pattern += 1
            self._pattern_id[pattern] = pid
            anchor = _anchor(pattern)
            required = tuple(w for j, (w, p) in enumerate(pattern) if j != anchor and not p)
            self._patterns[pid] = (words, prefix, anchor, [], required)
            table = self._prefix if prefix[anchor] else self._exact
            table.setdefault(words[anchor], []).append(pid)
            if prefix[anchor]:
                self._length_count[len(words[anchor])] += 1
                self._prefix_lengths = sorted(self._length_count)
        self._patterns[pid][3].append(owner)

    def _unpost(self, pid: int, pattern: tuple[tuple[str, bool], ...]) -> None:
        first, is_prefix = pattern[_anchor(pattern)]
        table = self._prefix if is_prefix else self._exact
        table[first].remove(pid)
        if not table[first]:
            del table[first]
        if is_prefix:
            self._length_count[len(first)] -= 1
            if not self._length_count[len(first)]:
                del self._length_count[len(first)]
            self._prefix_lengths = sorted(self._length_count)
        del self._patterns[pid]
        del self._pattern_id[pattern]


def _first(pair: tuple[int, TermHit]) -> int:
    return pair[0]


_EXACT_BONUS = 2  # an exact word counts as this many letters longer than a prefix when choosing the anchor


def _anchor(pattern: tuple[tuple[str, bool], ...]) -> int:
    """Index of the word a pattern is posted under: the longest word, an exact word counting ``_EXACT_BONUS``
    letters more than a prefix (``"reka krk*"`` -> ``reka``; ``"štrukel* je"`` -> ``štrukel*``, not ``je``)."""
    return max(range(len(pattern)),
               key=lambda j: (len(pattern[j][0]) + (0 if pattern[j][1] else _EXACT_BONUS), not pattern[j][1], -j))


def _phrase_at(words: tuple[str, ...], at: int, pwords: tuple[str, ...], pprefix: tuple[bool, ...]) -> bool:
    """Whether the phrase ``pwords`` (each word exact or a prefix, per ``pprefix``) stands at ``words[at:]``."""
    if at < 0 or at + len(pwords) > len(words):
        return False
    for j, pattern in enumerate(pwords):
        word = words[at + j]
        if not (word.startswith(pattern) if pprefix[j] else word == pattern):
            return False
    return True
