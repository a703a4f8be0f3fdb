"""The FastAPI application: the ``/v1`` routes (:mod:`newsmon.api.routes`), optional bearer-token auth, the body
size limit, readable errors, ``/healthz``, ``/readyz``, ``/metrics`` and the OpenAPI document (``/docs``,
``/openapi.json``, its descriptions in Markdown).

Every request to ``/v1`` goes through, in order: the token (401 before any of the body is read), the content type
(415 for a body that is not sent as JSON), the body size (413), then the route. Errors: every 4xx / 5xx answer is
``{"detail": "<one readable line>", "errors": [...]}``, and the line says what to send instead.
"""

from __future__ import annotations

import json
import re
import secrets
import time

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

import newsmon
from newsmon.api.batcher import Readiness, SuggestQueue
from newsmon.api.models import SuggestText
from newsmon.api.routes import router
from newsmon.api.service import ApiError, ApiService
from newsmon.schemas import ArticleEvent
from newsmon.workers.observability import HEALTH, REGISTRY

DESCRIPTION = """Label proposals for news articles, and the label registry's management.

The minimal call: `POST /v1/suggest` with `{"text": "...", "lang": "sl"}` (`lang` optional) and
`Content-Type: application/json`; the answer is a list of `LabelProposal`s.

Every `/v1` request sends `Authorization: Bearer <token>` when the server has `api.token`. Errors are
`{"detail": "<one readable line>", "errors": [...]}`: 401 missing or wrong token, 404 unknown label, 409 a label
change the registry would refuse (a name renamed away, also by a change not applied yet), 413 body too large
(`api.max_body_bytes`) or too many articles, 415 a body not sent as JSON, 422 invalid input (a bad KwE with its
index, reason and character position; a body that is not JSON, or nests deeper than 64 levels, with the reason
and position; more labels than a limit), 503 a dependency down, a calibration record that does not parse, or
`/v1/suggest` busy (with `Retry-After`).
"""

__all__ = ["create_app"]

REQUESTS = Counter("newsmon_api_requests_total", "HTTP API requests, by route and status code.",
                   ["route", "status"], registry=REGISTRY)
QUEUED = Gauge("newsmon_api_queued_articles", "Articles of POST /v1/suggest waiting to be scored.", registry=REGISTRY)
LATENCY = Histogram("newsmon_api_request_seconds", "HTTP API request time (seconds), by route.", ["route"],
                    buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30), registry=REGISTRY)


class Measure:
    """ASGI middleware: ``newsmon_api_requests_total`` and ``newsmon_api_request_seconds`` by route template (never
    the label or article in the path). Plain ASGI, not Starlette's ``@app.middleware``: that one reads the body
    in a task, so the body limit's 413 would reach FastAPI's body parsing as an exception group (a 400)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(route, str(status[0])).inc()
            LATENCY.labels(route).observe(time.perf_counter() - started)


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared in Content-Length, or counted while it
    streams) is answered 413 before the route runs."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:  # an HTTPException: FastAPI's body parsing passes it on (413, not 400)
                raise _TooLarge(self.max_bytes)
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._too_large(send)
        except BaseExceptionGroup as group:  # raised in a task (Starlette's http middleware reads the body so)
            found, rest = group.split(_TooLarge)
            if found is None or rest is not None:
                raise
            await self._too_large(send)

    async def _too_large(self, send):
        body = JSONResponse({"detail": _TooLarge(self.max_bytes).detail, "errors": []}, status_code=413)
        await send({"type": "http.response.start", "status": 413, "headers": body.raw_headers})
        await send({"type": "http.response.body", "body": body.body})


class Auth:
    """ASGI middleware: a ``/v1`` request without the bearer token ``token`` is answered 401 from its headers,
    before any of its body is read or parsed (no token set: every request passes)."""

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token.encode() if token else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.token is None or not scope["path"].startswith("/v1"):
            return await self.app(scope, receive, send)
        scheme, _, given = dict(scope.get("headers") or []).get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and secrets.compare_digest(given.strip(), self.token):
            return await self.app(scope, receive, send)
        await _send(send, 401, "missing or wrong bearer token: send `Authorization: Bearer <token>` (the server's "
                               "api.token)", {"WWW-Authenticate": "Bearer"})


class JsonOnly:
    """ASGI middleware: a ``/v1`` request with a body that is not declared JSON (``Content-Type``
    ``application/json`` or ``...+json``) is answered 415 with what to send, before the body is read; ``curl -d``
    without ``-H 'Content-Type: application/json'`` sends a form's type."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/v1") or scope["method"] not in (
                "POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        has_body = headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers
        media = headers.get(b"content-type", b"").split(b";")[0].strip().lower().decode("latin-1")
        if not has_body or media == "application/json" or media.endswith("+json"):
            return await self.app(scope, receive, send)
        await _send(send, 415, f"the body must be JSON sent with `Content-Type: application/json` (this request "
                               f"says {media or 'no content type'}); with curl: -H 'Content-Type: application/json' "
                               "-d '{...}', or --json '{...}'")


async def _send(send, status: int, detail: str, headers: dict | None = None) -> None:
    """Answer ``{"detail": detail, "errors": []}`` with ``status`` at the ASGI level."""
    body = JSONResponse({"detail": detail, "errors": []}, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": body.raw_headers})
    await send({"type": "http.response.body", "body": body.body})


class _TooLarge(StarletteHTTPException):
    def __init__(self, max_bytes: int):
        super().__init__(413, f"request body larger than api.max_body_bytes = {max_bytes} bytes")


def _error(status: int, detail: str, errors: list | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "errors": jsonable_encoder(errors or [])}, status_code=status,
                        headers=headers)


