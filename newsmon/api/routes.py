"""The ``/v1`` routes: proposals on request and label management (every change published as a ``LabelEvent``).

Labels in paths are taken in their canonical form (``schemas.base.canonical_label``: NFC, trimmed, lower case),
so ``/v1/labels/Krka`` is the label ``krka``; a label holding ``/`` is written as it is (``{label:path}``).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Annotated, Any, cast

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from newsmon.api.bodies import JsonRoute
from newsmon.api.models import (
    DecisionSent,
    ErrorBody,
    LabelChange,
    LabelTest,
    LabelTestResult,
    LabelView,
    RenameBody,
    SuggestText,
)
from newsmon.api.service import ApiError, ApiService
from newsmon.schemas import InvalidEvent, LabelDefinition, LabelProposal, ModeratorDecision, parse_event
from newsmon.schemas.base import check_label
from newsmon.shared.limits import decision_over_limit
from newsmon.workers.kwe_stage import kwe_errors

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
router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS, route_class=JsonRoute)


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


SUGGEST_BODY = ('send {"text": "...", "lang": "sl"} (lang optional), a full ArticleEvent, or a non-empty list of '
                'them, as JSON with `Content-Type: application/json`')


@router.post("/suggest", response_model=list[LabelProposal], tags=["proposals"],
             summary="Propose labels for a text or for article events")
async def suggest(svc: Service, request: Request, articles: Annotated[Any, Body(
        description="`{\"text\": ..., \"lang\": ...}`, an ArticleEvent, or a list of them.")],
        publish: Annotated[bool, Query(description="Also produce each proposal to the proposals topic (acknowledged "
                                       "before the answer): the console's queue and the moderation tool get it, as "
                                       "the classifier's own.")] = False):
    """The minimal call: `{"text": "...", "lang": "sl"}` (`lang` optional: detected among the memory's
    languages). A full `ArticleEvent` (as on the `articles` topic) or a list mixing both is taken too. The answer
    is always a list of `LabelProposal`s, in order: the objects the classifier produces on the proposals topic
    (the same stages; each article stored as a pending point, so moderator decisions on it work), the shape
    `newsmon suggest --json` prints. `?publish=true` also puts them on the proposals topic, so they reach the
    console's queue (`/console`) and the moderation tool. The requests of all clients are scored together in
    micro-batches; `503` with `Retry-After` while more than `api.queue_max_articles` articles wait."""
    items = articles if isinstance(articles, list) else [articles]
    if not items or not all(isinstance(a, dict) for a in items):
        raise ApiError(422, f"the body is not an article: {SUGGEST_BODY}")
    neither = [i for i, a in enumerate(items) if "text" not in a and "body" not in a]
    if neither:
        raise ApiError(422, "; ".join(f"article {i}: no `text` (the minimal form) and no `body` (an ArticleEvent)"
                                      for i in neither) + f": {SUGGEST_BODY}",
                       [{"index": i, "loc": ["text"], "msg": "Field required"} for i in neither])
    if any(_is_text(a) for a in items):
        items = await run_in_threadpool(_events_of_texts, svc, items)
    proposals = await request.app.state.queue.submit(items)  # micro-batched with other clients' (api/batcher.py)
    if publish:  # off the batch thread: the next batch is scored while these are acknowledged
        await run_in_threadpool(svc.publish_proposals, proposals)
    return proposals


def _is_text(item: dict) -> bool:
    """Whether a request item is the minimal form (``text``, no ``body``) rather than an ArticleEvent."""
    return "text" in item and "body" not in item


def _events_of_texts(svc: ApiService, items: list[dict]) -> list[dict]:
    """The request items with each minimal one (:class:`SuggestText`) replaced by its article event (its language
    detected when not given).

    Raises:
        ApiError: 422 naming each invalid item and field, or a language that cannot be detected.
    """
    out: list[Any] = []
    errors: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if not _is_text(item):
            out.append(item)
            continue
        try:
            req = SuggestText.model_validate(item)
        except ValidationError as exc:
            errors += [{"index": i, "loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
            continue
        lang = req.lang or svc.pipeline.classifier.language_of([req.text])[0]
        if lang is None:
            errors.append({"index": i, "loc": ["lang"], "msg": "the knowledge memory is empty, so no language to "
                           "detect: send lang (and build the memory: `newsmon memory build --data PATH "
                           "--calibrate`)"})
            continue
        out.append(req.event(lang))
    if errors:
        raise ApiError(422, "; ".join(f"article {e['index']}: {'.'.join(map(str, e['loc']))}: {e['msg']}"
                                      for e in errors), errors)
    return out


@router.post("/decisions", response_model=DecisionSent, tags=["proposals"],
             summary="Send a moderator decision on an article's labels", responses={202: {"model": DecisionSent}})
async def decide(svc: Service, response: Response, decision: Annotated[dict, Body(
        description="A ModeratorDecision; `schema_version` defaults to 1, `decided_at` to now.", examples=[
            {"article_id": "suggest-3f9c1a0b7d2e", "moderator": "ana",
             "decisions": [{"label": "krka", "action": "confirmed"}, {"label": "gospodarstvo", "action": "added"}]}])]):
    """Publish a `ModeratorDecision` on the decisions topic, as the moderation tool does: each label
    `confirmed`, `rejected` or `added`; with `undoes` (the `decided_at` of an earlier decision on the article) it
    takes that decision back. The memory updater applies it to the article in the knowledge memory
    (an article proposed through `/v1/suggest` is stored there, pending), so it is evidence for the next
    proposals. `200` once applied, `202` when published but not applied within `api.apply_wait_s`."""
    labels = decision.get("decisions")
    why = decision_over_limit(len(labels), svc.settings.limits) if isinstance(labels, list) else None
    if why is not None:  # before parsing: 20,000 labels took seconds to validate (an undo's labels too)
        raise ApiError(422, why, [{"loc": ["body", "decisions"], "msg": why}])
    version = 2 if decision.get("undoes") is not None else 1  # an undo (the console's) is version 2
    body = {"schema_version": version, "decided_at": datetime.now(UTC).isoformat(), **decision}
    try:
        event = cast(ModeratorDecision, parse_event(ModeratorDecision, json.dumps(body).encode()))
    except InvalidEvent as exc:
        raise ApiError(422, f"{exc.reason}; send {{\"article_id\": ..., \"moderator\": ..., \"decisions\": "
                            f"[{{\"label\": ..., \"action\": \"confirmed\" | \"rejected\" | \"added\"}}]}}",
                       [{"loc": ["body"], "msg": exc.reason}]) from None
    sent = await run_in_threadpool(svc.decide, event)
    response.status_code = 200 if sent.applied else 202
    return sent


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


@router.post("/labels/{label:path}/rename", response_model=LabelChange, tags=["labels"],
             summary="Rename a label", responses={202: {"model": LabelChange}})
async def rename_label(svc: Service, label: str, body: RenameBody, response: Response, actor: Actor = None):
    """Publish `renamed`: the new name takes over the old one's history and definition. `200` once applied (or
    `event: null` when it is already renamed so), `202` when published but not applied within `api.apply_wait_s`,
    `409` when the registry would refuse it (the label renamed away or retired, the new name renamed away; also
    by a change published before it and not applied yet), `404` for a label nothing knows."""
    label = canonical(label)
    if body.new_label == label:
        raise ApiError(422, "new_label is the label itself: send {\"new_label\": \"<another name>\"}")
    return _answer(response, await run_in_threadpool(svc.change, "renamed", label, actor, new_label=body.new_label))


@router.post("/labels/{label:path}/test", response_model=LabelTestResult, tags=["labels"],
             summary="Which articles a label's KwEs match")
async def test_label(svc: Service, label: str, body: LabelTest | None = None):
    """Match the label's definition (or the one posted) against a posted text, or the latest articles. No body
    (or `{}`): the stored definition against the latest articles."""
    label = canonical(label)
    body = body or LabelTest()
    if body.definition is not None:
        await run_in_threadpool(_check_kwes, body.definition, ("body", "definition", "kwes"))
    return await run_in_threadpool(svc.test, label, body)


@router.put("/labels/{label:path}", response_model=LabelChange, tags=["labels"],
            summary="Define or change a label", responses={202: {"model": LabelChange}})
async def put_label(svc: Service, label: str, definition: LabelDefinition, response: Response,
                    actor: Actor = None):
    """Publish `defined` (a new label) or `updated` (it had a definition) with the KwEs and filters, e.g.
    `{"kwes": ["krka OR krke"]}`. A KwE that does not parse is refused (422) with its index, the reason and the
    character position. `200` once applied (`GET` shows it, the next proposals use it), `202` when published but
    not applied within `api.apply_wait_s`; the same definition again changes nothing (`200`, no event); `409` for
    a name renamed away (also by a rename published before it and not applied yet)."""
    label = canonical(label)
    await run_in_threadpool(_check_kwes, definition, ("body", "kwes"))
    return _answer(response, await run_in_threadpool(svc.change, "defined", label, actor, definition=definition))


@router.delete("/labels/{label:path}", response_model=LabelChange, tags=["labels"], summary="Retire a label",
               responses={202: {"model": LabelChange}})
async def retire_label(svc: Service, label: str, response: Response, actor: Actor = None):
    """Publish `retired`: never proposed again, its rules stop matching. `200` once applied, `202` when published
    but not applied within `api.apply_wait_s`; retiring a retired label changes nothing (`200`, no event); `409`
    for a name renamed away; `404` for a label nothing knows."""
    label = canonical(label)
    return _answer(response, await run_in_threadpool(svc.change, "retired", label, actor))


def _answer(response: Response, change: LabelChange) -> LabelChange:
    """``change`` with its status: 200 when applied before the answer (or nothing to change), 202 when only
    published."""
    response.status_code = 200 if change.applied else 202
    return change


def _check_kwes(definition: LabelDefinition, loc: tuple) -> None:
    """422 for a KwE that does not parse (each one's index, reason and position). Parsing 100 KwEs of 10,000
    characters takes seconds: callers run it off the event loop."""
    bad = kwe_errors(definition.kwes)
    if bad:
        errors = [{"loc": [*loc, i], **exc.to_dict()} for i, exc in bad]
        raise ApiError(422, "; ".join(f"{'.'.join(map(str, loc))}.{i}: {exc}" for i, exc in bad), errors)
