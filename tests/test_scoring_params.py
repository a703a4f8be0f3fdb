"""Every scoring parameter does something: each field of :class:`~newsmon.schemas.scoring.ScoringParams` and each
option of every registered component and decision rule, changed on a fixture where everything is on, changes the
scores or the decisions of the scorer (or, for ``lexical_candidates``, what it asks the knowledge memory for). A
field added without an effect, or without a line here, fails this test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pathlib import Path

import numpy as np
import pytest

from test_head_model import house_style_corpus

from newsmon.schemas.scoring import ScoringParams, options_model, registered
from newsmon.shared.scoring import FittedModels, MemoryArticles, OneRecord, Resolved, Retrieval, Scorer

D = 16


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple
    payload: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def fixture():
    """A memory of 240 house-style articles (random but label-correlated embeddings) and 12 queries with their
    top-20 neighbours (with texts, for hybrid retrieval's fusion)."""
    rng = np.random.default_rng(11)
    texts, labels = house_style_corpus(240, seed=11)
    centre = {lb: rng.standard_normal(D) for lb in ("agency", "economy", "local")}
    vecs = np.stack([sum(centre[lb] for lb in ls) + 1.2 * rng.standard_normal(D) for ls in labels]).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    labels = [tuple(ls) + ((f"rare{i % 7}",) if i % 9 == 0 else ()) for i, ls in enumerate(labels)]
    # a rare label's name in the texts of its articles and of half the queries: the label names have something to do
    texts = [t + (" rare3" if "rare3" in ls else "") for t, ls in zip(texts, labels, strict=True)]
    memory = MemoryArticles(vecs, texts, labels)
    qtexts, qlabels = house_style_corpus(12, seed=12)
    qtexts = [t + (" rare3" if i % 2 == 0 else "") for i, t in enumerate(qtexts)]
    q = np.stack([sum(centre[lb] for lb in ls) + 1.2 * rng.standard_normal(D) for ls in qlabels]).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    sims = q @ vecs.T
    rows = []
    for i in range(len(q)):
        top = np.argsort(-sims[i])[:20]
        rows.append([Hit(f"m{j}", float(sims[i, j]), labels[j], {"text": texts[j]}) for j in top])
    return memory, qtexts, q, Retrieval.from_neighbours(rows)


BASE = {"top_k": 12, "tau": 0.05, "threshold": 0.35, "lexical_weight": 0.3, "lexical_candidates": 200,
        "components": [{"name": "label_keys", "options": {"weight": 0.5, "keys": 3, "tau": 0.02}},
                       {"name": "head_model", "options": {"weight": 0.5, "c": 1.0}},
                       {"name": "label_tree", "options": {"weight": 0.3}},
                       {"name": "label_names", "options": {"weight": 0.2}}],
        "rules": [{"name": "threshold"}, {"name": "set_vote", "options": {"share": 0.3}},
                  {"name": "tail_support", "options": {"support": 2, "neighbours": 6, "similarity": 0.3}},
                  {"name": "new_label_support", "options": {"support": 1, "neighbours": 8, "similarity": 0.2}},
                  {"name": "floor", "options": {"score": 0.1}}]}


def rule_base(step: dict) -> dict:
    """A base for one rule's options: a high threshold (it proposes little), then the rule alone."""
    if step["name"] == "label_count":  # it replaces the threshold's decision
        return {**BASE, "rules": [step]}
    return {**BASE, "threshold": 0.95, "rules": [{"name": "threshold"}, step]}

#: Each field of ScoringParams -> a changed value (None: see INERT).
FIELDS = {
    "top_k": 2, "tau": 1.0, "threshold": 0.8, "bucket_thresholds": (0.05, 0.9, 0.9, 0.2),
    "label_thresholds": {"agency": 0.05, "local": 0.95}, "lexical_weight": 0.9, "lexical_candidates": None,
    "lexical_search": None, "components": [], "rules": [{"name": "threshold"}],
}
#: Fields whose effect is not on the scores of given neighbours, with where it is (checked below).
INERT = {"lexical_candidates": "how many neighbours hybrid retrieval asks the knowledge memory for",
         "lexical_search": "whether the memory's lexical top-N joins the dense candidates (fewer than N here)"}
#: Each option of each registered rule and component -> a changed value.
OPTIONS = {
    ("component", "label_keys"): {"weight": 5.0, "keys": 1, "tau": 1.0},
    ("component", "head_model"): {"weight": 1.0, "c": 100.0},
    ("component", "label_tree"): {"weight": 0.25},
    ("component", "label_names"): {"weight": 0.9, "unsure_below": 0.01},
    ("rule", "set_vote"): {"share": 0.99},
    ("rule", "tail_support"): {"support": 7, "neighbours": 1, "similarity": 0.99},
    ("rule", "new_label_support"): {"support": 8, "neighbours": 1, "similarity": 0.99},
    ("rule", "floor"): {"score": 0.99},
    ("rule", "label_count"): {"minimum": 0.9},
    ("rule", "too_few_words"): {"min_words": 40},
    ("rule", "far_from_memory"): {"similarity": 0.99},
}


def _outcome(fixture, params: dict) -> tuple:
    """The scores and decisions of the queries under ``params`` (each test's base outcome is computed once: the
    scorer is deterministic)."""
    key = (id(fixture), json.dumps(params, sort_keys=True))
    if key not in _OUTCOMES:
        _OUTCOMES[key] = _scored(fixture, params)
    return _OUTCOMES[key]


_OUTCOMES: dict[tuple, tuple] = {}


def _scored(fixture, params: dict) -> tuple:
    memory, texts, q, r = fixture
    res = Resolved(ScoringParams(**params), "r@1", frozenset({"agency", "economy", "local"}), "calibration")
    scorer = Scorer(OneRecord(res, FittedModels(memory)))
    (g,) = scorer.score(texts, ["sl"] * len(texts), q, retrieval=r, resolved=res)
    d, v = g.decision, g.vocab
    order = np.argsort(v.labels)
    return (np.round(d.scores[:, order], 6).tobytes(), d.proposed[:, order].tobytes(),
            d.decided_by[:, order].tobytes(), np.round(d.thresholds[order], 6).tobytes(), tuple(d.abstained))


def test_every_field_is_listed():
    assert set(FIELDS) == set(ScoringParams.model_fields)
    assert set(INERT) == {k for k, v in FIELDS.items() if v is None}


@pytest.mark.parametrize("name", sorted(k for k, v in FIELDS.items() if v is not None))
def test_each_field_changes_the_scores_or_the_decisions(fixture, name):
    same = _outcome(fixture, {**BASE, name: FIELDS[name]}) == _outcome(fixture, BASE)
    assert not same, f"changing {name} changes nothing"


#: Steps whose options are checked in their own module (a model no memory fits: stacking's is fitted by the
#: calibration), with each option's changed value there.
ELSEWHERE = {("component", "stacking"): ("tests/test_stacking.py", {"candidates", "iterations"})}


def test_every_option_of_every_registered_step_is_listed():
    listed = {(kind, n) for kind, n in OPTIONS}
    for kind in ("rule", "component"):
        for n in registered(kind):
            fields = set(options_model(kind, n).model_fields)
            if (kind, n) in ELSEWHERE:
                where, checked = ELSEWHERE[(kind, n)]
                assert checked == fields and all(f in Path(where).read_text(encoding="utf-8") for f in fields)
            elif fields:
                assert (kind, n) in listed, f"{kind} {n} has options {fields} and no line in OPTIONS"
                assert set(OPTIONS[(kind, n)]) == fields, (kind, n)


#: The options of each rule on its own base (:func:`rule_base`).
RULE_STEPS = {"set_vote": {"share": 0.3}, "tail_support": {"support": 2, "neighbours": 6, "similarity": 0.3},
              "new_label_support": {"support": 1, "neighbours": 8, "similarity": 0.2}, "floor": {"score": 0.1},
              "label_count": {"minimum": 0.2}, "too_few_words": {"min_words": 2},
              "far_from_memory": {"similarity": -1.0}}


@pytest.mark.parametrize("kind, step, option", [(k, s, o) for (k, s), opts in OPTIONS.items() for o in opts])
def test_each_option_changes_the_scores_or_the_decisions(fixture, kind, step, option):
    key = "rules" if kind == "rule" else "components"
    base = rule_base({"name": step, "options": RULE_STEPS[step]}) if kind == "rule" else BASE
    changed = [{**s, "options": {**s.get("options", {}), option: OPTIONS[(kind, step)][option]}}
               if s["name"] == step else s for s in base[key]]
    assert any(s["name"] == step for s in base[key])
    same = _outcome(fixture, {**base, key: changed}) == _outcome(fixture, base)
    assert not same, f"{kind} {step}: changing {option} changes nothing"


def test_lexical_candidates_set_what_the_memory_is_asked_for(fixture):
    memory, texts, q, r = fixture
    asked = []

    class Memory:
        def search(self, vectors, langs, top_k, exclude, texts, lexical_k, keep=None):
            asked.append((top_k, lexical_k))
            found = r.rows(range(len(vectors)))
            return (found if keep is None else keep(found)), [("c",)] * len(vectors)

    for n, search in ((200, True), (50, True), (200, False)):
        res = Resolved(ScoringParams(**{**BASE, "lexical_candidates": n, "lexical_search": search}))
        Scorer(OneRecord(res, FittedModels(memory)), Memory()).score(texts, ["sl"] * len(texts), q)
    assert asked == [(200, 200), (50, 50), (200, 0)]


def test_without_the_lexical_search_a_given_retrieval_is_cut_to_the_dense_candidates(fixture):
    # eval and the calibration hand the scorer one retrieval for every parameter set (the dense top-N united with
    # the lexical top-N, by cosine); without the lexical search the workers ask the memory for the dense top-N
    # alone, so the scorer must read only the first N of a given retrieval: what is measured is what streams
    memory, texts, q, r = fixture
    cut = {**BASE, "lexical_candidates": 12}
    assert _outcome(fixture, {**cut, "lexical_search": False}) == _outcome((memory, texts, q, r.head(12)), cut)
    assert _outcome(fixture, {**cut, "lexical_search": False}) != _outcome(fixture, cut)
