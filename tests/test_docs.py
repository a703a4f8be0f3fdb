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
