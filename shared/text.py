"""One text normalisation and word tokenisation for keyword rules and articles.

Everything that compares words across texts by meaning (the keyword Boolean expressions of :mod:`.kwe`) uses these
functions, so a rule and an article written differently but meaning the same words give the same word list. Two
other word cuts exist, each named for what it serves and kept apart because what they store must not change: the
lexical index's terms (:func:`newsmon.shared.terms.index_terms`: scikit-learn's word analyser, the memory's
stored sparse vectors) and the near-duplicate shingles' words (:func:`newsmon.shared.dedup.text.shingle_form`:
``đ`` kept, the stored near-duplicate indexes).

Normalisation of one word (:func:`normalize_word`), in this order:

1. **Invisible format characters are deleted**: every character of Unicode general category ``Cf`` (soft hyphen
   U+00AD, zero-width space U+200B, zero-width non-joiner/joiner U+200C/U+200D, word joiner U+2060, BOM /
   zero-width no-break space U+FEFF, left-to-right/right-to-left marks and bidi embeddings, invisible operators).
   They never split a word and never stay in one: ``Kr\\u00adka`` is ``krka``. (They carry meaning only in scripts
   we do not handle: Persian, Indic.)
2. **Unicode NFKC**. NFKC makes canonically equivalent strings equal, as NFC does (``c`` + combining caron U+030C
   is ``č``, so NFD input matches), and also folds compatibility characters met in feeds and PDFs: ligatures
   (``ﬁ`` -> ``fi``), full-width letters, and the single-code-point Serbo-Croatian digraphs ``ǆ ǉ ǌ`` (U+01C4-U+01CC)
   -> ``dž lj nj``. The near-duplicate shingles (``shared/dedup/text.py``) use NFKC too.
3. **Case folding** (``str.casefold``; ``ß`` -> ``ss``, ``Σ/ς`` -> ``σ``).
4. **Serbian and Macedonian Cyrillic -> Latin** (Gaj's Latin alphabet, the Serbian standard), letter by letter,
   so that one rule matches both scripts: а a, б b, в v, г g, д d, ђ **dj** (see 5), е e, ж ž, з z, и i, ј j, к k,
   л l, љ lj, м m, н n, њ nj, о o, п p, р r, с s, т t, ћ ć, у u, ф f, х h, ц c, ч č, џ dž, ш š; Macedonian
   ѓ **gj**, ќ **kj**, ѕ **dz** (the digraphs Macedonians use in Latin script, e.g. *Gjorgje*, as for shingles),
   ѐ e, ѝ i; and the Macedonian Latin letters ǵ -> gj, ḱ -> kj. Letters of other Cyrillic alphabets (я, ы, щ, ...)
   stay Cyrillic: their Latin spellings disagree between languages.
5. **Latin diacritics are kept**, with one exception: ``đ`` -> ``dj``. Serbian and Croatian Latin text is often
   written with ``dj`` for ``đ`` (*Djoković* / *Đoković* / *Ђоковић* are one name); no language we handle has a
   word in which ``dj`` and ``đ`` would mean different things. ``č ć š ž`` are *not* folded to ``c s z``: in
   Slovene and Serbo-Croatian that would merge different words (*čas* / *cas*, *šal* / *sal*); a rule that must
   match "shaved" Latin spells both forms.

Word segmentation (:func:`tokenize`): a word is a maximal run of letters, combining marks and digits (general
categories L, M, N), in which format characters (Cf) may occur; it must hold at least one letter or digit.
Everything else separates words: spaces and line breaks alike (a phrase split across a line break matches), and
all punctuation and symbols, including apostrophes, hyphens, dots and the underscore. This is the Unicode word
boundary rule (UAX #29) tailored for keyword search: UAX #29 would keep ``krka's``, ``14,97``, ``www.krka.si``
and sentences glued without a space (``Pogorelec.Nama``, frequent in scraped news) as single words, none of which
would then match the word ``krka`` or ``nama``. A hyphenated compound (``covid-19``) is two words; in a rule it
becomes a phrase of two words, so it still matches the same text.

Before any of that, and before an article is embedded or shingled, :func:`clean_text` repairs what a reader never
sees: HTML (character references decoded, tags removed), mojibake and stray control characters (``ftfy``), the
invisible format characters above (a soft hyphen, a zero-width space or a word joiner inside a word), and the
Unicode form (NFC). So the same visible article is the same string for the encoder (and its cache), the
near-duplicate check, the keyword rules and the lexical vectors.

Every function here is linear in the length of its input, whatever the input (``benchmarks/text_linearity.py``,
``tests/test_text_linearity.py``): no pattern is retried from each character of a run it cannot match, and no
Unicode normalisation sees a run of more than :data:`MAX_COMBINING_RUN` combining marks.

Public API: :func:`clean_text` (:func:`strip_html`, :func:`cap_combining`), :func:`normalize_word`,
:func:`normalize_text`, :func:`tokenize` -> :class:`Tokens`, :func:`words`.
"""

