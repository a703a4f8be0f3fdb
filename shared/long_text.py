"""Long articles for a short-context encoder: the token windows an article longer than ``max_length`` is embedded
in when ``encoder.max_chunks`` > 1 (:meth:`newsmon.shared.encoder.Encoder.encode` averages their vectors).

multilingual-e5-small reads 512 tokens; half of the sentinews_sl articles are longer (median 525 tokens, 90th
percentile 927), so truncation embeds only their first part. bge-m3 reads 8192 and needs no windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from newsmon.shared.config import EncoderSettings


def chunk_suffix(settings: EncoderSettings) -> str:
    """``+chunks<N>`` for ``max_chunks`` N > 1, else "": a long article's vector then covers more of its text, so
    the vectors are another model version's (collections, cache keys)."""
    return f"+chunks{settings.max_chunks}" if settings.max_chunks > 1 else ""


def windows(ids: Sequence[int], prefix_ids: Sequence[int], room: int, max_chunks: int) -> list[list[int]]:
    """The token windows of one text whose ``ids`` (prefix included, no special tokens) exceed ``room`` tokens:
    the first ``room`` tokens (what truncation keeps), then ``prefix_ids`` + the next ``room - len(prefix_ids)``
    tokens, and so on, at most ``max_chunks`` windows; each window without the special tokens.

    Raises:
        ValueError: ``room`` is not larger than the prefix.
    """
    step = room - len(prefix_ids)
    if step < 1:
        raise ValueError(f"max_length leaves no room for text after the prefix ({len(prefix_ids)} tokens)")
    out = [list(ids[:room])]
    start = room
    while start < len(ids) and len(out) < max_chunks:
        out.append(list(prefix_ids) + list(ids[start:start + step]))
        start += step
    return out


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens a transformers tokenizer puts before and after one text (``[0]`` and ``[2]``, ``<s>`` and
    ``</s>``, for XLM-R), read from what it does to a one-word text (a tokenizer built from a bare
    ``tokenizer.json`` adds them from its post-processor but does not report them otherwise)."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    at = next(i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare)
    return full[:at], full[at + len(bare):]
