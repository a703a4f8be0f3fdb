"""Boilerplate that many unrelated articles share, removed before shingling.

A scraped article often carries the outlet's cookie-consent wall, a paywall notice or a newsletter box. Two
unrelated stories under the same 45-word consent text share most of their 3-word shingles, so their estimated
Jaccard passes the near-copy threshold, and the second would inherit the first's labels without a model call. The
near-duplicate check therefore shingles the text without such boilerplate (:func:`strip_boilerplate`).

Known patterns, sentence by sentence: a sentence is boilerplate when it matches one of :data:`PATTERNS`, written
for the languages we handle (sl, hr, sr in both scripts, bs, mk, sq, en) after :func:`~newsmon.shared.text.clean_text`
and case folding:

* **cookie / consent walls**: cookies (*piškotki*, *kolačići*, *колачиња*, *biskota*), the IAB consent framework's
  sentences (*store and/or access information on a device*, *personalised ads and content*), "accept all";
* **paywalls**: "subscribe to continue", "already a subscriber", *vsebina je na voljo naročnikom*, *sadržaj je
  dostupan pretplatnicima*, *za nadaljevanje branja*, *postanite naročnik*;
* **newsletter and share boxes**: "sign up for our newsletter", *prijavite se na e-novice*.

A line (paragraph) in which at least half of the sentences are boilerplate is dropped whole, so the consent
wall's neutral sentences ("Več o tem v naši politiki zasebnosti.") go with it. What remains is shingled as before;
if fewer than ``min_words`` words remain, the article is never a near-copy (nothing distinctive to compare).

Recurring lines, learned: :class:`RecurringLines` drops a line (paragraph) once it has been seen verbatim in
``min_docs`` distinct originals of the stream, for boilerplate no pattern names.

Only the near-duplicate check uses this; the encoder embeds the whole text. A genuine article *about* cookies
loses those sentences for the near-duplicate check only, so at worst a copy of it is missed and classified by the
model (the safe direction).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from newsmon.shared.dedup.text import shingle_form
from newsmon.shared.text import clean_text

__all__ = ["PATTERNS", "RecurringLines", "strip_boilerplate"]

#: Regular expressions (on the cleaned, case-folded sentence) of consent, paywall and newsletter sentences. Every
#: repetition is bounded (``\w{0,20}``, never ``\w*`` before more pattern): an unbounded one is tried from every
#: occurrence of its prefix to the end of the word, quadratic on a text of one repeated word without spaces.
PATTERNS: tuple[str, ...] = (
    # cookies and consent
    r"\bcookie", r"piškot", r"kolačić", r"kolačič", r"kolacic", r"колачи", r"\bbiskot",
    r"store and/or access information", r"personali[sz]ed ads", r"ad and content measurement",
    r"\baccept all\b", r"\bsprejmi vse\b", r"\bprihvati sve\b", r"\bприхвати све\b", r"\bprano të gjitha\b",
    r"(soglaš|strinja)\w{0,20} z uporabo", r"(pristaj|slaž)\w{0,20} (se )?s korištenjem", r"\bgdpr\b",
    # paywalls
    r"subscribe (now )?to (continue|read)", r"already a subscriber", r"for subscribers only",
    r"(available|reserved) (only )?(to|for) (our )?subscribers",
    r"na voljo (samo |le )?naročnikom", r"postanite naročnik", r"za nadaljevanje branja",
    r"dostupan (samo |isključivo )?pretplatnicima", r"pretplatite se", r"za nastavak čitanja",
    r"доступан (само )?претплатницима", r"претплатите се",
    # newsletters and share boxes
    r"sign up (for|to) our newsletter", r"subscribe to our newsletter", r"prijavite se na (naše )?e-novice",
    r"naročite se na (naše )?e-novice", r"prijavite se na (naš )?newsletter",
)
_BOILERPLATE = re.compile("|".join(f"(?:{p})" for p in PATTERNS))
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_LINES = re.compile(r"\n+")


def _is_boilerplate(sentence: str) -> bool:
    return bool(_BOILERPLATE.search(sentence.casefold()))


def strip_boilerplate(text: str) -> str:
    """``text`` (cleaned with :func:`~newsmon.shared.text.clean_text`) without its consent, paywall and newsletter
    sentences (see the module docstring); a line at least half of whose sentences are boilerplate is dropped whole.

    Args:
        text: an article (title + body).

    Returns:
        The remaining text, lines joined by ``\\n`` (may be empty).
    """
    text = clean_text(text)
    if not _BOILERPLATE.search(text.casefold()):  # most articles: one scan, nothing to remove
        return text
    kept_lines = []
    for line in _LINES.split(text):
        sentences = [s for s in _SENTENCE_END.split(line) if s.strip()]
        if not sentences:
            continue
        flags = [_is_boilerplate(s) for s in sentences]
        if 2 * sum(flags) >= len(sentences):
            continue
        kept_lines.append(" ".join(s for s, bad in zip(sentences, flags) if not bad))
    return "\n".join(kept_lines)


class RecurringLines:
    """Lines that recur verbatim in many distinct originals, learned from the stream: an outlet's footer, a consent
    or paywall text in words :data:`PATTERNS` does not know. Once a line has been seen in ``min_docs`` articles
    indexed as originals (near-copies do not count, so a story re-published by many outlets never becomes
    boilerplate), it is dropped before shingling like a known pattern.

    A line is a paragraph of the cleaned text with at least :attr:`MIN_LINE_WORDS` words, compared after
    :func:`~newsmon.shared.dedup.text.shingle_form`. Counts live in a count-min sketch (``depth`` rows of
    ``width`` saturating 8-bit counters; 2 MiB by default; a count is never under-estimated), halved every
    ``halve_every`` observed originals so that the sketch never fills up and old boilerplate fades.

    Limits: the sketch is per process (each classifier replica learns from the articles it sees), and a line is
    only dropped from signatures computed after it was learned, so an original indexed earlier keeps it in its
    stored signature; a copy of such an original may then be missed (classified by the model: the safe side).
    Not thread-safe: the near-duplicate index calls it under its lock.
    """

    MIN_LINE_WORDS = 4

    def __init__(self, min_docs: int = 5, width: int = 1 << 20, depth: int = 2, halve_every: int = 100_000) -> None:
        if min_docs < 1 or depth < 1 or depth * (width.bit_length() - 1) > 64 or width & (width - 1):
            raise ValueError("min_docs >= 1; width a power of two; depth x log2(width) <= 64 bits of the hash")
        self.min_docs, self.width, self.depth, self.halve_every = min_docs, width, depth, halve_every
        self._bits = width.bit_length() - 1
        self._counts = np.zeros((depth, width), dtype=np.uint8)
        self._observed = 0

    def split(self, cleaned: str) -> tuple[str, list[int]]:
        """``cleaned`` (output of :func:`strip_boilerplate`) without its recurring lines, and the hashes of its
        countable lines (for :meth:`observe` when the article becomes an original)."""
        kept, hashes = [], []
        for line in _LINES.split(cleaned):
            norm = shingle_form(line, cleaned=True)
            if len(norm.split()) < self.MIN_LINE_WORDS:
                kept.append(line)
                continue
            h = int.from_bytes(hashlib.blake2b(norm.encode("utf-8"), digest_size=8).digest(), "little")
            hashes.append(h)
            if self.count(h) < self.min_docs:
                kept.append(line)
        return "\n".join(kept), hashes

    def count(self, h: int) -> int:
        """Estimated number of observed originals that had the line of hash ``h`` (never less than the truth)."""
        return int(min(self._counts[r, self._cell(h, r)] for r in range(self.depth)))

    def observe(self, hashes: list[int]) -> None:
        """Count the lines of one new original (each distinct line once)."""
        for h in set(hashes):
            for r in range(self.depth):
                c = self._cell(h, r)
                if self._counts[r, c] < 255:
                    self._counts[r, c] += 1
        self._observed += 1
        if self._observed % self.halve_every == 0:
            self._counts >>= 1

    def _cell(self, h: int, row: int) -> int:
        return (h >> (row * self._bits)) & (self.width - 1)