from __future__ import annotations

import html
import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass

import ftfy
import ftfy.chardata
import ftfy.fixes
import regex

__all__ = ["CYRILLIC_TO_LATIN", "MAX_COMBINING_RUN", "NORMALIZATION_VERSION", "Tokens", "article_text", "cap_combining",
           "clean_text", "cut_at_word", "forget_cleaned", "normalize_text", "normalize_word", "strip_html", "tokenize",
           "words"]

#: Bump when the normalisation or segmentation changes: stored artefacts built from words (indexes, shingles)
#: must be rebuilt.
NORMALIZATION_VERSION = 1

#: Serbian and Macedonian Cyrillic -> Gaj's Latin, lower case (step 4 of the module docstring).
CYRILLIC_TO_LATIN = {
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "ђ": "dj", "е": "e", "ж": "ž", "з": "z", "и": "i",
    "ј": "j", "к": "k", "л": "l", "љ": "lj", "м": "m", "н": "n", "њ": "nj", "о": "o", "п": "p", "р": "r",
    "с": "s", "т": "t", "ћ": "ć", "у": "u", "ф": "f", "х": "h", "ц": "c", "ч": "č", "џ": "dž", "ш": "š",
    "ѓ": "gj", "ќ": "kj", "ѕ": "dz", "ѐ": "e", "ѝ": "i",
}
_LATIN_FOLD = {"đ": "dj", "ǵ": "gj", "ḱ": "kj"}
_FORMAT_RE = regex.compile(r"\p{Cf}+")
_FOLD_TABLE = str.maketrans({**CYRILLIC_TO_LATIN, **_LATIN_FOLD})

# A word starts where a run of letters, marks, digits and format characters starts (the look-behind), so that a
# run without a letter or digit (a million zero-width spaces, or combining marks) is scanned once and given up,
# not once from each of its characters; the possessive quantifiers never backtrack. Linear in the text.
_WORD_RE = regex.compile(r"(?<![\p{L}\p{M}\p{N}\p{Cf}])[\p{Cf}\p{M}]*+[\p{L}\p{N}][\p{L}\p{M}\p{N}\p{Cf}]*+")
_SEPARATOR = "\n"  # never inside a word; used to normalise all words of a text in one call

#: The most combining marks kept in a row (the Stream-Safe Text Format of Unicode UAX #15 allows 30 non-starters).
MAX_COMBINING_RUN = 30
# Runs of combining marks (and the two half-width sound marks U+FF9E/U+FF9F, which NFKC turns into combining marks:
# tests/test_text_linearity.py checks that no other character does) beyond MAX_COMBINING_RUN. CPython's normalisation
# sorts a run of combining marks by insertion (quadratic: 10 s for 40,000 alternating marks), so every NFC/NFKC of
# untrusted text here runs after this cap.
_MARK_RUN = regex.compile(r"([\p{M}\uff9e\uff9f]{" + str(MAX_COMBINING_RUN) + r"})[\p{M}\uff9e\uff9f]++")
# Space separators other than the space (no-break space U+00A0 from &nbsp;, the thin and en/em spaces, U+3000)
# read as a space; the line and paragraph separators as a line break.
_SPACE_TABLE = {cp: " " for cp in (0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)}
_SPACE_TABLE.update({0x2028: "\n", 0x2029: "\n"})
_SPACE_CHARS = regex.compile("[{}]".format("".join(chr(c) for c in _SPACE_TABLE)))

# HTML: the elements of HTML 5 and the older presentational ones. A tag of one of them is removed (a block
# element's tag becomes a line break); anything else in angle brackets (``a <b and c> d`` in a plain text, where
# b is not an element) stays as text. No nested quantifier: each `<` is tried once, up to the next `<` or `>`.
_BLOCK_TAGS = ("address article aside blockquote body br dd details dialog div dl dt fieldset figcaption figure "
               "footer form h1 h2 h3 h4 h5 h6 head header hr html li main nav ol p pre section summary table tbody "
               "td tfoot th thead title tr ul center").split()
