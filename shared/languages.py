"""Language identification of an article that arrives without a language (``suggest`` without ``--lang``, an API
call with a text alone): py3langid (a maintained fork of langid.py, Lui and Baldwin, "langid.py: An Off-the-shelf
Language Identification Tool", ACL 2012; a naive Bayes model over byte n-grams, shipped in the package, 97
languages including sl, hr, sr, bs, mk, sq and en), restricted to the languages that have a knowledge memory, so
an article is always scored with the parameters of a memory that exists. Accuracy on the corpora:
``benchmarks/languages.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["DETECT_CHARS", "detect"]

#: Characters of the text the identifier reads (its start; n-gram counting is linear in it).
DETECT_CHARS = 4000

_lock = threading.Lock()
_identifier: Any = None


def _model() -> Any:
    """The identifier (loaded once per process, on first use: it takes seconds)."""
    global _identifier
    with _lock:
        if _identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier  # deferred: loading the model takes seconds

            _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _identifier


def detect(text: str, candidates: Sequence[str]) -> str:
    """The most probable of ``candidates`` (ISO 639-1 codes) for ``text`` (read lower-cased: a wire story's
    capitals mislead the identifier's character n-grams); a candidate the identifier does not know is never chosen
    unless it is the only one.

    Raises:
        ValueError: no candidates.
    """
    if not candidates:
        raise ValueError("no candidate languages to choose from")
    ident = _model()
    known = {c for c in candidates if c in ident.nb_classes}
    if len(known) <= 1:
        return next(iter(known)) if known else candidates[0]
    for lang, _score in ident.rank(text[:DETECT_CHARS].lower()):  # every language, most probable first
        if lang in known:
            return str(lang)
    return candidates[0]
