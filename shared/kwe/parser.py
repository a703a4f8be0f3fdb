"""Parse a keyword Boolean expression (KwE), the client-topic syntax of media monitoring.

Grammar (informal; positions in errors are 0-based character offsets into the expression as given)::

    expression := exclusion* positive ( " OR " positive )* exclusion*
    positive   := term
    exclusion  := "-" term                    the minus directly before the term
    term       := word | '"' word ( ' ' word )* '"'

Items are separated by whitespace (spaces, tabs, line breaks); ``OR`` stands only between two positive terms.

Examples: ``krka OR krke OR krki OR krko -"reka krk*" -"reki krk*"``, ``energetik* -"energijsk* pijač*"``,
``"марко* петровић*" OR "mark* petrović*"``.

Semantics (:class:`.expression.KeywordExpression`): the expression matches when one of its positive terms occurs
and none of its excluded terms does. The expression is flat: an exclusion excludes the whole expression wherever
it is written, and there is no grouping, AND, NOT or field syntax.

Decisions (strict: anything ambiguous is a :class:`KweSyntaxError`, never a guess):

* ``OR`` is the only operator and is upper-case. A bare ``or`` / ``and`` / ``not`` / ``AND`` / ``NOT`` / ``&&`` /
  ``||`` / ``TO`` is rejected (quote it, ``"or"``, to search for the word).
* **Juxtaposition of two positive terms is an error** (``marko petrović``): it reads as AND to some analysts, as
  OR in some monitoring tools, and as a phrase to others. The message offers both spellings: ``marko OR
  petrović`` for either word, ``"marko petrović"`` for the phrase. Exclusions are juxtaposed (``a -b -c``); an
  exclusion between two positive terms does not join them (``a -b c`` is an error).
* An exclusion may not be an operand of ``OR`` (``a OR -b``, ``-b OR a``): write the positive disjunction first,
  then the exclusions (``a OR c -b``). A term both wanted and excluded (``krka -krka``) is an error.
* A minus is ASCII ``-`` (U+002D), the en dash ``–`` (U+2013), the em dash ``—`` (U+2014) or the minus sign
  ``−`` (U+2212): editors and word processors turn one into another. It excludes only at the start of an item
  (start of the expression or after whitespace) and must be directly followed by the term: a lone ``-``, ``- x``
  and ``--x`` are errors. Inside a word (``covid-19``) it is ordinary punctuation.
* Quotes are ``"``; the typographic double quotes ``„ “ ” » «`` read as ``"`` (Slovene and Serbian typography).
  An unbalanced quote is an error at the opening quote; an empty phrase (``""``, ``"..."``) is an error.
* A term is split into words by :func:`..text.tokenize`, the same segmentation as articles: ``covid-19`` is the
  phrase ``covid 19``; a term without letters or digits is an error.
* ``*`` directly after a word makes that word a prefix (in phrases too: ``"reka krk*"``). ``*`` elsewhere (alone,
  ``**``, ``a*b``, ``*ka``) is an error, and the prefix must have at least ``MIN_PREFIX_CHARS`` (2) characters
  after normalisation: a one-letter prefix matches a large share of all words. ``?``, ``~``, ``^``, ``\\``,
  ``field:``, ``+``, a leading ``!``, parentheses, brackets and ``/regex/`` (Lucene syntax) are errors.
* At most ``MAX_EXPRESSION_CHARS`` (10,000) characters (about 1,000 terms).

Parsing uses ``luqum`` (a maintained Lucene query parser): the syntax is a subset of Lucene's, so luqum's lexer
and parser find words, phrases, ``OR`` and prohibitions (``-``) with their positions, and its tree is walked into a
flat list of items, checked against the rules above and mapped to :class:`.expression.Term`. A length-preserving
pre-pass (so luqum's positions stay valid) maps the dash and quote variants, which luqum does not know, and
reports the errors luqum's messages would make unclear (unbalanced quote, lone minus, ``?``, ``\\``). luqum's PLY
parser keeps module-global state, so calls are serialised with a lock.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from luqum import tree as lq
from luqum.exceptions import ParseError
from luqum.parser import parser as _luqum_parser

from ..text import Tokens, tokenize
from .expression import KeywordExpression, Term

__all__ = ["MAX_EXPRESSION_CHARS", "MIN_PREFIX_CHARS", "KweSyntaxError", "parse_kwe"]

MIN_PREFIX_CHARS = 2
MAX_EXPRESSION_CHARS = 10_000

_MINUSES = "-\u2013\u2014\u2212"
_QUOTES = '"\u201e\u201c\u201d\u00bb\u00ab'
_RESERVED = {"or", "and", "not", "to", "&&", "||"}
_UNSUPPORTED = {
    "?": "the wildcard ? is not supported: use * at the end of a word",
    "\\": "backslash escapes are not supported: quote the text instead",
}
_NODE_ERRORS = {
    lq.AndOperation: "AND is not part of the grammar: list alternatives with OR, or quote a phrase",
    lq.Not: "NOT is not part of the grammar: exclude with a leading minus (-term)",
    lq.Plus: "+ (required term) is not part of the grammar",
    lq.Group: "parentheses are not part of the grammar: write a OR b -c -d",
    lq.FieldGroup: "parentheses are not part of the grammar: write a OR b -c -d",
    lq.SearchField: "field: syntax is not supported: limit a label by language, country, source or section "
                    "in its filters",
    lq.Fuzzy: "~ (fuzzy match) is not supported", lq.Proximity: "~ (proximity) is not supported",
    lq.Boost: "^ (boost) is not supported", lq.Range: "ranges are not supported",
    lq.Regex: "regular expressions are not supported",
}
_LOCK = threading.Lock()


class KweSyntaxError(ValueError):
    """A keyword Boolean expression that cannot be parsed.

    Attributes:
        reason: what is wrong, in words.
        expression: the expression as given.
        position: 0-based character offset of the offending spot (``len(expression)`` for "at the end").
    """

    def __init__(self, reason: str, expression: str, position: int):
        self.reason, self.expression, self.position = reason, expression, position
        super().__init__(f"{reason} (at position {position} of {_excerpt(expression, position)!r})")

    def caret(self) -> str:
        """The expression and a caret under the offending character, on two lines (for CLI output)."""
        return f"{self.expression}\n{' ' * self.position}^"

    def to_dict(self) -> dict:
        """``{"reason", "position", "expression"}`` (an HTTP 422 body)."""
        return {"reason": self.reason, "position": self.position, "expression": self.expression}


def _excerpt(expression: str, position: int, width: int = 40) -> str:
    """The expression, or the part of a long one around ``position`` (with ``…`` where cut)."""
    if len(expression) <= 2 * width:
        return expression
    start, end = max(0, position - width), min(len(expression), position + width)
    return ("…" if start else "") + expression[start:end] + ("…" if end < len(expression) else "")


@dataclass(frozen=True, slots=True)
class _Item:
    node: lq.Word | lq.Phrase
    position: int
    excluded: bool


def parse_kwe(expression: str) -> KeywordExpression:
    """Parse one keyword Boolean expression (grammar and decisions: module docstring).

    Args:
        expression: e.g. ``krka OR krke -"reka krk*"``; at most ``MAX_EXPRESSION_CHARS`` characters.

    Returns:
        The :class:`.expression.KeywordExpression`, with duplicate terms dropped.

    Raises:
        KweSyntaxError: the expression breaks the grammar; ``position`` points at the first problem.
        TypeError: ``expression`` is not a ``str``.
    """
    if not isinstance(expression, str):
        raise TypeError(f"a keyword expression must be str, not {type(expression).__name__}")
    if not expression.strip():
        raise KweSyntaxError("empty expression", expression, 0)
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise KweSyntaxError(f"longer than {MAX_EXPRESSION_CHARS} characters", expression, MAX_EXPRESSION_CHARS)
    prepared = _prepare(expression)
    flat = _flatten(_luqum_parse(prepared, expression), expression)
    terms = [_term(item, expression) for item, _ in flat]
    _check_separators(flat, expression)
    positives: dict = {}
    excluded: dict = {}
    for term in terms:
        (excluded if term.excluded else positives).setdefault(term.pattern, term)
    if not positives:
        raise KweSyntaxError("only exclusions: an expression needs at least one term that is not excluded",
                             expression, 0)
    both = [term for pattern, term in excluded.items() if pattern in positives]
    if both:
        raise KweSyntaxError("the same term is both wanted and excluded", expression, both[0].position)
    return KeywordExpression(expression, tuple(positives.values()), tuple(excluded.values()))


def _prepare(expression: str) -> str:
    """Length-preserving: whitespace -> space, dash/quote variants -> ASCII; early errors with positions."""
    out = []
    quote_at = -1
    for i, ch in enumerate(expression):
        if ch in _QUOTES:
            quote_at = i if quote_at < 0 else -1
            out.append('"')
        elif quote_at >= 0:
            out.append(" " if ch.isspace() else ch)
        elif ch.isspace():
            out.append(" ")
        elif ch in _UNSUPPORTED:
            raise KweSyntaxError(_UNSUPPORTED[ch], expression, i)
        elif ch == "!" and (i == 0 or expression[i - 1].isspace()):
            raise KweSyntaxError("! (NOT) is not part of the grammar: exclude with a leading minus (-term)",
                                 expression, i)
        elif ch in _MINUSES and (i == 0 or expression[i - 1].isspace()):
            _check_minus(expression, i)
            out.append("-")
        else:
            out.append(ch)
    if quote_at >= 0:
        raise KweSyntaxError("unbalanced quote: the phrase opened here is not closed", expression, quote_at)
    if "?" in expression:
        raise KweSyntaxError(_UNSUPPORTED["?"], expression, expression.index("?"))
    return "".join(out)


def _check_minus(expression: str, i: int) -> None:
    nxt = expression[i + 1] if i + 1 < len(expression) else ""
    if not nxt or nxt.isspace():
        raise KweSyntaxError("a minus must be directly followed by the excluded term or phrase", expression, i)
    if nxt in _MINUSES:
        raise KweSyntaxError("double minus: exclude with a single minus", expression, i)


_LUQUM_POSITION = re.compile(r"at position (\d+)")


def _luqum_parse(prepared: str, expression: str) -> lq.Item:
    try:
        with _LOCK:
            return _luqum_parser.parse(prepared)
    except ParseError as exc:
        found = _LUQUM_POSITION.search(str(exc))
        position = int(found.group(1)) if found else len(expression)
        stripped = prepared.rstrip()
        if not found and stripped.endswith(" OR") or stripped == "OR":
            position = len(stripped) - 2
            raise KweSyntaxError("OR at the end of the expression: OR must stand between two terms",
                                 expression, position) from None
        if prepared.startswith("OR", position):
            raise KweSyntaxError("OR must stand between two terms", expression, position) from None
        raise KweSyntaxError(f"syntax error: {_luqum_reason(exc)}", expression, position) from None


def _luqum_reason(exc: ParseError) -> str:
    text = str(exc).replace("Syntax error in input : ", "")
    return re.sub(r"\s+at (position \d+|the end)!?$", "", text).strip()


def _flatten(node: lq.Item, expression: str) -> list[tuple[_Item, str]]:
    """The tree as ``[(item, separator before it), ...]`` in text order (the first separator is ``""``)."""
    for kind, reason in _NODE_ERRORS.items():
        if isinstance(node, kind):
            raise KweSyntaxError(reason, expression, _node_error_position(node, expression))
    if isinstance(node, (lq.OrOperation, lq.UnknownOperation)):
        sep = "OR" if isinstance(node, lq.OrOperation) else " "
        out: list[tuple[_Item, str]] = []
        for k, child in enumerate(node.children):
            flat = _flatten(child, expression)
            out.append((flat[0][0], sep if k else ""))
            out.extend(flat[1:])
        return out
    if isinstance(node, lq.Prohibit):
        child = node.children[0]
        if not isinstance(child, (lq.Word, lq.Phrase)):
            raise KweSyntaxError("a minus excludes one term or phrase", expression, node.pos)
        return [(_Item(child, node.pos, True), "")]
    if isinstance(node, (lq.Word, lq.Phrase)):
        return [(_Item(node, node.pos, False), "")]
    raise KweSyntaxError(f"unsupported syntax ({type(node).__name__})", expression, node.pos or 0)


def _node_error_position(node: lq.Item, expression: str) -> int:
    if isinstance(node, lq.AndOperation):
        first = node.children[0]
        found = re.search(r"AND|&&", expression[first.pos + first.size:])
        return first.pos + first.size + (found.start() if found else 0)
    if isinstance(node, (lq.Fuzzy, lq.Proximity, lq.Boost)):
        term = node.children[0]
        return term.pos + term.size
    return node.pos or 0


def _check_separators(flat: list[tuple[_Item, str]], expression: str) -> None:
    """OR only between positive items; the positive items form one OR chain (exclusions before or after it)."""
    seen_positive = False
    for k, (item, sep) in enumerate(flat):
        left = flat[k - 1][0] if k else None
        if sep == "OR" and (item.excluded or left.excluded):
            at = left.position if left.excluded else item.position
            raise KweSyntaxError("an exclusion cannot be an operand of OR: write the terms joined by OR first, "
                                 "then the exclusions (a OR b -c)", expression, at)
        if not item.excluded and seen_positive and sep != "OR":
            raise KweSyntaxError("two terms without OR between them: write a OR b for either word, or \"a b\" "
                                 "for the phrase (there is no AND)", expression, item.position)
        seen_positive = seen_positive or not item.excluded


def _term(item: _Item, expression: str) -> Term:
    node = item.node
    is_phrase = isinstance(node, lq.Phrase)
    body = node.value[1:-1] if is_phrase else node.value
    start = node.pos + 1 if is_phrase else node.pos
    if not is_phrase and body.casefold() in _RESERVED:
        raise KweSyntaxError(f"{body!r} is not an operator: the only operator is upper-case OR (quote "
                             f"\"{body}\" to search for the word)", expression, node.pos)
    tokens = tokenize(body)
    prefix = _prefix_flags(body, tokens, start, expression)
    if not tokens.words:
        what = "empty phrase" if is_phrase else "a term needs a letter or digit"
        raise KweSyntaxError(what, expression, node.pos)
    text = expression[node.pos:node.pos + node.size]
    return Term(tokens.words, prefix, text, node.pos, item.excluded)


def _prefix_flags(body: str, tokens: Tokens, start: int, expression: str) -> tuple[bool, ...]:
    """Per word of ``body``, whether a ``*`` directly follows it; every other ``*`` is an error."""
    prefix = [False] * len(tokens.words)
    word_at_end = {end: k for k, (_, end) in enumerate(tokens.spans)}
    for offset, ch in enumerate(body):
        if ch == "*":
            k = word_at_end.get(offset)
            if k is None:
                raise KweSyntaxError("* must directly follow a word (a prefix: krk*)", expression, start + offset)
            if offset + 1 < len(body) and tokenize(body[offset + 1]).words:
                raise KweSyntaxError("* is only allowed at the end of a word", expression, start + offset)
            if len(tokens.words[k]) < MIN_PREFIX_CHARS:
                raise KweSyntaxError(f"a prefix needs at least {MIN_PREFIX_CHARS} letters or digits before *",
                                     expression, start + offset)
            prefix[k] = True
    return tuple(prefix)
