"""`make test` checks Redis and PostgreSQL on loopback first (scripts/check_services.py) and stops at once, saying
what to start, instead of failing their modules one by one half an hour later."""

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_services.py"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def _module():
    spec = importlib.util.spec_from_file_location("check_services", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_missing_service_is_named_with_its_address():
    mod = _module()
    port = _closed_port()
    assert f"127.0.0.1:{port}" in mod.check_redis(f"redis://127.0.0.1:{port}/15")
    assert "PostgreSQL is not reachable" in mod.check_postgres(f"postgresql://postgres@127.0.0.1:{port}/test")


def test_the_check_fails_fast_without_redis_and_passes_with_the_real_services():
    port = _closed_port()
    env = {"NEWSMON_TEST_REDIS_URL": f"redis://127.0.0.1:{port}/15", "PATH": "/usr/bin:/bin"}
    bad = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert f"Redis is not reachable at redis://127.0.0.1:{port}/15" in bad.stderr
    assert "start Redis and PostgreSQL" in bad.stderr
    good = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    redis = os.environ.get("NEWSMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")  # a lane of make test: its own DB
    assert f"Redis ({redis}) and PostgreSQL (postgresql://postgres@127.0.0.1:5432/test) answer" \
        in good.stdout  # a newcomer sees that the check ran


def test_make_test_runs_the_check_before_the_modules():
    recipe = (ROOT / "Makefile").read_text().split("\ntest: install\n", 1)[1]
    assert recipe.index("scripts/check_services.py") < recipe.index("scripts/run_tests.py")
