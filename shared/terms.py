"""Term features of a text, one definition for the knowledge memory's lexical index and the lexical fusion.

Words are tokenised as scikit-learn's default word analyser does (``(?u)\\b\\w\\w+\\b``, lower-cased, the same as
the TF-IDF baselines) and hashed into ``2^20`` features (``HashingVectorizer``, no sign flipping); a feature's
weight is the sublinear term frequency ``1 + log(tf)`` (Manning, Raghavan & Schütze, *Introduction to
Information Retrieval*, 2008, eq. 6.13). Hashing needs no vocabulary, so a new article or a moderator's decision
is indexed at once, in any language.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer

from newsmon.shared.text import clean_text

#: Hashed word features (2^20: collisions are negligible for news vocabularies).
N_FEATURES = 1 << 20



def hashing_vectorizer(token_pattern: str = r"(?u)\b\w\w+\b") -> HashingVectorizer:
    """A lower-casing hashing vectorizer into ``2^20`` features (no sign flipping, raw counts) for the tokens
    ``token_pattern`` matches (default: scikit-learn's word analyser)."""
    return HashingVectorizer(n_features=N_FEATURES, alternate_sign=False, norm=None, lowercase=True,
                             token_pattern=token_pattern, dtype=np.float32)


_VECTORIZER = hashing_vectorizer()
_ANALYZER = _VECTORIZER.build_analyzer()


def index_terms(text: str) -> list[str]:
    """The terms of ``text`` as the lexical index cuts them (cleaned, lower-cased, :func:`hashing_vectorizer`'s
    analyser: words of two or more word characters), in order; not the keyword rules' words
    (:func:`newsmon.shared.text.words`: no Cyrillic folding, one-letter words dropped), because the memory's stored
    sparse vectors are made of these. Linear in the length of the text."""
    return _ANALYZER(clean_text(text or ""))


def term_rows(texts: Sequence[str], vectorizer: HashingVectorizer | None = None) -> sp.csr_matrix:
    """``(n, 2^20)`` float32 CSR of sublinear term frequencies ``1 + log(tf)`` (a row of zeros for an empty text,
    ``(0, 2^20)`` for no texts) of the tokens of ``vectorizer`` (default: words, :func:`hashing_vectorizer`) in
    each text cleaned first (:func:`~newsmon.shared.text.clean_text`: ``&#269;`` is ``č`` here too). Linear in
    the length of each text."""
    if not len(texts):
        return sp.csr_matrix((0, N_FEATURES), dtype=np.float32)
    X = (vectorizer or _VECTORIZER).transform([clean_text(t or "") for t in texts]).tocsr()
    X.data = (1.0 + np.log(X.data)).astype(np.float32)
    return X


def sparse_terms(texts: Sequence[str]) -> list[tuple[list[int], list[float]] | None]:
    """Per text, the ``(indices, values)`` of its term row, L2-normalised (unit length, so that a long article
    does not outscore a short one by its length alone); None for a text without words (no lexical vector).

    These are the knowledge memory's lexical vectors (a Qdrant sparse vector with the IDF modifier: the engine
    weights each term by its inverse document frequency over the collection at query time).
    """
    X = term_rows(texts)
    out: list[tuple[list[int], list[float]] | None] = []
    for i in range(X.shape[0]):
        lo, hi = X.indptr[i], X.indptr[i + 1]
        vals = X.data[lo:hi]
        norm = float(np.sqrt((vals * vals).sum()))
        out.append((X.indices[lo:hi].tolist(), (vals / norm).tolist()) if norm > 0 else None)
    return out
