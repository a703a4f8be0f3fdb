"""The ``newsmon`` command line (typer): one module per command group, wired together here.

``newsmon eval``, ``tune``, ``memory build|import|stats``, ``suggest``, ``publish``,
``train nightly|mine|finetune|tune|rollout``,
``model import-e5-small|build-onnx``, ``settings``, ``worker``, ``serve``, ``topics create|check``, ``demo``.
Settings come from ``NEWSMON_*`` environment variables (see ``newsmon settings``); options given here override
them.
"""

from __future__ import annotations

import inspect
import os
import re

# before any module below imports huggingface_hub / tokenizers, which read these at import time
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the hub is unreachable from our machines; never wait on it
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402

from newsmon.cli import calibrate, classify, evaluate, memory_import, publish, run, setup, topics, train  # noqa: E402


def _flags_without_placeholder() -> None:
    """Help screens show flags (``--json``, ``--help``, ``--overwrite/--no-overwrite``) without a value
    placeholder: typer's rich help (0.2x) prints ``<bool>`` beside them as if they took a value, while its plain
    help leaves flags bare. Patched once on typer's option class; a typer without the method is left alone."""
    from typer.core import TyperOption

    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "newsmon_flags_bare", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else original(self, ctx)

    display_type_rich.newsmon_flags_bare = True
    TyperOption.display_type_rich = display_type_rich


_flags_without_placeholder()

app = typer.Typer(help="newsmon: label proposals for news articles (RAE-XMC over a Qdrant knowledge memory).",
                  no_args_is_help=True, pretty_exceptions_enable=False)
memory_app = typer.Typer(help="Knowledge memory: build, import and inspect.", no_args_is_help=True)
model_app = typer.Typer(help="Encoder checkpoints.", no_args_is_help=True)
train_app = typer.Typer(help="The nightly training job and its stages.", no_args_is_help=True)
topics_app = typer.Typer(help="Kafka topics: create them (admin) or check them as the workers do.",
                         no_args_is_help=True)
app.add_typer(memory_app, name="memory")
app.add_typer(model_app, name="model")
app.add_typer(train_app, name="train")
app.add_typer(topics_app, name="topics")

app.command("settings")(setup.show_settings)
model_app.command("import-e5-small")(setup.import_e5_small_cmd)
model_app.command("build-onnx")(setup.build_onnx_cmd)
memory_app.command("build")(classify.memory_build)
memory_app.command("import")(memory_import.memory_import)
memory_app.command("stats")(classify.memory_stats)
memory_app.command("index")(classify.memory_index)
app.command("suggest")(classify.suggest)
app.command("publish")(publish.publish_cmd)
app.command("eval")(evaluate.eval_cmd)
app.command("tune")(calibrate.tune_cmd)
app.command("worker")(run.worker_cmd)
app.command("serve")(run.serve_cmd)
app.command("demo")(run.demo_cmd)
topics_app.command("create")(topics.topics_create)
topics_app.command("check")(topics.topics_check)
train_app.command("mine")(train.train_mine)
train_app.command("finetune")(train.train_finetune)
train_app.command("tune")(train.train_tune)
train_app.command("rollout")(train.train_rollout)
train_app.command("nightly")(train.train_nightly)


def reflow(doc: str) -> str:
    """A docstring as help text that wraps at words: each paragraph (blank-line separated) joined into one line,
    which the terminal's help screen then wraps at its width; a paragraph of list items (lines starting with
    ``-``, ``*`` or a number) keeps one line per item. Typer keeps a docstring's line breaks after its first
    paragraph, so a source line break would end a screen line mid-sentence."""
    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
        items: list[str] = []
        for ln in lines:
            if items and not re.match(r"^([-*]|\d+[.)])\s", ln):
                items[-1] += " " + ln
            else:
                items.append(ln)
        out.append("\n".join(items) if len(items) > 1 and all(re.match(r"^([-*]|\d+[.)])\s", i) for i in items)
                   else " ".join(items))
    return "\n\n".join(out)


def _reflow_help(group: typer.Typer) -> None:
    """Set every command's help (of ``group`` and its sub-groups) to its docstring :func:`reflow`-ed."""
    for info in group.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = reflow(info.callback.__doc__)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _reflow_help(sub.typer_instance)


_reflow_help(app)


def main() -> None:  # pragma: no cover
    """Run the command line."""
    app()
