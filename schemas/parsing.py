"""Reading a Kafka message value as an event: :func:`parse_event`, and :class:`InvalidEvent` with a short reason."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from newsmon.schemas.base import Event, show_value
from newsmon.schemas.dead_letters import DeadLetterReason

__all__ = ["InvalidEvent", "parse_event"]

_MAX_ERRORS_SHOWN = 3


class InvalidEvent(ValueError):
    """A message that is not a valid event. ``reason`` says why, in one short human-readable line; ``code`` is
    the dead-letter reason (:class:`~newsmon.schemas.dead_letters.DeadLetterReason`)."""

    def __init__(self, reason: str, model: str | None = None,
                 code: DeadLetterReason = DeadLetterReason.SCHEMA_VIOLATION) -> None:
        super().__init__(reason)
        self.reason = reason
        self.model = model
        self.code = DeadLetterReason(code)


def parse_event(model_cls: type[Event], raw: bytes | bytearray | memoryview | None) -> Event:
    """Parse one Kafka message value into ``model_cls``.

    Raises:
        InvalidEvent: the value is empty or null, not UTF-8, not JSON, not a JSON object, has a missing or
            unknown ``schema_version``, or fails validation (the first few errors, with field paths).
    """
    name = model_cls.__name__
    if raw is None or len(raw) == 0:
        raise InvalidEvent("empty message", name, DeadLetterReason.INVALID_JSON)
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEvent(f"not UTF-8: invalid byte at position {exc.start}", name,
                           DeadLetterReason.INVALID_JSON) from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidEvent(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", name,
                           DeadLetterReason.INVALID_JSON) from None
    except ValueError as exc:
        raise InvalidEvent(f"invalid JSON: {exc}", name, DeadLetterReason.INVALID_JSON) from None
    if not isinstance(obj, dict):
        raise InvalidEvent(f"not a JSON object: got {_json_type(obj)}", name, DeadLetterReason.INVALID_JSON)
    readable = ", ".join(map(str, model_cls.schema_versions))
    if "schema_version" not in obj:
        raise InvalidEvent(f"missing schema_version; this worker reads {readable}", name,
                           DeadLetterReason.UNSUPPORTED_VERSION)
    version = obj["schema_version"]
    if type(version) is not int or version not in model_cls.schema_versions:
        raise InvalidEvent(f"unsupported schema_version {show_value(version)}; this worker reads {readable}", name,
                           DeadLetterReason.UNSUPPORTED_VERSION)
    try:
        return model_cls.model_validate(obj)
    except ValidationError as exc:
        raise InvalidEvent(f"invalid {name}: {_summarise(exc)}", name) from None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _summarise(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for err in errors[:_MAX_ERRORS_SHOWN]:
        path = ".".join(str(p) for p in err["loc"])
        parts.append(f"{path}: {err['msg']}" if path else err["msg"])
    more = len(errors) - _MAX_ERRORS_SHOWN
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__
