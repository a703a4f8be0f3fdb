"""The README is a front page (the two set-up commands, links into the docs), and the docs' messages are the
schemas' own examples. The site itself (strict build, generated references) is tested in ``tests/test_site.py``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
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


def test_make_refuses_a_python_older_than_required(tmp_path):
    """The README's commands stop at once, with the reason and the way out, when ``PY`` is older than
    pyproject's ``requires-python`` (here: a minimum no Python meets), and make no venv; the minimum is the
    pyproject's."""
    make = shutil.which("make")
    assert make, "make is needed for the README's commands"
    venv = tmp_path / "venv"
    run = subprocess.run([make, "-s", "-C", str(ROOT), f"VENV={venv}", "MIN_PY=99.0", f"PY={sys.executable}",
                          "install"], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "newsmon needs Python 99.0 or newer" in run.stderr and "PY=" in run.stderr
    assert not venv.exists()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    want = re.search(r'requires-python = ">=([0-9.]+)"', pyproject).group(1)
    assert re.search(rf"^MIN_PY \?= {re.escape(want)}$", makefile, re.M)


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


def _hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("newsmon_docs_hooks_in_files", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_references_are_in_their_files():
    """Issue 43 item 7: docs/reference/cli.md (and settings.md, the same kind) read as Markdown hold the reference
    itself, not a placeholder for the site's build: the committed file is exactly what the generator writes
    (``python docs/hooks.py`` rewrites it), so a new command or setting that is not regenerated fails here."""
    hooks = _hooks()
    cli = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert hooks.missing_commands(cli) == [] and "### `newsmon memory build`" in cli
    settings = (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    assert hooks.missing_settings(settings) == []
    for page, name in hooks.IN_FILE.items():
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert hooks.filled(text) == text, f"{page} is not what `python docs/hooks.py` writes: run it"
        block = hooks.generated_block(text, name)
        assert block is not None and block.strip() == hooks.GENERATORS[name]().strip(), page