_INLINE_TAGS = ("a abbr area audio b base bdi bdo big button canvas caption cite code col colgroup data datalist "
                "del dfn em embed font i iframe img input ins kbd label legend link map mark meta meter noscript "
                "object optgroup option output param picture progress q rp rt ruby s samp select small source span "
                "strike strong sub sup template textarea time track tt u var video wbr").split()
_TAG_RE = re.compile(r"</?(" + "|".join(sorted(_BLOCK_TAGS + _INLINE_TAGS, key=len, reverse=True))
                     + r")(?:[\s/][^<>]*)?>", re.IGNORECASE)
_BLOCK = frozenset(_BLOCK_TAGS)
# `&amp;` before an entity or `&`: a text escaped twice (`&amp;scaron;`) reads as once, so cleaning a clean text
# changes nothing
_AMP_CHAIN = re.compile(r"&(?:amp;|#0*38;|#[xX]0*26;)+(?=[#A-Za-z0-9&])")
_DROPPED_ELEMENTS = ("script", "style")
_ELEMENT_RES = {name: (re.compile(rf"<{name}[\s/>]", re.IGNORECASE), re.compile(rf"</{name}\s*>", re.IGNORECASE))
                for name in _DROPPED_ELEMENTS}


# ftfy's repairs that never change what a reader sees, and nothing that rewrites visible text: quotes stay curly
# (Slovene „...“), ligatures, full-width letters and line breaks are left alone (NFKC in the near-duplicate check
# folds the latter two itself); HTML is decoded before ftfy runs (see clean_text).
_FTFY = ftfy.TextFixerConfig(unescape_html=False, fix_latin_ligatures=False, fix_character_width=False,
                             uncurl_quotes=False, fix_line_breaks=False, normalization="NFC", explain=False)


def cap_combining(text: str) -> str:
    """``text`` with every run of combining marks cut to :data:`MAX_COMBINING_RUN` (``Zalgo`` text loses the
    excess marks; no language needs more than a few in a row). Linear; call it before NFC/NFKC of untrusted text."""
    return _MARK_RUN.sub(r"\1", text)


def strip_html(text: str) -> str:
    """``text`` with HTML decoded and removed: character references decoded (``&#269;`` -> ``č``, ``&scaron;`` ->
    ``š``, ``&nbsp;`` -> U+00A0; twice-escaped ones, ``&amp;scaron;``, too), then comments, ``script`` and
    ``style`` elements (with their content) and the tags of HTML elements removed, a block element's tag
    (``<p>``, ``<br>``, ``<div>``, ``<li>``...) replaced by a line break. Angle brackets that are not an HTML
    element's tag stay. Linear in the length of ``text``; a text without ``&`` and ``<`` is returned as it is."""
    if "&" in text:
        text = html.unescape(_AMP_CHAIN.sub("&", text))
    if "<" not in text:
        return text
    text = _drop_between(text, "<!--", "-->")
    for name in _DROPPED_ELEMENTS:
        text = _drop_element(text, name)
    return _TAG_RE.sub(_tag_replacement, text)


def _tag_replacement(m: re.Match) -> str:
    return "\n" if m.group(1).lower() in _BLOCK else ""


def _drop_between(text: str, start: str, end: str) -> str:
    """``text`` without each ``start ... end`` (shortest, left to right); an unclosed ``start`` is kept. One pass."""
    out, pos = [], 0
    while True:
        i = text.find(start, pos)
        if i < 0:
            break
        j = text.find(end, i + len(start))
        if j < 0:
            break  # no end after this start: none after any later start either
        out.append(text[pos:i])
        pos = j + len(end)
    return "".join(out) + text[pos:] if out else text


def _drop_element(text: str, name: str) -> str:
    """``text`` without ``<name ...> ... </name>`` (case-insensitive; an unclosed one is kept). One pass."""
    opening, closing = _ELEMENT_RES[name]
    out, pos = [], 0
    while True:
        m = opening.search(text, pos)
        if m is None:
            break
        c = closing.search(text, m.end())
        if c is None:
            break  # no end after this start: none after any later start either
        out.append(text[pos:m.start()])
        pos = c.end()
    return "".join(out) + text[pos:] if out else text


