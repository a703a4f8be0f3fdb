"""The Kafka wire schemas: round trips, invalid messages, helpers, and the committed JSON Schema files."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from newsmon.schemas import (
    ArticleEvent,
    EVENT_MODELS,
    InvalidEvent,
    LabelDecision,
    LabelDefinition,
    LabelEvent,
    LabelFilters,
    LabelProposal,
    ModeratorDecision,
    NeighbourRef,
    Proposal,
    ProposedLabel,
    RuleEvidence,
    ScoringInfo,
    Timings,
    dead_letter_headers,
    dead_letter_topic,
    generate,
    parse_event,
)

T0 = "2024-05-01T10:00:00+02:00"


def article(**over) -> dict:
    d = {"schema_version": 1, "article_id": "sta-2024-000123", "title": "Vlada sprejela proračun",
         "body": "Vlada je danes sprejela predlog proračuna.", "lang": "sl", "outlet": "STA",
         "country": "SI", "published_at": T0, "url": "https://www.sta.si/a/123"}
    d.update(over)
    return d


def raw(d) -> bytes:
    return json.dumps(d, ensure_ascii=False).encode("utf-8")


def reason(model, payload) -> str:
    with pytest.raises(InvalidEvent) as info:
        parse_event(model, payload if isinstance(payload, bytes) else raw(payload))
    assert str(info.value) == info.value.reason
    return info.value.reason


# ------------------------------------------------------------------------------------------------ files

def test_committed_json_schemas_are_fresh():
    fresh = generate.render_schemas()
    assert sorted(fresh) == sorted(f"{name}.schema.json" for name in EVENT_MODELS)
    stale = [name for name, text in fresh.items()
             if not (generate.SCHEMA_DIR / name).exists()
             or (generate.SCHEMA_DIR / name).read_text(encoding="utf-8") != text]
    assert not stale, f"stale or missing JSON Schemas {stale}; run: python -m newsmon.schemas.generate"
    assert generate.check() == []


def test_generate_check_and_write(tmp_path, capsys):
    assert generate.main(["--check", "--dir", str(tmp_path)]) == 1
    assert "missing" in capsys.readouterr().err
    assert generate.main(["--dir", str(tmp_path)]) == 0
    assert generate.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "ArticleEvent.schema.json").write_text("{}\n")
    (tmp_path / "Gone.schema.json").write_text("{}\n")
    assert generate.main(["--check", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stale" in err and "ArticleEvent" in err and "unexpected" in err and "Gone" in err
    text = (tmp_path / "LabelEvent.schema.json").read_text()
    assert text.endswith("}\n") and json.loads(text)["title"] == "LabelEvent"
    assert "schema_version" in json.loads(text)["required"]


# ------------------------------------------------------------------------------------------- round trips

def _round_trip(event):
    back = parse_event(type(event), event.to_bytes())
    assert back == event
    assert back.model_dump_json() == event.model_dump_json()
    written = json.loads(event.to_bytes())["schema_version"]
    assert written == event.schema_version and written in type(event).schema_versions
    return back


def test_article_round_trip_and_utc():
    ev = parse_event(ArticleEvent, raw(article()))
    assert ev.published_at == datetime(2024, 5, 1, 8, 0, tzinfo=timezone.utc)
    assert ev.published_at.utcoffset() == timedelta(0)
    assert json.loads(ev.to_bytes())["published_at"] == "2024-05-01T08:00:00Z"
    assert ev.kafka_key() == b"sta-2024-000123" and ArticleEvent.default_topic == "articles"
    _round_trip(ev)
    _round_trip(ArticleEvent(article_id="x", title=None, body="b", lang="en", outlet="o", country="GB",
                             published_at=datetime(2024, 1, 1, tzinfo=timezone.utc)))


def test_article_ignores_unknown_fields_and_keeps_url():
    ev = parse_event(ArticleEvent, raw(article(author="someone", url="http://a.example")))
    assert not hasattr(ev, "author") and ev.url == "http://a.example"


def test_label_proposal_round_trip():
    ev = LabelProposal(
        article_id="a1",
        labels=[ProposedLabel(label="politics", score=0.91,
                              neighbours=[NeighbourRef(article_id="m7", similarity=0.88)]),
                ProposedLabel(label="economy", score=0.4)],
        duplicate_of=None, model_version="e5-small@1", memory_version="mem-2024-05-01",
        timings=Timings(batch_size=16, queue_ms=3.5, dedup_ms=0.2, embed_ms=40.0, search_ms=5.1,
                        score_ms=0.7, total_ms=49.5),
        produced_at=datetime(2024, 5, 1, 8, 0, 1, 250000, tzinfo=timezone.utc))
    back = _round_trip(ev)
    assert back.labels[0].neighbours[0].similarity == 0.88
    assert LabelProposal.default_topic == "label-proposals" and ev.kafka_key() == b"a1"
    assert Timings().total_ms == 0.0


def test_a_label_proposal_is_the_one_proposal_type_with_its_envelope():
    """:class:`Proposal` (what the scorer returns and every path passes on) and :class:`LabelProposal` share their
    fields, of the same types; :meth:`LabelProposal.of` puts a proposal on the wire unchanged but for the labels'
    cap (the wire's shape did not change with the type: ``test_committed_json_schemas_are_fresh``)."""
    shared = ("labels", "candidates", "scoring", "abstained")
    assert set(Proposal.model_fields) == {*shared, "searched"}
    assert all(Proposal.model_fields[f].annotation == LabelProposal.model_fields[f].annotation for f in shared)
    p = Proposal(labels=[ProposedLabel(label="politics", score=0.9), ProposedLabel(label="economy", score=0.5)],
                 candidates=[ProposedLabel(label="sport", score=0.1)], abstained=None, searched=("newsmon_sl_m",))
    assert p.label_set == {"politics", "economy"}
    lp = LabelProposal.of(p, article_id="a1", model_version="m", memory_version="+".join(p.searched),
                          produced_at=datetime(2024, 5, 1, 8, tzinfo=timezone.utc), revision=2, max_labels=1)
    assert [x.label for x in lp.labels] == ["politics"] and lp.candidates == p.candidates and lp.revision == 2
    assert lp.memory_version == "newsmon_sl_m" and lp.timings == Timings() and "searched" not in lp.model_dump()
    assert _round_trip(lp) == lp
    with pytest.raises(ValidationError, match="proposed twice"):
        LabelProposal.of(p.model_copy(update={"candidates": p.labels[:1]}), article_id="a1", model_version="m",
                         memory_version="v", produced_at=datetime(2024, 5, 1, 8, tzinfo=timezone.utc))


def test_moderator_decision_round_trip_and_helpers():
    ev = ModeratorDecision(article_id="a1", moderator="ana", decided_at=T0, decisions=[
        LabelDecision(label="politics", action="confirmed"), LabelDecision(label="sport", action="rejected"),
        LabelDecision(label="economy", action="added"), LabelDecision(label="crime", action="rejected")])
    _round_trip(ev)
    assert ev.accepted_labels == ["politics", "economy"]
    assert ev.rejected_labels == ["sport", "crime"]
    assert ModeratorDecision.default_topic == "moderator-decisions"


def test_label_event_round_trip():
    for ev in (LabelEvent(action="added", label="ai", occurred_at=T0, actor="ops"),
               LabelEvent(action="retired", label="ai", occurred_at=T0),
               LabelEvent(action="renamed", label="ai", new_label="artificial intelligence", occurred_at=T0)):
        _round_trip(ev)
        assert ev.kafka_key() == b"label-registry"  # one key for every label event (test below)
    assert LabelEvent.default_topic == "label-events"


# ------------------------------------------------------------------------------------------- invalid input

def test_invalid_json_and_bytes():
    assert reason(ArticleEvent, b'{"schema_version": 1,').startswith("invalid JSON:")
    assert reason(ArticleEvent, b"\xff\xfe{}").startswith("not UTF-8")
    assert reason(ArticleEvent, b"[1, 2]") == "not a JSON object: got array"
    assert reason(ArticleEvent, b"") == "empty message"
    assert reason(ArticleEvent, b'{"schema_version": 1, "x": NaN}').startswith("invalid JSON")


def test_missing_body():
    d = article()
    del d["body"]
    r = reason(ArticleEvent, d)
    assert r.startswith("invalid ArticleEvent:") and "body: Field required" in r


def test_schema_version():
    assert reason(ArticleEvent, article(schema_version=3)) == "unsupported schema_version 3; this worker reads 1, 2"
    assert reason(ModeratorDecision, {"schema_version": 3}) == "unsupported schema_version 3; this worker reads 1, 2"
    assert reason(LabelEvent, {"action": "added"}) == "missing schema_version; this worker reads 1, 2"
    d = article()
    del d["schema_version"]
    assert reason(ArticleEvent, d) == "missing schema_version; this worker reads 1, 2"
    assert reason(ArticleEvent, article(schema_version="1")) == \
        'unsupported schema_version "1"; this worker reads 1, 2'
    assert reason(ArticleEvent, article(schema_version=True)).startswith("unsupported schema_version true")
    with pytest.raises(ValueError, match="unsupported schema_version 3; this worker reads 1, 2"):
        ArticleEvent.model_validate(article(schema_version=3))
    for model in EVENT_MODELS.values():  # the default written is the highest version read
        assert model.model_fields["schema_version"].default == max(model.schema_versions)
        schema = model.model_json_schema()["properties"]["schema_version"]
        assert schema["enum"] == list(model.schema_versions) and schema["type"] == "integer"


def test_empty_text():
    assert "empty text" in reason(ArticleEvent, article(title=" ", body="\n\t "))
    assert "empty text" in reason(ArticleEvent, article(title=None, body=""))
    assert parse_event(ArticleEvent, raw(article(title="Only a title", body=""))).text == "Only a title\n"


def test_naive_datetime():
    r = reason(ArticleEvent, article(published_at="2024-05-01T10:00:00"))
    assert "published_at" in r and "timezone" in r
    with pytest.raises(ValueError, match="timezone"):
        LabelEvent(action="added", label="x", occurred_at=datetime(2024, 1, 1))


def test_renamed_without_new_label():
    ev = {"schema_version": 1, "action": "renamed", "label": "ai", "occurred_at": T0}
    assert "renamed needs new_label" in reason(LabelEvent, ev)
    assert "must differ" in reason(LabelEvent, {**ev, "new_label": "ai"})
    assert "only allowed for renamed" in reason(LabelEvent, {**ev, "action": "added", "new_label": "b"})


def test_duplicate_label_in_decisions():
    ev = {"schema_version": 1, "article_id": "a1", "moderator": "ana", "decided_at": T0,
          "decisions": [{"label": "sport", "action": "confirmed"}, {"label": "sport", "action": "rejected"}]}
    assert "label 'sport' decided twice" in reason(ModeratorDecision, ev)
    assert "decisions" in reason(ModeratorDecision, {**ev, "decisions": []})


def test_other_field_checks():
    assert "article_id" in reason(ArticleEvent, article(article_id="has space"))
    assert "article_id" in reason(ArticleEvent, article(article_id="x" * 257))
    assert "lang" in reason(ArticleEvent, article(lang="SL"))
    assert "country" in reason(ArticleEvent, article(country="si"))
    assert "url" in reason(ArticleEvent, article(url="ftp://example.com/x"))
    assert "url" in reason(ArticleEvent, article(url="https://a.example/has space"))
    r = reason(ArticleEvent, {"schema_version": 1, "extra": 1})
    assert "(+" in r and "more)" in r  # first few errors only
    prop = {"schema_version": 1, "article_id": "a", "labels": [], "model_version": "m", "memory_version": "v",
            "produced_at": T0}
    assert parse_event(LabelProposal, raw(prop)).timings.batch_size == 1
    assert reason(LabelProposal, {**prop, "surprise": 1}) == \
        "invalid LabelProposal: surprise: Extra inputs are not permitted"
    assert "timings.embed_ms" in reason(LabelProposal, {**prop, "timings": {"embed_ms": -1}})
    assert "proposed twice" in reason(LabelProposal, {**prop, "labels": [{"label": "a", "score": 1},
                                                                         {"label": "a", "score": 0.5}]})


def test_body_size_not_capped():
    assert len(parse_event(ArticleEvent, raw(article(body="x" * 2_000_000))).body) == 2_000_000


# ------------------------------------------------------------------------------------------------ helpers

def test_text_property():
    base = article()
    assert ArticleEvent.model_validate(base).text == "Vlada sprejela proračun\nVlada je danes sprejela predlog proračuna."
    assert ArticleEvent.model_validate({**base, "title": None}).text == base["body"]
    assert ArticleEvent.model_validate({**base, "title": ""}).text == base["body"]


def test_dead_letters():
    assert dead_letter_topic("articles") == "articles.dlq"
    now = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    headers = dead_letter_headers("invalid JSON: boom", "proposer-0", "articles", 3, 12345, now=now)
    assert headers == [
        ("newsmon-error", b"invalid JSON: boom"),
        ("newsmon-worker", b"proposer-0"),
        ("newsmon-failed-at", b"2024-05-01T08:00:00.123Z"),
        ("newsmon-source-topic", b"articles"),
        ("newsmon-source-partition", b"3"),
        ("newsmon-source-offset", b"12345"),
    ]
    long = dead_letter_headers("č" * 5000, "w", "t", 0, 0)
    err = dict(long)["newsmon-error"]
    assert len(err) == 4096 and err.decode("utf-8") == "č" * 2048
    assert dict(long)["newsmon-failed-at"].endswith(b"Z")
    with pytest.raises(ValueError):
        dead_letter_headers("e", "w", "t", 0, 0, now=datetime(2024, 1, 1))


# ------------------------------------------------------------------------------------------- version 2

def test_v1_events_still_parse():
    """Messages written by version-1 producers are read by this release, new fields at their defaults."""
    ev = parse_event(ArticleEvent, raw(article(schema_version=1)))
    assert ev.schema_version == 1 and ev.section is None
    ev = parse_event(ArticleEvent, raw(article(schema_version=1, section="gospodarstvo")))  # tolerant reader
    assert ev.section == "gospodarstvo"
    v1_proposal = {"schema_version": 1, "article_id": "a1", "labels": [{"label": "politika", "score": 0.7,
                   "neighbours": [{"article_id": "m1", "similarity": 0.9}]}], "model_version": "m",
                   "memory_version": "newsmon_sl_m", "produced_at": "2024-05-01T08:00:00Z"}
    p = parse_event(LabelProposal, raw(v1_proposal))
    assert p.revision == 0 and p.candidates == [] and p.scoring is None and p.labels[0].source == "retrieval"
    ev = parse_event(LabelEvent, raw({"schema_version": 1, "action": "retired", "label": "ai",
                                      "occurred_at": "2024-05-01T08:00:00Z"}))
    assert ev.action == "retired" and ev.schema_version == 1


def test_label_event_definition_and_lowest_version_written():
    d = LabelDefinition(kwes=['krka OR krke OR krki -"reka krk*"'],
                        filters=LabelFilters(languages=["sl"], countries=["SI"]))
    ev = LabelEvent(action="defined", label="Krka", definition=d, occurred_at=T0)
    assert json.loads(ev.to_bytes())["schema_version"] == 2
    assert _round_trip(ev).definition.kwes == d.kwes
    # old actions are written as version 1, so version-1 readers keep understanding them
    assert json.loads(LabelEvent(action="retired", label="Krka", occurred_at=T0).to_bytes())["schema_version"] == 1
    base = {"schema_version": 2, "label": "Krka", "occurred_at": "2024-05-01T08:00:00Z"}
    assert "defined needs definition" in reason(LabelEvent, {**base, "action": "defined"})
    assert "only allowed for defined and updated" in reason(
        LabelEvent, {**base, "action": "retired", "definition": d.model_dump()})
    assert "needs schema_version 2" in reason(
        LabelEvent, {**base, "schema_version": 1, "action": "updated", "definition": d.model_dump()})
    assert "kwes" in reason(LabelEvent, {**base, "action": "defined", "definition": {"kwes": []}})
    assert "languages" in reason(LabelEvent, {**base, "action": "defined",
                                              "definition": {"kwes": ["x"], "filters": {"languages": ["SL"]}}})


@pytest.mark.parametrize("code", ["SL", "slv", "xx", "qa", "sl-SI"])
def test_label_filters_languages_are_iso_639_1(code):
    base = {"schema_version": 2, "label": "Krka", "occurred_at": "2024-05-01T08:00:00Z", "action": "defined"}
    why = reason(LabelEvent, {**base, "definition": {"kwes": ["x"], "filters": {"languages": ["sl", code]}}})
    assert "languages" in why and "ISO 639-1" in why, why
    assert LabelFilters(languages=["sl", "hr", "sr"]).languages == ["sl", "hr", "sr"]


def test_label_proposal_v2_fields():
    ev = LabelProposal(
        article_id="a2", revision=1, model_version="m", memory_version="newsmon_hr_m+newsmon_sl_m",
        labels=[ProposedLabel(label="Krka", score=1.0, source="rule",
                              rule=RuleEvidence(kwe="krka OR krke", matched=["Krke"]))],
        candidates=[ProposedLabel(label="gospodarstvo", score=0.31,
                                  neighbours=[NeighbourRef(article_id="m1", similarity=0.9, title="Krka raste")])],
        scoring=ScoringInfo(predictor="newsmon", top_k=50, tau=0.04, threshold=0.5),
        produced_at=T0)
    back = _round_trip(ev)
    assert back.labels[0].rule.matched == ["Krke"] and back.candidates[0].neighbours[0].title == "Krka raste"
    dup = ev.model_dump(mode="json")
    dup["candidates"][0]["label"] = "Krka"
    assert "proposed twice" in reason(LabelProposal, dup)
    v1 = ev.model_dump(mode="json")
    v1["schema_version"] = 1
    assert "needs schema_version 6" in reason(LabelProposal, v1)  # the scoring's one shape is version 6
    v1["scoring"] = None
    assert "needs schema_version 2" in reason(LabelProposal, v1)
    long = "+".join(f"newsmon_{lang}_e5-small@{'a' * 40}" for lang in ("sl", "hr", "sr", "sq", "mk", "en"))
    assert LabelProposal(article_id="a3", labels=[], model_version="m", memory_version=long,
                         produced_at=T0).memory_version == long


# ------------------------------------------------------------------------------------------------ examples

_CYRILLIC = re.compile(r"[\u0400-\u04FF]")


@pytest.mark.parametrize("name", sorted(EVENT_MODELS))
def test_every_schema_example_validates_against_its_model(name):
    """The JSON Schema of every event carries realistic examples (Slovene, and Serbian in Cyrillic script),
    and each is a valid message on the wire: parsed as the worker parses it and written back unchanged in
    meaning (the same message after a second round trip)."""
    model = EVENT_MODELS[name]
    examples = model.model_json_schema()["examples"]
    assert len(examples) >= 2, name
    texts = [json.dumps(e, ensure_ascii=False) for e in examples]
    assert any(_CYRILLIC.search(t) for t in texts), f"{name}: no example in Cyrillic script"
    assert any(re.search(r"[čšž]", t) for t in texts), f"{name}: no Slovene example"
    for example in examples:
        ev = parse_event(model, raw(example))
        assert ev.schema_version == example["schema_version"]
        _round_trip(ev)
    # and the committed file carries the same examples
    committed = json.loads((generate.SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    assert committed["examples"] == examples


def test_schema_examples_are_consistent_with_each_other():
    """The examples tell one story: each proposal and decision is about an example article, the Cyrillic rule
    evidence is what the KwE engine finds in the Cyrillic article, and every example KwE parses."""
    from newsmon.shared.kwe import parse_kwe
    from newsmon.shared.memory.base import collection_name

    articles = {e["article_id"]: ArticleEvent.model_validate(e) for e in ArticleEvent.json_examples}
    proposals = [LabelProposal.model_validate(e) for e in LabelProposal.json_examples]
    for p in proposals:
        assert p.article_id in articles or p.duplicate_of in articles
        lang = articles[p.article_id if p.article_id in articles else p.duplicate_of].lang
        searched = p.memory_version.split("+")
        assert collection_name("newsmon", lang, p.model_version) in searched  # named as the router names them
        assert all(c == collection_name("newsmon", c.split("_")[1], p.model_version) for c in searched)
        for x in [*p.labels, *p.candidates]:
            if x.rule is not None:
                hit = parse_kwe(x.rule.kwe).match(articles[p.article_id].text)
                assert hit is not None, x.rule.kwe
    assert {p.labels == [] and bool(p.candidates) for p in proposals} == {True, False}  # one with nothing above
    for d in ModeratorDecision.json_examples:
        assert d["article_id"] in articles
    for e in LabelEvent.json_examples:
        for kwe in (e.get("definition") or {}).get("kwes", []):
            parse_kwe(kwe)


#: A proposal as version 5 wrote it: the decision rules and the head model as flat fields of ``scoring``.
_V5 = {"schema_version": 5, "article_id": "dnevnik-2024-05-07-3301", "revision": 0,
       "labels": [{"label": "odpuščanje", "score": 0.208, "source": "retrieval", "decided_by": "set_vote",
                   "threshold": 0.65, "neighbours": []}],
       "candidates": [{"label": "sindikat", "score": 0.181, "source": "retrieval", "threshold": 0.25,
                       "neighbours": []}],
       "model_version": "m", "memory_version": "newsmon_sl_m",
       "scoring": {"predictor": "newsmon", "top_k": 30, "tau": 0.02, "threshold": 0.25, "calibration": "r@1",
                   "floor": None, "set_vote": 0.45, "tail_support": 0, "new_label_support": 2, "label_lambda": 0.1,
                   "bucket_thresholds": [0.65, 0.65, 0.25, 0.4], "label_thresholds": 3, "label_count": None,
                   "head_weight": 0.75},
       "produced_at": "2024-05-07T09:12:30.004Z"}


def test_proposals_of_versions_3_to_5_are_read_into_the_one_shape_and_written_as_version_6():
    """Versions 3 to 5 carried the decision rules and the head model as flat fields of ``scoring``; they are still
    read (a consumer's old messages), into the shape the settings and the calibration record share (components and
    rules with their options), and a message re-written is version 6. A lower declaration than the flat content
    needs is still refused."""
    p = parse_event(LabelProposal, raw(_V5))
    assert p.schema_version == 5 and p.needs_version() == 5
    assert [(r.name, r.options) for r in p.scoring.rules] == [
        ("threshold", {}), ("set_vote", {"share": 0.45}),
        ("new_label_support", {"support": 2, "neighbours": 20, "similarity": 0.8})]
    assert [(c.name, c.options["weight"]) for c in p.scoring.components] == [("label_keys", 0.1), ("head_model", 0.75)]
    assert p.scoring.label_thresholds == 3 and p.labels[0].decided_by == "set_vote"
    again = parse_event(LabelProposal, p.to_bytes())
    assert again.schema_version == 6 and again.model_dump(exclude={"schema_version"}) == p.model_dump(
        exclude={"schema_version"})
    assert "needs schema_version 5" in reason(LabelProposal, {**_V5, "schema_version": 4})  # the head model's weight
    counted = {**_V5, "scoring": {**_V5["scoring"], "head_weight": 0.0, "label_count": 0.3}}
    assert "needs schema_version 4" in reason(LabelProposal, {**counted, "schema_version": 3})
    assert parse_event(LabelProposal, raw({**counted, "schema_version": 4})).scoring.rules[0].name == "label_count"
    flat = {**_V5, "scoring": {**_V5["scoring"], "head_weight": 0.0, "label_lambda": 0.0}}
    assert "needs schema_version 3" in reason(LabelProposal, {**flat, "schema_version": 2})
    v2 = {k: v for k, v in _V5.items() if k not in ("labels", "candidates")} | {"labels": [], "candidates": []}
    v2["scoring"] = {k: _V5["scoring"][k] for k in ("predictor", "top_k", "tau", "threshold", "calibration")}
    assert parse_event(LabelProposal, raw({**v2, "schema_version": 2})).needs_version() == 2


def test_version_6_names_any_registered_rule_and_carries_an_abstention():
    """``decided_by`` is a registered rule's name (the wire's enum is generated from the registry); a name that is
    not snake case is refused; ``abstained`` needs version 6."""
    with pytest.raises(ValueError, match="decided_by"):
        ProposedLabel(label="x", score=0.5, decided_by="Threshold Rule")
    enum = ProposedLabel.model_json_schema()["properties"]["decided_by"]["anyOf"][0]["enum"]
    assert {"threshold", "set_vote", "tail_support", "new_label_support", "floor", "label_count"} <= set(enum)
    v6 = next(e for e in LabelProposal.json_examples if e["article_id"] == "vecer-2024-118733")
    quiet = {**v6, "labels": [], "candidates": [], "scoring": None, "abstained": "too few real words (2 < 5)"}
    assert parse_event(LabelProposal, raw(quiet)).abstained.startswith("too few")
    assert "needs schema_version 6" in reason(LabelProposal, {**quiet, "schema_version": 5})
    assert LabelProposal.model_fields["schema_version"].default == 7  # 7: per label reason (issue 43 item 3)


@pytest.mark.parametrize("name", sorted(EVENT_MODELS))
def test_every_event_is_written_at_the_lowest_version_that_carries_it(name):
    """A producer writes the lowest ``schema_version`` that carries an event's content, so a consumer still on an
    older version reads every message that uses nothing newer: the workers' proposals without the label-count
    rule are version 3, which a version-3 reader (the moderation tool before the rule) parses. Each example
    declares the version its content needs; built in code without a version it is written at that version."""
    model = EVENT_MODELS[name]
    for example in model.json_examples:
        built = model.model_validate({k: v for k, v in example.items() if k != "schema_version"})
        written = json.loads(built.to_bytes())["schema_version"]
        assert written == built.needs_version() == example["schema_version"], example
        older = type("Older", (model,), {"schema_versions": tuple(v for v in model.schema_versions if v <= written)})
        assert parse_event(older, built.to_bytes()).schema_version == written
    if name == "LabelProposal":  # the near-copy's revision carries no scoring: version 2 carries it
        copy = next(e for e in model.json_examples if e["duplicate_of"])
        assert copy["schema_version"] == 2 and copy["scoring"] is None


def test_every_label_event_has_one_key_so_a_rename_chain_keeps_its_order():
    """A rename a -> b then b -> c (and a retire or define of b after it) depend on each other across labels: keyed
    by label they landed on two partitions, and a consumer could apply b -> c first and refuse a -> b (a rename into
    a name renamed away; seen as the reverse order in tests/test_truthful_answers.py). One key for every label event
    keeps the registry's changes on one partition, in the order they were produced."""
    from datetime import datetime, timezone

    from newsmon.schemas import LabelEvent
    from newsmon.schemas.labels import LABEL_EVENTS_KEY

    at = datetime(2026, 12, 7, tzinfo=timezone.utc)
    chain = [LabelEvent(action="renamed", label="t:a", new_label="t:a-b", occurred_at=at),
             LabelEvent(action="renamed", label="t:a-b", new_label="t:a-b-c", occurred_at=at),
             LabelEvent(action="retired", label="t:a-b-c", occurred_at=at),
             LabelEvent(action="added", label="t:other", occurred_at=at)]
    assert {e.kafka_key() for e in chain} == {LABEL_EVENTS_KEY}


def test_a_name_python_reads_as_blank_is_refused_on_the_wire():
    # the pattern \S is checked by pydantic's Rust engine, whose whitespace leaves out U+001C-U+001F; str.strip removes
    # them, so a moderator named "\x1f" passed the wire and was then nobody in the console (hypothesis found it):
    # every character str.isspace() holds, alone or mixed, is blank for every name field
    import sys

    from newsmon.schemas import ModeratorDecision

    blank = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert "\x1f" in blank and "\x1c" in blank
    for name in [*blank, "".join(blank), " \x1f\t\x1e "]:
        with pytest.raises(ValidationError, match="blank|pattern"):
            ModeratorDecision(article_id="a1", moderator=name, decided_at="2026-12-07T10:00:00Z",
                              decisions=[{"label": "x", "action": "confirmed"}])
    from pydantic import TypeAdapter

    from newsmon.schemas.articles import Section
    from newsmon.schemas.base import Name
    from newsmon.schemas.labels import Kwe, Value
    from newsmon.schemas.proposals import MemoryVersion

    for kind in (Name, Section, Kwe, Value, MemoryVersion):  # the kind: every non-blank string of the wire
        for name in ("\x1f", " \x1c\x1d\x1e "):
            with pytest.raises(ValidationError, match="blank"):
                TypeAdapter(kind).validate_python(name)
        assert TypeAdapter(kind).validate_python("\x1fx") == "\x1fx"
    from newsmon.api.models import SuggestText

    for text in ("\x1f", " \x1c\x1d\x1e\n"):  # the HTTP API's minimal article: a text of them has no words to score
        with pytest.raises(ValidationError, match="blank"):
            SuggestText(text=text)
    assert SuggestText(text="\x1fKrka").text == "\x1fKrka"
    ok = ModeratorDecision(article_id="a1", moderator=" \x1fana ", decided_at="2026-12-07T10:00:00Z",
                           decisions=[{"label": "x", "action": "confirmed"}])
    assert ok.moderator == " \x1fana "  # a name with a character str.strip keeps is taken as given
