"""Near-duplicate detection (shared/dedup.py) on real sentinews_sl articles, in memory and in the real Redis.

Redis: NEWSMON_TEST_REDIS_URL (default redis://127.0.0.1:6379/15); every test namespace starts with
``newsmon-test:dedup:`` and only those keys are deleted.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid

import pytest

from newsmon.shared.dedup import (
    DEFAULT_THRESHOLD,
    NearDuplicateIndex,
    lsh_params,
    serbian_latin_to_cyrillic,
    shingle_form,
)

TEST_PREFIX = "newsmon-test:dedup:"
# The one pair of sentinews_sl articles that is the same STA wire story as published by two portals (re-edited
# first half, verbatim second half; 3-shingle Jaccard 0.60): a real near-duplicate, not a false positive.
KNOWN_CORPUS_PAIR = {"sl-test-127", "sl-test-1247"}


# -- fixtures ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def articles(shared_data) -> list[dict]:
    path = shared_data / "sentinews_sl" / "articles.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def long_articles(articles) -> list[dict]:
    """Real articles of >= 100 words (a near-copy of a 30-word brief with a new headline is not a near-copy)."""
    return [a for a in articles if len(a["text"].split()) >= 100 and a["id"] not in KNOWN_CORPUS_PAIR][:120]


@pytest.fixture(scope="module")
def redis_url() -> str:
    import redis

    url = os.environ.get("NEWSMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(f"no Redis at {url} ({exc}); start one or set NEWSMON_TEST_REDIS_URL")
    finally:
        client.close()
    return url


@pytest.fixture
def namespace(redis_url):
    import redis

    ns = f"{TEST_PREFIX}{uuid.uuid4().hex[:10]}"
    yield ns
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=ns + ":*"))
    if keys:
        client.delete(*keys)
    client.close()


def _keys(redis_url: str, ns: str) -> list[bytes]:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return sorted(client.scan_iter(match=ns + ":*"))
    finally:
        client.close()


# -- near-copies of a real article, as aggregators make them -------------------------------------------------------

def _title_body(a: dict) -> tuple[str, str]:
    title = a["title"]
    assert a["text"].startswith(title)
    return title, a["text"][len(title):]


def changed_title(a: dict, other: dict) -> str:
    return "EKSKLUZIVNO: " + other["title"] + _title_body(a)[1]


def dropped_span(a: dict) -> str:
    """The body without a run of sentences from the middle covering about 20% of its words."""
    title, body = _title_body(a)
    sents = [s for s in re.split(r"(?<=[.!?])\s*(?=[A-ZČŠŽ])", body.strip()) if s]
    total = len(body.split())
    start = max(1, len(sents) // 3)
    end, cut = start, 0
    while end < len(sents) - 1 and cut < 0.15 * total:
        cut += len(sents[end].split())
        end += 1
    if not 0.05 * total <= cut <= 0.35 * total:  # few long sentences: cut 20% of the words instead
        words = body.split()
        k = len(words) // 5
        return title + "\n" + " ".join(words[:k] + words[2 * k:])
    return title + "\n" + " ".join(sents[:start] + sents[end:])


def with_boilerplate(a: dict, o1: dict, o2: dict) -> str:
    return ("Deli z prijatelji: Facebook | Twitter | E-pošta\n" + a["text"] + f"\nPreberite tudi: {o1['title']}\n"
            f"Preberite tudi: {o2['title']}\nVir: STA\n© 2013 Novice.si. Vse pravice pridržane.")


# -- normalisation -------------------------------------------------------------------------------------------------

def test_serbian_cyrillic_and_latin_normalise_to_the_same_text():
    cyr = ("Ђорђе и Љиљана су са њиховом ћерком у џепу нашли жуту шољу, а Влада Србије је у четвртак усвојила "
           "нацрт закона о буџету за 2024. годину.")
    lat = ("Đorđe i Ljiljana su sa njihovom ćerkom u džepu našli žutu šolju, a Vlada Srbije je u četvrtak usvojila "
           "nacrt zakona o budžetu za 2024. godinu.")
    assert shingle_form(cyr) == shingle_form(lat)
    assert shingle_form(cyr) == ("đorđe i ljiljana su sa njihovom ćerkom u džepu našli žutu šolju a vlada srbije "
                                   "je u četvrtak usvojila nacrt zakona o budžetu za 2024 godinu")
    assert shingle_form("ЉУБЉАНА, ЊЕГОШ, ЏЕП") == shingle_form("Ljubljana, Njegoš, Džep") == "ljubljana njegoš džep"
    # Macedonian letters
    assert shingle_form("Ѓорѓи, ќе, ѕвезда, Јован") == "gjorgji kje dzvezda jovan"


def test_normalisation_case_nfkc_punctuation_whitespace():
    assert shingle_form("ＦＩＮＡＮＣＥ ﬁnance Finance") == "finance finance finance"  # full-width, ligature
    assert shingle_form("c\u030cas C\u030cAS") == shingle_form("čas ČAS") == "čas čas"  # combining caron
    assert shingle_form("Straße") == shingle_form("STRASSE") == "strasse"
    assert shingle_form("  „Ne,“ je rekel —\tnato:\n\n(odšel)…  ") == "ne je rekel nato odšel"
    assert shingle_form("Smolec.Nama lani 2,34 milijona € +5 %") == "smolec nama lani 2 34 milijona 5"
    assert shingle_form("") == shingle_form(" ...! ") == ""


def test_latin_to_cyrillic_round_trip_on_a_real_article(articles):
    text = articles[5]["text"]
    cyr = serbian_latin_to_cyrillic(text)
    assert sum("а" <= ch <= "я" for ch in cyr) > 0.5 * sum(ch.isalpha() for ch in cyr)
    assert shingle_form(cyr) == shingle_form(text)


def test_lsh_banding_keeps_pairs_at_the_threshold():
    for t in (0.5, 0.6, 0.7, 0.8):
        b, r = lsh_params(t, 128)
        assert b * r <= 128 and b >= 2
        assert 1 - (1 - t ** r) ** b >= 0.999


# -- detection on real articles ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def memory_index(long_articles) -> NearDuplicateIndex:
    index = NearDuplicateIndex()
    for a in long_articles:
        assert index.check_and_add(a["id"], a["text"]) is None
    assert len(index) == len(long_articles)
    return index


@pytest.mark.parametrize("kind", ["title", "drop", "translit", "boiler"])
def test_near_copies_of_real_articles_are_found(memory_index, long_articles, kind):
    n = len(long_articles)
    for i, a in enumerate(long_articles):
        o1, o2 = long_articles[(i + 7) % n], long_articles[(i + 13) % n]
        text = {"title": lambda: changed_title(a, o1), "drop": lambda: dropped_span(a),
                "translit": lambda: serbian_latin_to_cyrillic(a["text"]),
                "boiler": lambda: with_boilerplate(a, o1, o2)}[kind]()
        assert text != a["text"]
        hit = memory_index.find(text)
        assert hit is not None, f"{kind} copy of {a['id']} not found"
        assert hit[0] == a["id"] and DEFAULT_THRESHOLD <= hit[1] <= 1.0, (kind, a["id"], hit)


@pytest.mark.slow  # the whole corpus: 1,450 articles, about a million pairs
def test_distinct_real_articles_are_not_flagged(articles):
    """The whole corpus (1450 articles, ~1M pairs, topic-sharing ones included) through check_and_add: the only
    link is the one real re-edited wire story."""
    index = NearDuplicateIndex()
    hits = {a["id"]: h for a in articles if (h := index.check_and_add(a["id"], a["text"])) is not None}
    assert {k: v[0] for k, v in hits.items()} == {"sl-test-1247": "sl-test-127"}
    assert len(index) == len(articles) - 1


def test_hard_negatives_sharing_labels_stay_far_below_the_threshold(articles):
    index = NearDuplicateIndex()
    sigs = {a["id"]: index.signature(a["text"]) for a in articles[:400]}
    by_id = {a["id"]: a for a in articles[:400]}
    pairs = [(x, y) for i, x in enumerate(by_id) for y in list(by_id)[i + 1:]
             if len(set(by_id[x]["labels"]) & set(by_id[y]["labels"])) >= 2]
    assert len(pairs) >= 50
    worst = max(float((sigs[x] == sigs[y]).mean()) for x, y in pairs if sigs[x] is not None and sigs[y] is not None)
    assert worst < DEFAULT_THRESHOLD - 0.2


def test_short_texts_are_never_duplicates():
    index = NearDuplicateIndex()
    short = "Borza: SBI TOP danes navzdol, Krka gor."  # 7 words
    index.add("s1", short)
    assert len(index) == 0 and "s1" not in index
    assert index.check_and_add("s2", short) is None and index.find(short) is None
    assert index.find("") is None


# -- API semantics -------------------------------------------------------------------------------------------------

def test_check_and_add_keeps_the_first_copy_as_original(long_articles):
    a, other = long_articles[0], long_articles[1]
    index = NearDuplicateIndex()
    assert index.check_and_add("orig", a["text"]) is None
    hit = index.check_and_add("copy-1", changed_title(a, other))
    assert hit is not None and hit[0] == "orig"
    hit = index.check_and_add("copy-2", serbian_latin_to_cyrillic(a["text"]))
    assert hit == ("orig", 1.0)
    assert len(index) == 1 and "copy-1" not in index and "copy-2" not in index
    assert index.check_and_add("orig", a["text"]) is None  # an indexed id is not its own duplicate
    assert len(index) == 1
    assert index.remove("orig") is True and index.remove("orig") is False
    assert index.find(a["text"]) is None and len(index) == 0


def test_add_is_idempotent_in_memory(long_articles):
    a, b = long_articles[2], long_articles[3]
    index = NearDuplicateIndex()
    index.add("x", a["text"])
    index.add("x", a["text"])
    index.add("x", b["text"])  # same id, other text: the first text stays
    assert len(index) == 1
    assert index.find(a["text"]) == ("x", 1.0)
    assert index.find(b["text"]) is None
    with pytest.raises(ValueError):
        index.add("", a["text"])


def test_check_and_add_is_atomic_across_threads(long_articles):
    a = long_articles[4]
    index = NearDuplicateIndex()
    results: list = [None] * 8
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        results[i] = index.check_and_add(f"t{i}", a["text"])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    originals = [i for i, r in enumerate(results) if r is None]
    assert len(originals) == 1 and len(index) == 1
    assert all(r == (f"t{originals[0]}", 1.0) for r in results if r is not None)


# -- Redis: one index shared by replicas ---------------------------------------------------------------------------

def test_redis_index_is_shared_between_replicas(redis_url, namespace, long_articles):
    docs = long_articles[:20]
    with NearDuplicateIndex(redis_url=redis_url, namespace=namespace) as replica_a, \
            NearDuplicateIndex(redis_url=redis_url, namespace=namespace) as replica_b:
        for d in docs:
            replica_a.add(d["id"], d["text"])
        assert replica_b.count() == len(replica_b) == 20
        for i, d in enumerate(docs):
            hit = replica_b.find(changed_title(d, docs[(i + 1) % 20]))
            assert hit is not None and hit[0] == d["id"]
            assert replica_b.find(serbian_latin_to_cyrillic(d["text"])) == (d["id"], 1.0)
        new = long_articles[30]
        assert replica_b.check_and_add(new["id"], new["text"]) is None
        assert replica_a.find(dropped_span(new))[0] == new["id"]
        assert replica_a.check_and_add("copy", with_boilerplate(new, docs[0], docs[1]))[0] == new["id"]
        assert replica_a.count() == 21 and "copy" not in replica_b
        assert replica_b.remove(new["id"]) is True
        assert replica_a.find(new["text"]) is None and replica_a.count() == 20
        # a replica of another layout cannot open the namespace
        with pytest.raises(ValueError, match="other parameters"):
            NearDuplicateIndex(threshold=0.8, redis_url=redis_url, namespace=namespace)


def test_redis_add_is_idempotent_and_remove_leaves_no_keys(redis_url, namespace, long_articles):
    a, b = long_articles[5], long_articles[6]
    with NearDuplicateIndex(redis_url=redis_url, namespace=namespace) as r1, \
            NearDuplicateIndex(redis_url=redis_url, namespace=namespace) as r2:
        r1.add("x", a["text"])
        r2.add("x", a["text"])  # the same id from another replica
        r1.add("x", b["text"])
        assert r1.count() == r2.count() == 1
        assert r2.find(a["text"]) == ("x", 1.0) and r2.find(b["text"]) is None
        assert r1.remove("x") and not r2.remove("x")
        assert _keys(redis_url, namespace) == [f"{namespace}:config".encode()]
        r1.add("y", b["text"])
        r1.clear()
        assert _keys(redis_url, namespace) == [] and r2.count() == 0
