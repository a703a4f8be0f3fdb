"""One id policy and one label policy on every path, and corpus lines that are not UTF-8 (issue 9).

* ``Delo 2019-03-04 #12`` is refused with the reason by the wire events, the corpus loader (a bad line) and the
  knowledge memory (so it never becomes a neighbour that the proposal schema refuses).
* One visible label is one label: ``Šport`` in NFC and NFD, ``Politika`` and ``politika`` are one label in the
  wire events, the corpus loader, the memory and the label registry.
* A corpus line in cp1250 is a bad line with its number and reason, reported by the commands that read corpora.
"""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from newsmon.schemas import ArticleEvent, LabelEvent, LabelProposal, ModeratorDecision
from newsmon.schemas.labels import LABEL_EVENTS_KEY
from newsmon.schemas import base
from newsmon.shared.data import load_corpus
from newsmon.workers.labels import LabelRegistry, RedisLabelRegistry

BAD_ID = "Delo 2019-03-04 #12"
T0 = "2024-05-01T08:00:00Z"
SPORT_NFC = unicodedata.normalize("NFC", "Šport")
SPORT_NFD = unicodedata.normalize("NFD", "Šport")


def _article(**kw) -> dict:
    return {"schema_version": 2, "article_id": "a1", "title": "Vlada", "body": "Vlada je sprejela proračun.",
            "lang": "sl", "outlet": "Delo", "country": "SI", "published_at": T0, **kw}


def _proposal(**kw) -> dict:
    return {"article_id": "a1", "labels": [], "model_version": "m", "memory_version": "newsmon_sl_m",
            "produced_at": T0, **kw}


def _decision(*labels: str, article_id: str = "a1") -> dict:
    return {"article_id": article_id, "moderator": "ana", "decided_at": T0,
            "decisions": [{"label": lb, "action": "confirmed"} for lb in labels]}


def _reason(model, data) -> str:
    with pytest.raises(ValidationError) as exc:
        model.model_validate(data)
    return str(exc.value)


