"""The near-duplicate index (MinHash LSH over word shingles, in memory or in Redis); the method, the chosen
defaults and the Redis layout are described in :mod:`newsmon.shared.dedup`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable

import numpy as np
import redis
from datasketch import MinHash, MinHashLSH

from newsmon.shared.dedup.boilerplate import RecurringLines, strip_boilerplate
from newsmon.shared.dedup.lsh import (lsh_params, pipelined_insert, pipelined_query, redis_glob_escape,
                                      supports_pipelining)
from newsmon.shared.dedup.text import NORMALISATION_VERSION, shingle_form, shingles

DEFAULT_THRESHOLD = 0.6
DEFAULT_NUM_PERM = 128
DEFAULT_SHINGLE_SIZE = 3
DEFAULT_MIN_WORDS = 8
DEFAULT_BOILERPLATE_MIN_DOCS = 5
_SEED = 1
_SCHEME = "affine32"


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
        boilerplate_min_docs: a line (paragraph) seen verbatim in this many originals is boilerplate and dropped
            before shingling (:class:`~newsmon.shared.dedup.boilerplate.RecurringLines`, learned in this
            process); 0 = off.

    Raises:
        ValueError: bad parameters, or (Redis) the namespace holds an index built with other parameters.
        redis.exceptions.ConnectionError: (Redis) the server cannot be reached; every method may raise
            ``redis.exceptions.RedisError`` later on.
    """

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, num_perm: int = DEFAULT_NUM_PERM,
                 shingle_size: int = DEFAULT_SHINGLE_SIZE, redis_url: str | None = None,
                 namespace: str = "newsmon:dedup", min_words: int = DEFAULT_MIN_WORDS,
                 boilerplate_min_docs: int = DEFAULT_BOILERPLATE_MIN_DOCS) -> None:
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
        self._lines = RecurringLines(boilerplate_min_docs) if boilerplate_min_docs > 0 else None
        self.bands, self.rows = lsh_params(self.threshold, self.num_perm)
        self._template = MinHash(num_perm=self.num_perm, seed=_SEED, scheme=_SCHEME)
        self._lock = threading.RLock()
        self._redis = None
        self._pool = None
        if redis_url is None:
            self._sigs: dict[str, np.ndarray] = {}
            self._lsh = MinHashLSH(num_perm=self.num_perm, params=(self.bands, self.rows))
        else:
            self._pool = redis.ConnectionPool.from_url(redis_url)
            self._redis = redis.Redis(connection_pool=self._pool)
            self._sig_key = f"{namespace}:sig"
            self._check_config()
            # One connection pool for the signature hash and all b+1 datasketch storages (else b+1 pools).
            storage = {"type": "redis", "basename": f"{namespace}:lsh".encode("utf-8"),
                       "redis": {"connection_pool": self._pool}}
            self._lsh = MinHashLSH(num_perm=self.num_perm, params=(self.bands, self.rows),
                                   storage_config=storage, prepickle=False)
            self._pipelined = supports_pipelining(self._lsh)

    # -- public API -------------------------------------------------------------------------------------------

    def find(self, text: str, exclude: str | None = None) -> tuple[str, float] | None:
        """The indexed article this text is a near-copy of; the index is left unchanged.

        Args:
            text: the article text (title + body).
            exclude: an article id never returned (the article's own id: a text indexed before under the same id
                is not its own original, as in :meth:`check_and_add`).

        Returns:
            ``(original_id, estimated_jaccard)`` of the best match with ``estimated_jaccard >= threshold``
            (ties: the smallest id), or ``None`` (no match, or fewer than ``min_words`` words).
        """
        sig, _lines = self._signature_and_lines(text)
        if sig is None:
            return None
        with self._lock:
            return self._find_sig(sig, exclude=exclude)

    def add(self, article_id: str, text: str) -> None:
        """Index an article as a possible original.

        Idempotent: an id already indexed is left as it is, even with another text (``remove`` it first to
        replace it). Texts with fewer than ``min_words`` words are not indexed.

        Raises:
            ValueError: empty ``article_id``.
        """
        self._check_id(article_id)
        sig, lines = self._signature_and_lines(text)
        if sig is None:
            return
        with self._lock:
            if self._add_sig(article_id, sig) and self._lines is not None:
                self._lines.observe(lines)

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
        sig, lines = self._signature_and_lines(text)
        if sig is None:
            return None
        with self._lock:
            hit = self._find_sig(sig, exclude=article_id)
            if hit is None and self._add_sig(article_id, sig) and self._lines is not None:
                self._lines.observe(lines)  # a new original: its lines count towards recurring boilerplate
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
        """MinHash signature of a text: ``uint32[num_perm]``, or ``None`` below ``min_words`` words (counted after
        the boilerplate is removed and the text normalised)."""
        return self._signature_and_lines(text)[0]

    def clear(self) -> None:
        """Remove every indexed article (Redis: deletes all keys under ``<namespace>:``, config included; the
        config is written again by the next ``add``)."""
        with self._lock:
            if self._redis is None:
                self._sigs.clear()
                self._lsh = MinHashLSH(num_perm=self.num_perm, params=(self.bands, self.rows))
                return
            pattern = redis_glob_escape(self.namespace) + ":*"
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

    def _signature_and_lines(self, text: str) -> tuple[np.ndarray | None, list[int]]:
        """The signature (None below ``min_words``) after boilerplate -- known patterns and learned recurring
        lines -- is removed, and the hashes of the text's countable lines. Reads the learned counts without the
        lock (a line learned meanwhile by another thread may or may not count); :meth:`RecurringLines.observe`
        runs under it."""
        cleaned = strip_boilerplate(text)  # consent walls and paywalls link nothing; returns clean_text's output
        lines: list[int] = []
        if self._lines is not None:
            cleaned, lines = self._lines.split(cleaned)
        words = shingle_form(cleaned, cleaned=True).split()
        if len(words) < self.min_words:
            return None, lines
        m = self._template.copy()
        m.update_batch(shingles(words, self.shingle_size))
        return m.hashvalues, lines

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

    def _add_sig(self, article_id: str, sig: np.ndarray) -> bool:
        """Index ``sig`` under ``article_id``; False when the id was indexed already (nothing changed)."""
        key = article_id.encode("utf-8")
        if self._redis is None:
            if article_id in self._sigs:
                return False
            self._sigs[article_id] = sig
        else:
            if not self._config_written:
                self._check_config()
            if not self._redis.hsetnx(self._sig_key, key, sig.astype("<u4").tobytes()):
                return False  # already indexed (by us or by another replica)
        self._lsh_insert(key, sig)
        return True

    def _lsh_query(self, sig: np.ndarray) -> list[bytes]:
        if self._redis is None or not self._pipelined:
            return self._lsh.query(self._minhash(sig))
        return pipelined_query(self._redis, self._lsh, sig)

    def _lsh_insert(self, key: bytes, sig: np.ndarray) -> None:
        if self._redis is None or not self._pipelined:
            self._lsh.insert(key, self._minhash(sig), check_duplication=False)
            return
        pipelined_insert(self._redis, self._lsh, key, sig)

    def _check_config(self) -> None:
        config = json.dumps({"num_perm": self.num_perm, "bands": self.bands, "rows": self.rows,
                             "shingle_size": self.shingle_size, "seed": _SEED,
                             "scheme": _SCHEME, "normalisation": NORMALISATION_VERSION}, sort_keys=True)
        key = f"{self.namespace}:config"
        self._redis.set(key, config, nx=True)
        self._config_written = True
        stored = self._redis.get(key)
        if stored is not None and stored.decode("utf-8") != config:
            raise ValueError(f"Redis namespace {self.namespace!r} holds a dedup index with other parameters: "
                             f"{stored.decode('utf-8')} (this replica: {config}); use the same settings or "
                             f"another namespace")
