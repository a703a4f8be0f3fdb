"""The form of a text that near-duplicate detection shingles (:func:`shingle_form`) and its word shingles (see
:mod:`newsmon.shared.dedup`).

:func:`shingle_form` is not :func:`newsmon.shared.text.normalize_text` (the keyword rules' words), on purpose: it
keeps ``đ`` (Cyrillic ``ђ`` -> ``đ``; the keyword form folds both to ``dj``), cuts at every non-word character
after NFKC (the keyword form cuts at runs of letters, marks and digits) and cleans the text first. Its output is
what the stored near-duplicate indexes hold (:data:`NORMALISATION_VERSION`, checked against every index's stored
configuration): changing it would refuse every existing index until it is rebuilt.
"""

from __future__ import annotations

import re
import unicodedata

from newsmon.shared.text import CYRILLIC_TO_LATIN, clean_text

#: Version of :func:`shingle_form`; part of the stored index configuration (a change needs a new index).
NORMALISATION_VERSION = 3  # 2: clean_text first (invisible characters, mojibake); 3: HTML decoded, marks capped

# Serbian Cyrillic (Vuk's alphabet) -> Gaj's Latin, plus the Macedonian letters (ѓ ќ ѕ and the accented ѐ ѝ): the
# keyword rules' table with ђ -> đ (kept as the index stores it). Lower case only: shingle_form case-folds first.
_CYRILLIC_TO_LATIN = {**CYRILLIC_TO_LATIN, "ђ": "đ"}
_TRANSLIT_TABLE = str.maketrans(_CYRILLIC_TO_LATIN)
_NON_WORD = re.compile(r"[\W_]+")


def shingle_form(text: str, cleaned: bool = False) -> str:
    """Canonical form of a text for shingling (see the module docstring for how it differs from the keyword form).

    Steps: :func:`newsmon.shared.text.clean_text` (the same cleaning as before embedding: invisible characters
    such as a soft hyphen, zero-width space or word joiner inside a word are deleted, mojibake repaired; skipped
    when ``cleaned`` says the caller did it), Unicode NFKC (compatibility forms and decomposed diacritics ->
    composed: ``ﬁ`` -> ``fi``, ``c`` +
    combining caron -> ``č``), case folding (``str.casefold``: ``ß`` -> ``ss``), Serbian/Macedonian Cyrillic ->
    Latin (а->a ... ч->č, ћ->ć, ђ->đ, ш->š, ж->ž, љ->lj, њ->nj, џ->dž; ѓ->gj, ќ->kj, ѕ->dz, ј->j), every run of
    punctuation, symbols, underscores and whitespace -> one space, stripped.

    Serbian written in Cyrillic and in Latin gives the same string. Diacritics are kept (``č`` != ``c``); letters
    of other Cyrillic alphabets (ы, я, ...) are kept as they are.

    Args:
        text: any text (``str``); an empty text gives ``""``.

    Returns:
        The normalised text: lower-case words separated by single spaces.
    """
    text = unicodedata.normalize("NFKC", text if cleaned else clean_text(text)).casefold().translate(_TRANSLIT_TABLE)
    return _NON_WORD.sub(" ", text).strip()


_LATIN_DIGRAPHS = {"lj": "љ", "nj": "њ", "dž": "џ"}
_LATIN_TO_CYRILLIC = {lat: cyr for cyr, lat in _CYRILLIC_TO_LATIN.items() if len(lat) == 1 and cyr not in "ѐѝ"}
_LATIN_RE = re.compile(r"lj|nj|dž|[a-pr-vzčćđšž]", re.IGNORECASE)  # not q w x y


def serbian_latin_to_cyrillic(text: str) -> str:
    """Serbian Latin -> Serbian Cyrillic, letter by letter (lj, nj, dž as one letter; case kept).

    Letters outside Gaj's alphabet (q, w, x, y) stay Latin. Used by the tests and the benchmark to make
    transliterated near-copies; :func:`shingle_form` maps the result back to the Latin spelling.
    """
    def repl(m: re.Match) -> str:
        s = m.group(0)
        low = s.lower()
        cyr = _LATIN_DIGRAPHS.get(low) or _LATIN_TO_CYRILLIC[low]
        return cyr.upper() if s[0].isupper() else cyr

    return _LATIN_RE.sub(repl, unicodedata.normalize("NFC", text))


def shingles(words: list[str], size: int) -> set[bytes]:
    """The set of contiguous ``size``-word shingles of ``words`` (UTF-8 bytes, words joined by a space).

    A text shorter than ``size`` words gives one shingle (all its words); no words give the empty set.
    """
    if not words:
        return set()
    if len(words) <= size:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i:i + size]).encode("utf-8") for i in range(len(words) - size + 1)}
