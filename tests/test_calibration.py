"""The product predictor's decision rules on small cases computed by hand, its calibration search, and the
calibration record's round trip (written, read after a restart, overridden by an explicit setting)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from newsmon.schemas.scoring import ScoringParams, legacy_params, registered
from newsmon.shared.config import Settings
from newsmon.shared.predictors import get_predictor
from newsmon.shared.scoring import LabelVocab, Retrieval, decide, explain
from newsmon.shared.scoring.calibration import CalibrationSet, calibrate
from newsmon.shared.scoring.records import CalibrationRecord, CalibrationStore, effective_scoring, record_id
from newsmon.shared.scoring.rules.label_count import predicted_label_count
from newsmon.shared.scoring.rules.new_label_support import new_label_replay
from newsmon.shared.scoring.rules.set_vote import set_vote
from newsmon.shared.scoring.rules.tail_support import tail_support
from newsmon.shared.scoring.rules.threshold_search import bootstrap_objective as bootstrap_interval

RULES = registered("rule")


def Params(**flat) -> ScoringParams:
    """The parameters from the flat fields of calibration records before layout version 2 (floor=0.1, ...)."""
    return ScoringParams(**legacy_params(flat))


def newsmon_decide(r, vocab, params, known_labels=None, label_hits=None, label_counts=None, head=None):
    evidence = {k: v for k, v in (("label_keys", label_hits), ("head_model", head)) if v is not None}
    d = decide(r, vocab, params, evidence, label_counts, known_labels)
    return d.scores, d.proposed


def newsmon_decision(r, vocab, params, reasons=False):
    return decide(r, vocab, params, reasons=reasons)


def _calibrate(r, gold, rules=None, new_labels=True, memory_labels=None, label_counts=None, objective=None):
    cal = CalibrationSet(r, list(gold), label_counts=label_counts,
                         known_labels=set(memory_labels) if memory_labels is not None else None)
    if objective is not None:
        cal.objective = objective
    return calibrate(cal, rules=rules, replay=new_labels)


@dataclass
class Hit:
    article_id: str
    similarity: float
    labels: tuple


def _r(rows) -> Retrieval:
    return Retrieval.from_neighbours([[Hit(f"n{j}", s, lb) for j, (s, lb) in enumerate(row)] for row in rows])


def test_threshold_alone_is_rae_xmc():
    # tau large -> equal weights over the 4 neighbours: a 3/4, b 1/4
    r = _r([[(0.9, ("a",)), (0.9, ("a",)), (0.9, ("a", "b")), (0.9, ("c",))]])
    vocab = LabelVocab()
    scores, chosen = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.5))
    got = dict(zip(vocab.labels, scores[0].round(3)))
    assert got == {"a": 0.75, "b": 0.25, "c": 0.25}
    assert [vocab.labels[j] for j in np.flatnonzero(chosen[0])] == ["a"]


def test_floor_proposes_the_best_label_only_when_nothing_passes():
    r = _r([[(0.9, ("a",)), (0.9, ("b",)), (0.9, ("a",)), (0.9, ("c",))],   # a 0.5, not > 0.6
            [(0.9, ("a",)), (0.9, ("a",)), (0.9, ("a",)), (0.9, ("b",))]])  # a 0.75 passes
    vocab = LabelVocab()
    _, off = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.6))
    assert off.sum(axis=1).tolist() == [0, 1]
    _, on = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.6, floor=0.4))
    assert [vocab.labels[j] for j in np.flatnonzero(on[0])] == ["a"] and on.sum(axis=1).tolist() == [1, 1]
    _, high = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.6, floor=0.55))
    assert high.sum(axis=1).tolist() == [0, 1]


def test_set_vote_proposes_the_winning_exact_label_set():
    # sets: {a,b} twice, {a} once, {c} once -> {a,b} holds 0.5 of the weight
    r = _r([[(0.9, ("a", "b")), (0.9, ("b", "a")), (0.9, ("a",)), (0.9, ("c",))]])
    sets, w = set_vote(r, 4, 100.0)
    assert sets == [("a", "b")] and w[0] == pytest.approx(0.5)
    vocab = LabelVocab()
    _, base = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.6))
    assert [vocab.labels[j] for j in np.flatnonzero(base[0])] == ["a"]  # a 0.75; b 0.5 is not > 0.6
    _, voted = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.6, set_vote=0.5))
    assert sorted(vocab.labels[j] for j in np.flatnonzero(voted[0])) == ["a", "b"]
    _, short = newsmon_decide(r, vocab, Params(top_k=4, tau=100.0, threshold=0.6, set_vote=0.51))
    assert [vocab.labels[j] for j in np.flatnonzero(short[0])] == ["a"]


def test_each_proposed_label_says_which_rule_proposed_it():
    # 8 neighbours, equal weights (1/8 each), every label set once unless said. row 0: a 6/8 passes 0.6
    # (threshold). row 1: the set {a, b} holds 4/8: the vote proposes a (7/8) and b (4/8, under its threshold).
    # row 2: x on the first 3 close neighbours (tail support), 3/8; h 7/8 passes. row 3: nothing passes, no close
    # neighbour: the floor proposes the best label, e 4/8.
    r = _r([[(0.9, ("a",)), (0.9, ("a", "c")), (0.9, ("a", "d")), (0.9, ("a", "e")), (0.9, ("a", "f")),
             (0.9, ("a", "g")), (0.9, ("d",)), (0.9, ("h",))],
            [(0.9, ("a", "b"))] * 4 + [(0.9, ("a",)), (0.9, ("a", "c")), (0.9, ("a", "c", "d")), (0.9, ("c",))],
            [(0.95, ("x", "h")), (0.95, ("x", "h", "y")), (0.95, ("x",)), (0.95, ("h",)), (0.5, ("h", "i")),
             (0.5, ("h", "j")), (0.5, ("h", "k")), (0.5, ("h", "l"))],
            [(0.8, ("e",)), (0.8, ("e", "f")), (0.8, ("e", "g")), (0.8, ("e", "m")), (0.8, ("f",)), (0.8, ("g",)),
             (0.8, ("m",)), (0.8, ("n",))]])
    vocab = LabelVocab()
    p = Params(top_k=8, tau=100.0, threshold=0.6, set_vote=0.5, tail_support=3, tail_neighbours=4,
               tail_similarity=0.9, floor=0.3)
    d = newsmon_decision(r, vocab, p, reasons=True)
    got = [{vocab.labels[j]: RULES[d.decided_by[i, j]] for j in np.flatnonzero(d.proposed[i])}
           for i in range(4)]
    assert got == [{"a": "threshold"}, {"a": "set_vote", "b": "set_vote"},
                   {"h": "threshold", "x": "tail_support"}, {"e": "floor"}]
    assert (d.decided_by >= 0).tolist() == d.proposed.tolist()  # a code exactly where a label is proposed
    assert d.thresholds.tolist() == [0.6] * len(vocab)
    scores, proposed = newsmon_decide(r, LabelVocab(), p)  # the same decisions without the reasons
    assert (proposed == d.proposed).all() and np.array_equal(scores, d.scores)
    # explain carries them, with each label's threshold, to the proposals and their candidates
    (first, second, *_rest) = explain(r, d, vocab, candidates=3)
    assert [(x.label, x.decided_by, x.threshold) for x in second.labels] == [("a", "set_vote", 0.6),
                                                                              ("b", "set_vote", 0.6)]
    assert [(x.label, x.decided_by, x.threshold) for x in first.candidates] == [("d", None, 0.6), ("c", None, 0.6),
                                                                                 ("e", None, 0.6)]


def test_label_count_proposes_each_articles_n_best_labels():
    # 4 neighbours, equal weights. row 0: label counts 2, 3, 3, 1 -> n = round(2.25) = 2; a 1.0, b 0.75, c 0.5:
    # c reaches the minimum 0.3 but is third. row 1: counts 1, 1, 1, 2 -> n = 1; d 0.75, e 0.5. row 2: counts
    # 3, 3, 2, 2 -> 2.5, halves up: n = 3; f 1.0, g 0.5, the rest 0.25 under the minimum: f and g only.
    r = _r([[(0.9, ("a", "b")), (0.9, ("a", "b", "c")), (0.9, ("a", "b", "c")), (0.9, ("a",))],
            [(0.9, ("d",)), (0.9, ("d",)), (0.9, ("e",)), (0.9, ("d", "e"))],
            [(0.9, ("f", "g", "h")), (0.9, ("f", "g", "i")), (0.9, ("f", "j")), (0.9, ("f", "k"))]])
    assert predicted_label_count(r, 4, 100.0).tolist() == [2, 1, 3]
    p = Params(top_k=4, tau=100.0, threshold=0.1, label_count=0.3)
    vocab = LabelVocab()
    d = newsmon_decision(r, vocab, p, reasons=True)
    got = [{vocab.labels[j]: RULES[d.decided_by[i, j]] for j in np.flatnonzero(d.proposed[i])}
           for i in range(3)]
    assert got == [{"a": "label_count", "b": "label_count"}, {"d": "label_count"},
                   {"f": "label_count", "g": "label_count"}]
    assert d.thresholds.tolist() == [0.3] * len(vocab)  # its minimum is every label's bar
    _, by_threshold = newsmon_decide(r, LabelVocab(), Params(top_k=4, tau=100.0, threshold=0.1))
    assert by_threshold.sum() == 11  # the threshold 0.1 alone proposes every label (3 + 2 + 6): the rule replaced it
    (first, *_rest) = explain(r, d, vocab, candidates=3)
    assert [(x.label, x.decided_by, x.threshold) for x in first.labels] == [("a", "label_count", 0.3),
                                                                             ("b", "label_count", 0.3)]
    assert [x.label for x in first.candidates] == ["c"]


def test_calibration_keeps_the_label_count_rule_where_no_threshold_separates():
    # b scores 0.5 in both kinds of article: gold {a} where the neighbours carry 1.25 labels, gold {a, b} where
    # they carry 2.5; no threshold gets both kinds right, the label count does (any minimum in (0.25, 0.5])
    one = [(0.9, ("a",)), (0.9, ("a",)), (0.9, ("b",)), (0.9, ("a", "b"))]
    two = [(0.9, ("a", "b", "c")), (0.9, ("a", "b", "d")), (0.9, ("a", "e")), (0.9, ("a", "f"))]
    result = _calibrate(_r([one] * 50 + [two] * 50), [("a",)] * 50 + [("a", "b")] * 50, rules=("label_count",),
                       new_labels=False)
    step = result.steps[-1]
    assert step["step"] == "+ label_count" and step["kept"] and step["lift_interval"][0] > 0
    assert step["subset_accuracy"] == 1.0 and result.steps[0]["subset_accuracy"] <= 0.5
    assert 0.25 < result.params.rule("label_count").minimum <= 0.5


@pytest.mark.parametrize("fixed, kept", [(1, False), (30, True)])
def test_a_lever_is_kept_only_when_its_lift_is_beyond_the_noise(fixed, kept):
    # gold {a, b} everywhere. Most articles: a, b 3/4, c 1/4 (a threshold in [0.25, 0.75) gets them right). The
    # `fixed` others: a, b and c at 2/4 each, which no threshold separates; the label-set vote ({a, b} holds 2/4)
    # gets them right. One article of 100 is a lift inside the noise (a resample without it shows none).
    easy = [(0.9, ("a", "b"))] * 3 + [(0.9, ("c",))]
    hard = [(0.9, ("a", "b")), (0.9, ("a", "b")), (0.9, ("c", "d")), (0.9, ("c", "e"))]
    r = _r([hard] * fixed + [easy] * (100 - fixed))
    result = _calibrate(r, [("a", "b")] * 100, rules=("set_vote",), new_labels=False)
    step = result.steps[-1]
    assert step["step"] == "+ set_vote" and step["objective"] > result.steps[0]["objective"]  # it does lift
    assert step["kept"] is kept and (step["lift_interval"][0] > 0) is kept
    assert (result.params.rule("set_vote") is not None) is kept


def test_tail_support_lets_three_close_confirmations_carry_a_new_label():
    # a new label 'x' on 3 close neighbours among 50 that carry the head label 'h': its softmax share is small
    row = [(0.95, ("x", "h")), (0.94, ("x",)), (0.93, ("x",))] + [(0.92, ("h",))] * 47
    r = _r([row])
    vocab = LabelVocab()
    scores, base = newsmon_decide(r, vocab, Params(top_k=50, tau=0.04, threshold=0.3))
    x = vocab.index["x"]
    assert scores[0, x] < 0.3 and not base[0, x]
    assert tail_support(r, vocab, 3, 5, 0.9)[0, x]
    _, tail = newsmon_decide(r, vocab, Params(top_k=50, tau=0.04, threshold=0.3, tail_support=3,
                                              tail_neighbours=5, tail_similarity=0.9))
    assert tail[0, x]
    _, far = newsmon_decide(r, vocab, Params(top_k=50, tau=0.04, threshold=0.3, tail_support=3,
                                             tail_neighbours=5, tail_similarity=0.96))
    assert not far[0, x]


def test_new_label_rule_serves_only_labels_the_calibration_never_saw():
    # 'x' sits on 2 of the first 3 neighbours (cosine 0.86, 0.84) among 30 that carry the head label 'h'
    row = [(0.86, ("x",)), (0.85, ("h",)), (0.84, ("x", "h"))] + [(0.83, ("h",))] * 27
    r = _r([row])
    on = Params(top_k=30, tau=0.04, threshold=0.3, new_label_support=2, new_label_neighbours=3,
                new_label_similarity=0.8)
    vocab = LabelVocab()
    scores, base = newsmon_decide(r, vocab, Params(top_k=30, tau=0.04, threshold=0.3))
    x = vocab.index["x"]
    assert scores[0, x] < 0.3 and not base[0, x]
    _, new = newsmon_decide(r, vocab, on, known_labels={"h"})
    assert new[0, x] and new[0, vocab.index["h"]]
    assert not newsmon_decide(r, vocab, on, known_labels={"h", "x"})[1][0, x]  # known: the calibrated rules decide
    assert not newsmon_decide(r, vocab, on)[1][0, x]  # no record lists the known labels: off
    strict = Params(top_k=30, tau=0.04, threshold=0.3, new_label_support=2, new_label_neighbours=3,
                    new_label_similarity=0.85)  # only one of the two at >= 0.85
    assert not newsmon_decide(r, vocab, strict, known_labels={"h"})[1][0, x]
    narrow = Params(top_k=30, tau=0.04, threshold=0.3, new_label_support=2, new_label_neighbours=2,
                    new_label_similarity=0.8)  # the 2nd carrier is 3rd
    assert not newsmon_decide(r, vocab, narrow, known_labels={"h"})[1][0, x]


def test_new_label_replay_counts_by_hand():
    # label 'x' on exactly 3 memory articles c1..c3 (all confirmed); 'y' on one article (not replayed)
    c1, c2, c3, o = ("c1", ("x",)), ("c2", ("x",)), ("c3", ("x",)), ("o", ("y",))
    rows = [[(c1, 0.9), (c2, 0.85), (o, 0.8)],  # carries x: 2 close confirmations -> rule TP, 1-NN TP
            [(c1, 0.9), (o, 0.8), (c3, 0.7)],  # carries x: one close confirmation -> rule FN, 1-NN TP
            [(o, 0.9), (c1, 0.85), (c3, 0.7)]]  # no x: 2 confirmations, one under 0.8 -> rule TN, 1-NN TN
    r = Retrieval.from_neighbours([[Hit(a, s, lb) for (a, lb), s in row] for row in rows])
    gold = [("x",), ("x", "y"), ("y",)]
    tallies, n = new_label_replay(r, gold, options=[(2, 3, 0.8), (2, 3, 0.6)], articles=(3, 3))
    assert n == 1
    assert tallies[None] == (2, 0, 0)  # the 1-NN rule
    assert tallies[(2, 3, 0.8)] == (1, 0, 1)
    assert tallies[(2, 3, 0.6)] == (2, 1, 0)


def test_calibration_chooses_the_new_label_rule_by_replay_and_lists_the_known_labels():
    rows, gold = [], []
    for i in range(120):  # 12 stories of 10 articles; each story's label sits on its 10 articles in the memory
        story = i // 10
        near = [(f"s{story}_{j}", 0.9 - 0.005 * j, (f"t{story}",)) for j in range(10) if j != i % 10]
        far = [(f"s{(story + 1 + j) % 12}_{j}", 0.6 - 0.01 * j, (f"t{(story + 1 + j) % 12}",)) for j in range(41)]
        rows.append([Hit(a, s, lb) for a, s, lb in near + far])
        gold.append((f"t{story}",))
    r = Retrieval.from_neighbours(rows)
    res = _calibrate(r, gold, memory_labels=[f"t{k}" for k in range(12)])
    step = res.steps[-1]
    assert step["step"] == "+ new_label_support" and step["replay"]["labels"] == 12
    assert step["kept"] and step["replay"]["f1"] > step["replay"]["one_nn_f1"]
    assert res.params.rule("new_label_support").support >= 2
    assert res.known_labels == sorted(f"t{k}" for k in range(12))
    assert _calibrate(r, gold, new_labels=False).params.rule("new_label_support") is None


def test_calibration_is_deterministic_and_keeps_only_rules_that_lift():
    rng = np.random.default_rng(0)
    rows, gold = [], []
    for i in range(60):  # two well-separated topics; each article's neighbours mostly share its label set
        mine = ("a",) if i % 2 else ("b", "c")
        other = ("b", "c") if i % 2 else ("a",)
        nb = [(0.9 - 0.01 * j, mine if rng.random() < 0.8 else other) for j in range(10)]
        rows.append(nb)
        gold.append(mine)
    r = _r(rows)
    one, two = _calibrate(r, gold), _calibrate(r, gold)
    assert one.params == two.params and one.figures == two.figures
    assert one.figures["subset_accuracy"] > 0.9 and one.figures["objective_lo"] <= one.figures["objective"]
    assert one.steps[0]["kept"] and [s["step"] for s in one.steps][1:] == ["+ floor", "+ set_vote",
                                                                         "+ label_count", "+ tail_support",
                                                                         "+ far_from_memory", "+ new_label_support"]
    for s in one.steps[1:-1]:
        best = max(t["objective"] for t in one.steps[:one.steps.index(s)] if t["kept"])
        if s["step"] in ("+ tail_support", "+ far_from_memory"):  # kept unless they lower the objective
            assert s["kept"] == (s["objective"] >= best - 1e-9)
        else:
            assert s["kept"] == (s["objective"] > best + 1e-9)


def test_bootstrap_interval_brackets_the_objective():
    Y = np.array([[1, 0], [0, 1], [1, 1], [1, 0]], dtype=bool)
    P = np.array([[1, 0], [0, 0], [1, 1], [0, 1]], dtype=bool)
    lo, hi = bootstrap_interval(Y, P)
    assert 0 <= lo <= hi <= 2


def test_newsmon_predictor_calibrates_on_memory_and_validation_only():
    from newsmon.shared.predictors import QueryBatch, TrainingSet

    vocab = LabelVocab(["a", "b"])
    loo = _r([[(0.9, ("a",)), (0.8, ("a",))], [(0.9, ("b",)), (0.8, ("b",))]] * 5)
    train = TrainingSet(["x"] * 10, vocab.encode([("a",), ("b",)] * 5), vocab, retrieval=loo)
    p = get_predictor("newsmon").fit(train)
    assert p.calibration is not None and p.calibration.figures["n"] == 10
    s, d = p.score_and_decide(QueryBatch(["Vlada sprejela proračun"], ["sl"],
                                         retrieval=_r([[(0.9, ("b",)), (0.85, ("b",))]])))
    assert s.shape == (1, 2) and d[0].tolist() == [False, True]


def test_calibration_record_round_trip_and_explicit_settings_win(tmp_path, monkeypatch):
    s = Settings(home=tmp_path)
    rec = CalibrationRecord(collection="newsmon_sl_m1", language="sl", model_version="m1",
                            params=Params(top_k=20, tau=0.02, threshold=0.35, floor=0.1,
                                          bucket_thresholds=(0.5, 0.4, 0.3, 0.3),
                                          label_thresholds={"earn": 0.45}, label_count=0.3).model_dump(mode="json"),
                            objective="micro_f1 + subset_accuracy", figures={"micro_f1": 0.5})
    CalibrationStore(s).write(rec)
    again = CalibrationStore(Settings(home=tmp_path)).read("newsmon_sl_m1")  # a new process reads the file
    assert again == rec and record_id(again).startswith("newsmon_sl_m1@")
    assert CalibrationStore(s).read("newsmon_hr_m1") is None
    params, source = effective_scoring(s, again)
    assert (params.top_k, params.tau, params.threshold, params.rule("floor").score, source) == (
        20, 0.02, 0.35, 0.1, "calibration")
    monkeypatch.setenv("NEWSMON_SCORING__THRESHOLD", "0.6")
    explicit = Settings(home=tmp_path)
    params, source = effective_scoring(explicit, again)
    assert (params.top_k, params.threshold, source) == (20, 0.6, "calibration+settings")
    assert params.bucket_thresholds is None and params.label_thresholds is None  # the explicit one decides
    assert params.rule("label_count") is None  # and the label-count rule, which would replace it, is off
    assert [r.name for r in params.rules] == ["threshold", "floor"]
    assert effective_scoring(s, again)[0].bucket_thresholds == (0.5, 0.4, 0.3, 0.3)
    assert effective_scoring(s, again)[0].rule("label_count").minimum == 0.3
    assert effective_scoring(s, again)[0].label_thresholds == {"earn": 0.45}
    monkeypatch.delenv("NEWSMON_SCORING__THRESHOLD")
    monkeypatch.setenv("NEWSMON_SCORING__BUCKET_THRESHOLDS", "[0.4, 0.4, 0.4, 0.4]")
    params, _ = effective_scoring(Settings(home=tmp_path), again)
    assert params.bucket_thresholds == (0.4, 0.4, 0.4, 0.4) and params.label_thresholds is None
    monkeypatch.setenv("NEWSMON_SCORING__LABEL_THRESHOLDS", '{"earn": 0.3}')
    params, _ = effective_scoring(Settings(home=tmp_path), again)
    assert params.label_thresholds == {"earn": 0.3} and params.rule("label_count") is None
    monkeypatch.setenv("NEWSMON_SCORING__RULES", '[{"name": "label_count", "options": {"minimum": 0.2}}]')
    assert effective_scoring(Settings(home=tmp_path), again)[0].rule("label_count").minimum == 0.2  # explicit too
    monkeypatch.delenv("NEWSMON_SCORING__RULES")
    monkeypatch.delenv("NEWSMON_SCORING__BUCKET_THRESHOLDS")
    monkeypatch.delenv("NEWSMON_SCORING__LABEL_THRESHOLDS")
    assert effective_scoring(explicit, None) == (explicit.scoring, "settings")
    assert effective_scoring(s, None) == (s.scoring, "defaults")
    assert [r.name for r in ScoringParams().rules] == ["threshold", "too_few_words"]
    assert ScoringParams().components == []
    assert again.known_labels is None  # a record without a label list: the new-label rule stays off
    listed = rec.model_copy(update={"labels": ["a", "b"]})
    CalibrationStore(s).write(listed)
    assert CalibrationStore(Settings(home=tmp_path)).read("newsmon_sl_m1").known_labels == {"a", "b"}


def test_calibration_record_in_server_mode_reaches_every_client(tmp_path):
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "qdrant"))  # local mode speaks the server's client API
    s = Settings(home=tmp_path)
    s.memory.url = "http://qdrant.invalid:6333"
    rec = CalibrationRecord(collection="newsmon_en_m1", language="en", model_version="m1",
                            params=Params(top_k=10).model_dump(mode="json"), objective="micro_f1 + subset_accuracy")
    CalibrationStore(s, client=client).write(rec)
    assert CalibrationStore(s, client=client, ttl_s=0).read("newsmon_en_m1") == rec
    client.close()


def test_lexical_fusion_reranks_dense_candidates_by_shared_words():
    from newsmon.shared.scoring.lexical import TermVectors, fuse, local_tfidf_cosine

    r = Retrieval(np.array([["a", "b", ""]], dtype=object), np.array([[0.90, 0.85, -np.inf]], dtype=np.float32),
                  [[("x",), ("y",), ()]], None, [["vlada sprejela proračun", "krka poročala dobiček krka", ""]])
    terms = TermVectors()
    lex = local_tfidf_cosine(terms.rows(["krka dobiček"])[0], terms.rows(r.texts[0][:2]))
    assert lex[0] == 0.0 and 0.5 < lex[1] <= 1.0
    dense = fuse(r, ["krka dobiček"], 0.0, 2)
    assert dense.ids[0].tolist() == ["a", "b"]
    fused = fuse(r, ["krka dobiček"], 0.5, 2, terms)
    assert fused.ids[0].tolist() == ["b", "a"] and fused.labels[0] == [("y",), ("x",)]
    assert fused.sims[0, 0] == pytest.approx(0.5 * 0.85 + 0.5 * lex[1], abs=1e-6)
    assert fused.sims[0, 1] == pytest.approx(0.45, abs=1e-6)
    with pytest.raises(ValueError, match="texts"):
        fuse(Retrieval(r.ids, r.sims, r.labels), ["q"], 0.5, 2)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 10_000), st.booleans())
def test_local_tfidf_cosine_is_the_formula(n, seed, far_columns):
    """The O(nnz) local TF-IDF cosine equals the formula computed densely over the columns involved (the local
    IDF ``log((1 + N) / (1 + df)) + 1`` on the candidates' terms, weight 1 on the query's other terms; empty rows
    0), for random rows with shared and private terms, empty rows, and columns at the ends of the feature space."""
    import scipy.sparse as sp

    from newsmon.shared.scoring.lexical import local_tfidf_cosine
    from newsmon.shared.terms import N_FEATURES

    rng = np.random.default_rng(seed)
    pool = rng.choice(N_FEATURES, 30, replace=False) if far_columns else np.arange(30)
    pool[0], pool[-1] = 0, N_FEATURES - 1
    used = np.unique(pool)  # the columns involved: the formula is computed densely over these only

    def row() -> dict[int, float]:
        cols = rng.choice(pool, rng.integers(0, 8), replace=False)
        return dict(zip(cols.tolist(), (rng.random(len(cols)).astype(np.float32) + 0.1).tolist(), strict=True))

    def csr(rows: list[dict[int, float]]) -> sp.csr_matrix:
        """The rows in the whole feature space (``(len(rows), N_FEATURES)``), as the lexical index stores them."""
        r = np.array([i for i, x in enumerate(rows) for _ in x], dtype=np.int64)
        c = np.array([col for x in rows for col in x], dtype=np.int64)
        v = np.array([val for x in rows for val in x.values()], dtype=np.float32)
        m = sp.csr_matrix((v, (r, c)), shape=(len(rows), N_FEATURES), dtype=np.float32)
        m.sort_indices()
        return m

    def dense(x: dict[int, float]) -> np.ndarray:
        return np.array([x.get(int(col), 0.0) for col in used], dtype=np.float32)

    q_row, d_rows = row(), [row() for _ in range(n)]
    got = local_tfidf_cosine(csr([q_row]), csr(d_rows))
    q, D = dense(q_row), np.stack([dense(x) for x in d_rows])
    df = (D > 0).sum(axis=0)
    idf = np.where(df > 0, np.log((1.0 + n) / (1.0 + df)) + 1.0, 1.0)
    qw, Dw = q * idf, D * idf
    want = [float(qw @ d) / (np.linalg.norm(qw) * np.linalg.norm(d)) if np.linalg.norm(qw) > 0
            and np.linalg.norm(d) > 0 else 0.0 for d in Dw]
    assert got.dtype == np.float32 and got.shape == (n,)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_tail_support_reads_the_dense_cosine_after_lexical_fusion():
    # after hybrid retrieval the ranking score is the fusion (about 0.5 here), not a cosine: the tail rule's
    # cosine threshold must read the neighbours' dense cosines (Retrieval.cosine)
    from newsmon.shared.scoring.lexical import fuse

    row = [(0.95, ("x",)), (0.94, ("x",)), (0.93, ("x",))] + [(0.80, ("h",))] * 20
    texts = ["vlada proračun davki"] * 3 + ["nogomet tekma"] * 20
    base = _r([row])
    r = Retrieval(base.ids, base.sims, base.labels, None, [texts])
    fused = fuse(r, ["vlada pokojnine zakon reforma"], 0.5, 23)
    assert fused.sims[0, 0] < 0.9 and fused.cosine[0, :3].tolist() == pytest.approx([0.95, 0.94, 0.93])
    vocab = LabelVocab()
    assert tail_support(fused, vocab, 3, 5, 0.9)[0, vocab.index["x"]]
    assert not tail_support(Retrieval(fused.ids, fused.sims, fused.labels), vocab, 3, 5, 0.9)[0, vocab.index["x"]]


def test_calibration_keeps_tail_support_when_it_does_not_lower_the_objective():
    # no label of this corpus is carried by 3 close neighbours beyond what the threshold already proposes: the
    # tail rule changes nothing on the calibration articles, and is kept for the labels that come later
    rows, gold = [], []
    for i in range(40):
        mine = ("a",) if i % 2 else ("b",)
        rows.append([(0.80 - 0.001 * j, mine) for j in range(10)])
        gold.append(mine)
    result = _calibrate(_r(rows), gold)
    tail = next(s for s in result.steps if s["step"] == "+ tail_support")
    assert tail["step"] == "+ tail_support" and tail["kept"] and result.params.rule("tail_support").support > 0
    assert tail["objective"] == pytest.approx(result.steps[0]["objective"])


def test_a_proposal_shows_the_cosine_of_its_neighbours_after_fusion():
    # the wire's `similarity` is the cosine of the embeddings (LabelProposal schema); the fused ranking score of
    # hybrid retrieval is lower (about 0.5 here) and must not leak into it
    from newsmon.shared.scoring.lexical import fuse

    row = [(0.95, ("x",)), (0.94, ("x",)), (0.93, ("x",))] + [(0.80, ("h",))] * 5
    base = _r([row])
    r = fuse(Retrieval(base.ids, base.sims, base.labels, None, [["vlada proračun davki"] * 3 + ["nogomet"] * 5]),
             ["vlada pokojnine zakon reforma"], 0.5, 8)
    vocab = LabelVocab()
    p = explain(r, decide(r, vocab, Params(top_k=8, tau=0.04, threshold=0.3)), vocab)[0]
    x = next(lb for lb in p.labels if lb.label == "x")
    assert [s for _, s in x.neighbours] == pytest.approx([0.95, 0.94, 0.93]) and r.sims[0, 0] < 0.9


def test_label_keys_are_normalised_sums_and_leave_one_out_takes_the_article_out():
    from newsmon.shared.scoring.components.label_keys import LabelKeys

    X = np.array([[1, 0], [0.8, 0.6], [0, 1]], dtype=np.float32)
    keys = LabelKeys(2).add(X, [("a",), ("a", "b"), ("b",)])
    hits = keys.top(np.array([[1, 0]], dtype=np.float32), 2)
    # key a = (1.8, 0.6) / |.| -> cosine 1.8 / sqrt(3.6); key b = (0.8, 1.6) / |.| -> 0.8 / sqrt(3.2)
    assert hits.labels == [["a", "b"]]
    assert hits.cosines[0].tolist() == pytest.approx([1.8 / np.sqrt(3.6), 0.8 / np.sqrt(3.2)], abs=1e-6)
    loo = keys.top(X[:1], 2, own_vectors=X[:1], own_labels=[("a",)])  # article 0 out: key a = (0.8, 0.6)
    assert loo.labels == [["a", "b"]] and loo.cosines[0, 0] == pytest.approx(0.8, abs=1e-6)
    alone = keys.top(X[2:], 2, own_vectors=X[2:], own_labels=[("b",)])  # key b is then article 1's alone
    assert alone.labels == [["b", "a"]]
    assert alone.cosines[0].tolist() == pytest.approx([0.6, 0.6 / np.sqrt(3.6)], abs=1e-6)
    renamed = hits.relabel(lambda t: {"a": ("c",), "b": ()}[t[0]])  # a renamed to c, b retired
    assert renamed.labels == [["c"]] and renamed.cosines[0, 1] == -np.inf


def test_label_keys_mix_into_the_scores_with_weight_lambda():
    from newsmon.shared.scoring.components.label_keys import LabelHits

    r = _r([[(0.9, ("a",)), (0.9, ("b",))]])  # neighbours: a 0.5, b 0.5
    hits = LabelHits([["b", "c"]], np.array([[0.9, 0.9]], dtype=np.float32))  # keys: b 0.5, c 0.5
    vocab = LabelVocab()
    on = Params(top_k=2, tau=1.0, threshold=0.45, label_lambda=1.0, label_keys=2, label_tau=0.01)
    scores, chosen = newsmon_decide(r, vocab, on, label_hits=hits)
    got = {lb: round(float(scores[0, vocab.index[lb]]), 4) for lb in vocab.labels}
    assert got == {"a": 0.25, "b": 0.5, "c": 0.25}  # (neighbours + 1 * keys) / (1 + 1)
    assert [vocab.labels[j] for j in np.flatnonzero(chosen[0])] == ["b"]
    off = newsmon_decide(r, LabelVocab(), Params(top_k=2, tau=1.0, threshold=0.45), label_hits=hits)[0]
    assert off.shape == (1, 2) and off[0].tolist() == pytest.approx([0.5, 0.5])  # lambda 0: keys unused


def test_bucket_thresholds_use_each_labels_frequency_in_the_memory():
    from newsmon.shared.scoring.rules.threshold import column_thresholds

    # neighbours: r (rare, 3 memory articles) 0.3, m (11-99) 0.3, f (frequent, 800) 0.4 of the weight
    r = _r([[(0.9, ("r",)), (0.9, ("m",)), (0.9, ("f",)), (0.9, ("r", "m", "f")), (0.9, ("f",))] + [(0.9, ())] * 5])
    counts = {"r": 3, "m": 40, "f": 800}
    vocab = LabelVocab()
    p = Params(top_k=10, tau=1.0, threshold=0.5, bucket_thresholds=(0.25, 0.35, 0.2, 0.45))
    scores, chosen = newsmon_decide(r, vocab, p, label_counts=counts)
    assert {lb: round(float(scores[0, vocab.index[lb]]), 2) for lb in "rmf"} == {"r": 0.2, "m": 0.2, "f": 0.3}
    assert column_thresholds(vocab, p, counts).tolist() == [0.25, 0.35, 0.45]
    assert not chosen.any()  # each under its own bucket's threshold
    lower = p.model_copy(update={"bucket_thresholds": (0.15, 0.35, 0.2, 0.25)})
    _, chosen = newsmon_decide(r, vocab, lower, label_counts=counts)
    assert sorted(vocab.labels[j] for j in np.flatnonzero(chosen[0])) == ["f", "r"]
    _, new = newsmon_decide(r, vocab, lower, label_counts={"m": 40, "f": 800})  # r unknown: the rare bucket
    assert new[0, vocab.index["r"]]
    assert column_thresholds(vocab, lower, None).tolist() == [0.5, 0.5, 0.5]  # no counts: the one threshold
    assert column_thresholds(vocab, Params(threshold=0.3), counts).tolist() == [0.3, 0.3, 0.3]
    with pytest.raises(ValueError, match="bucket thresholds must lie in"):
        ScoringParams(bucket_thresholds=(0.2, 0.2, 1.2, 0.2))


def test_calibration_tries_bucket_thresholds_and_keeps_them_only_when_they_lift():
    # a frequent label 'f' on most neighbours of every article, carried by only half the articles; rare labels
    # 'r<i>' on 2 of the 10 neighbours of the article that carries them: one threshold cannot serve both
    rows, gold, counts = [], [], {"f": 600}
    for i in range(40):
        rare = f"r{i}"
        counts[rare] = 3
        f = ("f",) if i % 2 else ()
        rows.append([(0.9, (rare,) + f), (0.9, (rare,))] + [(0.9, ("f",))] * 5 + [(0.9, ())] * 3)
        gold.append((rare,) + f)
    r = _r(rows)
    res = _calibrate(r, gold, label_counts=counts, rules=())
    step = next(s for s in res.steps if s["step"] == "+ bucket thresholds")
    base = res.steps[0]["objective"]
    assert step["kept"] == (step["objective"] > base + 1e-9)
    assert step["kept"] and res.params.bucket_thresholds is not None
    # the rare labels pass, the frequent one where it is wrong not: every article's label set, as the decision
    # compares the scores (whatever k the base grid took: equal similarities, a label's share of the first k)
    vocab = LabelVocab()
    _, chosen = newsmon_decide(r, vocab, res.params, label_counts=counts)
    assert [{vocab.labels[j] for j in np.flatnonzero(row)} for row in chosen] == [set(g) for g in gold]
    _, one = newsmon_decide(r, LabelVocab(), res.params.model_copy(update={"bucket_thresholds": None}),
                            label_counts=counts)
    assert one.sum(axis=1).tolist() != [len(g) for g in gold]  # one threshold cannot serve both
    assert "+ bucket thresholds" not in [s["step"] for s in _calibrate(r, gold, rules=()).steps]


@dataclass
class TextHit:
    article_id: str
    similarity: float
    labels: tuple
    payload: dict


def _lexical_case(n: int, far: bool) -> CalibrationSet:
    """``n`` articles, each with 200 dense candidates (cosine 0.9-0.8, the label ``wrong``, no shared words) and 5
    candidates sharing the article's own rare words and carrying its label, at cosine 0.75 (``far``: beyond the
    dense top 200, found only by the lexical search) or 0.85 (among the dense candidates, below the wrong ones that
    the dense order puts first)."""
    from newsmon.shared.scoring.calibration import LEXICAL_CANDIDATES

    rows, gold, texts = [], [], []
    for i in range(n):
        label, words = f"topic{i % 4}", f"podjetje{i % 4} stavka{i % 4} direktor{i % 4}"
        row = [TextHit(f"d{i}-{j}", 0.9 - 0.1 * j / LEXICAL_CANDIDATES, ("wrong",), {"text": f"vreme dež {j}"})
               for j in range(LEXICAL_CANDIDATES)]
        row += [TextHit(f"l{i}-{j}", 0.75 if far else 0.85, (label,), {"text": f"{words} novica {j}"})
                for j in range(5)]
        rows.append(sorted(row, key=lambda h: -h.similarity))
        gold.append((label,))
        texts.append(f"{words} danes")
    return CalibrationSet(Retrieval.from_neighbours(rows), gold, texts)


@pytest.mark.parametrize("far", [True, False])
def test_the_lexical_search_is_kept_only_where_its_candidates_lift(far):
    # the fusion is judged on the dense candidates alone, then the lexical search (the memory's lexical top-N
    # added, a sparse search whose cost grows with the memory) on top: kept only where it lifts beyond the noise
    result = calibrate(_lexical_case(40, far), rules=(), replay=False)
    steps = {s["step"]: s for s in result.steps}
    assert steps["+ lexical search"]["kept"] is far
    assert result.params.lexical_search is far
    assert steps["+ lexical fusion"]["kept"] is not far  # near: the fusion alone finds the right candidates
    assert result.params.lexical_weight > 0 and result.figures["micro_f1"] == 1.0
    dense = _lexical_case(40, far)
    dense.hybrid = False  # calibration.hybrid off: dense retrieval alone, no lexical step tried
    result = calibrate(dense, rules=(), replay=False)
    assert not [s for s in result.steps if "lexical" in s["step"]] and result.params.lexical_weight == 0
    assert result.figures["micro_f1"] < 1.0


def test_a_scratch_calibration_store_reads_the_served_records_and_never_writes_them(tmp_path):
    """The gate recalibrates production in a scratch store: the served file is not touched, even for a moment."""
    from newsmon.shared.scoring.records import ScratchCalibrations

    s = Settings(home=tmp_path)
    served = CalibrationStore(s)
    rec = CalibrationRecord(collection="newsmon_sl_m1", language="sl", model_version="m1",
                            params=Params(top_k=10).model_dump(mode="json"), objective="micro_f1 + subset_accuracy")
    served.write(rec)
    path = served.directory / "newsmon_sl_m1.json"
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    scratch = ScratchCalibrations(served)
    assert scratch.read("newsmon_sl_m1") == rec  # reads through: an unchanged memory reuses the served record
    recalibrated = rec.model_copy(update={"params": Params(top_k=30).model_dump(mode="json")})
    scratch.write(recalibrated)
    scratch.write(rec.model_copy(update={"collection": "newsmon_hr_m1", "language": "hr"}))
    assert scratch.read("newsmon_sl_m1") == recalibrated and scratch.read("newsmon_hr_m1").language == "hr"
    assert "scratch" in scratch.where("newsmon_sl_m1")
    scratch.remove("newsmon_sl_m1")
    assert scratch.read("newsmon_sl_m1") is None
    scratch.close()
    fresh = CalibrationStore(Settings(home=tmp_path), ttl_s=0)  # what a worker reads: as it was
    assert fresh.read("newsmon_sl_m1") == rec and fresh.read("newsmon_hr_m1") is None
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in served.directory.iterdir()) == ["newsmon_sl_m1.json"]


@pytest.mark.parametrize("far", [True, False])
def test_the_lexical_search_is_judged_at_the_weight_the_fusion_chose(monkeypatch, far):
    # the cost of the lexical steps: the fusion's step walks every lexical weight's k / tau / threshold grid, the
    # search's step the same grid at the one weight the fusion chose (what the search's candidates add), not again
    # at every weight
    from newsmon.shared.scoring.calibration import choice as choice_module
    from newsmon.shared.scoring.calibration.search import GRID_K, GRID_LEXICAL, GRID_TAU

    tried: list[dict] = []
    add_scores = choice_module.Choice.add_scores

    def recording(self, Y, S, thresholds, options, payload=None):
        tried.append(dict(options))
        return add_scores(self, Y, S, thresholds, options, payload)

    monkeypatch.setattr(choice_module.Choice, "add_scores", recording)
    result = calibrate(_lexical_case(40, far), rules=(), replay=False)
    steps = {s["step"]: s for s in result.steps}
    fusion, search = ([o for o in tried if o.get("lexical_search") is s] for s in (False, True))
    cells = len(GRID_K) * len(GRID_TAU)
    assert len([o for o in tried if "lexical_weight" not in o]) == cells  # the base grid
    assert len(fusion) == cells * len(GRID_LEXICAL) and {o["lexical_weight"] for o in fusion} == set(GRID_LEXICAL)
    assert len(search) == cells
    assert {o["lexical_weight"] for o in search} == {steps["+ lexical fusion"]["params"]["lexical_weight"]}
    assert steps["+ lexical search"]["params"]["lexical_weight"] == steps["+ lexical fusion"]["params"][
        "lexical_weight"]
    assert result.figures["micro_f1"] == 1.0
