"""Near-duplicate detection for incoming articles, run before embedding.

A near-copy of an article already seen (re-published by an aggregator with another headline, a paragraph cut,
boilerplate around it, or transliterated between Serbian Latin and Cyrillic) is linked to the first copy
(``duplicate_of``) and takes over its labels without a model call.

Method (Broder 1997): a text is normalised (:func:`normalize_text`), cut into the set of its overlapping
``shingle_size``-word shingles, and two texts are near-duplicates when the *resemblance* (Jaccard similarity) of
their shingle sets is at least ``threshold``. Each set is summarised by a MinHash signature of ``num_perm``
32-bit values; the fraction of equal positions of two signatures is an unbiased estimate of the resemblance
(standard error ``sqrt(J(1-J)/num_perm)``, about 0.04 at J=0.7 with 128 permutations). Candidates are found with
MinHash LSH (banding: ``b`` bands of ``r`` rows) and then verified against the stored signatures, so only
articles with an *estimated* Jaccard >= ``threshold`` are returned.

References:
    A. Z. Broder. On the resemblance and containment of documents. Compression and Complexity of Sequences
    (SEQUENCES '97), IEEE, 1997, pp. 21-29.
    A. Z. Broder, S. C. Glassman, M. S. Manasse, G. Zweig. Syntactic clustering of the Web. WWW6, 1997.
    J. Leskovec, A. Rajaraman, J. Ullman. Mining of Massive Datasets, ch. 3 (LSH banding).

Chosen defaults (tuned with ``benchmarks/dedup_quality.py`` on sentinews_sl and reuters21578_en; the figures are
in the benchmark's output, recall = near-copies found over four kinds: new headline, a paragraph or ~20% of the
sentences cut, Latin -> Cyrillic, aggregator boilerplate):

* ``shingle_size = 3`` words. 1- and 2-word shingles make distinct articles on the same subject look alike (shared
  names, numbers and set phrases: on Reuters 2-word shingles flag 39 of 4000 distinct-article checks at t=0.6
  against 25 for 3-word ones, 1-word ones 32 of 2000); 4- and 5-word shingles make every changed word cost 4-5
  shingles, so recall drops (Reuters at t=0.6: 0.896 with 3, 0.887 with 4, 0.867 with 5) while about as many
  distinct articles are flagged (25 / 23 / 22 of 4000). Broder et al. used word shingles of this order for the
  same job.
* ``threshold = 0.6`` estimated Jaccard. Sentinews: recall 0.990, no distinct article above it except the corpus'
  one re-edited wire story (0.625); the hardest genuinely distinct pairs (TF-IDF nearest neighbours, articles
  sharing >= 2 labels) stay below 0.13. Reuters: recall 0.896 (0.999 for new headlines and 0.99 for cut paragraphs
  on articles of >= 60 words; boilerplate around a 40-word item is the weak case, as the boilerplate outweighs the
  item), and what it flags among "distinct" articles are the corpus' own re-sends (RPT-/CORRECTED-, new
  headline) and templated periodic reports ("FED ADDS RESERVES VIA CUSTOMER REPURCHASES") whose labels agree.
  0.5 would add ~5 points of Reuters recall but needs 64 LSH bands of 2 rows (many more chance candidates);
  0.7 loses 11 points of Reuters recall and 2 of sentinews for almost no fewer flags.
* ``num_perm = 128``: standard error of the estimate ~0.043 at J=0.6; 512 bytes of signature per article.
* ``min_words = 8``: a text with fewer than 8 words after normalisation is never declared a duplicate and is not
  indexed. With so few shingles the estimate is meaningless (a 7-word headline has 5 shingles; one changed word
  halves the resemblance) and short texts (a bare headline, "Reuter", a table caption) coincide by chance.

LSH banding: the datasketch optimiser puts the middle of the LSH S-curve at the threshold, so about half the pairs
right at the threshold would never become candidates. As every candidate is verified anyway, this module picks the
band size ``r`` as large as possible such that a pair with Jaccard == ``threshold`` collides in at least one band
with probability >= ``LSH_RECALL_AT_THRESHOLD`` (for 128 permutations and 0.6: 42 bands of 3 rows).

Shared state in Redis (``redis_url`` given): all keys start with ``<namespace>:``.

* ``<namespace>:lsh_bucket_*`` and ``<namespace>:lsh_keys``: the datasketch ``MinHashLSH`` Redis storage
  (``basename = <namespace>:lsh``); every classifier replica that opens the same namespace sees the same index.
* ``<namespace>:sig``: a hash, article id -> signature (``num_perm`` little-endian uint32, 512 bytes for 128).
* ``<namespace>:config``: JSON of the parameters that fix the storage layout (num_perm, bands, rows, shingle size,
  seed, scheme, normalisation version). A replica opened with other values raises ``ValueError`` instead of
  silently mixing incompatible buckets.

Concurrency: one :class:`NearDuplicateIndex` is thread-safe (a lock around every operation; ``check_and_add`` is
atomic within a process). Across replicas nothing is locked: two replicas that check the same near-copy at the same
moment may both miss each other and both add their copy. That is accepted by design: at worst both copies are
classified by the model (the cost of not having the index), and later copies match one of them. A distributed lock
per article would cost a round trip on every article for a rare, harmless race. Adding the *same id* from two
replicas is safe: the signature is written with ``HSETNX`` and only the writer that created it inserts into the LSH
(one ``MULTI/EXEC``); a replica that dies between the two leaves an article that is never a candidate (a missed
link, not a wrong one). Round trips: ``find`` 2 (all band lookups pipelined, then ``HMGET`` of the candidates'
signatures), ``check_and_add`` of a new article 4.
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections.abc import Iterable

import numpy as np
from datasketch import MinHash, MinHashLSH

__all__ = [
    "DEFAULT_MIN_WORDS",
    "DEFAULT_NUM_PERM",
    "DEFAULT_SHINGLE_SIZE",
    "DEFAULT_THRESHOLD",
    "NearDuplicateIndex",
    "lsh_params",
    "normalize_text",
    "serbian_latin_to_cyrillic",
    "shingles",
]

DEFAULT_THRESHOLD = 0.6
DEFAULT_NUM_PERM = 128
DEFAULT_SHINGLE_SIZE = 3
DEFAULT_MIN_WORDS = 8
LSH_RECALL_AT_THRESHOLD = 0.999
_SEED = 1
_SCHEME = "affine32"
_NORMALISATION_VERSION = 1

# Serbian Cyrillic (Vuk's alphabet) -> Gaj's Latin, plus the Macedonian letters (ѓ ќ ѕ and the accented ѐ ѝ).
# Lower case only: normalize_text case-folds first.
_CYRILLIC_TO_LATIN = {
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "ђ": "đ", "е": "e", "ж": "ž", "з": "z", "и": "i",
    "ј": "j", "к": "k", "л": "l", "љ": "lj", "м": "m", "н": "n", "њ": "nj", "о": "o", "п": "p", "р": "r",
    "с": "s", "т": "t", "ћ": "ć", "у": "u", "ф": "f", "х": "h", "ц": "c", "ч": "č", "џ": "dž", "ш": "š",
    "ѓ": "gj", "ќ": "kj", "ѕ": "dz", "ѐ": "e", "ѝ": "i",
}
_TRANSLIT_TABLE = str.maketrans(_CYRILLIC_TO_LATIN)
_NON_WORD = re.compile(r"[\W_]+")


def normalize_text(text: str) -> str:
    """Canonical form of a text for shingling.

    Steps: Unicode NFKC (compatibility forms and decomposed diacritics -> composed: ``ﬁ`` -> ``fi``, ``c`` +
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
    text = unicodedata.normalize("NFKC", text).casefold().translate(_TRANSLIT_TABLE)
    return _NON_WORD.sub(" ", text).strip()


_LATIN_DIGRAPHS = {"lj": "љ", "nj": "њ", "dž": "џ"}
_LATIN_TO_CYRILLIC = {lat: cyr for cyr, lat in _CYRILLIC_TO_LATIN.items() if len(lat) == 1 and cyr not in "ѐѝ"}
_LATIN_RE = re.compile(r"lj|nj|dž|[a-pr-vzčćđšž]", re.IGNORECASE)  # not q w x y


def serbian_latin_to_cyrillic(text: str) -> str:
    """Serbian Latin -> Serbian Cyrillic, letter by letter (lj, nj, dž as one letter; case kept).

    Letters outside Gaj's alphabet (q, w, x, y) stay Latin. Used by the tests and the benchmark to make
    transliterated near-copies; :func:`normalize_text` maps the result back to the Latin spelling.
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


_LSH_PARAM_CACHE: dict[tuple[float, int, float], tuple[int, int]] = {}


def lsh_params(threshold: float, num_perm: int, recall: float = LSH_RECALL_AT_THRESHOLD) -> tuple[int, int]:
    """LSH banding ``(bands, rows)`` for candidates that are verified afterwards.

    The largest ``rows`` (fewest chance candidates) with ``bands = num_perm // rows`` such that a pair of
    resemblance ``threshold`` shares at least one band with probability ``1 - (1 - t**rows)**bands >= recall``.
    At least 2 bands (datasketch's minimum).
    """
    key = (threshold, num_perm, recall)
    if key not in _LSH_PARAM_CACHE:
        best = (num_perm // 2, 1) if num_perm >= 2 else (num_perm, 1)
        for rows in range(num_perm // 2, 0, -1):
            bands = num_perm // rows
            if 1.0 - (1.0 - threshold ** rows) ** bands >= recall:
                best = (bands, rows)
                break
        _LSH_PARAM_CACHE[key] = best
    return _LSH_PARAM_CACHE[key]


def _supports_pipelining(lsh: MinHashLSH) -> bool:
    """Whether the datasketch Redis storage exposes what the pipelined query/insert use (datasketch 2.0)."""
    try:
        tables = lsh.hashtables
        return (callable(getattr(lsh, "_H", None)) and len(lsh.hashranges) == len(tables) and
                all(isinstance(getattr(t, "_name", None), bytes) and callable(getattr(t, "redis_key", None))
                    for t in [*tables, lsh.keys]))
    except AttributeError:
        return False


def _redis_glob_escape(s: str) -> str:
    return re.sub(r"([\\*?\[\]])", r"\\\1", s)


class NearDuplicateIndex:
    """An index of article signatures that answers "is this text a near-copy of an article already seen?".

    Args:
        threshold: estimated Jaccard resemblance of the ``shingle_size``-word shingle sets, in (0, 1], at or
            above which a text is a near-copy.
        num_perm: MinHash signature length (number of permutations); memory per article ``4 * num_perm`` bytes.
        shingle_size: words per shingle (>= 1).
        redis_url: e.g. ``redis://host:6379/0``; ``None`` keeps everything in this process' memory.
        namespace: prefix of every Redis key (see the module docstring); replicas sharing an index use the same
            namespace and the same parameters.
        min_words: texts with fewer words after normalisation are never duplicates and are not indexed.

    Raises:
        ValueError: bad parameters, or (Redis) the namespace holds an index built with other parameters.
        redis.exceptions.ConnectionError: (Redis) the server cannot be reached; every method may raise
            ``redis.exceptions.RedisError`` later on.
    """

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, num_perm: int = DEFAULT_NUM_PERM,
                 shingle_size: int = DEFAULT_SHINGLE_SIZE, redis_url: str | None = None,
                 namespace: str = "newsmon:dedup", min_words: int = DEFAULT_MIN_WORDS) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if num_perm < 4:
            raise ValueError(f"num_perm must be >= 4, got {num_perm}")
        if shingle_size < 1:
            raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
        if min_words < 1:
            raise ValueError(f"min_words must be >= 1, got {min_words}")
        if not namespace:
            raise ValueError("namespace must not be empty")
        self.threshold = float(threshold)
        self.num_perm = int(num_perm)
        self.shingle_size = int(shingle_size)
        self.min_words = int(min_words)
        self.namespace = namespace
        self.bands, self.rows = lsh_params(self.threshold, self.num_perm)
        self._template = MinHash(num_perm=self.num_perm, seed=_SEED, scheme=_SCHEME)
        self._lock = threading.RLock()
        self._redis = None
        self._pool = None
        if redis_url is None:
            self._sigs: dict[str, np.ndarray] = {}
            self._lsh = MinHashLSH(num_perm=self.num_perm, params=(self.bands, self.rows))
        else:
            import redis

            self._pool = redis.ConnectionPool.from_url(redis_url)
            self._redis = redis.Redis(connection_pool=self._pool)
            self._sig_key = f"{namespace}:sig"
            self._check_config()
            # One connection pool for the signature hash and all b+1 datasketch storages (else b+1 pools).
            storage = {"type": "redis", "basename": f"{namespace}:lsh".encode("utf-8"),
                       "redis": {"connection_pool": self._pool}}
            self._lsh = MinHashLSH(num_perm=self.num_perm, params=(self.bands, self.rows),
                                   storage_config=storage, prepickle=False)
            self._pipelined = _supports_pipelining(self._lsh)

    # -- public API -------------------------------------------------------------------------------------------

    def find(self, text: str) -> tuple[str, float] | None:
        """The indexed article this text is a near-copy of.

        Args:
            text: the article text (title + body).

        Returns:
            ``(original_id, estimated_jaccard)`` of the best match with ``estimated_jaccard >= threshold``
            (ties: the smallest id), or ``None`` (no match, or fewer than ``min_words`` words).
        """
        sig = self._signature(text)
        if sig is None:
            return None
        with self._lock:
            return self._find_sig(sig)

    def add(self, article_id: str, text: str) -> None:
        """Index an article as a possible original.

        Idempotent: an id already indexed is left as it is, even with another text (``remove`` it first to
        replace it). Texts with fewer than ``min_words`` words are not indexed.

        Raises:
            ValueError: empty ``article_id``.
        """
        self._check_id(article_id)
        sig = self._signature(text)
        if sig is None:
            return
        with self._lock:
            self._add_sig(article_id, sig)

    def check_and_add(self, article_id: str, text: str) -> tuple[str, float] | None:
        """``find``, then ``add`` only when the text is not a near-copy (the first copy stays the original).

        An id that is already indexed is not compared with itself: the call returns the best *other* match or
        ``None`` and leaves the index unchanged.

        Returns:
            ``(original_id, estimated_jaccard)`` as :meth:`find`, or ``None`` when the article was new (and is
            now indexed, unless it is shorter than ``min_words``).

        Raises:
            ValueError: empty ``article_id``.
        """
        self._check_id(article_id)
        sig = self._signature(text)
        if sig is None:
            return None
        with self._lock:
            hit = self._find_sig(sig, exclude=article_id)
            if hit is None:
                self._add_sig(article_id, sig)
            return hit

    def remove(self, article_id: str) -> bool:
        """Drop an article from the index. Returns whether it was indexed (unknown ids are a no-op)."""
        key = article_id.encode("utf-8")
        with self._lock:
            if self._redis is None:
                if self._sigs.pop(article_id, None) is None:
                    return False
            elif not self._redis.hdel(self._sig_key, key):
                return False
            try:
                self._lsh.remove(key)
            except ValueError:  # added concurrently by another replica and not yet in the LSH, or half-removed
                pass
            return True

    def count(self) -> int:
        """Number of indexed articles (one Redis ``HLEN`` when shared)."""
        with self._lock:
            if self._redis is None:
                return len(self._sigs)
            return int(self._redis.hlen(self._sig_key))

    __len__ = count

    def __contains__(self, article_id: str) -> bool:
        with self._lock:
            if self._redis is None:
                return article_id in self._sigs
            return bool(self._redis.hexists(self._sig_key, article_id.encode("utf-8")))

    def signature(self, text: str) -> np.ndarray | None:
        """MinHash signature of a text: ``uint32[num_perm]``, or ``None`` below ``min_words`` words."""
        return self._signature(text)

    def clear(self) -> None:
        """Remove every indexed article (Redis: deletes all keys under ``<namespace>:``, config included; the
        config is written again by the next ``add``)."""
        with self._lock:
            if self._redis is None:
                self._sigs.clear()
                self._lsh = MinHashLSH(num_perm=self.num_perm, params=(self.bands, self.rows))
                return
            pattern = _redis_glob_escape(self.namespace) + ":*"
            batch = []
            for k in self._redis.scan_iter(match=pattern, count=1000):
                batch.append(k)
                if len(batch) >= 1000:
                    self._redis.delete(*batch)
                    batch = []
            if batch:
                self._redis.delete(*batch)
            self._config_written = False  # written again by the next add

    def close(self) -> None:
        """Release the Redis connections (no-op in memory)."""
        if self._pool is not None:
            self._pool.disconnect()

    def __enter__(self) -> NearDuplicateIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self._redis is None else f"redis:{self.namespace}"
        return (f"NearDuplicateIndex(threshold={self.threshold}, num_perm={self.num_perm}, "
                f"shingle_size={self.shingle_size}, bands={self.bands}x{self.rows}, {where})")

    # -- internals ----------------------------------------------------------------------------------------------

    @staticmethod
    def _check_id(article_id: str) -> None:
        if not isinstance(article_id, str) or not article_id:
            raise ValueError("article_id must be a non-empty str")

    def _signature(self, text: str) -> np.ndarray | None:
        words = normalize_text(text).split()
        if len(words) < self.min_words:
            return None
        m = self._template.copy()
        m.update_batch(shingles(words, self.shingle_size))
        return m.hashvalues

    def _minhash(self, sig: np.ndarray) -> MinHash:
        return MinHash(seed=_SEED, hashvalues=sig, permutations=self._template.permutations, scheme=_SCHEME)

    def _candidate_sigs(self, ids: list[bytes]) -> Iterable[tuple[str, np.ndarray]]:
        if self._redis is None:
            for k in ids:
                sid = k.decode("utf-8")
                sig = self._sigs.get(sid)
                if sig is not None:
                    yield sid, sig
            return
        for k, raw in zip(ids, self._redis.hmget(self._sig_key, ids)):
            if raw is not None and len(raw) == 4 * self.num_perm:  # None: removed meanwhile
                yield k.decode("utf-8"), np.frombuffer(raw, dtype="<u4")

    def _find_sig(self, sig: np.ndarray, exclude: str | None = None) -> tuple[str, float] | None:
        ids = self._lsh_query(sig)
        if not ids:
            return None
        best: tuple[str, float] | None = None
        for sid, other in self._candidate_sigs(sorted(ids)):
            if sid == exclude:
                continue
            # the MinHash resemblance estimate (= MinHash.jaccard): fraction of equal signature positions
            jac = float(np.count_nonzero(sig == other)) / self.num_perm
            if jac >= self.threshold and (best is None or jac > best[1]):
                best = (sid, jac)
        return best

    def _add_sig(self, article_id: str, sig: np.ndarray) -> None:
        key = article_id.encode("utf-8")
        if self._redis is None:
            if article_id in self._sigs:
                return
            self._sigs[article_id] = sig
        else:
            if not self._config_written:
                self._check_config()
            if not self._redis.hsetnx(self._sig_key, key, sig.astype("<u4").tobytes()):
                return  # already indexed (by us or by another replica)
        self._lsh_insert(key, sig)

    # One Redis round trip for an LSH query or insert instead of one (query) or two (insert) per band plus two:
    # the commands are exactly those of datasketch's RedisSetStorage/RedisListStorage (same keys, same values),
    # so datasketch's own query/remove and other replicas see the same index. Falls back to the plain datasketch
    # calls if the storage internals this relies on are missing (another datasketch version).

    def _lsh_query(self, sig: np.ndarray) -> list[bytes]:
        if self._redis is None or not self._pipelined:
            return self._lsh.query(self._minhash(sig))
        lsh = self._lsh
        pipe = self._redis.pipeline(transaction=False)
        for (start, end), table in zip(lsh.hashranges, lsh.hashtables):
            pipe.smembers(table.redis_key(lsh._H(sig[start:end])))
        out: set[bytes] = set()
        for members in pipe.execute():
            out.update(members)
        return list(out)

    def _lsh_insert(self, key: bytes, sig: np.ndarray) -> None:
        if self._redis is None or not self._pipelined:
            self._lsh.insert(key, self._minhash(sig), check_duplication=False)
            return
        lsh = self._lsh
        hs = [lsh._H(sig[start:end]) for start, end in lsh.hashranges]
        pipe = self._redis.pipeline(transaction=True)  # MULTI/EXEC: no half-inserted entry
        pipe.hset(lsh.keys._name, key, lsh.keys.redis_key(key))
        pipe.rpush(lsh.keys.redis_key(key), *hs)
        for h, table in zip(hs, lsh.hashtables):
            pipe.hset(table._name, h, table.redis_key(h))
            pipe.sadd(table.redis_key(h), key)
        pipe.execute()

    def _check_config(self) -> None:
        config = json.dumps({"num_perm": self.num_perm, "bands": self.bands, "rows": self.rows,
                             "shingle_size": self.shingle_size, "seed": _SEED,
                             "scheme": _SCHEME, "normalisation": _NORMALISATION_VERSION}, sort_keys=True)
        key = f"{self.namespace}:config"
        self._redis.set(key, config, nx=True)
        self._config_written = True
        stored = self._redis.get(key)
        if stored is not None and stored.decode("utf-8") != config:
            raise ValueError(f"Redis namespace {self.namespace!r} holds a dedup index with other parameters: "
                             f"{stored.decode('utf-8')} (this replica: {config}); use the same settings or "
                             f"another namespace")
