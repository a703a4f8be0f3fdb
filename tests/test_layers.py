"""The code's shape, checked rather than hoped: one import root (``newsmon.*``), layers that only import
downwards, and small modules and functions."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Repository folder -> the package it is installed as.
PACKAGES = {"schemas": "newsmon.schemas", "shared": "newsmon.shared", "training_jobs": "newsmon.training_jobs",
            "workers": "newsmon.workers", "newsmon": "newsmon"}
#: Layer -> the layers it may import. The wire (schemas) and the method and adapters (shared) at the bottom,
#: offline jobs and stream processes above them (never each other), the CLI and the demo on top.
#: shared may import schemas (both at the bottom, the wire below the method): what an article id, a label or a
#: language code is on the wire is what it is in a corpus, the memory and the CLI, checked by one definition
#: (e.g. ``newsmon.schemas.base.check_language_code``) instead of a copy in shared. schemas never imports shared.
MAY_IMPORT = {
    "newsmon.schemas": {"newsmon.schemas"},
    "newsmon.shared": {"newsmon.shared", "newsmon.schemas"},
    "newsmon.training_jobs": {"newsmon.training_jobs", "newsmon.shared", "newsmon.schemas"},
    "newsmon.workers": {"newsmon.workers", "newsmon.shared", "newsmon.schemas"},
    "newsmon": {"newsmon", "newsmon.workers", "newsmon.training_jobs", "newsmon.shared", "newsmon.schemas"},
}
#: The folder names that must never be imported as top-level packages.
BARE_NAMES = {"schemas", "shared", "training_jobs", "workers"}
#: Size limits of the package's code (lines, docstrings and comments included).
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
#: How a module that is longer than MAX_MODULE_LINES says why, in its docstring (the rule is judged on cohesion:
#: a module may grow past the limit when splitting it would cut one idea in two).
LONG_MODULE_REASON = "Longer than 400 lines:"


def layer_of(module: str) -> str | None:
    """The layer of a ``newsmon`` module name (the longest matching package), or None outside newsmon."""
    if module != "newsmon" and not module.startswith("newsmon."):
        return None
    return max((p for p in MAY_IMPORT if module == p or module.startswith(p + ".")), key=len)


def module_files() -> list[tuple[str, Path]]:
    """``(module name, file)`` of every module of the package."""
    out = []
    for folder, package in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append((".".join([package, *parts]), path))
    return out


def imported_modules(module: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``source``: module level, in functions, in
    ``if TYPE_CHECKING`` blocks; relative imports resolved against ``module``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
    return out


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """Imports in ``source`` (of ``module``) that go up the layers or use a bare folder name."""
    own = layer_of(module)
    bad = []
    for line, target in imported_modules(module, source, is_package):
        if target.split(".")[0] in BARE_NAMES:
            bad.append(f"{module}:{line} imports {target} (use newsmon.{target})")
            continue
        layer = layer_of(target)
        if layer is not None and layer not in MAY_IMPORT[own]:
            bad.append(f"{module}:{line} ({own}) imports {target} ({layer})")
    return bad


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (lines)`` of the functions and methods in ``source`` longer than ``limit`` lines."""
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_every_package_is_found():
    modules = dict(module_files())
    assert {"newsmon.cli", "newsmon.shared.memory.base", "newsmon.workers.pipeline",
            "newsmon.training_jobs.rollout", "newsmon.schemas.events", "newsmon.shared.predictors.base"} <= set(modules)


