"""JSON request bodies, read the one way for ``/v1`` and the console's JSON routes: a body that is not JSON, not
UTF-8, or nested deeper than :data:`MAX_DEPTH` is refused with the reason and the character position (422),
never a ``RecursionError`` (500) or FastAPI's bare "There was an error parsing the body" (400).

``/v1`` routes read their bodies through :class:`JsonRoute` (FastAPI's custom route class: the request's
``json()`` is :func:`parse_json`); the console calls :func:`parse_json` itself.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

__all__ = ["JsonBodyError", "JsonRoute", "MAX_DEPTH", "parse_json"]

#: Arrays and objects nested deeper than this are refused: no request of the API nests more than a few levels,
#: and the validation, error and answer paths recurse once or more per level.
MAX_DEPTH = 64

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # one JSON string; unrolled: linear
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonBodyError(json.JSONDecodeError):
    """A body that is not acceptable JSON: ``msg`` the reason, ``pos`` the character position (a byte offset for a
    body that is not UTF-8). A :class:`json.JSONDecodeError`, so FastAPI answers it as its own (422
    ``json_invalid``, with the position)."""

    def to_dict(self) -> dict[str, Any]:
        return {"loc": ["body", self.pos], "msg": self.msg, "position": self.pos}

    def __str__(self) -> str:
        return f"{self.msg} at character {self.pos}"


def parse_json(raw: bytes | bytearray | str) -> Any:
    """The JSON value of ``raw`` (UTF-8 bytes or text). Linear in the body's length: the decoder, then the nesting
    depth counted at C speed when the body holds more brackets than :data:`MAX_DEPTH` (the position of a too deep
    one is found by a scan that stops there).

    Raises:
        JsonBodyError: not UTF-8, not JSON, or nested deeper than :data:`MAX_DEPTH`.
    """
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonBodyError(f"the body is not UTF-8 (byte 0x{raw[exc.start]:02x})", "", exc.start) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonBodyError(exc.msg, exc.doc, exc.pos) from None
    except RecursionError:
        _refuse_deep(text)
        raise JsonBodyError(f"arrays and objects nested too deep (at most {MAX_DEPTH})", "", 0) from None
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        _refuse_deep(text)
    return value


def _depth(text: str) -> int:
    """The deepest nesting of a valid JSON text: strings blanked, then the running sum over its brackets."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub('""', text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _refuse_deep(text: str) -> None:
    """Raise the :class:`JsonBodyError` of the first bracket that opens level ``MAX_DEPTH + 1``, if any."""
    depth = 0
    for m in _TOKEN.finditer(text):
        step = _STEP.get(m.group())
        if step is None:
            continue
        depth += step
        if depth > MAX_DEPTH:
            raise JsonBodyError(f"arrays and objects nested deeper than {MAX_DEPTH} levels", "", m.start())


class _JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            self._parsed = parse_json(await self.body())
        return self._parsed


class JsonRoute(APIRoute):
    """FastAPI's custom route class of the ``/v1`` routes: their JSON bodies are read with :func:`parse_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(_JsonRequest(request.scope, request.receive))

        return handle
