"""`newsmon demo` end to end (README command 1) on a real 100-article slice: broker, workers, memory, metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_demo_runs_end_to_end(sentinews_slice, newsmon_home):
    env = {**os.environ, "NEWSMON_HOME": str(newsmon_home), "NEWSMON_DATA": str(sentinews_slice)}
    res = subprocess.run([sys.executable, "-m", "newsmon.cli", "demo", "--show", "5"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    assert "Tansu broker on 127.0.0.1:" in out
    assert "HTTP API on http://127.0.0.1:" in out and "/v1/suggest" in out
    assert "knowledge memory: {'sl': 80} articles" in out
    assert "streamed 10 articles" in out and "10 moderator decisions applied" in out
    assert "micro-F1" in out and "subset accuracy" in out
    assert out.count("| gold [") == 5  # five proposals printed in full