def test_layers_only_import_downwards():
    bad = []
    for module, path in module_files():
        bad += violations(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("module, source", [
    ("newsmon.shared.memory.router", "from newsmon.training_jobs.rollout import rollout\n"),
    ("newsmon.shared.classifier", "def f():\n    import newsmon.workers.base\n"),
    ("newsmon.workers.classifier_worker", "from newsmon.training_jobs import rollout\n"),
    ("newsmon.training_jobs.nightly", "def f():\n    from newsmon.workers.runtime import build_runtime\n"),
    ("newsmon.schemas.events", "from newsmon.shared.config import Settings\n"),
    ("newsmon.shared.memory.edge", "from ...cli import app\n"),
    ("newsmon.workers.pipeline", "from shared.memory import SearchFilter\n"),
])
def test_the_layer_check_catches_an_upward_import(module, source):
    assert violations(module, source), source


def test_downward_and_relative_imports_pass():
    assert violations("newsmon.cli.train", "from newsmon.training_jobs.nightly import mine\n") == []
    assert violations("newsmon.workers.pipeline", "from ..shared.memory import SearchFilter\n") == []
    assert violations("newsmon.shared.memory", "from .base import point_id\n", is_package=True) == []


def test_modules_and_functions_are_small():
    too_long = []
    for module, path in module_files():
        source = path.read_text(encoding="utf-8")
        n = len(source.splitlines())
        if n > MAX_MODULE_LINES and not says_why_long(source):
            too_long.append(f"{module}: {n} lines > {MAX_MODULE_LINES}, and its docstring does not say why "
                            f"({LONG_MODULE_REASON!r} and the reason)")
        too_long += [f"{module}.{f} > {MAX_FUNCTION_LINES}" for f in long_functions(source)]
    assert not too_long, "\n".join(too_long)


def says_why_long(source: str) -> bool:
    """Whether the module docstring of ``source`` says why the module is past :data:`MAX_MODULE_LINES`: a line
    with :data:`LONG_MODULE_REASON` followed by the reason (one idea that splitting would cut in two)."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return any(line.strip().startswith(LONG_MODULE_REASON) and len(line.strip()) > len(LONG_MODULE_REASON) + 10
               for line in doc.splitlines())


def test_a_long_module_passes_only_when_its_docstring_says_why():
    body = "x = 1\n" * MAX_MODULE_LINES
    assert not says_why_long(f'"""A module."""\n{body}')
    assert not says_why_long(f'"""A module.\n\n{LONG_MODULE_REASON}\n"""\n{body}')  # a reason, not the words
    assert says_why_long(f'"""A module.\n\n{LONG_MODULE_REASON} the loop and its error policy are one state '
                         f'machine.\n"""\n{body}')


def test_the_size_check_catches_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def f():\n{body}") == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions(f"def f():\n{body[: body.rindex('    x')]}") == []


@pytest.mark.parametrize("bare", sorted(BARE_NAMES))
def test_bare_folder_names_are_not_importable_even_from_the_repository_root(bare):
    res = subprocess.run([sys.executable, "-c", f"import {bare}"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0
    assert "ImportError" in res.stderr and f"newsmon.{bare}" in res.stderr, res.stderr[-2000:]
    ok = subprocess.run([sys.executable, "-c", f"import newsmon.{bare}"], cwd=REPO, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_the_distribution_installs_only_newsmon():
    dist = metadata.distribution("newsmon")
    assert (dist.read_text("top_level.txt") or "").split() == ["newsmon"]
    scripts = [e.value for e in dist.entry_points if e.group == "console_scripts" and e.name == "newsmon"]
    assert scripts == ["newsmon.cli:app"]


def test_every_package_folder_is_installed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    packages = {module for module, path in module_files() if path.name == "__init__.py"}
    data = {name for name in config["packages"] if name in config.get("package-data", {}) and name not in packages
            and name.rsplit(".", 1)[0] in packages}  # data packages (the JSON Schemas): folders without code
    assert set(config["packages"]) - data == packages, \
        "list every package folder in pyproject [tool.setuptools] packages"
    assert data == {"newsmon.schemas.json", "newsmon.console.templates", "newsmon.console.static"}
    assert config["package-dir"] == {package: folder for folder, package in PACKAGES.items()}


#: Public top-level names defined in more than one module of the package, each with why (shrink-only): ``main``,
#: the entry point of a runnable module; the others wait for the renames of issue 40's later phases.
REPEATED_NAMES = {
    "main": "the entry point of each runnable module (python -m ...)",
    "out_of_fold": "each component's out-of-fold evidence (head_model, label_tree)",
}


def repeated_names() -> dict[str, list[str]]:
    """Public top-level function and class names defined in more than one module of the lower layers -> the
    modules. The top layer is left out: a CLI command and an HTTP route are named after what the user asks for
    (``suggest``, ``decide``) and call the one implementation below."""
    where: dict[str, list[str]] = {}
    for module, path in module_files():
        if layer_of(module) == "newsmon":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            public = not getattr(node, "name", "_").startswith("_")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and public:
                where.setdefault(node.name, []).append(module)
    return {name: modules for name, modules in where.items() if len(modules) > 1}


def test_one_name_for_one_thing():
    """Two functions of one name in two modules read as one thing to a newcomer (``normalize_text`` and ``words``
    were each defined twice, with different behaviour): a name is defined once, or named for what it does."""
    found = repeated_names()
    assert set(found) <= set(REPEATED_NAMES), {n: m for n, m in found.items() if n not in REPEATED_NAMES}
    gone = set(REPEATED_NAMES) - set(found)
    assert not gone, f"no longer repeated: remove from REPEATED_NAMES: {gone}"
