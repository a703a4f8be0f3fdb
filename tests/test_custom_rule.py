"""A decision rule and a score component defined outside the package (here, in this test module) are one class
each: registered by name, each is calibrated by its own ``calibrate`` hook (the rule's written here, the
component's the default one), applied, stored in a calibration record and written to the wire (``decided_by``,
``scoring.rules`` / ``scoring.components`` and the JSON Schema's enum) with no change to ``newsmon.schemas``, to the
calibration or to the record code, and no new message version."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pytest
from pydantic import Field

from newsmon.schemas import LabelProposal, parse_event
from newsmon.schemas.scoring import Options, ScoringParams, registered
from newsmon.shared.config import Settings
from newsmon.shared.scoring import (DecisionRule, DecisionState, FittedModels, MemoryArticles, OneRecord, Resolved,
                                    Retrieval, Scorer, register_component, register_rule)
from newsmon.shared.scoring.components import Queries, unregister_component
from newsmon.shared.scoring.components.label_tree import TopLabels, TopLabelsComponent
from newsmon.shared.scoring.calibration import CalibrationSet, calibrate
from newsmon.shared.scoring.records import CalibrationRecord, CalibrationStore
from newsmon.shared.scoring.rules import unregister_rule


class TopOneOptions(Options):
    minimum: float = Field(0.0, ge=0, le=1, description="The best label's lowest score.")


class TopOne(DecisionRule):
    """Each article gets exactly its best label (when its score reaches ``minimum``), whatever came before."""

    name = "top_one"
    Options = TopOneOptions
    ORDER = 45
    GRID = ({"minimum": 0.0}, {"minimum": 0.6})

    def calibrate(self, run) -> None:
        """Its own step: the best ``minimum`` of its grid at the scores kept so far, offered to the run (which
        judges it by the calibration's selection rule and records it)."""
        S, best = run.scores(), None
        for options in self.GRID:
            trial = run.with_rule(self.name, TopOneOptions(**options))
            proposed = run.decide(trial, scores=S)
            if best is None or run.value(proposed) > best[0] + 1e-12:
                best = (run.value(proposed), trial, proposed)
        run.offer(f"+ {self.name}", best[1], best[2], chosen_by="top_one's own hook")

    def apply(self, state: DecisionState, options: TopOneOptions) -> None:
        m = state.scores.shape[0]
        best = state.scores.argmax(axis=1)
        rows = np.flatnonzero(state.scores[np.arange(m), best] >= options.minimum)
        chosen = np.zeros((len(rows), state.scores.shape[1]), dtype=bool)
        chosen[np.arange(len(rows)), best[rows]] = True
        state.replace_rows(rows, chosen, self.name)


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _retrieval() -> tuple[Retrieval, list[tuple[str, ...]]]:
    """Articles whose gold label is always their neighbours' most frequent one (equal similarities: the softmax
    weights are equal whatever tau), at shares no single threshold separates from the others: among the first 5
    neighbours, A-rows hold the gold label twice and three others once (0.4 against 0.2), B-rows the gold label three
    times and another twice (0.6 against 0.4)."""
    rows, gold = [], []
    for i in range(60):
        g, o = f"g{i % 5}", f"o{i % 7}"
        nb = [(o,), (g,), ("x",), (g,), ("y",), ("z",)] if i % 2 else [(g,), (o,), (g,), (o,), (g,), ("x",)]
        rows.append([Hit(f"n{i}_{j}", 0.9, lb) for j, lb in enumerate(nb)])
        gold.append((g,))
    return Retrieval.from_neighbours(rows), gold


@pytest.fixture(autouse=True)
def top_one():
    """The rule registered as a deployment's module would register it (and forgotten after the test, so that the
    other modules of a test run see the package's rules only)."""
    register_rule(TopOne)
    yield
    unregister_rule("top_one")


def test_a_rule_from_outside_the_package_is_calibrated_applied_stored_and_written(tmp_path):
    assert "top_one" in registered("rule")
    r, gold = _retrieval()
    result = calibrate(CalibrationSet(r, gold), rules=("top_one",), replay=False)
    step = result.steps[-1]
    assert step["step"] == "+ top_one" and step["kept"] and step["subset_accuracy"] == 1.0
    assert step["chosen_by"] == "top_one's own hook" and step["lift"]["objective"][1] > 0  # judged by the run
    params = result.params
    assert [s.name for s in params.rules] == ["threshold", "top_one", "too_few_words"]
    # stored in a calibration record and read back by another process
    s = Settings(home=tmp_path)
    CalibrationStore(s).write(CalibrationRecord(collection="newsmon_sl_m", language="sl", model_version="m",
                                                params=params.model_dump(mode="json"), objective="o"))
    assert CalibrationStore(Settings(home=tmp_path)).read("newsmon_sl_m").scoring() == params
    # applied by the scorer, and on the wire
    res = Resolved(params, "newsmon_sl_m@1", None, "calibration")
    memory = MemoryArticles(None, [], [])
    props = Scorer(OneRecord(res, FittedModels(memory))).propose(["Vlada sprejela proračun"] * 4, ["sl"] * 4, None,
                                                                  retrieval=r.rows(range(4)), resolved=res)
    assert [[x.label for x in p.labels] for p in props] == [[g[0]] for g in gold[:4]]
    assert {x.decided_by for p in props for x in p.labels} == {"top_one"}
    lp = LabelProposal.of(props[1], article_id="a1", model_version="m", memory_version="newsmon_sl_m",
                          produced_at=datetime(2024, 5, 1, 8, tzinfo=UTC))
    back = parse_event(LabelProposal, lp.to_bytes())
    assert back.labels[0].decided_by == "top_one" and back.schema_version == 7
    assert "the rule “top one” proposed it" in back.labels[0].reason  # a deployment's rule, named in words
    assert back.scoring.options_of("top_one") == {"minimum": params.rule("top_one").minimum}
    schema = json.dumps(LabelProposal.model_json_schema())
    assert schema.count('"top_one"') >= 2  # decided_by's and the rules' enums
    assert ScoringParams(rules=["threshold", {"name": "top_one", "options": {"minimum": 0.3}}]).rule(
        "top_one").minimum == 0.3


class HashtagOptions(Options):
    weight: float = Field(0.5, gt=0, le=1, description="The hashtags' weight in the mix.")


class Hashtags(TopLabelsComponent):
    """A label scores ``weight`` on an article whose text holds ``#label`` (the memory's labels only)."""

    name = "hashtags"
    Options = HashtagOptions
    GRID = ({"weight": 0.4}, {"weight": 0.9})

    def fit(self, memory: MemoryArticles, options: HashtagOptions) -> list[str]:
        return sorted({lb for labels in memory.labels for lb in labels})

    def _top(self, labels: list[str], texts) -> TopLabels:
        found = [[lb for lb in labels if f"#{lb}" in text.split()] for text in texts]
        scores = np.zeros((len(texts), max((len(f) for f in found), default=0)), np.float32)
        for i, f in enumerate(found):
            scores[i, :len(f)] = 1.0
        return TopLabels(found, scores)

    def evidence(self, model: list[str], queries: Queries, options: HashtagOptions) -> TopLabels:
        return self._top(model, queries.texts)

    def held_out_evidence(self, model: list[str], memory: MemoryArticles, options: HashtagOptions) -> TopLabels:
        return self._top(model, memory.texts)

    def mix(self, scores: np.ndarray, vocab, evidence: TopLabels, options: HashtagOptions) -> np.ndarray:
        before, q = evidence.dense(scores, vocab)
        return np.maximum(before, np.float32(options.weight) * q)

    def save(self, model: list[str], folder) -> None:
        (folder / "hashtags.json").write_text(json.dumps(model))

    def load(self, folder) -> list[str]:
        return json.loads((folder / "hashtags.json").read_text())


def test_a_component_from_outside_the_package_is_calibrated_applied_stored_and_written(tmp_path):
    """Neighbours that carry the gold label as often as five others (no threshold finds it); the article's hashtag
    names it: the component's default ``calibrate`` hook keeps it, the scorer mixes it in from the model it fits on
    the memory, and the proposal says so on the wire."""
    register_component(Hashtags)
    try:
        assert "hashtags" in registered("component")
        rows, gold, texts = [], [], []
        for i in range(40):
            g = f"g{i % 5}"
            others = [f"o{(i + j) % 9}" for j in range(5)]
            rows.append([Hit(f"n{i}_{j}", 0.9, (lb,)) for j, lb in enumerate([g] + others)])
            gold.append((g,))
            texts.append(f"Vlada in sindikat #{g} danes")
        r = Retrieval.from_neighbours(rows)
        memory = MemoryArticles(None, [""] * 5, [(f"g{j}",) for j in range(5)])  # no text: no built-in one tried
        cal = CalibrationSet(r, gold, memory=memory, validation=Queries(texts))
        result = calibrate(cal, rules=(), replay=False)
        step = next(s for s in result.steps if s["step"] == "+ hashtags")
        assert step["kept"] and step["subset_accuracy"] == 1.0 and step["lift"]["objective"][1] > 0
        params = result.params
        assert [c.name for c in params.components] == ["hashtags"]
        assert 1 / 6 < params.threshold < params.component("hashtags").weight  # re-chosen with it: the tag passes
        s = Settings(home=tmp_path)
        CalibrationStore(s).write(CalibrationRecord(collection="newsmon_sl_m", language="sl", model_version="m",
                                                    params=params.model_dump(mode="json"), objective="o"))
        assert CalibrationStore(Settings(home=tmp_path)).read("newsmon_sl_m").scoring() == params
        res = Resolved(params, "newsmon_sl_m@1", None, "calibration")
        props = Scorer(OneRecord(res, FittedModels(memory))).propose(texts[:5], ["sl"] * 5, None,
                                                                      retrieval=r.rows(range(5)), resolved=res)
        assert [[x.label for x in p.labels] for p in props] == [list(g) for g in gold[:5]]
        lp = LabelProposal.of(props[1], article_id="a1", model_version="m", memory_version="newsmon_sl_m",
                              produced_at=datetime(2024, 5, 1, 8, tzinfo=UTC))
        back = parse_event(LabelProposal, lp.to_bytes())
        assert back.scoring.components[0].name == "hashtags" and back.labels[0].label == "g1"
        assert '"hashtags"' in json.dumps(LabelProposal.model_json_schema())
    finally:
        unregister_component("hashtags")
