"""MkDocs hook and generator: the Markdown generated from the code (``mkdocs.yml``, ``hooks:``).

A page source holds a marker ``<!-- generated: NAME -->`` where the generated Markdown goes; the pages of
:data:`IN_FILE` (the CLI and settings references) hold it in the file itself, between that marker and
``<!-- end generated: NAME -->``, so the Markdown reads complete without a site build: ``python docs/hooks.py``
rewrites them from the code (``tests/test_docs.py`` checks that the committed files are what it writes), and the
site's build fills every marker again:

- ``cli``: every command and sub-command of the typer app ``newsmon.cli:app``, with its usage, help and options
  (read from the click command typer builds, so a new command or option is in the next build);
- ``settings``: every setting ``NEWSMON_...`` with its default and meaning, one table per section, from
  :func:`newsmon.shared.settings_reference.settings_reference` (the table ``newsmon settings --markdown`` prints);
- ``measurements``: the latest record of each benchmark under ``benchmarks/results/`` (``benchmarks/record.py``,
  ``NEWSMON_BENCHMARK_RESULTS`` moves the folder): its tables, command, commit, date, machine and load.

:func:`missing_commands` and :func:`missing_settings` name what a reference lacks (``tests/test_site.py``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- generated: {} -->"
END = "<!-- end generated: {} -->"
#: The pages (under docs/) whose generated Markdown is kept in the file itself: page -> generator name.
IN_FILE = {"reference/cli.md": "cli", "reference/settings.md": "settings"}


# ---------------------------------------------------------------- CLI


def _click_app():
    """The click command typer builds from ``newsmon.cli:app`` (typer's own click)."""
    import typer

    from newsmon.cli import app

    return typer.main.get_command(app)


def commands() -> list[tuple[str, Any]]:
    """``(path, command)`` of the app and every group and command under it, depth first (``("newsmon", app)``,
    ``("newsmon settings", ...)`` ... ``("newsmon memory build", ...)`` ...)."""
    import typer
    from typer.core import TyperGroup

    out = []

    def walk(cmd, path: str) -> None:
        out.append((path, cmd))
        if isinstance(cmd, TyperGroup):
            ctx = typer.Context(cmd, info_name=path)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, f"{path} {name}")

    walk(_click_app(), "newsmon")
    return out


