"""Label definitions in the registry (in process and real Redis) and the label rules in the article path: the
match_rules stage on the real embedded Qdrant engine, the real e5-small weights and real Slovene news."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone

import pytest
from confluent_kafka import Message

from newsmon.demo import article_event
from newsmon.schemas import InvalidEvent, LabelDefinition, LabelEvent, LabelFilters, ProposedLabel
from newsmon.shared.data import load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.kwe import ArticleMeta
from newsmon.shared.memory import SearchFilter
from newsmon.workers.decisions import DecisionService
from newsmon.workers.kwe_stage import RuleBook, match_rules
from newsmon.workers.labels import LabelConflict, LabelRegistry, RedisLabelRegistry
from newsmon.workers.pipeline import ArticlePipeline

KRKA = 'krka OR krke OR krki OR krko -"reka krk*" -"reki krk*"'
NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


def definition(*kwes: str, **kw) -> LabelDefinition:
    return LabelDefinition(kwes=list(kwes), **kw)


@pytest.fixture(params=["memory", "redis"])
def registry(request):
    if request.param == "memory":
        yield LabelRegistry()
        return
    url = request.getfixturevalue("redis_url")
    reg = RedisLabelRegistry(url, f"newsmon-test-{uuid.uuid4().hex[:8]}:labels")
    yield reg
    reg.clear()


def test_definitions_retire_add_rename_and_the_rule_index(registry):
    book = RuleBook()
    registry.define("client:krka", definition(KRKA))
    s1 = registry.snapshot()
    assert s1.definitions["client:krka"].kwes == [KRKA] and s1.version >= 1
    assert [m.label for m in book.index(s1).match("Krka je objavila rezultate.")] == ["client:krka"]
    assert book.index(s1).match("Ob reki Krki je lepo.") == []

    registry.retire("client:krka")  # its rules stop matching; the definition is kept
    s2 = registry.snapshot()
    assert s2.version > s1.version and "client:krka" in s2.retired and "client:krka" in s2.definitions
    assert book.index(s2).match("Krka je objavila rezultate.") == []
    registry.add("client:krka")  # back, with its rules
    assert [m.label for m in book.index(registry.snapshot()).match("Delnice Krke.")] == ["client:krka"]

    # a rename moves the rules (merged into the new name's own definition) and maps the history
    registry.define("client:pharma", definition("lek OR leka", require_rule_match=True))
    registry.rename("client:krka", "client:pharma")
    s3 = registry.snapshot()
    assert "client:krka" not in s3.definitions
    assert s3.definitions["client:pharma"].kwes == ["lek OR leka", KRKA]
    assert s3.definitions["client:pharma"].require_rule_match is True
    assert s3.names_of("client:pharma") == ("client:pharma", "client:krka")
    assert registry.apply(["client:krka", "x"], s3) == ("client:pharma", "x")
    assert [m.label for m in book.index(s3).match("Krka in Lek.")] == ["client:pharma"]
    with pytest.raises(LabelConflict, match="renamed to 'client:pharma'"):
        registry.define("client:krka", definition("krka"))
    # a renamed name moves once more: a -> b -> c
    registry.rename("client:pharma", "client:zdravila")
    s4 = registry.snapshot()
    assert s4.renamed == {"client:krka": "client:zdravila", "client:pharma": "client:zdravila"}
    assert s4.definitions["client:zdravila"].kwes == ["lek OR leka", KRKA]


def test_redis_registry_replicas_see_each_others_changes(redis_url):
    ns = f"newsmon-test-{uuid.uuid4().hex[:8]}:labels"
    writer, reader = RedisLabelRegistry(redis_url, ns), RedisLabelRegistry(redis_url, ns)
    try:
        assert reader.snapshot().definitions == {}
        writer.define("a", definition("alfa"))
        assert reader.snapshot().definitions["a"].kwes == ["alfa"]
        writer.define("a", definition("alfa OR beta"))  # updated: the reader's cache is refreshed
        assert reader.snapshot().definitions["a"].kwes == ["alfa OR beta"]
        writer.rename("a", "b")
        s = reader.snapshot()
        assert set(s.definitions) == {"b"} and s.renamed == {"a": "b"}
    finally:
        writer.clear()


def test_match_rules_evidence_rule_only_precision_filter_and_metadata():
    reg = LabelRegistry()
    reg.define("client:krka", definition(KRKA))
    reg.define("client:strict", definition("delnic*", require_rule_match=True))
    reg.define("client:si-only", definition("rezultat*", filters=LabelFilters(countries=["SI"])))
    reg.define("client:old", definition("krka"))
    state = reg.snapshot()
    index = RuleBook().index(state)
    counted: list[dict] = []

    def examples(names):
        counted.append(names)
        return {"client:krka": 0, "client:old": 3}

    retrieved = [ProposedLabel(label="gospodarstvo", score=0.9), ProposedLabel(label="client:strict", score=0.8),
                 ProposedLabel(label="client:si-only", score=0.7)]
    text = "Krka je objavila polletne rezultate.\nDelnice so zrasle."
    (labels, outcome), (labels_hr, _) = match_rules(
        [(text, ArticleMeta(lang="sl", country="SI"), retrieved),
         ("Krka in lek.", ArticleMeta(lang="hr", country="HR"), retrieved)],
        state, index, examples, min_examples=3, rule_score=0.5)
    by = {x.label: x for x in labels}
    # evidence on the retrieval labels whose rule matched; the precision filter keeps a matched one
    assert by["client:strict"].rule.kwe == "delnic*" and by["client:strict"].rule.matched == ["Delnice"]
    assert by["client:si-only"].rule.matched == ["rezultate"] and by["gospodarstvo"].rule is None
    # rule-only: the label without examples; the one with 3 confirmed examples is left to retrieval
    assert by["client:krka"].source == "rule" and by["client:krka"].score == 0.5
    assert by["client:krka"].rule.matched == ["Krka"] and "client:old" not in by
    assert [x.label for x in labels][-1] == "client:krka"  # after the retrieval labels
    assert counted == [{"client:krka": ("client:krka",), "client:old": ("client:old",)}]
    assert set(outcome.rule_only) == {"client:krka"}
    # the matched label with enough examples that retrieval did not propose: a candidate, with its evidence
    assert [(c.label, c.source, c.rule.matched) for c in outcome.candidates] == [("client:old", "rule", ["Krka"])]
    # second article: no match for the strict label (dropped) and the filter refuses HR (dropped)
    assert [x.label for x in labels_hr] == ["gospodarstvo", "client:krka"]


def test_candidates_below_the_threshold_follow_the_rules():
    """A candidate promoted rule-only leaves the candidates (a proposal holds each label once, or the worker
    could not produce it), and a candidate its definition refuses is not offered; the rest stay."""
    from newsmon.schemas import LabelProposal
    from newsmon.workers.kwe_stage import admitted_candidates

    reg = LabelRegistry()
    reg.define("client:krka", definition(KRKA))
    reg.define("client:strict", definition("delnic*", require_rule_match=True))
    reg.define("client:si-only", definition("rezultat*", filters=LabelFilters(countries=["SI"])))
    state = reg.snapshot()
    index = RuleBook().index(state)
    retrieved = [ProposedLabel(label="gospodarstvo", score=0.9)]
    candidates = [ProposedLabel(label=lb, score=0.2) for lb in ("client:krka", "client:strict", "client:si-only",
                                                                "ekonomija")]
    meta = ArticleMeta(lang="hr", country="HR")
    (labels, outcome), = match_rules([("Krka je objavila polletne rezultate.", meta, retrieved)], state, index,
                                     lambda names: dict.fromkeys(names, 0), min_examples=3, rule_score=0.5)
    assert [x.label for x in labels] == ["gospodarstvo", "client:krka"]
    kept = admitted_candidates(candidates, labels, outcome, index, meta)
    assert [x.label for x in kept] == ["ekonomija"]  # krka proposed; strict: no match; si-only: not SI
    LabelProposal(article_id="a", labels=labels, candidates=kept, model_version="m", memory_version="c",
                  produced_at=datetime.now(timezone.utc))
    assert [x.label for x in admitted_candidates(candidates, retrieved, outcome, index,
                                                 ArticleMeta(lang="sl", country="SI"))] == \
        ["client:krka", "client:si-only", "ekonomija"]


def message(value: bytes, offset: int) -> Message:
    return Message(topic="articles", partition=0, offset=offset, value=value, timestamp=(1, int(time.time() * 1000)))


def test_label_without_examples_proposed_from_its_rule_then_from_retrieval(memory_classifier, shared_data):
    corpus = load_corpus(shared_data / "sentinews_sl")
    clf, settings = memory_classifier, memory_classifier.settings
    clf.add_articles(corpus.split("train")[:60])
    reg = LabelRegistry()
    reg.define("client:mercator", definition("mercator* OR merkator*"))
    p = ArticlePipeline(settings, clf, NearDuplicateIndex(), reg)
    hits = [a for a in corpus.split("test") if "Mercator" in a.text][:4]
    miss = next(a for a in corpus.split("test") if "ercator" not in a.text)

    def run(articles, start):
        batch, _ = p.validate([message(article_event(a).to_bytes(), start + i) for i, a in enumerate(articles)])
        p.propose(batch)
        return {pr.article_id: pr for _m, pr in p.emit(batch)}

    out = run([hits[0], miss], 0)
    rule = {x.label: x for x in out[hits[0].id].labels}["client:mercator"]
    assert rule.source == "rule" and rule.neighbours == [] and "Mercator" in rule.rule.matched[0]
    assert "client:mercator" not in {x.label for x in out[miss.id].labels}
    # a near-copy of an undecided original is scored on its own: the rule proposes the label again
    copy = article_event(hits[0]).model_copy(update={"article_id": "copy-of-mercator"})
    batch, _ = p.validate([message(copy.to_bytes(), 10)])
    p.propose(batch)
    (_, pc), = p.emit(batch)
    assert pc.duplicate_of == hits[0].id and {x.label: x.source for x in pc.labels}["client:mercator"] == "rule"
    # three confirmed examples: no longer proposed from the rule alone
    mem = clf.memory("sl")
    mem.set_labels([a.id for a in corpus.split("train")[:3]], [("client:mercator",)] * 3)
    assert mem.count(SearchFilter(labels=("client:mercator", "other"))) == 3
    out = run(hits[1:2], 20)
    assert all(x.source != "rule" for x in out[hits[1].id].labels)
    # three unrelated articles cannot carry it through retrieval (k = 50): the KwE match is a candidate instead
    assert "client:mercator" not in {x.label for x in out[hits[1].id].labels}
    (c,) = [c for c in out[hits[1].id].candidates if c.label == "client:mercator"]
    assert c.rule.kwe == "mercator* OR merkator*"  # a retrieval candidate with the evidence, or the rule's own
    assert c.source == "rule" or c.neighbours


def test_definition_with_a_bad_kwe_is_refused_by_the_memory_updater(memory_classifier):
    svc = DecisionService(memory_classifier.settings, memory_classifier.router, LabelRegistry())
    raw = json.loads(LabelEvent(action="defined", label="x", definition=definition("krka"), occurred_at=NOW)
                     .to_bytes())
    raw["definition"]["kwes"] = ["krka", "krka AND lek"]
    msg = Message(topic=memory_classifier.settings.kafka.topic_label_events, value=json.dumps(raw).encode())
    with pytest.raises(InvalidEvent, match=r"definition.kwes.1: AND is not part of the grammar.*at position 5"):
        svc.parse(msg)
    reg = svc.registry
    reg.rename("x", "y")
    ev = LabelEvent(action="defined", label="x", definition=definition("krka"), occurred_at=NOW)
    assert "renamed to 'y'" in svc.apply_label_event(ev)
