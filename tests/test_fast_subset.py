"""The fast subset (``make test-fast``: ``pytest -m "not slow"``) stays what docs/contributing/testing.md says: the
modules tests/conftest.py marks slow exist, and the tests on the real weights, a broker or a browser are left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SLOW_FIXTURES, SLOW_MODULES

REPO = Path(__file__).resolve().parents[1]


def fast(*modules: str) -> set[str]:
    """The test ids of ``modules`` that ``-m "not slow"`` keeps."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m",
                          "not slow", *modules], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 5), out.stdout[-3000:] + out.stderr[-3000:]  # 5: every test deselected
    return {line.split("[")[0] for line in out.stdout.splitlines() if "::" in line}


def test_every_module_marked_slow_exists():
    missing = sorted(name for name in SLOW_MODULES if not (REPO / "tests" / name).is_file())
    assert SLOW_MODULES and not missing, missing


@pytest.mark.slow  # pytest's collection as a process
def test_the_fast_subset_leaves_out_the_weights_the_broker_the_browser_and_the_slow_modules():
    assert {"encoder", "tansu", "browser"} <= SLOW_FIXTURES
    kept = fast("tests/test_classifier.py", "tests/test_stream.py", "tests/test_helm.py", "tests/test_console_text.py",
                "tests/test_registry.py")
    assert not {k for k in kept if k.split("::")[0] in ("tests/test_classifier.py", "tests/test_stream.py",
                                                         "tests/test_helm.py")}, kept
    assert "tests/test_registry.py::test_names_in_registration_order_and_an_unknown_name_lists_them" in kept
    # a single test marked @pytest.mark.slow (a fresh process) is left out, its module's others kept
    assert "tests/test_registry.py::test_the_plug_ins_of_the_entry_point_group_are_imported_once" not in kept
    assert "tests/test_console_text.py::test_json_script_is_inert_in_html_and_reads_back" in kept
    assert "tests/test_console_text.py::test_in_a_browser_any_text_is_itself_and_the_page_script_runs" not in kept