def _escape_html(markdown: str) -> str:
    """``<`` and ``>`` outside code (fences and spans) as entities: help texts say ``suggest-<hash>``, which
    Markdown would read as an HTML tag and hide."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            parts = line.split("`")
            parts[::2] = [p.replace("<", "&lt;").replace(">", "&gt;") for p in parts[::2]]
            line = "`".join(parts)
        out.append(line)
    return "\n".join(out) + "\n"


def cli_reference() -> str:
    """The CLI reference in Markdown, written by typer's own generator (the one behind ``typer ... utils docs``):
    one section per command (``## `newsmon suggest` ``, ``### `newsmon memory build` ``), its help, usage,
    arguments, options and sub-commands."""
    import typer
    from typer.cli import get_docs_for_click

    cmd = _click_app()
    text = get_docs_for_click(obj=cmd, ctx=typer.Context(cmd), name="newsmon")
    text = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.M)  # the page's own title is the only h1
    return _escape_html(text)


def missing_commands(markdown: str) -> list[str]:
    """What a CLI reference lacks: each command without its section (``"newsmon memory build"``), and each option
    or argument of a command missing from that command's section (``"newsmon suggest --lang"``)."""
    import typer

    missing = []
    for path, cmd in commands():
        head = re.search(rf"^#+ `{re.escape(path)}`\n", markdown, flags=re.M)
        if head is None:
            missing.append(path)
            continue
        section = markdown[head.end():]
        nxt = re.search(r"^#+ `newsmon", section, flags=re.M)
        section = section[:nxt.start()] if nxt else section
        for param in cmd.get_params(typer.Context(cmd, info_name=path)):
            names = [param.name] if param.param_type_name == "argument" else [*param.opts, *param.secondary_opts]
            if getattr(param, "hidden", False):
                continue
            if not all(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", section) for n in names):
                missing.append(f"{path} {names[0]}")
    return missing


# ---------------------------------------------------------------- settings


def settings_rows() -> list[str]:
    """The rows of the settings table ``newsmon settings --markdown`` prints (header lines left out)."""
    from newsmon.shared.settings_reference import settings_reference

    return settings_reference().splitlines()[2:]


def _section(row: str) -> str:
    """The section of a settings row: ``NEWSMON_ENCODER__MODEL`` -> ``encoder``; top-level ones -> ``general``."""
    name = row.split("`")[1]
    return name[len("NEWSMON_"):].split("__")[0].lower() if "__" in name else "general"


def settings_tables() -> str:
    """Every setting, one table per section (general, encoder, memory, rae, kafka, ...), the rows verbatim."""
    from newsmon.shared.settings_reference import settings_reference

    header = "\n".join(settings_reference().splitlines()[:2])
    groups: dict[str, list[str]] = {}
    for row in settings_rows():
        groups.setdefault(_section(row), []).append(row)
    return "\n".join(f"## {name}\n\n{header}\n" + "\n".join(rows) + "\n" for name, rows in groups.items())


def leaf_settings() -> list[str]:
    """The environment variable of every leaf setting, from the settings model itself."""
    from pydantic import BaseModel

    from newsmon.shared.config import Settings

    out = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name.upper()}__")
            else:
                out.append(f"{prefix}{name.upper()}")

    walk(Settings, "NEWSMON_")
    return out


def missing_settings(markdown: str) -> list[str]:
    """The settings whose variable has no row (``| `NEWSMON_...` |``) in a settings reference."""
    return [v for v in leaf_settings() if f"| `{v}` |" not in markdown]


# ---------------------------------------------------------------- measurements


def _record_module():
    """``benchmarks/record.py`` (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("newsmon_benchmark_record", ROOT / "benchmarks" / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _purpose(name: str) -> str:
    """The first paragraph of ``benchmarks/<name>.py``'s docstring (what it measures), or ''."""
    path = ROOT / "benchmarks" / f"{name.split('.')[0]}.py"  # <benchmark>.<corpus> (record.run_name)
    if not path.is_file():
        return ""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _run_table(rec: dict) -> str:
    """What ran: command, commit, date, duration, machine and load, as a two-column table."""
    m = rec.get("machine") or {}
    load = rec.get("load") or {}
    commit = (rec.get("commit") or "unknown")[:12] + (" (with uncommitted changes)" if rec.get("dirty") else "")
    fmt = lambda v: " / ".join(f"{x:g}" for x in v) if v else "unknown"  # noqa: E731
    rows = [("command", f"`{rec.get('command', '')}`"), ("commit", f"`{commit}`"), ("date", rec.get("date", "")),
            ("seconds", f"{rec.get('seconds', '')}"),
            ("machine", f"{m.get('cpus')} CPUs, {m.get('memory_gib')} GiB, {m.get('platform')}, "
                        f"Python {m.get('python')}"),
            ("load average (1 / 5 / 15 min)", f"before {fmt(load.get('before'))}; after {fmt(load.get('after'))}")]
    if rec.get("error"):
        rows.append(("error", f"`{rec['error']}`"))
    return "| run | |\n|---|---|\n" + "\n".join(f"| {k} | {str(v).replace('|', chr(92) + '|')} |" for k, v in rows)


def _anchor(name: str) -> str:
    """The section id of a benchmark on the measurements page (``dedup_quality.sentinews_sl`` ->
    ``dedup_quality-sentinews_sl``)."""
    return re.sub(r"[^\w-]", "-", name)


def measurements() -> str:
    """One section per benchmark with a record (what it measures, the run, its tables, its other figures), after
    a table of them all."""
    record = _record_module()
    latest = record.all_latest()
    if not latest:
        return "No benchmark has written a record yet."
    index = [[f"[{name}](#{_anchor(name)})", rec.get("date", "")[:10], _purpose(name).split(". ")[0]]
             for name, rec in latest.items()]
    parts = [record.markdown_table(["benchmark", "date", "what it measures"], index) + "\n"]
    for name, rec in latest.items():
        parts.append(f"## {name} {{#{_anchor(name)}}}\n\n{_purpose(name)}\n\n{_run_table(rec)}\n")
        for t in rec.get("tables", []):
            parts.append(f"### {t['title']}\n\n{record.markdown_table(t['columns'], t['rows'])}\n"
                         + (f"\n{t['note']}\n" if t.get("note") else ""))
        if rec.get("data"):
            parts.append("Other figures of the run:\n\n```json\n"
                         + json.dumps(rec["data"], indent=1, ensure_ascii=False) + "\n```\n")
    return "\n".join(parts)


# ---------------------------------------------------------------- the hook

GENERATORS = {"cli": cli_reference, "settings": settings_tables, "measurements": measurements}


def generated_block(markdown: str, name: str) -> str | None:
    """The Markdown between the markers of ``name`` in a page (None without both markers)."""
    start, end = markdown.find(MARK.format(name)), markdown.find(END.format(name))
    if start < 0 or end < start:
        return None
    return markdown[start + len(MARK.format(name)):end]


def filled(markdown: str) -> str:
    """``markdown`` with each generator's block (its marker, then the marker to the end marker when there is one)
    written anew: ``MARK``, a blank line, the generated Markdown, a blank line, ``END``."""
    for name, generate in GENERATORS.items():
        mark, end = MARK.format(name), END.format(name)
        start = markdown.find(mark)
        if start < 0:
            continue
        stop = markdown.find(end, start)
        stop = stop + len(end) if stop >= 0 else start + len(mark)
        markdown = f"{markdown[:start]}{mark}\n\n{generate().strip()}\n\n{end}{markdown[stop:]}"
    return markdown


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Put the generated Markdown in place of each marker of the page (and of what a page of :data:`IN_FILE`
    holds between its markers)."""
    return filled(markdown)


def write_pages() -> list[Path]:
    """Rewrite the generated blocks of the pages of :data:`IN_FILE` from the code; returns the pages changed."""
    changed = []
    for page in IN_FILE:
        path = ROOT / "docs" / page
        text = path.read_text(encoding="utf-8")
        new = filled(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


if __name__ == "__main__":  # python docs/hooks.py: the references of IN_FILE written into their files
    for written in write_pages():
        print(f"wrote {written.relative_to(ROOT)}")
