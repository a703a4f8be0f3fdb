"""Issue 42 item 1 in a real browser: a label named ``</script><svg onload=alert(7)>`` and a moderator whose name
holds ``</script>`` and markup, on the console of a real ``newsmon serve`` (test_api.py's, both workers in it) in
headless Chromium. Every page shows them as text (no element of theirs in the page, no script error, no dialog),
the article page's script runs, and ``c`` confirms the article; the decision on the topic carries the name, and
the page rendered after it (the name now in the page's embedded state) still works, and so does issue 43's undo
(``u``) of that moderator's decision on that label.

The browser and the helpers are test_console.py's."""

from __future__ import annotations

from urllib.parse import quote

from test_api import TOKEN, api, wait_for  # noqa: F401 (fixtures)
from test_console import browser, css, keys, served, until  # noqa: F401 (fixtures)
from test_stream import Collector, corpus, publish  # noqa: F401 (fixtures)

from newsmon.demo import article_event
from newsmon.schemas import ModeratorDecision, parse_event

HOSTILE_LABEL = "</script><svg onload=alert(7)>"
HOSTILE_NAME = "ana</script><img src=x onerror=alert(8)>\"'&amp;"


def page_is_clean(driver) -> None:
    """No element the data could have made (the templates make no svg, img or iframe), no script error or CSP
    violation in the page's console, no dialog."""
    from selenium.common.exceptions import NoAlertPresentException

    assert driver.execute_script("return document.querySelectorAll('svg, img, iframe, object').length") == 0
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a dialog opened: {text!r}")


def test_a_hostile_label_and_moderator_stay_text_and_c_confirms(served, browser, corpus):
    from selenium.webdriver.common.by import By

    s, client, _proc = served
    base = str(client.base_url)
    decisions = Collector(s, s.kafka.topic_decisions)
    out = Collector(s, s.kafka.topic_proposals)
    try:
        r = client.put("/v1/labels/" + quote(HOSTILE_LABEL, safe=""), json={"kwes": ["mercator*"]})
        assert r.status_code == 200 and r.json()["event"]["label"] == HOSTILE_LABEL, r.text
        e0 = article_event(next(a for a in corpus.split("test") if "Mercator" in a.text))
        publish(s, s.kafka.topic_articles, [(e0.kafka_key(), e0.to_bytes())])
        out.wait_for(lambda c: e0.article_id in c.proposals(), 180, "the article's proposal")
        assert HOSTILE_LABEL in [x.label for x in out.proposals()[e0.article_id][0].labels]

        browser.get(base + "/console/login")
        css(browser, "#name").send_keys(HOSTILE_NAME)
        css(browser, "#token").send_keys(TOKEN)
        css(browser, "#login").click()
        until(browser, lambda d: d.find_elements(By.ID, "queue"), 30, "the queue after the login")
        row = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"li.item[data-id='{e0.article_id}']"), 60,
                    "the article in the queue")[0]
        assert HOSTILE_LABEL in row.text and css(browser, ".who strong").text == HOSTILE_NAME.strip()
        page_is_clean(browser)

        # the article page: the label is text and data, the page's script runs, c confirms
        browser.get(base + "/console/articles/" + e0.article_id)
        until(browser, lambda d: d.execute_script("return document.readyState") == "complete", 30, "the page")
        boxes = browser.find_elements(By.CSS_SELECTOR, "#proposed input[type=checkbox]")
        assert HOSTILE_LABEL in [b.get_attribute("data-label") for b in boxes]
        assert HOSTILE_LABEL in [x.text for x in browser.find_elements(By.CSS_SELECTOR, "#proposed strong")]
        state = browser.execute_script("return JSON.parse(document.getElementById('state').textContent)")
        assert HOSTILE_LABEL in state["labels"] and state["article_id"] == e0.article_id
        page_is_clean(browser)
        keys(browser, "c")
        until(browser, lambda d: css(d, "#status").get_attribute("data-state") == "applied", 30,
              "the decision applied (the page's script handled c)")
        assert css(browser, "#decided").text.startswith("Decided by " + HOSTILE_NAME.strip())
        decisions.wait_for(lambda c: c.messages, 30, "the ModeratorDecision on the topic")
        dec = parse_event(ModeratorDecision, decisions.messages[-1].value())
        assert dec.moderator == HOSTILE_NAME.strip() and HOSTILE_LABEL in dec.accepted_labels

        # rendered again: the moderator's name is now in the page's embedded state too
        browser.get(base + "/console/articles/" + e0.article_id)
        until(browser, lambda d: d.execute_script("return document.readyState") == "complete", 30, "the page")
        state = browser.execute_script("return JSON.parse(document.getElementById('state').textContent)")
        assert state["decided"]["moderator"] == HOSTILE_NAME.strip()
        assert css(browser, "#decided").text.startswith("Decided by " + HOSTILE_NAME.strip())
        page_is_clean(browser)
        assert css(browser, "#will").text.endswith("will be confirmed")  # the count of what c does (issue 43)
        keys(browser, "c")  # the script still runs: deciding again works
        until(browser, lambda d: css(d, "#status").get_attribute("data-state") == "applied", 60,
              "the second decision applied")
        # issue 43's undo, by the hostile moderator, of a decision naming the hostile label: text all along
        keys(browser, "u")
        until(browser, lambda d: css(d, "#status").get_attribute("data-state") == "undone", 60,
              "the decision undone (the page's script handled u and the undone event)")
        decisions.wait_for(lambda c: parse_event(ModeratorDecision, c.messages[-1].value()).undoes is not None, 30,
                           "the undo on the topic")
        undo = parse_event(ModeratorDecision, decisions.messages[-1].value())
        assert undo.moderator == HOSTILE_NAME.strip() and HOSTILE_LABEL in undo.accepted_labels
        page_is_clean(browser)

        browser.get(base + "/console/labels")
        links = browser.find_elements(By.CSS_SELECTOR, "a.edit")
        assert HOSTILE_LABEL in [a.get_attribute("data-label") for a in links]
        page_is_clean(browser)
    finally:
        decisions.close()
        out.close()