def clean_text(text: str) -> str:
    """The text as a reader sees it: the one normalisation every stage applies before it reads an article's
    text (near-duplicate check, label rules, embedding, lexical vectors, the corpus loader, ``suggest`` and the
    API).

    Steps, in order: HTML decoded and removed (:func:`strip_html`: ``&#269;`` and ``&scaron;`` are ``č`` and
    ``š``, tags of HTML elements gone); space separators (no-break space, thin and em spaces...) -> a space,
    U+2028/U+2029 -> a line break; every invisible format character (Unicode category ``Cf``: soft hyphen U+00AD,
    zero-width space U+200B, zero-width (non-)joiners, word joiner U+2060, BOM, bidi marks) deleted; runs of
    combining marks cut to :data:`MAX_COMBINING_RUN` (:func:`cap_combining`); ftfy's repairs (mojibake such
    as ``Ä\x8d`` -> ``č``, C0/C1 control characters other than tabs and line breaks, terminal escapes,
    surrogates), on runs of whole lines of at least ``_FTFY_SEGMENT`` characters; Unicode NFC (``c`` + combining
    caron -> ``č``). Visible characters are kept as they are (case, quotes, line breaks, diacritics). A text that
    needs none of this comes back unchanged (equal string), so embeddings cached before this step stay valid for
    it; cleaning a cleaned text changes nothing.

    Linear in the length of ``text`` (``benchmarks/text_linearity.py`` measures it on the worst inputs). The
    last texts it returned are remembered (``_RECENT_MAX`` of them, at most ``_RECENT_CHARS`` characters):
    cleaning one of them again, as each stage does with the text the first one cleaned, costs one lookup; so
    does a plain ASCII text without ``&``, ``<`` or control characters, which it returns as it is.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    if text in _RECENT or (text.isascii() and not _ASCII_TO_FIX.search(text)):
        return text  # cleaned already; or plain ASCII without markup or control characters: nothing to do
    out = _FORMAT_RE.sub("", _SPACE_CHARS.sub(_space, strip_html(text)))
    out = unicodedata.normalize("NFC", _fix_segments(cap_combining(out)))
    if len(out) >= _REMEMBER_FROM:
        _remember(out)
    return out


def article_text(text: str, max_chars: int) -> str:
    """What every stage reads of an article's text (the classifier's stages, the label test): :func:`clean_text`,
    cut to its first ``max_chars`` characters (``worker.max_text_chars``)."""
    return clean_text(text)[:max_chars]


#: ftfy runs on pieces of whole lines of at least this many characters (ftfy.fix_text would run once per line,
#: with a fixed cost per call that makes a text of short lines slow; one piece for the whole text would let
#: one line's mojibake decide for all of them).
_FTFY_SEGMENT = 4096
_FTFY_CONTROL = regex.compile("[" + "".join(regex.escape(chr(c)) for c in ftfy.chardata.CONTROL_CHARS) + "]")
# what clean_text can change in an ASCII text: markup, terminal escapes, the control characters ftfy removes
_ASCII_TO_FIX = regex.compile("[&<\x1b" + "".join(regex.escape(chr(c)) for c in ftfy.chardata.CONTROL_CHARS
                                                  if c < 128) + "]")
_RECENT: OrderedDict[str, None] = OrderedDict()
_RECENT_MAX, _RECENT_CHARS, _REMEMBER_FROM = 4096, 1 << 23, 256
_recent_lock = threading.Lock()
_recent_chars = 0


def _fix_segments(text: str) -> str:
    """ftfy's repairs (:data:`_FTFY`) on pieces of whole lines of at least :data:`_FTFY_SEGMENT` characters."""
    if len(text) <= _FTFY_SEGMENT:
        return _fix_segment(text)
    out, pos = [], 0
    while pos < len(text):
        end = text.find("\n", pos + _FTFY_SEGMENT)
        end = len(text) if end < 0 else end + 1
        out.append(_fix_segment(text[pos:end]))
        pos = end
    return "".join(out)


def _fix_segment(text: str) -> str:
    """The steps of ``ftfy.fix_text`` under :data:`_FTFY`, in its order, each once: ``ftfy.fix_and_explain``
    repeats all of them until nothing changes, so a text with nothing to repair pays its mojibake test (most of
    the time) twice; ``fix_encoding`` repeats itself until the text is repaired."""
    if "\x1b" in text:
        text = ftfy.fixes.remove_terminal_escapes(text)
    text = ftfy.fix_encoding(text, _FTFY)
    text = ftfy.fixes.fix_surrogates(text)
    return ftfy.fixes.remove_control_chars(text) if _FTFY_CONTROL.search(text) else text


