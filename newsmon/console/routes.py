"""The console's routes under ``/console``: the login, the queue, one article, the labels page, the live events
(server-sent) and the small JSON API the page script calls.

Auth: when ``api.token`` is set, the login form takes it (and the moderator's name) in a POST body (never in a
URL) and compares it with the token as ``/v1`` does; without a token only the name is asked. A login opens a
console session (:class:`~newsmon.console.session.ConsoleSessions`): a random id in an HttpOnly, ``SameSite=Strict``
cookie scoped to ``/console``, mapped on the server to the moderator's name for ``api.console_session_s``
seconds; the cookie never holds the API token, and logging out ends the session on the server. Pages without a
valid session redirect to the login (303); the JSON routes and the events answer 401. Every state-changing request
must also carry the header ``X-Newsmon-Console: 1`` (a cross-site form cannot send it) and a JSON body.

Every console answer carries a Content-Security-Policy that allows only this origin (``default-src 'self'``):
the page loads nothing from, and sends nothing to, any other host.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from pydantic import ValidationError

from newsmon.api.service import ApiError, ApiService
from newsmon.console import labels
from newsmon.console.feed import ConsoleFeed, Item
from newsmon.console.session import (
    SESSION_COOKIE,
    ApiUser,
    ConsoleHeaders,
    ConsoleSessions,
    NotLoggedIn,
    PageUser,
    console_feed,
    console_service,
    moderator,
    open_sessions,
    read_json,
)
from newsmon.render import reason_in_words
from newsmon.schemas import ModeratorDecision
from newsmon.shared.limits import decision_over_limit
from newsmon.shared.scoring.retrieval import display_title
from newsmon.shared.text import cut_at_word

__all__ = ["article_context", "evidence_refs", "json_script", "mount_console", "templates"]

HERE = Path(__file__).resolve().parent  # resolved: an editable install's link tree holds symlinks, which
# StaticFiles refuses to serve when they point outside its folder
STREAM_S = 20.0  # one event stream lasts this long, then the browser reconnects (Last-Event-ID): a server
#                  stopping never waits longer than that for an open console
MAX_NEIGHBOURS = 20


def json_script(value: Any) -> Markup:
    """``value`` as JSON that is inert wherever a page embeds it (a ``<script type="application/json">``
    element, an attribute, a server-sent event's ``data:`` line): ``<``, ``>``, ``&`` and ``'`` as ``\\u003c``...
    escapes and every non-ASCII character (U+2028 and U+2029, a lone surrogate) as ``\\uXXXX``, so no text in it
    can close the element, start markup or end the line; ``JSON.parse`` gives ``value`` back. Linear."""
    return Markup(json.dumps(value, ensure_ascii=True).translate(_JSON_HTML))  # every unsafe character escaped


_JSON_HTML = {ord(c): f"\\u{ord(c):04x}" for c in "<>&'"}
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["json_script"] = json_script
router = APIRouter(prefix="/console", include_in_schema=False)


# -- plumbing ------------------------------------------------------------------------------------------------
def mount_console(app: FastAPI, service: ApiService) -> None:
    """Add ``/console`` (routes, static files, the feed) to the API's ``app``. The feed's reading thread starts
    at the first console request, so an API nobody moderates from reads nothing more."""
    app.state.console_feed = ConsoleFeed(service.settings, lambda: service.pipeline.classifier.router,
                                         service.producer)
    app.state.console_sessions = open_sessions(service.settings)
    app.mount("/console/static", StaticFiles(directory=str(HERE / "static")), name="console-static")
    app.include_router(router)
    app.include_router(labels.router)
    app.router.on_shutdown.append(app.state.console_feed.close)

    @app.exception_handler(NotLoggedIn)
    async def not_logged_in(request: Request, exc: NotLoggedIn):
        if exc.page:
            target = quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""), safe="/")
            return RedirectResponse(f"/console/login?next={target}", status_code=303)
        return JSONResponse({"detail": "not logged in to the console: log in at /console/login", "errors": []},
                            status_code=401)

    app.add_middleware(ConsoleHeaders)


def _page(request: Request, template: str, user: str | None, status: int = 200, **context) -> HTMLResponse:
    """A page; ``after``: the latest event's id when it was rendered (its script listens from there on)."""
    after = getattr(request.state, "after", None)
    after = request.app.state.console_feed.last_id() if after is None else after
    return templates.TemplateResponse(request, template, {"user": user, "after": after, **context},
                                      status_code=status)


# -- login ---------------------------------------------------------------------------------------------------
def _next(target: str | None) -> str:
    return target if target and target.startswith("/console") and not target.startswith("//") else "/console"


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request):
    needs_token = console_service(request).settings.api.token is not None
    return _page(request, "login.html", moderator(request), needs_token=needs_token, error=None,
                 next=_next(request.query_params.get("next")))


