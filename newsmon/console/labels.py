"""The labels page's JSON routes (``/console/api/labels``): search the names, test a rule as it is typed, and
define, rename or retire a label, each a ``LabelEvent`` published as ``/v1/labels`` does, by the logged-in
moderator."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from newsmon.api.models import LabelChange, LabelTest
from newsmon.api.service import ApiError, ApiService
from newsmon.console.session import ApiUser, console_feed, console_service, read_json
from newsmon.schemas import LabelDefinition
from newsmon.schemas.base import check_label
from newsmon.workers.kwe_stage import kwe_errors

__all__ = ["router"]

router = APIRouter(prefix="/console/api/labels", include_in_schema=False)


@router.get("")
async def label_search(request: Request, _user: ApiUser, q: str = ""):
    """Labels whose name holds ``q``: the registry's active labels and those in the queue's proposals."""
    state = await run_in_threadpool(console_service(request).state)
    names = {k for k in state.definitions if k not in state.retired}
    names |= {x for x in console_feed(request).facets()["label"] if x not in state.retired and x not in state.renamed}
    needle = q.strip().lower()
    hits = sorted((n for n in names if needle in n), key=lambda n: (not n.startswith(needle), len(n), n))
    return {"labels": hits[:20]}


@router.post("/test")
async def label_test(request: Request, _user: ApiUser):
    """``{"label", "kwes": [...], "articles": N}`` -> the parser's errors (each KwE's index, reason, position),
    or the latest N articles the KwEs match with the matched words. Bounded as ``LabelDefinition`` is (100 KwEs of
    at most 10,000 characters) and run off the event loop."""
    body = await read_json(request)
    return await run_in_threadpool(_test, console_service(request), body)


def _test(svc: ApiService, body: dict) -> dict:
    raw = body.get("kwes")
    kwes = [k for k in raw if isinstance(k, str) and k.strip()] if isinstance(raw, list) else []
    if not kwes:
        return {"errors": [], "tested": 0, "kwe_matched": 0, "matched": []}
    try:
        label = check_label(body.get("label") or "rule-under-test")
        n = int(body.get("articles") or 50)
        test = LabelTest(definition=LabelDefinition(kwes=kwes), articles=max(1, min(n, 1000)))
    except (ValueError, TypeError, ValidationError) as exc:
        raise ApiError(422, str(exc)) from None
    bad = kwe_errors(kwes)
    if bad:
        return {"errors": [{"index": i, **exc.to_dict(), "message": str(exc)} for i, exc in bad]}
    result = svc.test(label, test)
    return {"errors": [], "tested": result.tested, "kwe_matched": result.kwe_matched,
            "matched": [{"article_id": m.article_id, "title": m.title, "outlet": m.outlet,
                         "kwe": m.rule.kwe, "words": m.rule.matched} for m in result.matched]}


@router.put("/{label:path}")
async def label_define(request: Request, label: str, user: ApiUser):
    """``{"kwes": [...], "description"}`` -> ``defined`` / ``updated`` as ``PUT /v1/labels/{label}`` (200, 202,
    409, 422)."""
    body = await read_json(request)
    svc = console_service(request)
    label = _label(label)
    try:
        definition = LabelDefinition(kwes=[k for k in body.get("kwes") or [] if str(k).strip()],
                                     description=body.get("description") or None)
    except ValidationError as exc:
        raise ApiError(422, "; ".join(e["msg"] for e in exc.errors())) from None
    bad = await run_in_threadpool(kwe_errors, definition.kwes)  # seconds for 100 long KwEs: off the event loop
    if bad:
        raise ApiError(422, "; ".join(f"kwes.{i}: {exc}" for i, exc in bad),
                       [{"index": i, **exc.to_dict()} for i, exc in bad])
    return _answer(await run_in_threadpool(svc.change, "defined", label, user, definition=definition))


@router.post("/{label:path}/rename")
async def label_rename(request: Request, label: str, user: ApiUser):
    """``{"new_label"}`` -> as ``POST /v1/labels/{label}/rename`` (200, 202, 404, 409, 422)."""
    body = await read_json(request)
    label, new = _label(label), _label(body.get("new_label") or "")
    if new == label:
        raise ApiError(422, "the new name is the label's own")
    return _answer(await run_in_threadpool(console_service(request).change, "renamed", label, user, new_label=new))


@router.delete("/{label:path}")
async def label_retire(request: Request, label: str, user: ApiUser):
    """As ``DELETE /v1/labels/{label}`` (200, 202, 404, 409)."""
    label = _label(label)
    return _answer(await run_in_threadpool(console_service(request).change, "retired", label, user))


def _answer(change: LabelChange) -> JSONResponse:
    """The change as ``/v1`` answers it: 200 when applied (or nothing to change), 202 when only published."""
    return JSONResponse(change.model_dump(mode="json"), status_code=200 if change.applied else 202)


def _label(raw: str) -> str:
    try:
        return check_label(raw)
    except ValueError as exc:
        raise ApiError(422, f"label: {exc}") from None
