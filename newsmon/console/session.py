"""The console's session and request plumbing: who is logged in (a console session: a random id in an HttpOnly
cookie, mapped on the server to the moderator's name, expiring), the console's security headers, the service and
the feed of a request, and JSON bodies."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from typing import Annotated

import redis
from fastapi import Depends, Request

from newsmon.api.bodies import JsonBodyError, parse_json
from newsmon.api.service import ApiError, ApiService
from newsmon.console.feed import ConsoleFeed
from newsmon.shared.config import Settings, reveal

__all__ = ["ApiUser", "CSP", "ConsoleHeaders", "ConsoleSessions", "NotLoggedIn", "PageUser", "SESSION_COOKIE",
           "api_user", "console_feed", "console_service", "moderator", "open_sessions", "page_user", "read_json"]

SESSION_COOKIE = "newsmon_console"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")


class ConsoleSessions:
    """Console logins: a random session id (256 bits, :func:`secrets.token_urlsafe`) -> the moderator's name, for
    ``api.console_session_s`` seconds from the login. The cookie holds only the id, never the API token; the store
    keys each session by the SHA-256 of its id (what the store holds cannot be replayed as a cookie) and keeps the
    fingerprint of the API token it was opened with, so changing ``api.token`` ends every session.

    In Redis (``worker.redis_url``: every API replica sees the session, a restart keeps it; key
    ``<ns>:console-session:<sha256>`` with the expiry as its TTL), else in this process.

    Raises:
        redis.exceptions.ConnectionError: Redis unreachable (the request fails with 500; the session is kept).
    """

    def __init__(self, settings: Settings, client: redis.Redis | None = None):
        self.ttl_s = settings.api.console_session_s
        token = settings.api.token
        self._token = hashlib.sha256(token.get_secret_value().encode()).hexdigest() if token is not None else ""
        self._redis, self._ns = client, f"{settings.worker.redis_namespace}:console-session"
        self._lock = threading.Lock()
        self._local: dict[str, tuple[float, str, str]] = {}  # key -> (expires at, monotonic; name; token)

    def open(self, name: str) -> str:
        """A new session of ``name``; its id (for the cookie)."""
        sid = secrets.token_urlsafe(32)
        key, value = self._key(sid), json.dumps({"name": name, "token": self._token})
        if self._redis is not None:
            self._redis.set(f"{self._ns}:{key}", value, ex=max(1, round(self.ttl_s)))
            return sid
        now = time.monotonic()
        with self._lock:
            self._local = {k: v for k, v in self._local.items() if v[0] > now}  # the expired ones go
            self._local[key] = (now + self.ttl_s, name, self._token)
        return sid

    def name(self, sid: str) -> str | None:
        """The moderator of session ``sid``, or None (unknown, expired, ended, or opened with another token)."""
        if not sid or len(sid) > 100:
            return None
        key = self._key(sid)
        if self._redis is not None:
            raw = self._redis.get(f"{self._ns}:{key}")
            got = json.loads(raw) if raw else None
            name, token = (got["name"], got["token"]) if got else (None, None)
        else:
            with self._lock:
                expires, name, token = self._local.get(key, (0.0, None, None))
            if expires <= time.monotonic():
                return None
        return name if token is not None and secrets.compare_digest(token, self._token) else None

    def close(self, sid: str) -> None:
        """End session ``sid`` (logout)."""
        key = self._key(sid)
        if self._redis is not None:
            self._redis.delete(f"{self._ns}:{key}")
        else:
            with self._lock:
                self._local.pop(key, None)

    @staticmethod
    def _key(sid: str) -> str:
        return hashlib.sha256(sid.encode("utf-8", "replace")).hexdigest()


def open_sessions(settings: Settings) -> ConsoleSessions:
    """The console's sessions: in Redis when ``worker.redis_url`` is set, else in this process."""
    url = reveal(settings.worker.redis_url)
    return ConsoleSessions(settings, redis.Redis.from_url(url) if url else None)


class NotLoggedIn(Exception):
    """No valid console session: pages redirect to the login, JSON routes answer 401."""

    def __init__(self, page: bool):
        self.page = page


class ConsoleHeaders:
    """ASGI middleware: the security headers (:data:`CSP` and the rest) on every ``/console`` answer, static
    files and errors included. Plain ASGI: it never touches the request body."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope.get("path", "").startswith("/console"):
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _HEADER_NAMES]
                message = {**message, "headers": headers + _HEADERS}
            await send(message)

        await self.app(scope, receive, sending)


_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"), (b"cache-control", b"no-store")]
_HEADER_NAMES = {k for k, _v in _HEADERS}


def console_service(request: Request) -> ApiService:
    return request.app.state.service


def console_feed(request: Request) -> ConsoleFeed:
    """The app's feed (its thread started at the first call); notes the latest event's id in
    ``request.state.after`` before the page reads the feed (the page's script asks for the events after it)."""
    feed: ConsoleFeed = request.app.state.console_feed
    feed.start()
    if not hasattr(request.state, "after"):
        request.state.after = feed.last_id()
    return feed


def moderator(request: Request) -> str | None:
    """The logged-in moderator's name, or None (no session cookie, or its session is unknown or expired)."""
    sessions: ConsoleSessions = request.app.state.console_sessions
    return sessions.name(request.cookies.get(SESSION_COOKIE, ""))


def page_user(request: Request) -> str:
    name = moderator(request)
    if name is None:
        raise NotLoggedIn(page=True)
    return name


def api_user(request: Request) -> str:
    name = moderator(request)
    if name is None:
        raise NotLoggedIn(page=False)
    if request.method not in ("GET", "HEAD") and request.headers.get("x-newsmon-console") != "1":
        raise ApiError(403, "console requests must carry the header X-Newsmon-Console: 1")
    return name


PageUser = Annotated[str, Depends(page_user)]
ApiUser = Annotated[str, Depends(api_user)]


async def read_json(request: Request) -> dict:
    """The request's JSON object body.

    Raises:
        ApiError: 415 not sent as JSON; 422 not JSON (the reason and the character position, a body nested deeper
            than :data:`newsmon.api.bodies.MAX_DEPTH` included), or not an object.
    """
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise ApiError(415, "send a JSON body (Content-Type: application/json)")
    try:
        body = parse_json(await request.body())
    except JsonBodyError as exc:
        raise ApiError(422, f"the body is not JSON: {exc}", [exc.to_dict()]) from None
    if not isinstance(body, dict):
        raise ApiError(422, "the body must be a JSON object")
    return body