@router.post("/login")
async def login(request: Request):
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
    name, given, target = form.get("name", "").strip(), form.get("token", ""), _next(form.get("next"))
    token = console_service(request).settings.api.token
    error = None
    if not name or len(name) > 256:
        error = "Enter your name (1 to 256 characters): it is recorded with each decision."
    elif token is not None and not secrets.compare_digest(given.encode(), token.get_secret_value().encode()):
        error = "Wrong token. Ask the operator for the API token (api.token)."
    if error:
        return _page(request, "login.html", None, 401 if name else 422, needs_token=token is not None,
                     error=error, next=target, name=name)
    response = RedirectResponse(target, status_code=303)
    sid = await run_in_threadpool(_sessions(request).open, name)
    response.set_cookie(SESSION_COOKIE, sid, max_age=round(console_service(request).settings.api.console_session_s),
                        httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/console")
    return response


@router.post("/logout")
async def logout(request: Request):
    """End the session (on the server: its id is worth nothing afterwards) and drop the cookie."""
    await run_in_threadpool(_sessions(request).close, request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/console/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/console")
    return response


def _sessions(request: Request) -> ConsoleSessions:
    return request.app.state.console_sessions


# -- pages ---------------------------------------------------------------------------------------------------
@router.get("", response_class=HTMLResponse)
async def queue_page(request: Request, user: PageUser):
    feed = console_feed(request)
    await run_in_threadpool(feed.started.wait, 5)
    q = request.query_params
    filters = {k: q.get(k) or None for k in ("lang", "outlet", "label")}
    items = feed.queue(lang=filters["lang"], outlet=filters["outlet"], label=filters["label"])
    return _page(request, "queue.html", user, items=items, facets=feed.facets(), filters=filters)


@router.get("/articles/{article_id:path}", response_class=HTMLResponse)
async def article_page(request: Request, article_id: str, user: PageUser):
    feed = console_feed(request)
    await run_in_threadpool(feed.started.wait, 5)
    item = feed.item(article_id)
    if item is None:
        return _page(request, "missing.html", user, 404, article_id=article_id)
    refs = evidence_refs(item)
    found = await run_in_threadpool(feed.find, [article_id, *refs])
    return _page(request, "article.html", user, **article_context(
        item, refs, found, feed.next_after(article_id), feed.summary(item)["decided"]))


def evidence_refs(item: Item) -> dict[str, dict[str, Any]]:
    """The neighbours behind an article's proposal: neighbour article id -> ``{"ref", "supports"}`` (the labels it
    voted for)."""
    refs: dict[str, dict[str, Any]] = {}
    for x in [*item.proposal.labels, *item.proposal.candidates]:
        for n in x.neighbours:
            refs.setdefault(n.article_id, {"ref": n, "supports": []})["supports"].append(x.label)
    return refs


def article_context(item: Item, refs: dict[str, dict[str, Any]], found: dict[str, dict], next_id: str | None,
                    decided: dict | None) -> dict[str, Any]:
    """What ``article.html`` shows of ``item``: ``found`` holds the memory's points of the article and of its
    neighbours (:meth:`ConsoleFeed.find`), ``next_id`` the next undecided article, ``decided`` the last decision.
    ``state`` is what the page's script reads: embedded with the ``json_script`` filter."""
    p = item.proposal
    point = found.get(p.article_id, {})
    neighbours = sorted(refs.values(), key=lambda r: -r["ref"].similarity)[:MAX_NEIGHBOURS]
    for r in neighbours:
        payload = found.get(r["ref"].article_id, {})
        r["labels"] = payload.get("labels", [])
        r["title"] = r["ref"].title or display_title(payload)  # a title-less article: the start of its text
    terms = [t for x in [*p.labels, *p.candidates] if x.rule for t in x.rule.matched]
    title, text = heading_and_body(point, item.title)
    state = {"article_id": p.article_id, "labels": [x.label for x in p.labels],
             "candidates": [x.label for x in p.candidates], "next": next_id, "decided": decided}
    sc = p.scoring
    support = {r.name: r.options["support"] for r in sc.rules if "support" in r.options} if sc else {}
    count_rule = bool(sc and sc.options_of("label_count") is not None)
    reasons = {x.label: reason_in_words(x, True, support, count_rule) for x in p.labels}
    return {"item": item, "p": p, "title": title, "point": point, "title_html": highlight(title or "", terms),
            "text_html": highlight(text, terms), "neighbours": neighbours, "state": state, "reasons": reasons}


@router.get("/labels", response_class=HTMLResponse)
async def labels_page(request: Request, user: PageUser):
    svc = console_service(request)
    state = await run_in_threadpool(svc.state)
    rows = [{"label": k, "definition": v, "status": "retired" if k in state.retired else "active"}
            for k, v in sorted(state.definitions.items())]
    return _page(request, "labels.html", user, rows=rows, renamed=sorted(state.renamed.items()),
                 version=state.version, test_articles=min(svc.settings.api.test_articles, 200),
                 selected=request.query_params.get("label") or "")


# -- events --------------------------------------------------------------------------------------------------
@router.get("/events")
async def events(request: Request, _user: ApiUser):
    """Server-sent events: ``proposal``, ``decided``, ``applied``, ``not_applied`` (see :mod:`.feed`), after the
    event ``Last-Event-ID`` (or ``?after=``) when given, so nothing between a page's rendering and its connection,
    or during a reconnection, is missed."""
    feed = console_feed(request)
    # a reconnecting browser says its last event (Last-Event-ID); a page its first connection's (``?after=``)
    last = request.headers.get("last-event-id") or request.query_params.get("after")
    q, missed = feed.subscribe(int(last) if last and last.isdigit() else None)

    async def stream():
        try:
            yield "retry: 300\n\n"
            for seq, ev in missed:
                yield _sse(seq, ev)
            until = time.monotonic() + STREAM_S
            while (left := until - time.monotonic()) > 0 and not await request.is_disconnected():
                try:
                    seq, ev = await asyncio.wait_for(q.get(), timeout=min(left, 5.0))
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                yield _sse(seq, ev)
        finally:
            feed.unsubscribe(q)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _sse(seq: int, event: dict) -> str:
    return f"id: {seq}\nevent: {event['type']}\ndata: {json_script(event)}\n\n"


# -- JSON ----------------------------------------------------------------------------------------------------
@router.get("/api/queue")
async def queue_json(request: Request, _user: ApiUser, lang: str | None = None, outlet: str | None = None,
                     label: str | None = None):
    feed = console_feed(request)
    await run_in_threadpool(feed.started.wait, 5)  # as the page: the proposals read back first
    return {"items": feed.queue(lang, outlet, label), "facets": feed.facets()}


@router.post("/api/decide")
async def decide(request: Request, user: ApiUser):
    """``{"article_id", "decisions": [{"label", "action"}]}`` -> a :class:`ModeratorDecision` by the logged-in
    moderator on the decisions topic (acknowledged by the broker before the answer, 202)."""
    body = await read_json(request)
    feed = console_feed(request)
    labels = body.get("decisions")
    why = decision_over_limit(len(labels), console_service(request).settings.limits) if isinstance(labels, list) \
        else None
    if why is not None:
        raise ApiError(422, why, [{"loc": ["decisions"], "msg": why}])
    try:
        decision = ModeratorDecision(article_id=body.get("article_id"), decisions=body.get("decisions"),
                                     moderator=user, decided_at=datetime.now(UTC))
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        raise ApiError(422, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors),
                       errors) from None
    try:
        partition, offset = await run_in_threadpool(feed.decide, decision,
                                                    console_service(request).settings.api.publish_timeout_s)
    except RuntimeError as exc:
        raise ApiError(503, str(exc)) from None
    await _on_disk(request, partition, offset)
    return JSONResponse({"decided_at": decision.decided_at.isoformat(), "partition": partition, "offset": offset,
                         "next": feed.next_after(decision.article_id)}, status_code=202)


@router.post("/api/undo")
async def undo(request: Request, user: ApiUser):
    """``{"article_id", "decided_at"}`` -> the logged-in moderator's decision of that time on the article taken back
    (a ``ModeratorDecision`` with ``undoes`` on the decisions topic, 202): the article is undecided again once the
    memory applied it. 409 when that decision is not the article's latest, or not this moderator's."""
    body = await read_json(request)
    feed = console_feed(request)
    try:
        when = datetime.fromisoformat(str(body.get("decided_at")))
        undone, partition, offset = await run_in_threadpool(
            feed.undo, str(body.get("article_id")), when, user, console_service(request).settings.api.publish_timeout_s)
    except ValueError:
        raise ApiError(422, "send {\"article_id\": ..., \"decided_at\": <the decision's decided_at>}") from None
    except LookupError as exc:
        raise ApiError(409, str(exc)) from None
    except RuntimeError as exc:
        raise ApiError(503, str(exc)) from None
    await _on_disk(request, partition, offset)
    return JSONResponse({"undone": when.isoformat(), "decided_at": undone.decided_at.isoformat()}, status_code=202)


async def _on_disk(request: Request, partition: int, offset: int) -> None:
    """Standalone (an embedded broker): wait until the decision (or undo) at ``offset`` of the decisions topic's
    ``partition`` is on disk in the broker's journal (:meth:`newsmon.journal.BrokerJournal.wait`).

    Raises:
        ApiError: 503 when it is not within ``api.publish_timeout_s``.
    """
    svc = console_service(request)
    topic, wait_s = svc.settings.kafka.topic_decisions, svc.settings.api.publish_timeout_s
    if svc.journal is not None and not await run_in_threadpool(svc.journal.wait, topic, partition, offset, wait_s):
        raise ApiError(503, f"the decision was published but is not on disk in {svc.journal.path} yet; send it again")


# -- text ----------------------------------------------------------------------------------------------------
HEADING_CHARS = 120  # a title-less article's heading: the start of its text, cut at a word


def heading_and_body(point: dict, title: str | None) -> tuple[str | None, str]:
    """An article's heading and body from its memory point: its headline and its text without the headline it
    starts with; without a headline, the start of its text cut at a word (:func:`cut_at_word`) and the whole text as
    the body (never a body cut where the heading stopped)."""
    text = str(point.get("text") or "")
    headline = str(point.get("title") or "")
    if headline:
        return headline, text[len(headline):].lstrip("\n") if text.startswith(headline) else text
    if text.strip():
        return cut_at_word(text, HEADING_CHARS), text
    return title, text


def highlight(text: str, terms: list[str]) -> Markup:
    """``text`` escaped for HTML, each occurrence of a ``terms`` entry (case-insensitive, longest first) in
    ``<mark>``. One pass of one alternation of literal strings: linear in the text for a bounded term list."""
    terms = sorted({t for t in terms if t.strip()}, key=len, reverse=True)[:50]
    if not terms:
        return Markup(html.escape(text, quote=True))
    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)
    out, last = [], 0
    for m in pattern.finditer(text):
        out += [html.escape(text[last:m.start()]), "<mark>", html.escape(m.group(0)), "</mark>"]
        last = m.end()
    out.append(html.escape(text[last:]))
    return Markup("".join(out))  # every piece of the text escaped above
