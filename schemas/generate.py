"""Write (or check) the JSON Schema files of the event models.

``python -m newsmon.schemas.generate``          writes ``schemas/json/<ModelName>.schema.json`` for every model in
                                        ``EVENT_MODELS`` and removes stale ``*.schema.json`` files there.
``python -m newsmon.schemas.generate --check``  writes nothing; exits 1 listing missing, stale and unexpected files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from newsmon.schemas.events import EVENT_MODELS

SCHEMA_DIR = Path(__file__).resolve().parent / "json"
SUFFIX = ".schema.json"


def render_schemas() -> dict[str, str]:
    """File name -> file text for every event model: pretty JSON, sorted keys, trailing newline."""
    return {
        f"{name}{SUFFIX}": json.dumps(model.model_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, model in sorted(EVENT_MODELS.items())
    }


def check(directory: Path = SCHEMA_DIR) -> list[str]:
    """Problems with the files in ``directory``: one line each (``missing``/``stale``/``unexpected``)."""
    expected = render_schemas()
    problems = []
    for name, text in expected.items():
        path = directory / name
        if not path.exists():
            problems.append(f"missing: {path}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"stale: {path}")
    if directory.is_dir():
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            if path.name not in expected:
                problems.append(f"unexpected: {path}")
    return problems


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    """Write the schema files into ``directory``, remove unexpected ones; return what changed."""
    directory.mkdir(parents=True, exist_ok=True)
    expected = render_schemas()
    changed = []
    for name, text in expected.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8", newline="\n")
            changed.append(f"wrote: {path}")
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        if path.name not in expected:
            path.unlink()
            changed.append(f"removed: {path}")
    return changed


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m newsmon.schemas.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file is out of date")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help=f"schema folder (default {SCHEMA_DIR})")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.dir)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("JSON Schemas out of date; run: python -m newsmon.schemas.generate", file=sys.stderr)
            return 1
        print(f"JSON Schemas up to date ({len(EVENT_MODELS)} files in {args.dir})")
        return 0
    changed = write(args.dir)
    for line in changed:
        print(line)
    if not changed:
        print(f"JSON Schemas already up to date in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
