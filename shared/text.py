"""One text normalisation and word tokenisation for keyword rules and articles.

Everything that compares words across texts (the keyword Boolean expressions of :mod:`.kwe` now; near-duplicate
shingles later) uses these functions, so a rule and an article written differently but meaning the same words
give the same word list.

Normalisation of one word (:func:`normalize_word`), in this order:

1. **Invisible format characters are deleted**: every character of Unicode general category ``Cf`` (soft hyphen
   U+00AD, zero-width space U+200B, zero-width non-joiner/joiner U+200C/U+200D, word joiner U+2060, BOM /
   zero-width no-break space U+FEFF, left-to-right/right-to-left marks and bidi embeddings, invisible operators).
   They never split a word and never stay in one: ``Kr\\u00adka`` is ``krka``. (They carry meaning only in scripts
   we do not handle: Persian, Indic.)
2. **Unicode NFKC**. NFKC makes canonically equivalent strings equal, as NFC does (``c`` + combining caron U+030C
   is ``č``, so NFD input matches), and also folds compatibility characters met in feeds and PDFs: ligatures
   (``ﬁ`` -> ``fi``), full-width letters, and the single-code-point Serbo-Croatian digraphs ``ǆ ǉ ǌ`` (U+01C4-U+01CC)
   -> ``dž lj nj``. ``shared/dedup.py`` uses NFKC too.
3. **Case folding** (``str.casefold``; ``ß`` -> ``ss``, ``Σ/ς`` -> ``σ``).
4. **Serbian and Macedonian Cyrillic -> Latin** (Gaj's Latin alphabet, the Serbian standard), letter by letter,
   so that one rule matches both scripts: а a, б b, в v, г g, д d, ђ **dj** (see 5), е e, ж ž, з z, и i, ј j, к k,
   л l, љ lj, м m, н n, њ nj, о o, п p, р r, с s, т t, ћ ć, у u, ф f, х h, ц c, ч č, џ dž, ш š; Macedonian
   ѓ **gj**, ќ **kj**, ѕ **dz** (the digraphs Macedonians use in Latin script, e.g. *Gjorgje*, as in dedup.py),
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
sees: mojibake and stray control characters (``ftfy``), the invisible format characters above (a soft hyphen, a
zero-width space or a word joiner inside a word), and the Unicode form (NFC). So the same visible article is the
same string for the encoder (and its cache), the near-duplicate check and the keyword rules.

Public API: :func:`clean_text`, :func:`normalize_word`, :func:`normalize_text`, :func:`tokenize` -> :class:`Tokens`,
:func:`words`.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import ftfy
import regex

__all__ = ["NORMALIZATION_VERSION", "Tokens", "clean_text", "normalize_text", "normalize_word", "tokenize", "words"]

#: Bump when the normalisation or segmentation changes: stored artefacts built from words (indexes, shingles)
#: must be rebuilt.
NORMALIZATION_VERSION = 1

_CYRILLIC_TO_LATIN = {
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "ђ": "dj", "е": "e", "ж": "ž", "з": "z", "и": "i",
    "ј": "j", "к": "k", "л": "l", "љ": "lj", "м": "m", "н": "n", "њ": "nj", "о": "o", "п": "p", "р": "r",
    "с": "s", "т": "t", "ћ": "ć", "у": "u", "ф": "f", "х": "h", "ц": "c", "ч": "č", "џ": "dž", "ш": "š",
    "ѓ": "gj", "ќ": "kj", "ѕ": "dz", "ѐ": "e", "ѝ": "i",
}
_LATIN_FOLD = {"đ": "dj", "ǵ": "gj", "ḱ": "kj"}
_FORMAT_RE = regex.compile(r"\p{Cf}+")
_FOLD_TABLE = str.maketrans({**_CYRILLIC_TO_LATIN, **_LATIN_FOLD})

_WORD_RE = regex.compile(r"[\p{Cf}\p{M}]*[\p{L}\p{N}][\p{L}\p{M}\p{N}\p{Cf}]*")
_SEPARATOR = "\n"  # never inside a word; used to normalise all words of a text in one call


# ftfy's repairs that never change what a reader sees, and nothing that rewrites visible text: quotes stay curly
# (Slovene „...“), HTML entities, ligatures, full-width letters and line breaks are left alone (NFKC in the
# near-duplicate check folds the latter two itself).
_FTFY = ftfy.TextFixerConfig(unescape_html=False, fix_latin_ligatures=False, fix_character_width=False,
                             uncurl_quotes=False, fix_line_breaks=False, normalization="NFC", explain=False)


def clean_text(text: str) -> str:
    """The text as a reader sees it: what the encoder embeds and the near-duplicate check shingles.

    Steps: ``ftfy.fix_text`` (mojibake such as ``Ä\x8d`` -> ``č``, C0/C1 control characters other than tabs and
    line breaks, terminal escapes, surrogates), every invisible format character (Unicode category ``Cf``: soft
    hyphen U+00AD, zero-width space U+200B, zero-width (non-)joiners, word joiner U+2060, BOM, bidi marks) deleted,
    Unicode NFC (``c`` + combining caron -> ``č``). Visible characters are kept as they are (case, quotes, line
    breaks, diacritics). A text that needs none of this comes back unchanged (equal string), so embeddings
    cached before this step stay valid for it.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    fixed = _FORMAT_RE.sub("", ftfy.fix_text(text, _FTFY))
    return unicodedata.normalize("NFC", fixed)


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
    text = unicodedata.normalize("NFKC", _FORMAT_RE.sub("", word)).casefold()
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
