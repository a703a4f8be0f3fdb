"""The moderators' tutorial (docs/tutorials/moderators.md) followed as a new user would (issue 43, acceptance): its
``bash`` blocks run as written, in one bash process, in a fresh home with no Kafka configured (``newsmon memory
build --calibrate``, ``newsmon serve`` with its embedded broker, ``newsmon publish``), on a real slice of
sentinews_sl whose articles have no headline; then a real headless Chromium fills nothing by hand: the queue holds
what ``newsmon publish`` sent, one article is opened with ``n``, its labels each say why and its neighbours show the
start of their text, ``1`` changes the count of what ``c`` will do, ``c`` decides (the memory holds the labels),
``u`` undoes (the memory holds the article undecided again), and ``c`` decides anew.

Only what must differ on a test machine is replaced: the home and corpus of the ``export`` lines, and the API port
(``localhost:8080`` -> a free port). The browser helpers are test_console.py's; the block runner test_tutorial.py's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_console import browser, css, keys, until  # noqa: F401 (fixtures)
from test_tutorial import bash_blocks, json_values, outputs, script

from newsmon.broker import free_port

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "tutorials" / "moderators.md"


def test_the_page_tells_a_new_user_how_to_fill_the_queue():
    blocks = bash_blocks(PAGE.read_text(encoding="utf-8"))
    text = "\n".join(blocks)
    for step in ("memory build --calibrate", "newsmon serve", "readyz", "newsmon publish"):
        assert step in text, step
    assert "BOOTSTRAP_SERVERS" not in text  # nothing to start or configure but newsmon


@pytest.fixture
def title_less_corpus(shared_data, tmp_path) -> Path:
    """40 train, 5 validation and 12 test articles of sentinews_sl, their headlines dropped (the text keeps every
    word): a title-less corpus, small enough to embed and calibrate in well under a minute on 2 cores."""
    rows = [json.loads(x) for x in (shared_data / "sentinews_sl" / "articles.jsonl").read_text(
        encoding="utf-8").splitlines()]
    picked = ([r for r in rows if r["split"] == "train"][:40] + [r for r in rows if r["split"] == "validation"][:5]
              + [r for r in rows if r["split"] == "test"][:12])
    out = tmp_path / "corpus.jsonl"
    out.write_text("".join(json.dumps({**r, "title": None}, ensure_ascii=False) + "\n" for r in picked),
                   encoding="utf-8")
    return out


def examples(base: str, label: str) -> int:
    """The confirmed examples of ``label`` in the knowledge memory (``GET /v1/labels/{label}``; 0 when unknown)."""
    r = httpx.get(f"{base}/v1/labels/{label}", timeout=30)
    return r.json()["examples"] if r.status_code == 200 else 0


def test_follow_the_tutorial_fill_the_queue_decide_and_undo(title_less_corpus, newsmon_home, tmp_path, browser):
    from selenium.webdriver.common.by import By

    from newsmon.shared.config import Settings
    from newsmon.shared.encoder import resolve_model

    resolve_model(Settings().encoder.model, newsmon_home)  # the checkpoint, imported once per session home
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "models").symlink_to(newsmon_home / "models", target_is_directory=True)
    blocks = bash_blocks(PAGE.read_text(encoding="utf-8"))
    start, stop = blocks[:-1], blocks[-1]
    assert "kill" in stop
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEWSMON_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(COLUMNS="200", NEWSMON_API__PORT=str(port))
    proc = subprocess.Popen(["bash", "-c", script(start, home, title_less_corpus, port)], cwd=work, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=900)
        log = (work / "serve.log").read_text() if (work / "serve.log").exists() else ""
        assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:] + log[-3000:]
        published = json_values(outputs(stdout, len(start))[-1])[-1]
        assert published["published"] == 12 and published["bad_lines"] == 0, published
        assert "embedded broker" in published["broker"], published

        # log in (no token: the tutorial sets none) and find the published articles in the queue
        browser.get(base + "/console")
        until(browser, lambda d: "/console/login" in d.current_url, 30, "the login form")
        css(browser, "#name").send_keys("ana")
        css(browser, "#login").click()
        until(browser, lambda d: d.find_elements(By.ID, "queue"), 30, "the queue")
        items = until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#queue li.item")) == 12 and
                      d.find_elements(By.CSS_SELECTOR, "#queue li.item"), 180,
                      "the twelve published articles in the queue (live, as the classifier proposes them)")
        titles = [x.find_element(By.CSS_SELECTOR, ".title").text for x in items]
        assert all(t and not re.fullmatch(r"sl-test-\d+", t) for t in titles), titles  # the start of the text

        # n: the newest undecided article; its heading is the start of its text, cut at a word
        keys(browser, "n")
        until(browser, lambda d: "/console/articles/" in d.current_url, 30, "the article")
        article_id = browser.current_url.rsplit("/", 1)[-1]
        heading = css(browser, "#a-title").text
        body = " ".join(css(browser, ".article .text").text.split())
        assert heading.endswith("…") and body.startswith(heading.removesuffix("…")), (heading, body[:200])
        assert not body[len(heading) - 1].isalnum(), (heading, body[:200])  # the heading stops at a word
        # each proposed label says why, in words; the neighbours show the start of their text, not a bare id
        labels = [b.get_attribute("data-label") for b in browser.find_elements(By.CSS_SELECTOR,
                                                                                "#proposed input[type=checkbox]")]
        assert labels, "no label proposed"
        reasons = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#proposed .reason")]
        assert len(reasons) == len(labels) and all(len(r.split()) >= 5 and "by rule" not in r for r in reasons)
        rows = browser.find_elements(By.CSS_SELECTOR, "#neighbour-rows tr")
        assert rows
        for row in rows:
            cell = row.find_elements(By.TAG_NAME, "td")[1].text
            assert cell.replace(row.get_attribute("data-id"), "").strip(), cell

        # the count of what c will do follows the ticks
        will = css(browser, "#will")
        n = len(labels)
        assert will.get_attribute("data-confirmed") == str(n) and "will be confirmed" in will.text, will.text
        keys(browser, "1")
        until(browser, lambda d: css(d, "#will").get_attribute("data-rejected") == "1", 10, "the count after 1")
        assert css(browser, "#will").get_attribute("data-confirmed") == str(n - 1)
        assert "1 rejected" in css(browser, "#will").text
        keys(browser, "1")
        until(browser, lambda d: css(d, "#will").get_attribute("data-rejected") == "0", 10, "the count after 1 again")

        # c decides: the memory holds the labels
        label = labels[0]
        before = examples(base, label)
        until(browser, lambda d: d.execute_script("return document.readyState") == "complete", 10, "the page")
        keys(browser, "c")
        until(browser, lambda d: css(d, "#status").get_attribute("data-state") == "applied", 60, "the decision")
        assert examples(base, label) == before + 1
        assert not css(browser, "#undo").get_attribute("hidden")

        # u undoes: the memory holds the article undecided again, and the queue says so
        keys(browser, "u")
        until(browser, lambda d: css(d, "#status").get_attribute("data-state") == "undone", 60, "the undo")
        assert examples(base, label) == before
        assert css(browser, "#undo").get_attribute("hidden")
        with httpx.Client(base_url=base, timeout=30) as other:
            assert other.post("/console/login", data={"name": "bo"}).status_code == 303
            queued = {x["article_id"]: x for x in other.get("/console/api/queue").json()["items"]}
            assert queued[article_id]["decided"] is None
            # another moderator cannot undo what is not theirs (nor what is undecided)
            r = other.post("/console/api/undo", headers={"X-Newsmon-Console": "1"},
                           json={"article_id": article_id, "decided_at": "2026-01-01T00:00:00+00:00"})
            assert r.status_code == 409, r.text

        # and decided anew
        keys(browser, "c")
        until(browser, lambda d: css(d, "#status").get_attribute("data-state") == "applied", 60, "the new decision")
        assert examples(base, label) == before + 1
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the serve the page started (its last block, `kill %1`, stops it)
        except ProcessLookupError:
            pass
