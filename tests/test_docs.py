"""The README's settings table is generated from the settings model and must not drift from it."""

from __future__ import annotations

from pathlib import Path

from newsmon.shared.config import settings_reference

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_settings_table_is_generated():
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- settings:start -->\n", "\n<!-- settings:end -->"
    assert start in text and end in text
    block = text[text.index(start) + len(start):text.index(end)]
    assert block == settings_reference(), "README settings table is stale: paste `newsmon settings --markdown`"


def test_readme_has_exactly_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Set-up: the two commands"):]
    section = section[:section.index("\n## ", 5)]
    block = section[section.index("```bash"):]
    block = block[:block.index("```", 7)]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines()[1:] if ln.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]


def test_readme_messages_are_valid_schema_examples():
    """"Messages by example" shows one message per topic; each is valid for its topic's model (parsed as the
    workers parse it) and is one of the examples in the committed JSON Schema, so the README cannot drift."""
    import json
    import re

    from newsmon.schemas import EVENT_MODELS, parse_event

    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Messages by example"):]
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
        assert f"`{field}" in section or f"`labels[].{field}" in section, field
