"""MinHash LSH banding for verified candidates, and the pipelined Redis calls of the near-duplicate index."""

from __future__ import annotations

import re

import numpy as np
import redis
from datasketch import MinHashLSH

#: Probability that a pair with Jaccard == threshold shares at least one LSH band (see :func:`lsh_params`).
LSH_RECALL_AT_THRESHOLD = 0.999

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


def supports_pipelining(lsh: MinHashLSH) -> bool:
    """Whether the datasketch Redis storage exposes what the pipelined query/insert use (datasketch 2.0)."""
    try:
        tables = lsh.hashtables
        return (callable(getattr(lsh, "_H", None)) and len(lsh.hashranges) == len(tables) and
                all(isinstance(getattr(t, "_name", None), bytes) and callable(getattr(t, "redis_key", None))
                    for t in [*tables, lsh.keys]))
    except AttributeError:
        return False


def redis_glob_escape(s: str) -> str:
    """``s`` with the Redis glob metacharacters escaped."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", s)


# One Redis round trip for an LSH query or insert instead of one (query) or two (insert) per band plus two:
# the commands are exactly those of datasketch's RedisSetStorage/RedisListStorage (same keys, same values),
# so datasketch's own query/remove and other replicas see the same index. The index falls back to the plain
# datasketch calls if the storage internals this relies on are missing (another datasketch version).


def pipelined_query(r: redis.Redis, lsh: MinHashLSH, sig: np.ndarray) -> list[bytes]:
    """The LSH candidates of signature ``sig`` (``uint32[num_perm]``): every band looked up in one pipeline."""
    pipe = r.pipeline(transaction=False)
    for (start, end), table in zip(lsh.hashranges, lsh.hashtables):
        pipe.smembers(table.redis_key(lsh._H(sig[start:end])))
    out: set[bytes] = set()
    for members in pipe.execute():
        out.update(members)
    return list(out)


def pipelined_insert(r: redis.Redis, lsh: MinHashLSH, key: bytes, sig: np.ndarray) -> None:
    """Insert ``key`` with signature ``sig`` into every band in one ``MULTI/EXEC`` (no half-inserted entry)."""
    hs = [lsh._H(sig[start:end]) for start, end in lsh.hashranges]
    pipe = r.pipeline(transaction=True)
    pipe.hset(lsh.keys._name, key, lsh.keys.redis_key(key))
    pipe.rpush(lsh.keys.redis_key(key), *hs)
    for h, table in zip(hs, lsh.hashtables):
        pipe.hset(table._name, h, table.redis_key(h))
        pipe.sadd(table.redis_key(h), key)
    pipe.execute()
