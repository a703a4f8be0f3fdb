"""The labels page's JSON routes (``/console/api/labels``): search the names, test a rule as it is typed, and
define, rename or retire a label, each a ``LabelEvent`` published as ``/v1/labels`` does, by the logged-in
moderator."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from newsmon.api.models import LabelTest
from newsmon.api.service import ApiError
from newsmon.console.session import ApiUser, console_feed, console_service, read_json
from newsmon.schemas import LabelDefinition
from newsmon.schemas.base import check_label
from newsmon.workers.rules import kwe_errors

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
    or the latest N articles the KwEs match with the matched words."""
    body = await read_json(request)
    kwes = [k for k in body.get("kwes") or [] if isinstance(k, str) and k.strip()]
    if not kwes:
        return {"errors": [], "tested": 0, "kwe_matched": 0, "matched": []}
    bad = kwe_errors(kwes)
    if bad:
        return {"errors": [{"index": i, **exc.to_dict(), "message": str(exc)} for i, exc in bad]}
    try:
        label = check_label(body.get("label") or "rule-under-test")
        n = int(body.get("articles") or 50)
        test = LabelTest(definition=LabelDefinition(kwes=kwes), articles=max(1, min(n, 1000)))
    except (ValueError, ValidationError) as exc:
        raise ApiError(422, str(exc)) from None
    result = await run_in_threadpool(console_service(request).test, label, test)
    return {"errors": [], "tested": result.tested, "kwe_matched": result.kwe_matched,
            "matched": [{"article_id": m.article_id, "title": m.title, "outlet": m.outlet,
                         "kwe": m.rule.kwe, "words": m.rule.matched} for m in result.matched]}


@router.put("/{label:path}")
async def label_define(request: Request, label: str, user: ApiUser):
    """``{"kwes": [...], "description"}`` -> ``defined`` / ``updated`` as ``PUT /v1/labels/{label}``."""
    body = await read_json(request)
    svc = console_service(request)
    label = _label(label)
    try:
        definition = LabelDefinition(kwes=[k for k in body.get("kwes") or [] if str(k).strip()],
                                     description=body.get("description") or None)
    except ValidationError as exc:
        raise ApiError(422, "; ".join(e["msg"] for e in exc.errors())) from None
    bad = kwe_errors(definition.kwes)
    if bad:
        raise ApiError(422, "; ".join(f"kwes.{i}: {exc}" for i, exc in bad),
                       [{"index": i, **exc.to_dict()} for i, exc in bad])
    state = await run_in_threadpool(svc.state)
    if label in state.renamed:
        raise ApiError(409, f"label {label!r} was renamed to {state.renamed[label]!r}")
    action = "updated" if label in state.definitions else "defined"
    change = await run_in_threadpool(svc.change, action, label, user, definition=definition)
    return JSONResponse(change.model_dump(mode="json"), status_code=202)


@router.post("/{label:path}/rename")
async def label_rename(request: Request, label: str, user: ApiUser):
    body = await read_json(request)
    svc = console_service(request)
    label, new = _label(label), _label(body.get("new_label") or "")
    await run_in_threadpool(svc.view, label)
    if new == label:
        raise ApiError(422, "the new name is the label's own")
    change = await run_in_threadpool(svc.change, "renamed", label, user, new_label=new)
    return JSONResponse(change.model_dump(mode="json"), status_code=202)


@router.delete("/{label:path}")
async def label_retire(request: Request, label: str, user: ApiUser):
    svc = console_service(request)
    label = _label(label)
    await run_in_threadpool(svc.view, label)
    change = await run_in_threadpool(svc.change, "retired", label, user)
    return JSONResponse(change.model_dump(mode="json"), status_code=202)


def _label(raw: str) -> str:
    try:
        return check_label(raw)
    except ValueError as exc:
        raise ApiError(422, f"label: {exc}") from None
