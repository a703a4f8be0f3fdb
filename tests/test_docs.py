"""The README is a front page (the two set-up commands, links into the docs), and the docs' messages are the
schemas' own examples. The site itself (strict build, generated references) is tested in ``tests/test_site.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MESSAGES = ROOT / "docs" / "reference" / "messages.md"


def test_readme_has_exactly_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Set-up: the two commands"):]
    section = section[:section.index("\n## ", 5)]
    block = section[section.index("```bash"):]
    block = block[:block.index("```", 7)]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines()[1:] if ln.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]


#: A commit hash as the README used to cite them: 7-40 hex digits with at least one digit and one letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def test_readme_is_a_front_page():
    """At most 200 lines, no commit hashes or run logs, and every link into docs/ names a page that exists."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert COMMIT.findall(text) == []
    assert "fresh clone" not in text.lower()
    links = re.findall(r"\]\((docs/[^)#\s]+)", text)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).is_file(), link


def test_the_commit_check_finds_a_hash():
    assert COMMIT.findall("measured on d59ccbf at load 3") == ["d59ccbf"]
    assert COMMIT.findall("deadbeef is a word, 1234567 a number") == []


def test_docs_messages_are_valid_schema_examples():
    """"Messages by example" shows one message per topic; each is valid for its topic's model (parsed as the
    workers parse it) and is one of the examples in the committed JSON Schema, so the page cannot drift."""
    from newsmon.schemas import EVENT_MODELS, parse_event

    text = MESSAGES.read_text(encoding="utf-8")
    section = text[text.index("## Messages by example"):]
    section = section[:section.index("\n## ")]
    by_topic = {m.default_topic: m for m in EVENT_MODELS.values()}
    shown = re.findall(r"^`([a-z-]+)` \(`(\w+)`[^\n]*\n\n```json\n(.*?)```", section, flags=re.S | re.M)
    assert sorted(t for t, _m, _j in shown) == sorted(by_topic)
    for topic, model_name, block in shown:
        model = by_topic[topic]
        assert model.__name__ == model_name
        message = json.loads(block)
        parse_event(model, block.encode("utf-8"))
        assert message in model.model_json_schema()["examples"], topic
    for field in ("labels", "candidates", "neighbours", "scoring", "model_version", "memory_version", "revision"):
        assert f"`{field}" in text or f"`labels[].{field}" in text, field
