"""Static checks (issue 30), from the repository root as CI runs them: ``ruff check .`` over the repository and
``mypy -p newsmon`` over the package pass; a new lint or type error fails them; they see the modules
``tests/test_layers.py`` sees; the strict editable install is the one they read; an editor (jedi) resolves a
``newsmon.shared`` import of ``newsmon.workers.pipeline`` to the file of the checkout.

The baselines (the findings present when the checks came in) are in ``pyproject.toml``: ruff's per-file ignores
and mypy's per-module ``disable_error_code``; they only shrink (see docs/contributing/static-checks.md)."""

from __future__ import annotations

import importlib.resources
import json
import re
import subprocess
import sys
import sysconfig
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from test_layers import PACKAGES, module_files

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
#: The baselines' sizes when they came in: (file, rule) entries of ruff's, modules of mypy's. Lower them as
#: entries go; never raise them (a new finding is fixed, not listed).
RUFF_BASELINE_MAX = 146
MYPY_BASELINE_MAX = 50
#: Data packages: folders installed for their files (package-data), without an __init__.py.
DATA_PACKAGES = {"newsmon.schemas.json", "newsmon.console.templates", "newsmon.console.static"}


def run(*args: str, stdin: str | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=REPO, input=stdin, capture_output=True, text=True, timeout=timeout)


def mypy(*args: str) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "mypy", *args)


def ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return run(str(BIN / "ruff"), "check", *args, stdin=stdin, timeout=300)


def real_paths(report: str) -> str:
    """mypy's report with the link tree's paths (``build/__editable__.../newsmon/shared/x.py``) as the files of the
    checkout (``shared/x.py``)."""
    def repl(m: re.Match) -> str:
        path = (REPO / m.group(0)).resolve()
        return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else m.group(0)
    return re.sub(r"build/__editable__[^\s:]+\.py", repl, report)


@pytest.fixture(scope="module")
def mypy_package() -> subprocess.CompletedProcess:
    """``mypy -p newsmon`` from the repository root, verbose (its sources are listed on stderr)."""
    return mypy("-p", "newsmon", "-v")


def mypy_sources(stderr: str) -> dict[str, Path]:
    """module -> file of mypy's ``Found source`` log lines."""
    found = re.findall(r"Found source:\s+BuildSource\(path='([^']*)', module='([^']*)'", stderr)
    return {module: Path(path) for path, module in found}


def test_mypy_passes_on_the_package(mypy_package):
    assert mypy_package.returncode == 0, real_paths(mypy_package.stdout)[-6000:] + mypy_package.stderr[-2000:]
    assert "Success: no issues found" in mypy_package.stdout


def test_ruff_passes_on_the_repository():
    res = ruff(".", "--output-format", "concise")
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


BAD_LINT = "import os\nimport json\n\n\ndef f(items=[]):\n    return undefined_name + len(items)\n"


@pytest.mark.parametrize("filename", ["shared/zz_new_module.py", "workers/pipeline.py", "tests/test_zz_new.py"])
def test_a_new_lint_error_fails_ruff(filename):
    """The snippet linted as a new file, and as a file with a baseline entry: the baseline hides only its rules."""
    res = ruff("--stdin-filename", filename, "--output-format", "json", "-", stdin=BAD_LINT)
    assert res.returncode == 1, res.stdout + res.stderr
    codes = {f["code"] for f in json.loads(res.stdout)}
    assert {"F821", "B006"} <= codes, codes
    if filename != "workers/pipeline.py":  # pipeline.py's baseline lists I001
        assert {"I001", "F401"} <= codes, codes


BAD_TYPES = '''from newsmon.schemas.base import check_language_code
from newsmon.workers.kafka_io import dead_letter_topic


def language_length() -> int:
    return check_language_code("sl")


def topic() -> str:
    return dead_letter_topic(None)
'''


def test_a_new_type_error_fails_mypy(mypy_package, tmp_path):
    """A module using the package with a wrong return type and a wrong argument (``arg-type``, a code the
    baseline disables in ``newsmon.workers.kafka_io`` only) fails mypy (run after the package: warm cache)."""
    bad = tmp_path / "zz_bad_types.py"
    bad.write_text(BAD_TYPES, encoding="utf-8")
    res = mypy(str(bad))
    assert res.returncode == 1, res.stdout + res.stderr
    assert re.search(r"zz_bad_types\.py:6: error: .*\[return-value\]", res.stdout), res.stdout
    assert re.search(r"zz_bad_types\.py:10: error: .*\[arg-type\]", res.stdout), res.stdout


def test_mypy_checks_the_modules_test_layers_sees(mypy_package):
    """Same modules, same files: a module of tests/test_layers.py that mypy does not see is a file added after
    the install (re-install: ``make install``)."""
    layers = dict(module_files())
    sources = mypy_sources(mypy_package.stderr)
    missing = sorted(set(layers) - set(sources))
    assert not missing, f"not in the installed link tree (run `make install`): {missing}"
    assert set(sources) - set(layers) == DATA_PACKAGES
    moved = {m: str(p) for m, p in sources.items() if m in layers and p.resolve() != layers[m].resolve()}
    assert not moved, moved


