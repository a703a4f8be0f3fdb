"""`newsmon demo` end to end (README command 1) on a real 100-article slice: broker, workers, memory, metrics;
run in a terminal (a pseudo-terminal), as a new user runs it, with a malformed corpus line."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BAR = "━"


def run_in_terminal(cmd: list[str], env: dict, timeout: float, columns: int = 160) -> tuple[int, str]:
    """Run ``cmd`` with stdin, stdout and stderr on one pseudo-terminal of ``columns`` columns, as in a shell
    window; returns (exit status, everything written to the terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(cmd, cwd=REPO, env={**env, "COLUMNS": str(columns), "TERM": "xterm-256color"},
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"{cmd} ran over {timeout} s:\n" + b"".join(chunks).decode(errors="replace")[-3000:])
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every process holding the terminal has exited
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", errors="replace")


def screen_lines(raw: str) -> list[str]:
    """What stays on the screen, line by line: colours dropped, and after a carriage return only what was
    written last (rich erases the line before it rewrites it, tqdm pads it)."""
    out = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        segments = [s for s in ANSI.sub("", line).split("\r") if s]
        out.append(segments[-1] if segments else "")
    return out


def test_demo_runs_end_to_end(sentinews_slice, newsmon_home, tmp_path):
    lines = sentinews_slice.read_text(encoding="utf-8").splitlines()
    corpus = tmp_path / "articles.jsonl"
    corpus.write_text("\n".join([*lines[:5], "{not json", *lines[5:]]) + "\n", encoding="utf-8")
    env = {**os.environ, "NEWSMON_HOME": str(newsmon_home), "NEWSMON_DATA": str(corpus)}
    code, raw = run_in_terminal([sys.executable, "-m", "newsmon.cli", "demo", "--show", "5"], env, timeout=900)
    screen = screen_lines(raw)
    text = "\n".join(screen)
    assert code == 0, text[-3000:]
    assert "Tansu broker on 127.0.0.1:" in text
    assert "HTTP API on http://127.0.0.1:" in text and "/v1/suggest" in text
    assert "knowledge memory: {'sl': 80} articles" in text
    assert "streamed 10 articles" in text and "10 moderator decisions applied" in text
    assert "micro-F1" in text and "subset accuracy" in text
    assert "macro-F1 averages the F1 of each label" in text  # the summary says what macro-F1 is, in one line
    assert " 0 of 0 " not in text
    assert re.search(r"^(calibrated sl|reused the calibration of sl) ", text, re.M), text[-3000:]
    # the malformed line: reported with its number when the corpus is read, and counted in the summary
    assert "skipped line 6: invalid JSON" in text
    assert "; 1 bad corpus line skipped" in text
    # five proposals in full: per label its mark against the gold labels, score, source and the rule, then the
    # neighbours with similarity, id and title
    headers = [ln for ln in screen if re.match(r"^sl-test-\d+: (\d+ of \d+ proposed labels right|the proposed label "
                                               r"(right|wrong)|no label proposed), gold ", ln)]
    assert len(headers) == 5, text[-4000:]
    # and the decision rule that proposed it (the demo's thresholds are its own calibration's)
    why = r"(its score [\d.]+ is above its threshold [\d.]+|.*label-set vote.*|.*best labels.*|.* or more of .*)"
    assert any(re.match(rf"^  [✓✗] \S.*  [01]\.\d{{3}}  retrieval  {why}", ln) for ln in screen), text[-4000:]
    titled = [ln for ln in screen if re.match(r"^      0\.\d{3}  sl-test-\d+  \S", ln)]
    assert titled, text[-4000:]
    # the progress bars never share a line with a result or a log line
    bars = [ln for ln in screen if BAR in ln]
    assert bars and all(re.fullmatch(r"(memory build|proposals) ━+ \d+/\d+ \d+:\d\d:\d\d remaining [-\d:]+\s*", ln)
                        for ln in bars), bars
    assert not any("proposals" in ln and "[info" in ln for ln in screen)


def test_a_warm_demo_reuses_the_calibration(sentinews_slice, newsmon_home, tmp_path):
    """Issue 28 item 3: the demo rebuilds its memory from the same articles on every run; the second run finds
    the calibration of the same inputs in the home's cache and says so, instead of calibrating again."""
    env = {**os.environ, "NEWSMON_HOME": str(newsmon_home), "NEWSMON_DATA": str(sentinews_slice)}
    for _run in range(2):  # the first run calibrates unless an earlier session's run already did
        code, raw = run_in_terminal([sys.executable, "-m", "newsmon.cli", "demo", "--show", "0", "--limit", "2"],
                                    env, timeout=900)
        text = "\n".join(screen_lines(raw))
        assert code == 0, text[-3000:]
    assert re.search(r"^reused the calibration of sl \(newsmon_sl_\S+@[0-9a-f]{12}; memory, model, validation "
                     r"articles, settings and code unchanged\)", text, re.M), text[-3000:]


def test_the_demo_can_leave_the_console_open_with_proposals_to_decide(sentinews_slice, newsmon_home, tmp_path):
    """Issue 43 item 1: the demo stopped its API when the stream ended, so a user sent to the console by the
    moderators' tutorial found nothing. ``newsmon demo --serve`` leaves the last articles undecided, keeps the API,
    the console and the workers until Ctrl-C, and ``newsmon publish`` (same home) adds articles to its queue."""
    import signal

    import httpx

    home = newsmon_home  # the model, the embeddings and the demo's calibration of the other demo tests
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEWSMON_")}, "NEWSMON_HOME": str(home),
           "NEWSMON_DATA": str(sentinews_slice)}
    proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "demo", "--serve", "--limit", "6", "--undecided",
                             "3", "--show", "0"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 900
        while not any("serving until Ctrl-C" in ln for ln in seen):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(seen)[-3000:]
            seen.append(proc.stdout.readline())
        url = re.search(r"console at (http://127\.0\.0\.1:\d+)/console", seen[-1]).group(1)
        assert "3 proposals left for you to decide" in seen[-1]
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/console/login", data={"name": "ana"}).status_code == 303
            deadline, items = time.monotonic() + 60, []
            while len(items) < 6:  # the console reads the proposals topic back from its first request on
                assert time.monotonic() < deadline, items
                items = client.get("/console/api/queue").json()["items"]
                time.sleep(0.3)
            assert len(items) == 6 and sum(it["decided"] is None for it in items) == 3, items
            more = tmp_path / "more.jsonl"
            rows = [json.loads(ln) for ln in sentinews_slice.read_text(encoding="utf-8").splitlines()]
            more.write_text("".join(json.dumps({**r, "id": f"more-{i}"}, ensure_ascii=False) + "\n"
                                    for i, r in enumerate(rows[:2])), encoding="utf-8")
            pub = subprocess.run([sys.executable, "-m", "newsmon.cli", "publish", str(more)], cwd=REPO, env=env,
                                 capture_output=True, text=True, timeout=120)
            assert pub.returncode == 0 and json.loads(pub.stdout.splitlines()[-1])["published"] == 2, pub.stderr
            deadline = time.monotonic() + 120
            while {"more-0", "more-1"} - {it["article_id"] for it in client.get("/console/api/queue").json()["items"]}:
                assert time.monotonic() < deadline, "the published articles never reached the queue"
                time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "stopped" in rest, rest[-3000:]
        assert not (home / "standalone.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_closing_hint_names_the_newsmon_the_user_can_call(tmp_path, monkeypatch):
    """After `make demo` the venv is not activated: the hint to see the demo's memory says `.venv/bin/newsmon`
    (its path from the current folder), and `newsmon` only where that is the one on PATH."""
    from newsmon.demo import command_name

    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "newsmon"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name(str(script)) == os.path.join(".venv", "bin", "newsmon")
    assert command_name(".venv/bin/newsmon") == ".venv/bin/newsmon"
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    assert command_name(str(script)) == "newsmon"
    assert command_name("/usr/lib/python3/some-runner") == "newsmon"  # not the newsmon script: the plain name
