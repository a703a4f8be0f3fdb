"""The FastAPI application: the ``/v1`` routes (:mod:`newsmon.api.routes`), optional bearer-token auth, the body
size limit, readable errors, ``/healthz``, ``/readyz``, ``/metrics`` and the OpenAPI document (``/docs``,
``/openapi.json``).

Errors: every 4xx / 5xx answer is ``{"detail": "<one readable line>", "errors": [...]}``: 401 missing or wrong
token, 404 unknown label, 409 a name renamed away, 413 body too large (``api.max_body_bytes``) or too many
articles, 422 invalid input (a bad KwE with its index, reason and character position), 503 a dependency down.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

import newsmon
from newsmon.api.routes import router
from newsmon.api.service import ApiError, ApiService
from newsmon.schemas import ArticleEvent
from newsmon.workers.observability import HEALTH, REGISTRY

__all__ = ["create_app"]

REQUESTS = Counter("newsmon_api_requests_total", "HTTP API requests, by route and status code.",
                   ["route", "status"], registry=REGISTRY)
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


class _TooLarge(StarletteHTTPException):
    def __init__(self, max_bytes: int):
        super().__init__(413, f"request body larger than api.max_body_bytes = {max_bytes} bytes")


def _error(status: int, detail: str, errors: list | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "errors": jsonable_encoder(errors or [])}, status_code=status,
                        headers=headers)


def _validation_detail(errors: list[dict]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)


def create_app(service: ApiService, with_workers: bool = False) -> FastAPI:
    """The application around ``service``; ``with_workers``: the workers run in this process, so ``/readyz``
    also waits for them (and ``/healthz`` for their loops)."""
    app = FastAPI(title="newsmon", version=newsmon.__version__, description=__doc__)
    app.state.service = service

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError):
        return _error(exc.status, exc.detail, exc.errors)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError):
        errors = [{k: v for k, v in e.items() if k != "url"} for e in exc.errors()]
        return _error(422, _validation_detail(errors), errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.get("/healthz", tags=["operations"], summary="Liveness")
    def healthz():
        ok, info = HEALTH.live() if with_workers else (True, {})
        return JSONResponse({"status": "ok" if ok else "stale", **info}, status_code=200 if ok else 503)

    @app.get("/readyz", tags=["operations"], summary="Readiness: registry, memory, broker (and workers)")
    def readyz():
        ok, checks = service.ready()
        info = {"checks": checks}
        if with_workers:
            workers_ok, state = HEALTH.ready()
            ok, info = ok and workers_ok, {**info, **state}
        return JSONResponse({"ready": ok, **info}, status_code=200 if ok else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    def metrics():
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    app.include_router(router)
    from newsmon.console import mount_console  # here: the console imports the API's service and models

    mount_console(app, service)  # /console: the moderation console (newsmon.console)
    app.add_middleware(BodyLimit, max_bytes=service.settings.api.max_body_bytes)
    app.add_middleware(Measure)  # outermost: a 413 of the body limit is counted too
    app.openapi = lambda: _openapi(app)
    return app


def _openapi(app: FastAPI) -> dict:
    """The OpenAPI document, with the ArticleEvent schema that ``POST /v1/suggest`` takes (its body is read as
    raw JSON, to be validated exactly as on the articles topic)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    article = ArticleEvent.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(article.pop("$defs", {}))
    schemas["ArticleEvent"] = article
    ref = {"$ref": "#/components/schemas/ArticleEvent"}
    body = doc["paths"]["/v1/suggest"]["post"]["requestBody"]["content"]["application/json"]
    body["schema"] = {"oneOf": [ref, {"type": "array", "items": ref}]}
    app.openapi_schema = doc
    return doc
