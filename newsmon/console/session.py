"""The console's session and request plumbing: who is logged in (the token in an HttpOnly cookie, compared with
``api.token`` as ``/v1`` does), the console's security headers, the service and the feed of a request, and
JSON bodies."""

from __future__ import annotations

import json
import secrets
from typing import Annotated
from urllib.parse import unquote

from fastapi import Depends, Request

from newsmon.api.service import ApiError, ApiService
from newsmon.console.feed import ConsoleFeed

__all__ = ["ApiUser", "CSP", "ConsoleHeaders", "NAME_COOKIE", "NotLoggedIn", "PageUser", "TOKEN_COOKIE",
           "api_user", "console_feed", "console_service", "moderator", "page_user", "read_json"]

TOKEN_COOKIE, NAME_COOKIE = "newsmon_console", "newsmon_moderator"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")


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
    """The logged-in moderator's name, or None (no name, or the token cookie is missing or wrong)."""
    name = unquote(request.cookies.get(NAME_COOKIE, "")).strip()
    if not name:
        return None
    token = console_service(request).settings.api.token
    if token is None:
        return name
    given = request.cookies.get(TOKEN_COOKIE, "")
    return name if secrets.compare_digest(given.encode(), token.get_secret_value().encode()) else None


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
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise ApiError(415, "send a JSON body (Content-Type: application/json)")
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(422, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(422, "the body must be a JSON object")
    return body


