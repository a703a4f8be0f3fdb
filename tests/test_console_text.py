"""Issue 42 item 1, as a property: any text (markup, ``</script>``, quotes, character references, line and paragraph
separators, control and format characters, any Unicode) as an article's title, body and outlet, as labels, as a
label's reason (issue 43), as a neighbour's title and as the moderator's name, is shown as that same text by the
console's article page and never runs script.

Many examples are rendered by the console's own code in-process (``article_context`` and the ``article.html``
template, exactly as the route renders them) and read back with html5lib, a parser that follows the WHATWG HTML
standard as browsers do; a handful are loaded in headless Chromium (test_console.py's) from a real HTTP server that
sends the console's headers (its Content-Security-Policy) and script, and read back from the browser's DOM."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import UTC, datetime

import html5lib
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from test_console import start_browser

from newsmon.console.feed import Item
from newsmon.console.routes import article_context, evidence_refs, json_script, templates
from newsmon.schemas import LabelProposal, ModeratorDecision
from newsmon.schemas.base import check_label
from newsmon.schemas.examples import PROPOSAL_EXAMPLES

FRAGMENTS = ["</script>", "</SCRIPT >", "<script>window.__ran=1</script>", "<svg onload=window.__ran=1>",
             "<img src=x onerror=window.__ran=1>", "<!--", "-->", "<![CDATA[", "]]>", "<style>", '"', "'", "`", "&",
             "&amp;", "&lt;", "&#60;", "<", ">", "\\", "\\u003c", "\u2028", "\u2029", "\u200b", "\u202e", "\ufeff",
             "\x0b", "\x0c", "\x1b[31m", "\x7f", "\x85", "{{ 7*7 }}", "${7*7}", " ", "\n", "\t", "č", "Ш", "😀"]
piece = st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(exclude_categories=("Cs",)), max_size=6))
text = st.lists(piece, min_size=1, max_size=8).map("".join).filter(bool)


def html_text(s: str) -> str:
    """What HTML makes of ``s`` as text (the standard's input stream: CR and CR LF are LF; a NUL in text is
    dropped)."""
    return s.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def _label_or_none(value: str) -> str | None:
    try:
        return check_label(value)
    except ValueError:
        return None


#: A drawn text the label policy accepts, in its canonical form (a filter, not an assume() of the whole page: the
#: draw is retried, so a page is rarely thrown away for one refused label).
label = text.map(_label_or_none).filter(lambda x: x is not None)


@st.composite
def pages(draw) -> dict:
    """An article page's inputs: an example proposal with drawn labels, rule words, neighbour title, title, body,
    outlet and moderator (each drawn value one the wire accepts)."""
    labels = [draw(label) for _ in range(3)]
    assume(len(set(labels)) == 3)
    title, body, outlet, name, nb_title, reason = (draw(text) for _ in range(6))
    raw = json.loads(json.dumps(PROPOSAL_EXAMPLES[1]))
    raw["labels"][0] |= {"label": labels[0], "rule": {"kwe": draw(text), "matched": [draw(text).strip() or "x"]}}
    raw["labels"][1] |= {"label": labels[1], "reason": reason}  # issue 43: each label's reason, shown as text
    raw["schema_version"] = 7
    raw["labels"][1]["neighbours"][0]["title"] = nb_title
    raw["candidates"][0] |= {"label": labels[2]}
    try:
        proposal = LabelProposal.model_validate(raw)
        decision = ModeratorDecision(article_id=proposal.article_id, moderator=name, decided_at=datetime.now(UTC),
                                     decisions=[{"label": labels[0], "action": "confirmed"}])
    except ValidationError:
        assume(False)
    return {"proposal": proposal, "decision": decision, "title": title, "body": body, "outlet": outlet,
            "name": name.strip()}


def render(page: dict) -> tuple[str, dict]:
    """The article page of ``page`` as the console renders it, and its embedded state."""
    item = Item(proposal=page["proposal"], title=page["title"], outlet=page["outlet"], lang="sl",
                decision=page["decision"], applied=True)
    refs = evidence_refs(item)
    found = {item.proposal.article_id: {"title": page["title"], "text": page["body"], "outlet": page["outlet"],
                                        "lang": "sl", "labels": []}}
    decided = {"moderator": page["decision"].moderator, "decided_at": page["decision"].decided_at.isoformat()}
    context = article_context(item, refs, found, "next-id", decided)
    return templates.get_template("article.html").render(user=page["name"], after=0, **context), context["state"]


def text_of(el) -> str:
    return "".join(el.itertext())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pages())
def test_any_text_is_shown_as_itself_and_adds_no_markup(page):
    html, state = render(page)
    doc = html5lib.parse(html, namespaceHTMLElements=False)
    by_id = {el.get("id"): el for el in doc.iter() if el.get("id")}
    assert json.loads(text_of(by_id["state"])) == state  # the page's script reads exactly its state
    assert state["decided"]["moderator"] == page["decision"].moderator
    assert text_of(by_id["a-title"]) == html_text(page["title"])
    paragraphs = [text_of(p) for p in next(d for d in doc.iter("div") if d.get("class") == "text").iter("p")]
    body = page["body"]
    body = body[len(page["title"]):].lstrip("\n") if body.startswith(page["title"]) else body  # not twice
    want = [line for line in body.split("\n") if line.strip()]
    assert "\n".join(paragraphs) == html_text("\n".join(want))
    meta = next(p for p in doc.iter("p") if p.get("class") == "meta")
    assert text_of(meta).startswith(html_text(page["outlet"]) + " · sl")
    boxes = [el for el in doc.iter("input") if el.get("type") == "checkbox"]
    assert [b.get("data-label") for b in boxes] == state["labels"]
    reasons = [text_of(el) for el in doc.iter("span") if el.get("class") == "reason"]
    assert reasons[1] == html_text(page["proposal"].labels[1].reason or "")  # a label's reason (issue 43)
    assert text_of(by_id["will"]) == f"{len(state['labels'])} labels will be confirmed"  # what c will do
    who = next(el for el in doc.iter("form") if el.get("class") == "who")
    assert text_of(next(who.iter("strong"))) == html_text(page["name"])
    assert text_of(by_id["decided"]).startswith("Decided by " + html_text(page["decision"].moderator) + " at ")
    # no markup of the data's own: the template's elements only, two scripts (the state, console.js), no handler
    tags = {el.tag for el in doc.iter() if isinstance(el.tag, str)}
    assert tags <= TEMPLATE_TAGS, tags - TEMPLATE_TAGS
    assert len(list(doc.iter("script"))) == 2
    assert not [a for el in doc.iter() for a in el.attrib if a.lower().startswith("on")]


TEMPLATE_TAGS = {"html", "head", "body", "meta", "title", "link", "script", "a", "header", "nav", "form", "span",
                 "strong", "button", "main", "div", "p", "article", "h1", "h2", "h3", "code", "section", "ol", "li",
                 "label", "input", "kbd", "em", "mark", "ul", "table", "caption", "thead", "tbody", "tr", "th", "td",
                 "small", "details", "summary", "time"}


def test_json_script_is_inert_in_html_and_reads_back():
    value = {"a": "</script><svg onload=alert(7)>", "b": "'&<>\u2028\u2029\ud800č"}
    embedded = str(json_script(value))
    assert embedded.isascii() and not set("<>&'") & set(embedded)
    assert json.loads(embedded) == value


# -- in a real browser -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def console_pages():
    """A real HTTP server (uvicorn, in a thread) serving pages rendered by :func:`render` under ``/console``, with
    the console's headers and static files; and headless Chromium: ``(base URL, pages dict, driver)``."""
    import uvicorn
    from fastapi import FastAPI, Response
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    from newsmon.console.routes import HERE
    from newsmon.console.session import ConsoleHeaders

    served: dict[str, str] = {}
    app = FastAPI()
    app.mount("/console/static", StaticFiles(directory=str(HERE / "static")))
    app.get("/console/articles/{n}")(lambda n: HTMLResponse(served[n]))
    app.get("/console/events")(lambda: Response(status_code=204))  # no live events: the browser stops asking
    app.add_middleware(ConsoleHeaders)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the page server did not start"
        time.sleep(0.05)
    driver = start_browser()
    try:
        yield f"http://127.0.0.1:{port}", served, driver
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(10)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(page=pages())
def test_in_a_browser_any_text_is_itself_and_the_page_script_runs(console_pages, page):
    base, served, driver = console_pages
    html, state = render(page)
    n = str(len(served))
    served[n] = html
    driver.get(f"{base}/console/articles/{n}")
    got = driver.execute_script(
        "return {state: JSON.parse(document.getElementById('state').textContent), ran: window.__ran || null,"
        " title: document.getElementById('a-title').textContent, tags: [...new Set([...document.querySelectorAll"
        "('*')].map(e => e.localName))], who: document.querySelector('.who strong').textContent,"
        " labels: [...document.querySelectorAll('#proposed input')].map(e => e.dataset.label)}")
    assert got["state"] == state and got["ran"] is None
    assert got["title"] == html_text(page["title"]) and got["who"] == html_text(page["name"])
    assert got["labels"] == state["labels"]
    assert set(got["tags"]) <= TEMPLATE_TAGS, set(got["tags"]) - TEMPLATE_TAGS
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe
    # the page's own script ran: its key handler puts the focus in the label search on "a"
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys("a").perform()
    assert driver.execute_script("return document.activeElement.id") == "search"
