"""Bounds on what one request or event may carry (``NEWSMON_LIMITS__*``), a section of
:class:`newsmon.shared.config.Settings`: defaults a media-monitoring desk never reaches, so that one message cannot
cost seconds or megabytes on every path it takes. The body sizes are ``api.max_body_bytes`` and
``worker.max_message_bytes``; a label name is at most 256 characters and a definition at most 100 KwEs (the wire's
own bounds, :mod:`newsmon.schemas`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["LimitSettings", "decision_over_limit"]


class LimitSettings(BaseModel):
    """Bounds of decisions and proposals."""

    decision_labels: int = Field(1000, ge=1, le=100_000, description="Labels one moderator decision may name; more "
                                 "are refused: 422 on the API and the console, dead-lettered too_large (stage "
                                 "validate) on the decisions topic.")
    proposal_labels: int = Field(200, ge=1, le=100_000, description="Labels one proposal carries at most (a "
                                 "near-copy of an article with more confirmed labels keeps the first ones).")


def decision_over_limit(labels: int, limits: LimitSettings) -> str | None:
    """Why a decision naming ``labels`` labels is refused (one line naming the limit), or None within it."""
    if labels <= limits.decision_labels:
        return None
    return (f"the decision names {labels} labels; at most limits.decision_labels = {limits.decision_labels} "
            "(NEWSMON_LIMITS__DECISION_LABELS)")
