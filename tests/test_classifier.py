"""The classifier's retrieval: an article's own language alone once its memory can stand on its own, merged with
every other language while it is too small or missing (cross-lingual), on the real embedded Qdrant engine."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from rich.console import Console


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_retrieve_own_language_first_then_cross_lingual(memory_classifier):
    classifier = memory_classifier
    classifier.settings.memory.min_language_articles = 4  # sl (6) and en (4) stand alone; de (0) and hr do not
    d = classifier.encoder.dim
    rng = np.random.default_rng(0)
    sl, en = _unit(rng, 6, d), _unit(rng, 4, d)
    sl_ids, en_ids = [f"sl{i}" for i in range(6)], [f"en{i}" for i in range(4)]
    classifier.memory("sl").upsert(sl_ids, sl, [["a"]] * 6, [{"lang": "sl"}] * 6)
    classifier.memory("en").upsert(en_ids, en, [["b"]] * 4, [{"lang": "en"}] * 4)
    classifier.memory("de").upsert(["de0"], _unit(rng, 1, d), [[]], [{"lang": "de"}])  # pending only
    q = np.stack([sl[0], en[0], en[1], sl[2], sl[3]])
    r, searched = classifier.search(q, ["sl", "en", "hr", "de", None], top_k=10)
    assert set(r.ids[0][:6]) == set(sl_ids) and list(r.ids[0][6:]) == [""] * 4  # its own language only
    assert set(r.ids[1][:4]) == set(en_ids) and list(r.ids[1][4:]) == [""] * 6
    assert searched[0] == (classifier.collection("sl"),) and searched[1] == (classifier.collection("en"),)
    for row, first in ((2, "en1"), (3, "sl2"), (4, "sl3")):  # no collection / pending only / no language
        assert r.ids[row][0] == first and set(r.ids[row]) == set(sl_ids) | set(en_ids)
        assert list(r.sims[row]) == sorted(r.sims[row], reverse=True)
    everything = tuple(classifier.collection(lg) for lg in ("de", "en", "sl"))
    assert searched[2] == searched[4] == everything  # no hr collection is created by searching for hr
    assert searched[3] == (classifier.collection("de"),) + tuple(classifier.collection(lg) for lg in ("en", "sl"))


def test_retrieve_known_language_with_every_neighbour_excluded_stays_empty(memory_classifier):
    classifier = memory_classifier
    d = classifier.encoder.dim
    rng = np.random.default_rng(1)
    v = _unit(rng, 2, d)
    classifier.memory("sl").upsert(["only"], v[:1], [["a"]], [{"lang": "sl"}])
    classifier.memory("en").upsert(["other"], v[1:], [["b"]], [{"lang": "en"}])
    classifier.settings.memory.min_language_articles = 1  # one labelled article lets sl stand alone
    r = classifier.retrieve(v[:1], ["sl"], top_k=3, exclude=["only"])
    assert list(r.ids[0]) == ["", "", ""]  # sl stands alone (counted, not just found): no cross-lingual fallback


def test_new_label_rule_reads_the_calibration_records_labels_and_follows_renames(memory_classifier):
    from newsmon.shared.scoring.records import CalibrationRecord

    clf = memory_classifier
    clf.settings.memory.min_language_articles = 1
    d = clf.encoder.dim
    rng = np.random.default_rng(2)
    q = _unit(rng, 1, d)
    near = q + 0.05 * _unit(rng, 2, d)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    far = _unit(rng, 8, d)

    def propose(labels_of_near: str, known: list[str], relabel=None) -> set[str]:
        clf.memory("sl").upsert([f"far{i}" for i in range(8)] + ["near0", "near1"], np.vstack([far, near]),
                                [["a"]] * 8 + [[labels_of_near]] * 2, [{"lang": "sl"}] * 10)
        params = {"top_k": 10, "tau": 100.0, "threshold": 0.5, "new_label_support": 2, "new_label_neighbours": 3,
                  "new_label_similarity": 0.5}  # a uniform softmax: the two carriers hold 0.2 of the weight
        clf.calibrations.write(CalibrationRecord(collection=clf.collection("sl"), language="sl",
                                                 model_version=clf.model_version, params=params,
                                                 objective="micro_f1 + subset_accuracy", labels=known))
        (p,), _ = clf.propose(["q"], ["sl"], vectors=q, relabel=relabel)
        assert p.scoring.calibration is not None and p.scoring.rule("new_label_support").support == 2
        return p.label_set

    assert propose("x", ["a"]) == {"a", "x"}  # x came after the calibration: two close carriers suffice
    assert propose("x", ["a", "x"]) == {"a"}  # known to the calibration: its share (0.2) decides
    rename = {"old": "x"}.get

    def relabel(labels):
        return tuple(rename(lb, lb) for lb in labels)

    assert propose("old", ["a", "old"], relabel) == {"a"}  # a known label renamed stays known
    assert propose("old", ["a"], relabel) == {"a", "x"}


def test_label_keys_come_from_the_memory_follow_each_calibration_record_and_the_registry(memory_classifier):
    from newsmon.shared.scoring.records import CalibrationRecord

    clf = memory_classifier
    clf.settings.memory.min_language_articles = 1
    d = clf.encoder.dim
    rng = np.random.default_rng(3)
    q, other = _unit(rng, 1, d), _unit(rng, 6, d)
    close = q + 0.3 * _unit(rng, 2, d)  # two articles of label k near the query, not its nearest neighbours
    close /= np.linalg.norm(close, axis=1, keepdims=True)
    clf.memory("sl").upsert([f"o{i}" for i in range(6)] + ["k0", "k1"], np.vstack([other, close]),
                            [["a"]] * 6 + [["k"]] * 2, [{"lang": "sl"}] * 8)

    def propose(lam: float, relabel=None) -> set[str]:
        params = {"top_k": 8, "tau": 100.0, "threshold": 0.4, "label_lambda": lam, "label_keys": 2,
                  "label_tau": 0.01}  # neighbours: a 0.75, k 0.25; keys: k nearly 1
        clf.calibrations.write(CalibrationRecord(collection=clf.collection("sl"), language="sl",
                                                 model_version=clf.model_version, params=params,
                                                 objective="micro_f1 + subset_accuracy", labels=["a", "k"]))
        (p,), _ = clf.propose(["q"], ["sl"], vectors=q, relabel=relabel)
        return p.label_set

    assert propose(0.0) == {"a"}
    assert propose(1.0) == {"k"}  # k: (0.25 + ~1) / 2 > 0.4; a: (0.75 + ~0) / 2 < 0.4 (its key is far)
    res = clf.resolved("sl")
    keys = clf.models.get("sl", res.record, res.params, False)[0]["label_keys"]  # the record's, as propose read them
    assert sorted(keys.labels) == ["a", "k"] and keys.counts[keys.index["k"]] == 2
    # k retired: gone from the neighbours and from the keys (a's key takes the keys' weight: (0.75 + 1) / 2)
    assert propose(1.0, relabel=lambda t: tuple(x for x in t if x != "k")) == {"a"}


def test_bucket_thresholds_count_the_memory_and_follow_renames(memory_classifier):
    from newsmon.shared.scoring.records import CalibrationRecord

    clf = memory_classifier
    clf.settings.memory.min_language_articles = 1
    d = clf.encoder.dim
    rng = np.random.default_rng(4)
    clf.memory("sl").upsert([f"a{i}" for i in range(12)] + ["k0", "k1"], _unit(rng, 14, d),
                            [["a"]] * 12 + [["k"]] * 2, [{"lang": "sl"}] * 14)
    params = {"top_k": 14, "tau": 100.0, "threshold": 0.5, "bucket_thresholds": [0.1, 0.9, 0.9, 0.9]}
    clf.calibrations.write(CalibrationRecord(collection=clf.collection("sl"), language="sl",
                                             model_version=clf.model_version, params=params,
                                             objective="micro_f1 + subset_accuracy", labels=["a", "k"]))
    q = _unit(rng, 1, d)
    (p,), _ = clf.propose(["q"], ["sl"], vectors=q)  # a: 12/14 of the weight, 12 articles (11-99 bucket: 0.9)
    assert p.label_set == {"k"} and p.scoring.bucket_thresholds == (0.1, 0.9, 0.9, 0.9)  # k: 2/14, rare: 0.1
    (p,), _ = clf.propose(["q"], ["sl"], vectors=q, relabel=lambda t: tuple("z" if x == "a" else x for x in t))
    assert p.label_set == {"k"}  # renamed a -> z keeps its 12 articles: z stays in the 11-99 bucket


def test_label_thresholds_of_the_record_decide_and_follow_renames(memory_classifier):
    from newsmon.shared.scoring.records import CalibrationRecord

    clf = memory_classifier
    clf.settings.memory.min_language_articles = 1
    d = clf.encoder.dim
    rng = np.random.default_rng(5)
    clf.memory("sl").upsert([f"a{i}" for i in range(10)] + ["k0", "k1", "k2"], _unit(rng, 13, d),
                            [["a"]] * 10 + [["k"]] * 3, [{"lang": "sl"}] * 13)

    def propose(own: dict, relabel=None) -> set[str]:
        params = {"top_k": 13, "tau": 100.0, "threshold": 0.5, "label_thresholds": own}
        clf.calibrations.write(CalibrationRecord(collection=clf.collection("sl"), language="sl",
                                                 model_version=clf.model_version, params=params,
                                                 objective="micro_f1 + subset_accuracy", labels=["a", "k", "j"]))
        (p,), _ = clf.propose(["q"], ["sl"], vectors=q, relabel=relabel)
        assert p.scoring.label_thresholds == len(own)  # the wire says how many
        return p.label_set

    q = _unit(rng, 1, d)
    assert propose({}) == {"a"}  # a: 10/13 of the weight > 0.5; k: 3/13 = 0.23 < 0.5
    assert propose({"k": 0.2}) == {"a", "k"}  # k over its own threshold
    assert propose({"k": 0.2}, relabel=lambda t: tuple("z" if x == "k" else x for x in t)) == {"a", "z"}
    # j merged into k: k keeps the lower of their thresholds
    assert propose({"k": 0.25}) == {"a"}
    assert propose({"k": 0.25, "j": 0.2}, relabel=lambda t: tuple("k" if x == "j" else x for x in t)) == {"a", "k"}
    # k retired: its threshold goes with it
    assert propose({"k": 0.2}, relabel=lambda t: tuple(x for x in t if x != "k")) == {"a"}


def test_the_wire_says_which_rule_proposed_each_label_and_its_threshold(memory_classifier):
    """A label the label-set vote proposed below its threshold reads as such on the wire and for a moderator
    (it was shown under 'below their thresholds' with source retrieval only: a newcomer saw a contradiction)."""
    from newsmon.render import render_proposal
    from newsmon.schemas import LabelProposal
    from newsmon.shared.scoring.records import CalibrationRecord

    clf = memory_classifier
    clf.settings.memory.min_language_articles = 1
    d = clf.encoder.dim
    rng = np.random.default_rng(7)
    clf.memory("sl").upsert([f"m{i}" for i in range(13)], _unit(rng, 13, d), [["a", "k"]] * 8 + [["a"]] * 5,
                            [{"lang": "sl"}] * 13)
    q = _unit(rng, 1, d)

    def propose(**rules) -> LabelProposal:
        params = {"top_k": 13, "tau": 100.0, "threshold": 0.7, **rules}  # equal weights: a 13/13, k 8/13 = 0.615
        clf.calibrations.write(CalibrationRecord(collection=clf.collection("sl"), language="sl",
                                                 model_version=clf.model_version, params=params,
                                                 objective="micro_f1 + subset_accuracy", labels=["a", "k"]))
        (p,), _ = clf.propose(["q"], ["sl"], vectors=q)
        return LabelProposal.of(p, article_id="q", model_version="m", memory_version="v",
                                produced_at=datetime(2024, 5, 1, 8, tzinfo=UTC))

    def why(p: LabelProposal) -> dict:
        return {x.label: (x.decided_by, x.threshold) for x in [*p.labels, *p.candidates]}

    plain = propose()
    assert why(plain) == {"a": ("threshold", 0.7), "k": (None, 0.7)} and [x.label for x in plain.labels] == ["a"]
    voted = propose(set_vote=0.6)  # the set {a, k} holds 8/13 of the weight
    assert why(voted) == {"a": ("set_vote", 0.7), "k": ("set_vote", 0.7)}
    # each label's reason (version 7), with the scoring's one shape (the record's components and rules, version 6)
    assert voted.schema_version == 7 == LabelProposal.model_validate_json(voted.to_bytes()).schema_version
    assert [r.name for r in voted.scoring.rules] == ["threshold", "set_vote"]
    # the label-count rule: the neighbours carry (8 * 2 + 5 * 1) / 13 = 1.6 labels -> the 2 best at >= 0.5
    counted = propose(label_count=0.5)
    assert why(counted) == {"a": ("label_count", 0.5), "k": ("label_count", 0.5)}
    assert counted.scoring.rule("label_count").minimum == 0.5 and counted.needs_version() == 7 == counted.schema_version
    assert LabelProposal.model_validate_json(counted.to_bytes()).labels[1].decided_by == "label_count"
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_proposal(voted))
    assert ("k 0.615 retrieval the nearest memory articles agree on a label set that holds it (label-set vote), "
            "although its score 0.62 is below its threshold 0.70; 8 of the 13 nearest memory articles carry it"
            in " ".join(console.export_text().split()))
    # frequency-bucket thresholds: each label says its own (a on 13 memory articles, k on 8: rare)
    buckets = propose(threshold=0.5, bucket_thresholds=[0.9, 0.3, 0.3, 0.3])
    assert why(buckets) == {"a": ("threshold", 0.3), "k": (None, 0.9)}


def test_the_head_model_is_fitted_from_the_memory_under_each_record_and_follows_the_registry(memory_classifier):
    """A record with the head model: the worker fits it from the memory's stored texts (one scroll) and mixes
    it in; with beta = 1 a head label's score is exactly the probability of the model fitted on the memory,
    so a house style that the random neighbours cannot show decides, and a rename carries it."""
    from test_head_model import house_style_corpus

    from newsmon.shared.scoring.records import CalibrationRecord
    from newsmon.shared.scoring.components.head_model import HeadModel

    clf = memory_classifier
    clf.settings.memory.min_language_articles = 1
    rng = np.random.default_rng(5)
    texts, labels = house_style_corpus(240, seed=6)
    clf.memory("sl").upsert([f"m{i}" for i in range(240)], _unit(rng, 240, clf.encoder.dim), [list(x) for x in labels],
                            [{"lang": "sl", "text": t} for t in texts])
    params = {"top_k": 20, "tau": 100.0, "threshold": 0.5, "head_weight": 1.0, "head_c": 10.0}
    clf.calibrations.write(CalibrationRecord(collection=clf.collection("sl"), language="sl",
                                             model_version=clf.model_version, params=params,
                                             objective="micro_f1 + subset_accuracy", labels=["agency", "economy",
                                                                                            "local"]))
    queries, truth = house_style_corpus(4, seed=7)
    props, _ = clf.propose(queries, ["sl"] * 4, vectors=_unit(rng, 4, clf.encoder.dim))
    expected = HeadModel(10.0).fit(texts, labels).scores(queries)
    for p, want, gold in zip(props, expected.probs, truth):
        got = {x.label: x.score for x in [*p.labels, *p.candidates]}
        assert got["agency"] == pytest.approx(float(want[0]), abs=1e-5)
        assert ("agency" in p.label_set) == ("agency" in gold)
        assert p.scoring.component("head_model").weight == 1.0
    renamed, _ = clf.propose(queries[:1], ["sl"], vectors=_unit(rng, 1, clf.encoder.dim),
                             relabel=lambda t: tuple("press" if x == "agency" else x for x in t))
    assert "press" in renamed[0].label_set and "agency" not in renamed[0].label_set