def test_every_file_of_the_package_is_in_the_link_tree():
    """The strict editable install links each file; one added after it is missing until ``make install``."""
    tree = link_tree()
    missing = [str(path.relative_to(REPO)) for module, path in module_files()
               if not (tree / link_name(module, path)).exists()]
    assert not missing, f"files added after the install (run `make install`): {missing}"


def link_tree() -> Path:
    """The folder the installed ``__editable__.newsmon-*.pth`` puts on sys.path: mypy's ``mypy_path``."""
    pths = sorted(Path(sysconfig.get_paths()["purelib"]).glob("__editable__.newsmon-*.pth"))
    assert len(pths) == 1, f"install with `make install` (strict editable mode): {pths}"
    return Path(pths[0].read_text(encoding="utf-8").strip())


def link_name(module: str, path: Path) -> Path:
    parts = module.split(".")
    return Path(*parts, "__init__.py") if path.name == "__init__.py" else Path(*parts[:-1], path.name)


def test_mypy_reads_the_installed_link_tree():
    configured = CONFIG["tool"]["mypy"]["mypy_path"].replace("$MYPY_CONFIG_FILE_DIR", str(REPO))
    assert Path(configured).resolve() == link_tree().resolve(), \
        "pyproject [tool.mypy] mypy_path must name the link tree of `make install` (the version is in its name)"


def test_package_data_is_installed():
    root = importlib.resources.files("newsmon")
    assert root.joinpath("py.typed").is_file()
    schemas = {p.name for p in importlib.resources.files("newsmon.schemas.json").iterdir()
               if p.name.endswith(".schema.json")}
    assert schemas == {p.name for p in (REPO / "schemas" / "json").glob("*.schema.json")} and schemas


def test_ruff_and_mypy_cover_the_folders_of_test_layers():
    """ruff lints every module file; its first-party package is the one root; mypy's override modules and
    ruff's per-file entries name modules and files that exist."""
    shown = {Path(p).resolve() for p in ruff(".", "--show-files").stdout.split()}
    assert {path.resolve() for _, path in module_files()} <= shown
    assert set(CONFIG["tool"]["ruff"]["lint"]["isort"]["known-first-party"]) == {"newsmon"} == \
        {package.split(".")[0] for package in PACKAGES.values()}
    modules = {m for m, _ in module_files()}
    listed = [m for o in CONFIG["tool"]["mypy"]["overrides"] for m in o["module"] if m.startswith("newsmon")]
    assert not [m for m in listed if m not in modules]
    files = [f for f in CONFIG["tool"]["ruff"]["lint"]["per-file-ignores"] if "*" not in f]
    assert not [f for f in files if not (REPO / f).is_file()]


def test_the_makefile_watches_the_folders_of_test_layers():
    """``make install`` re-installs when a file is added to one of these folders (the link tree is per file)."""
    folders = re.search(r"^PACKAGE_FOLDERS := (.*)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
    assert folders and set(folders.group(1).split()) == set(PACKAGES)


def test_the_baselines_only_shrink():
    """At most the entries they came in with, and each ruff entry still has a finding (else remove it)."""
    per_file = {f: codes for f, codes in CONFIG["tool"]["ruff"]["lint"]["per-file-ignores"].items() if "*" not in f}
    assert sum(len(codes) for codes in per_file.values()) <= RUFF_BASELINE_MAX
    baseline_modules = [m for o in CONFIG["tool"]["mypy"]["overrides"] if "disable_error_code" in o
                        for m in o["module"]]
    assert len(baseline_modules) == len(set(baseline_modules)) <= MYPY_BASELINE_MAX
    res = ruff(".", "--config", "lint.per-file-ignores = {}", "--output-format", "json")
    found = Counter((str(Path(f["filename"]).resolve().relative_to(REPO)), f["code"]) for f in json.loads(res.stdout))
    stale = [f"{f}: {code}" for f, codes in per_file.items() for code in codes if not found[(f, code)]]
    assert not stale, "fixed: remove from pyproject [tool.ruff.lint.per-file-ignores]:\n" + "\n".join(stale)


def test_jedi_goes_from_the_pipeline_to_the_shared_module():
    """"Go to definition" as an editor asks it (jedi with the venv, the repository as its project): a name and a
    module imported from ``newsmon.shared`` in ``workers/pipeline.py`` resolve to the files in ``shared/``."""
    import jedi

    source = REPO / "workers" / "pipeline.py"
    lines = source.read_text(encoding="utf-8").splitlines()
    line_no, line = next((i + 1, ln) for i, ln in enumerate(lines) if ln.startswith("from newsmon.shared.classifier "))
    script = jedi.Script(path=str(source), project=jedi.Project(REPO, environment_path=sys.prefix))
    for column in (line.index("classifier"), line.index("Classifier")):
        found = script.goto(line_no, column, follow_imports=True)
        assert [Path(d.module_path).resolve() for d in found] == [REPO / "shared" / "classifier.py"], found
    (cls,) = script.goto(line_no, line.index("Classifier"), follow_imports=True)
    definition = (REPO / "shared" / "classifier.py").read_text(encoding="utf-8").splitlines()[cls.line - 1]
    assert cls.type == "class" and definition.startswith("class Classifier"), definition
