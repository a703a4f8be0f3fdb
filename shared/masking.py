"""Secret settings and URLs that may carry credentials: masked for display, revealed only where a connection is
made (the settings in :mod:`newsmon.shared.config` use these types)."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import PlainSerializer, SecretStr

__all__ = ["SECRET_KEYS", "MaskedUrl", "SecretUrl", "mask_url", "redact_url", "reveal"]

SECRET_KEYS = re.compile(r"pass|secret|token|api[_-]?key|credential", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with its credentials masked: the password in the user-info part and the values of query parameters
    that name a secret (``password``, ``token``, ``api_key``, ...) become ``***``; scheme, user, host, port, path
    and the other parameters are kept, e.g. ``redis://:s3cret@redis:6379/0`` -> ``redis://:***@redis:6379/0``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.split(':', 1)[0]}:***@{host}"
        query = parts.query
        if query:
            query = urlencode([(k, "***" if SECRET_KEYS.search(k) else v)
                               for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:  # not parseable as a URL (a bad port ...): show nothing of it
        return "**********"


class SecretUrl(SecretStr):
    """A URL that may carry credentials (Redis, Optuna storage, Qdrant): a pydantic secret, so it is never printed
    by accident; ``str``, ``repr``, logs and ``newsmon settings`` show it through :func:`mask_url` (host kept,
    password dropped). ``get_secret_value()`` gives the URL to connect with."""

    def _display(self) -> str:
        return mask_url(self.get_secret_value())


MaskedUrl = Annotated[SecretUrl, PlainSerializer(lambda v: mask_url(reveal(v)), return_type=str, when_used="json")]
"""A :class:`SecretUrl` setting; JSON output (``newsmon settings``) holds the masked URL, also for a plain
string assigned in code (the settings do not validate assignments: tests set values outside the ranges)."""


def reveal(value: SecretStr | str | None) -> str | None:
    """The plain value of a secret setting (``None`` stays ``None``), for the one place that connects with it."""
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def redact_url(url: str | SecretStr) -> str:
    """``url`` (plain or a :class:`SecretUrl`) without user name, password and query string
    (``redis://:pw@host:6379/0`` -> ``redis://host:6379/0``), for logs and error messages; a string that is not a
    URL is returned as is."""
    url = reveal(url) or ""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
