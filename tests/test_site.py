"""The documentation site: ``mkdocs build --strict`` passes, and the pages generated from the code when it is built
(``docs/hooks.py``: the CLI and settings references, the measurements page) are complete."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def load_hooks():
    spec = importlib.util.spec_from_file_location("newsmon_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built as a reader gets it, strict (a warning fails the build), into a temp dir."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("NEWSMON_BENCHMARK_RESULTS", None)
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def page_text(site: Path, page: str) -> str:
    """The text of a built page (tags dropped, entities read)."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def test_site_builds_strict_with_every_page(site):
    sources = [p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md")]
    assert len(sources) > 20
    for src in sources:
        built = site / ("index.html" if src.name == "index.md" else src.with_suffix("") / "index.html")
        assert built.is_file(), src


def test_cli_reference_lists_every_command_and_option(site):
    markdown = hooks.cli_reference()
    assert hooks.missing_commands(markdown) == []
    paths = [p for p, _cmd in hooks.commands()]
    assert {"newsmon suggest", "newsmon memory build", "newsmon train nightly", "newsmon topics create"} <= set(paths)
    page = page_text(site, "reference/cli")
    for path in paths:
        assert path in page, path
    assert "--calibrate" in page and "--workers" in page


def test_the_cli_check_fails_on_a_missing_command_or_option():
    markdown = hooks.cli_reference()
    start, end = markdown.index("### `newsmon memory build`"), markdown.index("### `newsmon memory import`")
    assert hooks.missing_commands(markdown[:start] + markdown[end:]) == ["newsmon memory build"]
    section = markdown.index("## `newsmon suggest`")
    line = re.compile(r"^\* `--lang [^\n]*\n", flags=re.M).search(markdown, section)
    assert line is not None
    without = markdown[:line.start()] + markdown[line.end():]
    assert hooks.missing_commands(without) == ["newsmon suggest --lang"]


def test_settings_reference_lists_every_setting(site):
    from newsmon.shared.settings_reference import settings_reference

    tables = hooks.settings_tables()
    assert hooks.missing_settings(tables) == []
    for row in settings_reference().splitlines()[2:]:  # the rows of `newsmon settings --markdown`, verbatim
        assert row in tables.splitlines(), row
    page = page_text(site, "reference/settings")
    for variable in hooks.leaf_settings():
        assert variable in page, variable
    assert len(hooks.leaf_settings()) > 80


def test_the_settings_check_fails_on_a_missing_setting():
    tables = hooks.settings_tables()
    without = "\n".join(ln for ln in tables.splitlines() if not ln.startswith("| `NEWSMON_SCORING__TAU` |"))
    assert hooks.missing_settings(without) == ["NEWSMON_SCORING__TAU"]


def test_a_pipe_in_a_setting_stays_in_its_cell(site):
    """A meaning with ``|`` (``||W - I||^2``) is one cell, not a table cut in two."""
    raw = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    assert "||W - I||^2" in html.unescape(raw)


def test_measurements_page_shows_every_benchmark_with_a_record(site):
    page = page_text(site, "measurements")
    with_record = [d for d in RESULTS.iterdir() if d.is_dir() and any(d.glob("*.json"))] if RESULTS.is_dir() else []
    assert with_record, "benchmarks/results holds no record"
    for folder in with_record:
        latest = json.loads(sorted(folder.glob("*.json"))[-1].read_text(encoding="utf-8"))
        assert folder.name in page
        assert latest["command"] in page
        for table in latest["tables"]:
            assert table["title"] in page, (folder.name, table["title"])


def test_measurements_come_from_the_latest_record_of_each_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMON_BENCHMARK_RESULTS", str(tmp_path))
    record = hooks._record_module()
    with record.BenchmarkRecord("alpha", argv=["benchmarks/alpha.py", "--n", "3"]) as rec:
        rec.table("Alpha now", ["measure", "value"], [["articles/s", 6.25]], note="2 cores")
        rec.data["points"] = 1000
    older = json.loads(rec.path.read_text(encoding="utf-8"))
    older["tables"][0]["title"] = "Alpha before"
    (tmp_path / "alpha" / "20000101T000000Z.json").write_text(json.dumps(older), encoding="utf-8")
    with pytest.raises(RuntimeError):
        with record.BenchmarkRecord("beta", argv=["benchmarks/beta.py"]):
            raise RuntimeError("the broker did not start")
    (tmp_path / "gamma").mkdir()  # a folder without a record

    page = hooks.measurements()
    assert "## alpha {#alpha}" in page and "## beta {#beta}" in page and "gamma" not in page
    assert "| [alpha](#alpha) |" in page
    assert "Alpha now" in page and "Alpha before" not in page
    assert "| articles/s | 6.25 |" in page and "2 cores" in page and '"points": 1000' in page
    assert "`python benchmarks/alpha.py --n 3`" in page
    assert older["date"] in page and f"{older['machine']['cpus']} CPUs" in page
    if older["commit"]:
        assert older["commit"][:12] in page
    assert "RuntimeError: the broker did not start" in page
