"""The code map (docs/contributing/code-map.md) checked against the package tree: every module or folder it names
exists, and every package folder of the distribution is named in it, so the map a newcomer opens first cannot point
at a module that is gone or leave a package out (it once sent readers to the eval baseline for serving and named
modules that were not there)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE_MAP = REPO / "docs" / "contributing" / "code-map.md"
#: The folders at the repository top a path on the page may start with.
TOP = ("schemas", "shared", "workers", "training_jobs", "newsmon", "tests", "benchmarks", "scripts", "docs", "helm")


def code_spans(text: str) -> set[str]:
    """The page's code spans without white space in them (names, paths, settings)."""
    return set(re.findall(r"`([^`\s]+)`", text))


def named_paths(text: str) -> set[str]:
    """The code spans that are paths from the repository root: a top folder, then a file or a folder (``/``)."""
    return {s for s in code_spans(text) if "/" in s and s.split("/")[0] in TOP}


def package_folders() -> set[str]:
    """Every package of the distribution (pyproject's ``packages``, data packages included) as its folder with a
    trailing ``/``, through ``package-dir``."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    dirs: dict[str, str] = config["package-dir"]
    out = set()
    for package in config["packages"]:
        root = max((p for p in dirs if package == p or package.startswith(p + ".")), key=len)
        out.add("/".join([dirs[root], *package[len(root):].split(".")[1:]]) + "/")
    return out


def test_every_path_on_the_map_exists():
    text = CODE_MAP.read_text(encoding="utf-8")
    missing = sorted(p for p in named_paths(text)
                     if not (REPO / p).exists() or p.endswith("/") and not (REPO / p).is_dir())
    assert not missing, f"the code map names what is not there: {missing}"
    files = {p.name for top in TOP for p in (REPO / top).rglob("*.py")}
    bare = sorted(s for s in code_spans(text) if s.endswith(".py") and "/" not in s and s not in files)
    assert not bare, f"the code map names modules that are nowhere in the tree: {bare}"


def test_every_package_folder_is_on_the_map():
    named = named_paths(CODE_MAP.read_text(encoding="utf-8"))
    absent = sorted(package_folders() - named)
    assert not absent, f"package folders the code map does not name (as `folder/`): {absent}"


def test_the_checks_catch_a_stale_map():
    spans = "`shared/adapter.py` and `scoring/` and `newsmon.shared` and `/console`"
    assert named_paths(spans) == {"shared/adapter.py"}
    assert not (REPO / "shared" / "adapter.py").exists()
    assert {"shared/", "shared/scoring/rules/", "schemas/json/", "newsmon/"} <= package_folders()


def module_path(module: str) -> str:
    """The repository path of a ``newsmon`` module (``newsmon.shared.scoring.rae_xmc`` ->
    ``shared/scoring/rae_xmc.py``)."""
    parts = module.split(".")
    return "/".join(parts[1:] if parts[1] in ("schemas", "shared", "workers", "training_jobs") else parts) + ".py"


def test_the_serving_path_row_names_the_code_that_serves():
    """The row a newcomer opens to change how an article is scored names the module of the scorer's base score (the
    one the live scorer calls), not only the eval baseline that wraps it."""
    from newsmon.shared.scoring import decision

    lines = CODE_MAP.read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("| retrieve and score"))
    served = module_path(decision.rae_xmc_scores.__module__)
    assert (REPO / served).exists() and f"`{served}`" in row, (served, row)
