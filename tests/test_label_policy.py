"""One label policy (``schemas.base.check_label``) refuses control characters on every path that takes a label
(issue 27 item 6, labels): ``PUT /v1/labels/%00`` was accepted as the label ``"\\u0000"``, and a decision adding
``"x\\u0000y"`` and ``"\\u0007bell"`` was stored and proposed on the next similar article. Now the wire events
(decisions, label events, proposals), the corpus loader and the API's label paths (``tests/test_api.py``) refuse
them with the character and its position; the memory updater dead-letters such a decision with that reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from newsmon.schemas import DeadLetterReason, InvalidEvent, LabelEvent, ModeratorDecision, parse_event
from newsmon.schemas.base import LABEL_MAX_RAW_LENGTH, check_label
from newsmon.shared.data import load_corpus

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC).isoformat()


@pytest.mark.parametrize("label, where", [("\u0000", "U+0000 at position 0"), ("x\u0000y", "U+0000 at position 1"),
                                          ("\u0007bell", "U+0007 at position 0"), ("del\u007f", "U+007F"),
                                          ("c1\u0085", "U+0085"), ("esc\u001b[31m", "U+001B")])
def test_control_characters_are_refused_with_the_character_and_its_position(label, where):
    with pytest.raises(ValueError, match="control character") as exc:
        check_label(label)
    assert where in str(exc.value)


def test_what_stays_a_label():
    assert check_label("  Luka\tKoper\n") == "luka koper"  # whitespace runs are one space, as before
    assert check_label("Kr\u00adka") == "krka" and check_label("S\u030cport") == "šport"
    with pytest.raises(ValueError, match="lone surrogate U\\+D800"):
        check_label("a\ud800")
    with pytest.raises(ValueError, match="characters"):
        check_label("a" * (LABEL_MAX_RAW_LENGTH + 1))  # refused before any normalisation runs on it
    assert check_label(" " * 300 + "a") == "a"


def _decision(*labels: str) -> bytes:
    return json.dumps({"schema_version": 1, "article_id": "sl-1", "moderator": "ana", "decided_at": NOW,
                       "decisions": [{"label": lb, "action": "added"} for lb in labels]}).encode()


def test_a_decision_with_control_characters_is_dead_lettered_with_its_reason():
    """What the memory updater reads (``parse_event``) refuses it: a dead letter with reason schema_violation and
    the offending label named, nothing stored."""
    assert parse_event(ModeratorDecision, _decision("politika")).decisions[0].label == "politika"
    for labels in (("x\u0000y",), ("politika", "\u0007bell")):
        with pytest.raises(InvalidEvent) as exc:
            parse_event(ModeratorDecision, _decision(*labels))
        assert exc.value.code is DeadLetterReason.SCHEMA_VIOLATION and "control character" in exc.value.reason


def test_a_label_event_with_control_characters_is_refused():
    for fields in ({"action": "retired", "label": "\u0000"},
                   {"action": "renamed", "label": "luka", "new_label": "luka\u0007"}):
        raw = json.dumps({"schema_version": 1, "occurred_at": NOW, **fields}).encode()
        with pytest.raises(InvalidEvent, match="control character"):
            parse_event(LabelEvent, raw)


def test_a_corpus_line_with_a_control_character_label_is_a_bad_line(tmp_path):
    rows = [{"id": "a1", "text": "Krka je objavila rezultate.", "labels": ["gospodarstvo"], "lang": "sl",
             "split": "train"},
            {"id": "a2", "text": "Luka Koper.", "labels": ["luka", "\u0007bell"], "lang": "sl", "split": "train"}]
    path = tmp_path / "articles.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    corpus = load_corpus(path)
    assert [a.id for a in corpus.articles] == ["a1"]
    [bad] = corpus.bad_lines
    assert bad.line == 2 and "control character U+0007" in bad.reason