def _corpus_line(**kw) -> str:
    row = {"id": "sl-1", "title": "Vlada", "text": "Vlada je danes sprejela proračun za prihodnje leto.",
           "labels": ["politika"], "lang": "sl", "split": "train", "source": "test", **kw}
    return json.dumps(row, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------------- ids

def test_the_id_policy_refuses_the_example_with_the_reason():
    with pytest.raises(ValueError, match=r"' ' at position 5 is not allowed"):
        base.check_article_id(BAD_ID)
    for good in ("delo-2019-03-04-12", "sl-test-646", "reuters-1", "urn:delo:2019/03/04#12", "a" * 256):
        assert base.check_article_id(good) == good
    for bad, why in (("", "empty"), ("a" * 257, "257 characters"), ("-x", "starts with"), ("članek-1", "starts"),
                     ("a\u200bb", "position 2"), ("a\tb", "position 2")):
        with pytest.raises(ValueError, match=why):
            base.check_article_id(bad)


def test_every_wire_event_refuses_the_id():
    assert "' ' at position 5" in _reason(ArticleEvent, _article(article_id=BAD_ID))
    assert "article_id" in _reason(ModeratorDecision, _decision("politika", article_id=BAD_ID))
    assert "article_id" in _reason(LabelProposal, _proposal(article_id=BAD_ID))
    assert "duplicate_of" in _reason(LabelProposal, _proposal(duplicate_of=BAD_ID))
    neighbour = {"label": "politika", "score": 0.9, "neighbours": [{"article_id": BAD_ID, "similarity": 0.9}]}
    assert "neighbours" in _reason(LabelProposal, _proposal(labels=[neighbour]))
    schema = ArticleEvent.model_json_schema()["properties"]["article_id"]
    assert schema["maxLength"] == 256 and schema["pattern"].startswith("^[A-Za-z0-9]")


def test_the_corpus_loader_reports_the_id_as_a_bad_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(_corpus_line() + "\n" + _corpus_line(id=BAD_ID) + "\n", encoding="utf-8")
    corpus = load_corpus(path)
    assert [a.id for a in corpus.articles] == ["sl-1"]
    assert [b.line for b in corpus.bad_lines] == [2]
    assert "id: " in corpus.bad_lines[0].reason and "' ' at position 5" in corpus.bad_lines[0].reason


def test_the_memory_refuses_to_store_the_id(tmp_path):
    """memory build and the pending points write through the memory: an id the proposal schema would refuse as a
    neighbour never gets in (reads and deletes still take any id)."""
    from newsmon.shared.memory.edge import EdgeMemory

    mem = EdgeMemory(tmp_path / "m", "c", 4)
    try:
        vec = np.ones((1, 4), dtype=np.float32)
        with pytest.raises(ValueError, match="not valid"):
            mem.upsert([BAD_ID], vec, [["politika"]])
        mem.upsert(["delo-2019-03-04-12"], vec, [["Politika", "politika", SPORT_NFD]])
        assert mem.get(["delo-2019-03-04-12"])[0].labels == ("politika", SPORT_NFC.lower())
        with pytest.raises(ValueError, match="not valid"):
            mem.set_labels([BAD_ID], [["x"]])
        assert mem.get([BAD_ID]) == [None]
    finally:
        mem.close()


# ------------------------------------------------------------------------------------------------- labels

def test_one_visible_label_is_one_label():
    assert SPORT_NFC != SPORT_NFD
    assert base.canonical_label(SPORT_NFC) == base.canonical_label(SPORT_NFD) == "šport"
    assert base.canonical_label("  Politika ") == base.canonical_label("POLITIKA") == "politika"
    assert base.canonical_label("Alenka\u00ad  Bratušek") == "alenka bratušek"  # soft hyphen, double space
    assert base.canonical_label("Straße") == "straße"  # lower, not casefold: what the reader sees stays


def test_a_decision_naming_one_label_twice_is_refused():
    for pair in (("Politika", "politika"), (SPORT_NFC, SPORT_NFD)):
        assert "decided twice" in _reason(ModeratorDecision, _decision(*pair))
    d = ModeratorDecision.model_validate(_decision("Politika", SPORT_NFD))
    assert d.accepted_labels == ["politika", "šport"]


def test_proposals_and_label_events_use_the_canonical_label():
    twice = [{"label": SPORT_NFC, "score": 0.9}, {"label": SPORT_NFD, "score": 0.8}]
    assert "proposed twice" in _reason(LabelProposal, _proposal(labels=twice))
    assert "must differ" in _reason(LabelEvent, {"schema_version": 1, "action": "renamed", "label": SPORT_NFD,
                                                 "new_label": SPORT_NFC, "occurred_at": T0})
    ev = LabelEvent.model_validate({"schema_version": 1, "action": "retired", "label": SPORT_NFD, "occurred_at": T0})
    assert ev.label == "šport" and ev.kafka_key() == LABEL_EVENTS_KEY


def test_the_corpus_loader_merges_label_variants(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(_corpus_line(labels=["Politika", "politika", SPORT_NFC, SPORT_NFD, " "]) + "\n",
                    encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.articles[0].labels == ("politika", "šport") and not corpus.bad_lines


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_retiring_a_label_retires_its_other_forms(store, redis_url):
    reg = LabelRegistry() if store == "memory" else RedisLabelRegistry(redis_url, "newsmon-test:policy-labels")
    try:
        reg.retire(SPORT_NFC)
        assert reg.apply([SPORT_NFD, "Šport".upper(), "politika"]) == ("politika",)
        reg.rename("Politika", "Notranja politika")
        assert reg.apply(["politika", "POLITIKA"]) == ("notranja politika",)
        reg.add(SPORT_NFD)
        assert reg.apply([SPORT_NFC]) == ("šport",)
    finally:
        if store == "redis":
            reg.clear()


# ------------------------------------------------------------------------------------------ UTF-8 only

def test_a_cp1250_line_is_a_bad_line_not_replacement_characters(tmp_path):
    path = tmp_path / "a.jsonl"
    cp1250 = _corpus_line(id="sl-2", text="Šport: Čeferin je zmagal na volitvah in ostaja predsednik.")
    path.write_bytes((_corpus_line() + "\n").encode("utf-8") + (cp1250 + "\n").encode("cp1250")
                     + (_corpus_line(id="sl-3") + "\n").encode("utf-8"))
    corpus = load_corpus(path)
    assert [a.id for a in corpus.articles] == ["sl-1", "sl-3"]
    assert not any("\ufffd" in a.text for a in corpus.articles)
    [bad] = corpus.bad_lines
    assert bad.line == 2 and "not UTF-8" in bad.reason and "0x8a" in bad.reason  # Š in cp1250


@pytest.mark.slow  # `memory build` embeds with the real encoder weights
def test_memory_build_reports_the_bad_lines(tmp_path, monkeypatch, newsmon_home):
    from newsmon.cli import app

    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    monkeypatch.setenv("NEWSMON_MEMORY__PATH", str(tmp_path / "memory"))
    path = tmp_path / "a.jsonl"
    path.write_bytes((_corpus_line() + "\n").encode("utf-8") + (_corpus_line(id="sl-2") + "\n").encode("cp1250")
                     + (_corpus_line(id=BAD_ID) + "\n").encode("utf-8"))
    res = CliRunner().invoke(app, ["memory", "build", "--data", str(path)])
    assert res.exit_code == 0, res.output
    assert "skipped line 2: not UTF-8" in res.output and "skipped line 3: id:" in res.output
    assert "2 bad lines skipped" in res.output
    built = json.loads([x[x.index("{"):] for x in res.output.splitlines() if '{"upserted"' in x][-1])
    assert built["upserted"] == {"sl": 1} and built["bad_lines"] == 2
