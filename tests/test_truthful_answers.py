"""Issue 42: every answer tells the truth, against a real ``newsmon serve`` (both workers in it, real Tansu, real
Redis, the embedded memory of 60 real Slovene articles) and a second one without workers, whose label changes are
published and never applied (``--no-workers``, topics of its own).

* Label changes (item 2): two renames of one label at once give one ``200`` and one ``409`` with the reason, never
  two "published" answers of which one is dead-lettered; the console's label routes go through the same check;
  every status ``docs/reference/http-api.md`` lists for a label-changing route (200, 202, 409) is provoked here.
* Malformed JSON (item 3): 100,000-deep or non-UTF-8 JSON is a 422 with the reason and the position on ``/v1`` and
  on the console's JSON routes, never a 400 or a 500.
* The label test (item 5): a text larger than an article may be is refused (413), and it is read cut as an
  article is (``worker.max_text_chars``).
* The console's session (item 7): the cookie is a random session id, never the API token; a logout ends it.

The serve helpers are test_api.py's, the stream helpers test_stream.py's."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from test_api import TOKEN, prepare_home, start_serve, stop_serve
from test_stream import REPO, Collector, corpus, stream_settings  # noqa: F401 (fixtures)

from newsmon.schemas import LabelEvent, parse_event

CONSOLE_HEADERS = {"X-Newsmon-Console": "1"}


@pytest.fixture(scope="module")
def server(tansu, newsmon_home, tmp_path_factory, redis_url, encoder, corpus):
    """``newsmon serve`` with both workers (and the default 10 MB body limit), for the whole module:
    ``(settings, client)``."""
    tmp = tmp_path_factory.mktemp("serve")
    s = stream_settings(tansu, newsmon_home, tmp, redis_url)
    prepare_home(s, newsmon_home, encoder, corpus.split("train")[:60])
    proc, client = start_serve(s, redis_url, tmp / "serve.log", env={"NEWSMON_API__MAX_BODY_BYTES": "10000000"})
    yield s, client
    stop_serve(proc, client)


@pytest.fixture(scope="module")
def unapplied(tansu, newsmon_home, tmp_path_factory, redis_url, encoder):
    """``newsmon serve --no-workers`` on topics no memory updater reads: every change it publishes stays pending
    (``API__APPLY_WAIT_S`` 1 s, then 202)."""
    tmp = tmp_path_factory.mktemp("serve-unapplied")
    s = stream_settings(tansu, newsmon_home, tmp, redis_url)
    prepare_home(s, newsmon_home, encoder, [])
    proc, client = start_serve(s, redis_url, tmp / "serve.log", ("--no-workers",), {"NEWSMON_API__APPLY_WAIT_S": "1"})
    yield s, client
    stop_serve(proc, client)


def console(client: httpx.Client, name: str = "ana") -> httpx.Client:
    """A console client logged in as ``name`` on ``client``'s server (no bearer token: the session cookie)."""
    c = httpx.Client(base_url=str(client.base_url), timeout=60)
    r = c.post("/console/login", data={"name": name, "token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return c


# -- item 2: label changes -------------------------------------------------------------------------------------
def renames_at_once(c: httpx.Client, path: str, news: list[str], headers: dict) -> dict[str, httpx.Response]:
    """POST ``{"new_label": new}`` to ``path`` for each of ``news``, all at the same moment (one thread each)."""
    gate, answers = threading.Barrier(len(news)), {}

    def rename(new: str) -> None:
        gate.wait()
        answers[new] = c.post(path, json={"new_label": new}, headers=headers)

    threads = [threading.Thread(target=rename, args=(n,)) for n in news]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def test_two_renames_at_once_give_one_change_and_one_409_with_the_reason(server):
    s, client = server
    events = Collector(s, s.kafka.topic_label_events)
    try:
        assert client.put("/v1/labels/t42:a", json={"kwes": ["krka"]}).status_code == 200
        old, renamed = "t42:a", []
        for c, prefix, headers in ((client, "/v1/labels", {}), (console(client), "/console/api/labels",
                                                                 CONSOLE_HEADERS)):
            answers = renames_at_once(c, f"{prefix}/{old}/rename", [f"{old}-b", f"{old}-c"], headers)
            codes = sorted(a.status_code for a in answers.values())
            assert codes == [200, 409], {k: (a.status_code, a.text) for k, a in answers.items()}
            refused = next(a for a in answers.values() if a.status_code == 409)
            assert f"{old!r} was renamed to" in refused.json()["detail"], refused.text
            won = next(a for a in answers.values() if a.status_code == 200).json()
            assert won["applied"] is True and won["event"]["label"] == old
            renamed.append(old)
            old = won["event"]["new_label"]
        # on the topic: one rename of each label, none for the memory updater to dead-letter
        events.wait_for(lambda c: len(c.messages) >= 3, 30, "the definition and the two renames")
        time.sleep(1)
        logged = [parse_event(LabelEvent, m.value()) for m in events.messages]
        assert [e.label for e in logged if e.action == "renamed"] == renamed
    finally:
        events.close()


def test_the_console_refuses_what_the_registry_would_refuse(server):
    """The console's rename, retire and define of a name renamed away: 409 with the reason, as ``/v1`` (they
    answered 202 and the event was dead-lettered)."""
    _s, client = server
    con = console(client)
    assert client.put("/v1/labels/t42:old", json={"kwes": ["luka"]}).status_code == 200
    assert client.post("/v1/labels/t42:old/rename", json={"new_label": "t42:new"}).status_code == 200
    for method, path, body in (("POST", "/console/api/labels/t42:old/rename", {"new_label": "t42:other"}),
                               ("DELETE", "/console/api/labels/t42:old", None),
                               ("PUT", "/console/api/labels/t42:old", {"kwes": ["luka"]})):
        r = con.request(method, path, json=body, headers=CONSOLE_HEADERS)
        assert r.status_code == 409 and "'t42:old' was renamed to 't42:new'" in r.json()["detail"], (path, r.text)
    r = con.post("/console/api/labels/t42:nobody-knows/rename", json={"new_label": "t42:x"}, headers=CONSOLE_HEADERS)
    assert r.status_code == 404, r.text


DOC = REPO / "docs" / "reference" / "http-api.md"


def documented_statuses(doc: Path) -> dict[str, set[int]]:
    """The label-changing routes of the reference's table "Label changes: 200, 202, 409" -> the statuses it gives
    each (a non-empty cell)."""
    lines = doc.read_text(encoding="utf-8").split("### Label changes: 200, 202, 409", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = lines[start:next((i for i, line in enumerate(lines) if i > start and not line.startswith("|")),
                             len(lines))]
    rows = [r.strip().strip("|").split("|") for r in table[2:]]
    return {r[0].strip().strip("`"): {code for code, cell in zip((200, 202, 409), r[1:4], strict=True) if cell.strip()}
            for r in rows}


def test_each_label_change_status_the_reference_lists(server, unapplied):
    """Each (route, status) of the reference's table, provoked: 200 applied (or nothing to change), 202 published
    and not applied in time (the server without a memory updater), 409 refused with the reason, by the registry's
    state or by a change published before it and not applied yet."""
    clients = {"applied": (server[1], console(server[1])), "pending": (unapplied[1], console(unapplied[1]))}
    n = iter(range(1000))

    def call(where: str, route: str, label: str, body=None) -> httpx.Response:
        v1, con = clients[where]
        method, path = route.split(" ", 1)
        c, headers = (con, CONSOLE_HEADERS) if path.startswith("/console") else (v1, {})
        return c.request(method, path.replace("{label}", label), json=body, headers=headers)

    def define(where: str, route: str, status: int) -> None:
        label = f"t42:s{next(n)}"
        assert call(where, "PUT /v1/labels/{label}", label, {"kwes": ["krka"]}).status_code in (200, 202)
        if route.startswith("PUT"):
            r = call(where, route, label, {"kwes": ["krka", "krke"]})
        elif route.startswith("DELETE"):
            r = call(where, route, label)
        else:
            r = call(where, route, label, {"new_label": label + "-new"})
        assert r.status_code == status, (route, r.text)
        assert r.json()["applied"] is (status == 200) and r.json()["event"]["actor"] in (None, "ana")
        return label

    def refused(route: str) -> None:
        # pending: a rename published and not applied yet refuses what comes after it on the old name
        label = f"t42:s{next(n)}"
        call("pending", "PUT /v1/labels/{label}", label, {"kwes": ["krka"]})
        assert call("pending", "POST /v1/labels/{label}/rename", label, {"new_label": label + "-x"}).status_code == 202
        body = {"kwes": ["krka"]} if route.startswith("PUT") else None if route.startswith("DELETE") else \
            {"new_label": label + "-y"}
        r = call("pending", route, label, body)
        assert r.status_code == 409 and "not applied yet" in r.json()["detail"], (route, r.text)
        assert f"'{label}' was renamed to '{label}-x'" in r.json()["detail"], r.text

    scenarios = {}
    for route in documented_statuses(DOC):
        scenarios[(route, 200)] = lambda route=route: define("applied", route, 200)
        scenarios[(route, 202)] = lambda route=route: define("pending", route, 202)
        scenarios[(route, 409)] = lambda route=route: refused(route)
    documented = {(route, code) for route, codes in documented_statuses(DOC).items() for code in codes}
    assert len(documented_statuses(DOC)) == 6 and documented == set(scenarios), documented
    for key in sorted(scenarios):
        scenarios[key]()
    # nothing to change: 200 without an event, also when the state that makes it so is still pending
    label = f"t42:s{next(n)}"
    for _ in range(2):
        r = call("pending", "PUT /v1/labels/{label}", label, {"kwes": ["luka"]})
    assert r.status_code == 200 and r.json()["event"] is None and "already" in r.json()["note"], r.text


# -- item 3: malformed JSON ------------------------------------------------------------------------------------
def test_deep_or_broken_json_is_a_422_with_the_reason_and_the_position(server):
    _s, client = server
    con = console(client)
    deep = b"[" * 100_000 + b"]" * 100_000
    json_headers = {"Content-Type": "application/json"}
    for c, method, path, headers in ((client, "POST", "/v1/suggest", {}),
                                     (client, "PUT", "/v1/labels/t42:deep", {}),
                                     (client, "POST", "/v1/labels/t42:deep/rename", {}),
                                     (client, "POST", "/v1/labels/t42:deep/test", {}),
                                     (client, "POST", "/v1/decisions", {}),
                                     (con, "POST", "/console/api/decide", CONSOLE_HEADERS),
                                     (con, "POST", "/console/api/labels/test", CONSOLE_HEADERS),
                                     (con, "PUT", "/console/api/labels/t42:deep", CONSOLE_HEADERS),
                                     (con, "POST", "/console/api/labels/t42:deep/rename", CONSOLE_HEADERS)):
        for body, reason, at in ((deep, "nested deeper than 64", 64),
                                 (b'{"kwes": ' + b"[" * 70 + b"]" * 70 + b"}", "nested deeper than 64", 72),
                                 (b'{"text": "\xff"}', "not UTF-8", 10)):
            r = c.request(method, path, content=body, headers={**headers, **json_headers})
            assert r.status_code == 422, (path, r.status_code, r.text[:300])
            detail = r.json()["detail"]
            assert reason in detail and f"at character {at}" in detail, (path, detail)
    # a nested value just inside the bound still gets the route's own 422 (its echo of the input does not overflow)
    r = client.put("/v1/labels/t42:deep", json={"kwes": json.loads("[" * 60 + "]" * 60)})
    assert r.status_code == 422 and "kwes" in r.json()["detail"], r.text[:300]


# -- item 5: the label test ------------------------------------------------------------------------------------
def test_the_label_test_reads_a_text_bounded_and_cut_as_an_article(server):
    s, client = server
    test = {"definition": {"kwes": ["mercator*"]}}
    t0 = time.monotonic()
    r = client.post("/v1/labels/t42:test/test", json={**test, "text": "<a " * 1_000_000})
    assert r.status_code == 413 and "worker.max_message_bytes" in r.json()["detail"], r.text[:300]
    assert time.monotonic() - t0 < 10
    filler = "beseda " * (s.worker.max_text_chars // 7 + 10)  # beyond worker.max_text_chars (200,000)
    r = client.post("/v1/labels/t42:test/test", json={**test, "text": filler + "Mercator je objavil rezultate."})
    assert r.status_code == 200 and r.json()["matched"] == [], r.text[:300]  # the classifier never reads it
    r = client.post("/v1/labels/t42:test/test", json={**test, "text": "Mercator je objavil rezultate. " + filler})
    assert r.status_code == 200 and r.json()["matched"][0]["rule"]["matched"] == ["Mercator"], r.text[:300]
    r = console(client).post("/console/api/labels/test", headers=CONSOLE_HEADERS,
                             json={"kwes": ["krka"] * 101, "articles": 5})
    assert r.status_code == 422 and "100" in r.json()["detail"], r.text[:300]  # as LabelDefinition: 100 KwEs


# -- item 7: the console's session -----------------------------------------------------------------------------
def test_the_console_cookie_is_a_session_id_never_the_api_token(server):
    _s, client = server
    base = str(client.base_url)
    with httpx.Client(base_url=base, timeout=60) as c:
        r = c.post("/console/login", data={"name": "ana", "token": TOKEN}, follow_redirects=False)
        assert r.status_code == 303
        cookies = r.headers.get_list("set-cookie")
        assert len(cookies) == 1 and TOKEN not in cookies[0], cookies
        assert re.match(r"newsmon_console=[A-Za-z0-9_-]{40,};", cookies[0]), cookies
        assert all(k in cookies[0] for k in ("HttpOnly", "SameSite=strict", "Path=/console", "Max-Age=43200"))
        sid = c.cookies["newsmon_console"]
        assert c.get("/console/api/queue").status_code == 200
        # the API token as the cookie (what the cookie held before), a made-up id: no session
        for value in (TOKEN, "x" * 43):
            with httpx.Client(base_url=base, timeout=60, cookies={"newsmon_console": value}) as other:
                assert other.get("/console/api/queue").status_code == 401, value
        # the session is the server's: after the logout its id opens nothing
        assert c.post("/console/logout", follow_redirects=False).status_code == 303
        with httpx.Client(base_url=base, timeout=60, cookies={"newsmon_console": sid}) as replay:
            assert replay.get("/console/api/queue").status_code == 401


@pytest.mark.parametrize("store", ["process", "redis"])
def test_a_console_session_expires_and_ends_when_the_token_changes(store, redis_url):
    import uuid

    import redis
    from pydantic import SecretStr

    from newsmon.console.session import ConsoleSessions
    from newsmon.shared.config import Settings

    client = redis.Redis.from_url(redis_url) if store == "redis" else None
    made = []
    for token in ("token-1", "token-2"):
        s = Settings()
        # long enough that a loaded machine checks the live session before it expires (1 s expired under CI's load)
        s.api.console_session_s, s.api.token = 4.0, SecretStr(token)
        s.worker.redis_namespace = f"t42-{uuid.uuid4().hex[:8]}" if not made else made[0][0].worker.redis_namespace
        made.append((s, ConsoleSessions(s, client)))
    (_s, sessions), (_s2, after_token_change) = made
    opened = time.monotonic()
    sid = sessions.open("ana")
    assert sessions.name(sid) == "ana" and sessions.name(sid[:-1]) is None and sessions.name("") is None
    if client is not None:  # the store holds a digest of the id, never the id itself
        keys = [k.decode() for k in client.scan_iter(f"{_s.worker.redis_namespace}:console-session:*")]
        assert len(keys) == 1 and sid not in keys[0]
        assert after_token_change.name(sid) is None  # another API token: the session is not valid
    deadline = time.monotonic() + 30.0
    while sessions.name(sid) is not None:  # expires 4 s after the login; fails on time-out
        assert time.monotonic() < deadline, "the session did not expire within 30 s of a 4 s lifetime"
        time.sleep(0.25)
    assert time.monotonic() - opened >= 3.9, "the session ended before its lifetime"
