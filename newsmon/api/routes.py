"""The ``/v1`` routes: proposals on request and label management (every change published as a ``LabelEvent``).

Labels in paths are taken in their canonical form (``schemas.base.canonical_label``: NFC, trimmed, lower case),
so ``/v1/labels/Krka`` is the label ``krka``; a label holding ``/`` is written as it is (``{label:path}``).
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from newsmon.api.models import ErrorBody, LabelChange, LabelTest, LabelTestResult, LabelView, RenameBody
from newsmon.api.service import ApiError, ApiService
from newsmon.schemas import LabelDefinition, LabelProposal
from newsmon.schemas.base import check_label
from newsmon.workers.labels import conflict
from newsmon.workers.rules import kwe_errors

__all__ = ["router"]

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <api.token>` when a token is set.")


def require_token(request: Request,
                  credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """Refuse (401) a request without the bearer token, when ``api.token`` is set."""
    token = request.app.state.service.settings.api.token
    if token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not secrets.compare_digest(given.encode(), token.get_secret_value().encode()):
        raise ApiError(401, "missing or wrong bearer token: send `Authorization: Bearer <token>`")


ERRORS: dict = {code: {"model": ErrorBody} for code in (401, 404, 409, 413, 422, 503)}
router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


def service(request: Request) -> ApiService:
    return request.app.state.service


Service = Annotated[ApiService, Depends(service)]
Actor = Annotated[str | None, Query(max_length=256, description="Who makes the change (the event's actor).")]


def canonical(label: str) -> str:
    """The canonical label of a path parameter; 422 for a blank or too long one."""
    try:
        return check_label(label)
    except ValueError as exc:
        raise ApiError(422, f"path.label: {exc}", [{"loc": ["path", "label"], "msg": str(exc)}]) from None


@router.post("/suggest", response_model=list[LabelProposal], tags=["proposals"],
             summary="Propose labels for one or more articles")
async def suggest(svc: Service, articles: Annotated[Any, Body(description="An ArticleEvent or a list of them.")]):
    """One ``ArticleEvent`` (JSON object) or a list of them in; their ``LabelProposal``s out, in order, the
    same objects the classifier produces on the proposals topic (validated the same way; stored as pending
    points, so moderator decisions on them work)."""
    items = articles if isinstance(articles, list) else [articles]
    if not items or not all(isinstance(a, dict) for a in items):
        raise ApiError(422, "the body must be an ArticleEvent object or a non-empty list of them")
    return await run_in_threadpool(svc.suggest, items)


@router.get("/labels", tags=["labels"], summary="The labels the registry knows")
async def list_labels(svc: Service) -> dict:
    """Every label with a definition (active or retired), the retired labels and the renames (old -> new)."""
    state = await run_in_threadpool(svc.state)
    return {"registry_version": state.version, "definitions": state.definitions,
            "retired": sorted(state.retired), "renamed": state.renamed}


@router.get("/labels/{label:path}", response_model=LabelView, tags=["labels"], summary="One label")
async def get_label(svc: Service, label: str):
    """The label's status, definition, renames and confirmed examples; 404 when nothing knows it."""
    return await run_in_threadpool(svc.view, canonical(label))


@router.post("/labels/{label:path}/rename", response_model=LabelChange, status_code=202, tags=["labels"],
             summary="Rename a label")
async def rename_label(svc: Service, label: str, body: RenameBody, actor: Actor = None):
    """Publish ``renamed``: the new name takes over the old one's history and definition."""
    label = canonical(label)
    await run_in_threadpool(svc.view, label)  # 404 when unknown
    if body.new_label == label:
        raise ApiError(422, "new_label is the label itself")
    await _refuse_conflict(svc, "renamed", label, body.new_label)
    return await run_in_threadpool(svc.change, "renamed", label, actor, new_label=body.new_label)


@router.post("/labels/{label:path}/test", response_model=LabelTestResult, tags=["labels"],
             summary="Which articles a label's KwEs match")
async def test_label(svc: Service, label: str, body: LabelTest):
    """Match the label's definition (or the one posted) against a posted text, or the latest articles."""
    label = canonical(label)
    if body.definition is not None:
        _check_kwes(body.definition, ("body", "definition", "kwes"))
    return await run_in_threadpool(svc.test, label, body)


@router.put("/labels/{label:path}", response_model=LabelChange, status_code=202, tags=["labels"],
            summary="Define or change a label")
async def put_label(svc: Service, label: str, definition: LabelDefinition, actor: Actor = None):
    """Publish ``defined`` (a new label) or ``updated`` (it had a definition) with the KwEs and filters.
    A KwE that does not parse is refused (422) with its index, the reason and the character position."""
    label = canonical(label)
    _check_kwes(definition, ("body", "kwes"))
    state = await _refuse_conflict(svc, "defined", label)
    action = "updated" if label in state.definitions else "defined"
    return await run_in_threadpool(svc.change, action, label, actor, definition=definition)


@router.delete("/labels/{label:path}", response_model=LabelChange, status_code=202, tags=["labels"],
               summary="Retire a label")
async def retire_label(svc: Service, label: str, actor: Actor = None):
    """Publish ``retired``: never proposed again, its rules stop matching."""
    label = canonical(label)
    await run_in_threadpool(svc.view, label)  # 404 when unknown
    await _refuse_conflict(svc, "retired", label)
    return await run_in_threadpool(svc.change, "retired", label, actor)


async def _refuse_conflict(svc: ApiService, action: str, label: str, new_label: str | None = None):
    """The registry's state; 409 when it would refuse the event (``newsmon.workers.labels.conflict``)."""
    state = await run_in_threadpool(svc.state)
    why = conflict(action, label, state.renamed, state.retired, new_label)
    if why is not None:
        raise ApiError(409, why)
    return state


def _check_kwes(definition: LabelDefinition, loc: tuple) -> None:
    bad = kwe_errors(definition.kwes)
    if bad:
        errors = [{"loc": [*loc, i], **exc.to_dict()} for i, exc in bad]
        raise ApiError(422, "; ".join(f"{'.'.join(map(str, loc))}.{i}: {exc}" for i, exc in bad), errors)