#: What each route's body is, for the 422 of a body that does not validate.
BODY_HINTS = {
    "/v1/suggest": 'send {"text": "...", "lang": "sl"} (lang optional), an ArticleEvent, or a list of them',
    "/v1/labels/{label}": 'send a LabelDefinition, e.g. {"kwes": ["krka OR krke"]}',
    "/v1/labels/{label}/rename": 'send {"new_label": "<the new name>"}',
    "/v1/labels/{label}/test": 'send {} to test the stored definition on the latest articles, or {"text": "..."}, '
                               'and optionally {"definition": {"kwes": [...]}}',
}


def _validation_detail(errors: list[dict], route: str | None = None) -> str:
    """One line for a 422: each error's location and message (a body that is not JSON said plainly, with the
    position and the decoder's reason), then what the route takes."""
    parts = []
    for e in errors:
        if e.get("type") == "json_invalid":
            loc = e.get("loc", ())
            at = f" at character {loc[1]}" if len(loc) > 1 else ""
            reason = (e.get("ctx") or {}).get("error", "JSON decode error")
            parts.append(f"the body is not valid JSON: {reason}{at}")
        else:
            parts.append(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}")
    hint = BODY_HINTS.get(route or "")
    return "; ".join(parts) + (f"; {hint} with `Content-Type: application/json`" if hint else "")


def _start_threads(app: FastAPI, service: ApiService, with_workers: bool) -> None:
    """The suggest queue (``app.state.queue``) and the readiness checks (``app.state.readiness``) beside the event
    loop (:mod:`newsmon.api.batcher`), stopped when the application shuts down."""

    def ready() -> tuple[bool, dict]:
        ok, checks = service.ready()
        info: dict = {"checks": checks}
        if with_workers:
            workers_ok, state = HEALTH.ready()
            ok, info = ok and workers_ok, {**info, **state}
        return ok, info

    api = service.settings.api
    app.state.queue = SuggestQueue(service, api.queue_max_articles, service.settings.worker.batch_max_messages,
                                   api.batch_wait_ms / 1000)
    app.state.readiness = Readiness(ready)

    @app.on_event("shutdown")
    def _stop_threads():
        app.state.queue.close()
        app.state.readiness.close()


def create_app(service: ApiService, with_workers: bool = False) -> FastAPI:
    """The application around ``service``; ``with_workers``: the workers run in this process, so ``/readyz``
    also waits for them (and ``/healthz`` for their loops)."""
    app = FastAPI(title="newsmon", version=newsmon.__version__, description=DESCRIPTION)
    app.state.service = service

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError):
        return _error(exc.status, exc.detail, exc.errors, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = [{k: v for k, v in e.items() if k != "url"} for e in exc.errors()]
        return _error(422, _validation_detail(errors, getattr(request.scope.get("route"), "path", None)), errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path}: the routes are listed at /docs"
        elif exc.status_code == 405:
            detail = f"{request.method} is not a method of {request.url.path}: see /docs for the ones it has"
        return _error(exc.status_code, detail, headers=getattr(exc, "headers", None))

    _start_threads(app, service, with_workers)

    # the operations routes answer on the event loop (async, nothing blocking): never behind the scoring
    @app.get("/healthz", tags=["operations"], summary="Liveness")
    async def healthz():
        ok, info = HEALTH.live() if with_workers else (True, {})
        return JSONResponse({"status": "ok" if ok else "stale", **info}, status_code=200 if ok else 503)

    @app.get("/readyz", tags=["operations"], summary="Readiness: registry, memory, calibration, broker (and workers)")
    async def readyz():
        ok, info = app.state.readiness.latest()
        return JSONResponse({"ready": ok, **info}, status_code=200 if ok else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    async def metrics():
        QUEUED.set(app.state.queue.depth())
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    app.include_router(router)
    from newsmon.console import mount_console  # here: the console imports the API's service and models

    mount_console(app, service)  # /console: the moderation console (newsmon.console)
    api = service.settings.api
    app.add_middleware(BodyLimit, max_bytes=api.max_body_bytes)
    app.add_middleware(JsonOnly)
    app.add_middleware(Auth, token=api.token.get_secret_value() if api.token is not None else None)
    app.add_middleware(Measure)  # outermost: a 401, 415 or 413 of the middlewares is counted too
    app.openapi = lambda: _openapi(app)
    return app


def _openapi(app: FastAPI) -> dict:
    """The OpenAPI document, with the schemas ``POST /v1/suggest`` takes, the minimal ``SuggestText`` first and
    the ``ArticleEvent`` (its body is read as raw JSON, to be validated exactly as on the articles topic)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    article = ArticleEvent.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(article.pop("$defs", {}))
    schemas["ArticleEvent"] = article
    schemas["SuggestText"] = SuggestText.model_json_schema(ref_template="#/components/schemas/{model}")
    one = {"oneOf": [{"$ref": "#/components/schemas/SuggestText"}, {"$ref": "#/components/schemas/ArticleEvent"}]}
    body = doc["paths"]["/v1/suggest"]["post"]["requestBody"]["content"]["application/json"]
    body["schema"] = {"oneOf": [*one["oneOf"], {"type": "array", "items": one}]}
    body["example"] = {"text": "Krka je lani povečala prihodke od prodaje.", "lang": "sl"}
    app.openapi_schema = _markdown(doc)
    return app.openapi_schema


_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc):`~?(?:[\w.]+\.)?(\w+)`")


def _markdown(doc: dict) -> dict:
    """``doc`` with every description in Markdown: reStructuredText's double backticks as single ones and
    cross-reference roles (``:class:`~a.B` ``) as the plain name in backticks; docstrings of the wire models
    are written for the code's reference, these for readers of ``/docs``."""
    text = json.dumps(doc, ensure_ascii=False)
    return json.loads(_ROLE.sub(r"`\1`", text.replace("``", "`")))
