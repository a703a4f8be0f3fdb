"""Fail fast before `make test` when the loopback services the tests need are not reachable.

The suite needs Redis (redis://127.0.0.1:6379/15, or NEWSMON_TEST_REDIS_URL) and PostgreSQL
(postgresql://postgres@127.0.0.1:5432/test, trust auth: the URL tests/test_training.py uses); without them the
modules that use them fail one by one after the others have run for half an hour. Exit status 0 when both
answer, else 2 with one line per missing service saying what to start. Timeout: 5 s per service.
"""

from __future__ import annotations

import os
import sys


def check_redis(url: str) -> str | None:
    """None when Redis at ``url`` answers PING, else the reason."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5).ping()
    except Exception as exc:  # noqa: BLE001 - every failure is reported the same way
        return f"Redis is not reachable at {url}: {exc}"
    return None


def check_postgres(url: str) -> str | None:
    """None when PostgreSQL at ``url`` accepts a connection, else the reason."""
    import psycopg2

    try:
        psycopg2.connect(url, connect_timeout=5).close()
    except Exception as exc:  # noqa: BLE001
        return f"PostgreSQL is not reachable at {url}: {str(exc).strip()}"
    return None


def main() -> int:
    redis_url = os.environ.get("NEWSMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    pg_url = "postgresql://postgres@127.0.0.1:5432/test"
    problems = [p for p in (check_redis(redis_url), check_postgres(pg_url)) if p]
    for p in problems:
        print(f"make test: {p}", file=sys.stderr)
    if problems:
        print("make test: start Redis and PostgreSQL on loopback (see README, 'Set-up: the two commands')",
              file=sys.stderr)
        return 2
    print(f"make test: Redis ({redis_url}) and PostgreSQL ({pg_url}) answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