def _remember(text: str) -> None:
    global _recent_chars
    with _recent_lock:
        if text in _RECENT:
            _RECENT.move_to_end(text)
            return
        _RECENT[text] = None
        _recent_chars += len(text)
        while len(_RECENT) > _RECENT_MAX or _recent_chars > _RECENT_CHARS:
            old, _ = _RECENT.popitem(last=False)
            _recent_chars -= len(old)


def forget_cleaned() -> None:
    """Forget the texts :func:`clean_text` remembers (benchmarks time the cleaning itself)."""
    global _recent_chars
    with _recent_lock:
        _RECENT.clear()
        _recent_chars = 0


def _space(m: regex.Match) -> str:
    return _SPACE_TABLE[ord(m.group())]


@dataclass(frozen=True, slots=True)
class Tokens:
    """The words of one text, normalised, with where each one stands in the original text.

    Attributes:
        text: the original text.
        words: the normalised words, in text order (``len(words) == len(spans)``).
        spans: ``(start, end)`` character offsets of each word in ``text`` (end exclusive).
    """

    text: str
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.words)

    def surface(self, first: int, last: int) -> str:
        """The original text from word ``first`` to word ``last`` (both included, 0-based word indices)."""
        return self.text[self.spans[first][0]:self.spans[last][1]]


def normalize_word(word: str) -> str:
    """The canonical form of one word (or of any text, word separators left as they are).

    Steps (see the module docstring): delete format characters (Cf), NFKC, case folding, Serbian/Macedonian
    Cyrillic -> Latin, ``đ`` -> ``dj``.

    Args:
        word: any string.

    Returns:
        The normalised string (may be shorter or longer than ``word``: ``љ`` -> ``lj``).
    """
    text = unicodedata.normalize("NFKC", cap_combining(_FORMAT_RE.sub("", word))).casefold()
    return text.translate(_FOLD_TABLE)


def tokenize(text: str) -> Tokens:
    """Split a text into normalised words (the segmentation of the module docstring).

    Args:
        text: an article (title + body) or the text of a rule term; ``""`` gives no words.

    Returns:
        :class:`Tokens` with the normalised words and their character spans in ``text``.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    matches = list(_WORD_RE.finditer(text))
    spans = [m.span() for m in matches]
    raw = [m.group() for m in matches]
    if not raw:
        return Tokens(text, (), ())
    joined = normalize_word(_SEPARATOR.join(raw))
    folded = joined.split(_SEPARATOR)
    if folded != _WORD_RE.findall(joined):  # NFKC made a word into several, or into punctuation + word
        folded, spans = _tokenize_slowly(raw, spans)
    return Tokens(text, tuple(folded), tuple(spans))


def _tokenize_slowly(raw: list[str], spans: list[tuple[int, int]]) -> tuple[list[str], list[tuple[int, int]]]:
    """Word by word, for the rare text where NFKC turns a word into several (``½`` -> ``1⁄2``)."""
    out_words: list[str] = []
    out_spans: list[tuple[int, int]] = []
    for word, span in zip(raw, spans):
        for part in _WORD_RE.findall(normalize_word(word)):
            out_words.append(part)
            out_spans.append(span)
    return out_words, out_spans


def words(text: str) -> list[str]:
    """The normalised words of ``text`` (``tokenize(text).words`` as a list)."""
    return list(tokenize(text).words)


def normalize_text(text: str) -> str:
    """The normalised words of ``text`` joined by single spaces (a canonical string form of a text)."""
    return " ".join(tokenize(text).words)


def cut_at_word(text: str, limit: int) -> str:
    """``text`` with its whitespace collapsed, cut to at most ``limit`` characters at a word boundary with an
    ellipsis (``…``) when it is longer (mid-word only when its first word alone is longer). Reads at most
    ``2 * limit`` characters of ``text`` past its leading whitespace: a headline or an excerpt of a long text costs
    what it shows."""
    head = text.lstrip()
    short = " ".join(head[:2 * limit].split())
    if len(short) <= limit and len(head) <= 2 * limit:
        return short
    cut = short[:limit - 1]
    if len(short) >= limit and not short[limit - 1].isspace():  # the cut falls inside a word: drop its start
        space = cut.rfind(" ")
        cut = cut[:space] if space > 0 else cut
    return cut.rstrip(" ,;:-–—") + "…"
