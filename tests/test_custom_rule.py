"""A decision rule defined outside the package (here, in this test module) is one class: registered by name, it
is calibrated, applied, stored in a calibration record and written to the wire (``decided_by``, ``scoring.rules``
and the JSON Schema's enum) with no change to ``newsmon.schemas`` and no new message version."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from pydantic import Field

from newsmon.schemas import LabelProposal, parse_event
from newsmon.schemas.scoring import Options, ScoringParams, registered
from newsmon.shared.config import Settings
from newsmon.shared.scoring import (DecisionRule, DecisionState, FittedModels, MemoryArticles, Resolved, Retrieval,
                                    Scorer, register_rule)
from newsmon.shared.scoring.calibration import CalibrationSet, calibrate
from newsmon.shared.scoring.records import CalibrationRecord, CalibrationStore
from newsmon.shared.scoring.rules import unregister_rule
from newsmon.shared.scoring.wire import proposal_fields


class TopOneOptions(Options):
    minimum: float = Field(0.0, ge=0, le=1, description="The best label's lowest score.")


class TopOne(DecisionRule):
    """Each article gets exactly its best label (when its score reaches ``minimum``), whatever came before."""

    name = "top_one"
    Options = TopOneOptions
    ORDER = 45
    GRID = ({"minimum": 0.0}, {"minimum": 0.6})

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
    props = Scorer(FittedModels(memory), lambda _lang: res).propose(["Vlada sprejela proračun"] * 4, ["sl"] * 4, None,
                                                                     retrieval=r.rows(range(4)), resolved=res)
    assert [[x.label for x in p.labels] for p in props] == [[g[0]] for g in gold[:4]]
    assert {x.decided_by for p in props for x in p.labels} == {"top_one"}
    lp = LabelProposal(article_id="a1", **proposal_fields(props[1]), model_version="m", memory_version="newsmon_sl_m",
                       produced_at="2024-05-01T08:00:00Z")
    back = parse_event(LabelProposal, lp.to_bytes())
    assert back.labels[0].decided_by == "top_one" and back.schema_version == 7
    assert "the rule “top one” proposed it" in back.labels[0].reason  # a deployment's rule, named in words
    assert back.scoring.options_of("top_one") == {"minimum": params.rule("top_one").minimum}
    schema = json.dumps(LabelProposal.model_json_schema())
    assert schema.count('"top_one"') >= 2  # decided_by's and the rules' enums
    assert ScoringParams(rules=["threshold", {"name": "top_one", "options": {"minimum": 0.3}}]).rule(
        "top_one").minimum == 0.3
