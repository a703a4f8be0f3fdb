"""The label names (a label whose name occurs in the article, scored by how often that meant the label in the
memory): matching by hand (inflected and namespaced names, short words whole), the counts and their leave-one-out,
the mix, a stored model read back, and matching that stays linear in the article's length."""

from __future__ import annotations

import numpy as np
import pytest

from newsmon.shared.scoring import LabelVocab, MemoryArticles
from newsmon.shared.scoring.components.label_names import (
    SHORT,
    STEM,
    LabelNamesComponent,
    LabelNamesOptions,
    fit_names,
    name_stems,
    out_of_fold,
    stems,
)
from newsmon.shared.scoring.components.label_tree import TopLabels

TEXTS = ["Stavka v Elektru Primorska se nadaljuje", "Japan's exports rise again", "Sindikat napoveduje stavko",
         "Vreme bo lepo, pravi napoved", "Stavke ne bo, so rekli v sindikatu"]
LABELS = [("stavka", "elektro primorska"), ("place:japan",), ("sindikat",), ("vreme",), ("sindikat",)]


def test_names_match_inflected_words_namespaced_codes_and_short_words_whole():
    assert name_stems("place:japan") == ("japa",) and name_stems("topic:money-fx") == ("fx", "money"[:4])
    assert name_stems("stavka") == ("stavk",) and name_stems("zdravstveno zavarovanje") == ("zavaro", "zdravs")
    assert name_stems("usa") == ("usa",) and name_stems("x:") == ()
    model = fit_names(["Japanese yen", "USA and Canada"], [("a",), ("place:usa",)])
    found = [model.matches(stems(t)) for t in ["Japanese yen", "USA and Canada"]]
    assert found == [[], [1]]  # "a" has no word of two characters: never named
    model = fit_names(TEXTS, LABELS)
    got = model.scores(["Japanese yen", "the usage of it", "Stavke so v Elektro Primorski", "Primorska"])
    assert got.labels[0] == ["place:japan"] and got.labels[1] == [] and got.labels[3] == []
    assert set(got.labels[2]) == {"stavka", "elektro primorska"}  # every word of a name, in any case and order


def test_the_counts_and_their_out_of_fold_scores_by_hand():
    model = fit_names(TEXTS, LABELS)
    found = [model.matches(stems(t)) for t in TEXTS]
    j = {lb: i for i, lb in enumerate(model.labels)}
    # "stavk" starts a word of articles 0, 2 and 4; only article 0 carries stavka
    assert model.matched[j["stavka"]] == 3 and model.hits[j["stavka"]] == 1
    assert model.matched[j["sindikat"]] == 2 and model.hits[j["sindikat"]] == 2
    q = model.scores(["Nova stavka"])
    assert q.labels == [["stavka"]] and q.scores[0, 0] == pytest.approx((1 + 1) / (3 + 2))
    oof = out_of_fold(TEXTS, LABELS)  # 5 folds of 5 articles: each scored by the names of the other four
    # article 0: no other article carries stavka or elektro primorska, so neither is a label of the others' names
    # (taking article 0 out of the counts instead gave its own labels scores of their own: a stacked model read
    # them as "this is the article's label")
    assert oof.labels[0] == []
    row = dict(zip(oof.labels[2], oof.scores[2], strict=False))  # article 2: stavka 1 of 2, sindikat 1 of 1
    assert row == pytest.approx({"stavka": (1 + 1) / (2 + 2), "sindikat": (1 + 1) / (1 + 2)})
    assert found[3] == [j["vreme"]] and oof.labels[3] == []  # vreme: article 3's label alone


def test_the_mix_and_a_stored_model_read_back(tmp_path):
    comp, opts = LabelNamesComponent(), LabelNamesOptions(weight=0.5)
    ev = TopLabels([["b", "c"]], np.array([[0.8, 0.4]], dtype=np.float32))
    vocab = LabelVocab(["a", "b"])
    mixed = comp.mix(np.array([[0.6, 0.2]], dtype=np.float32), vocab, ev, opts)
    assert vocab.labels == ["a", "b", "c"] and mixed[0].tolist() == pytest.approx([0.6, 0.4, 0.2])
    model = comp.fit(MemoryArticles(None, TEXTS, LABELS), opts)
    comp.save(model, tmp_path)
    back = comp.load(tmp_path)
    texts = ["Stavka in sindikat", "Japan", "nič"]
    a, b = model.scores(texts), back.scores(texts)
    assert a.labels == b.labels and np.array_equal(a.scores, b.scores) and back.key == model.key


def test_matching_is_linear_in_the_article():
    """Each distinct word gives at most STEM - SHORT + 2 keys, and each key is looked up once: a 1 MB article of one
    letter, of distinct words or of a name repeated costs keys in proportion to its distinct words."""
    assert len(stems("a" * 1_000_000)) == STEM - SHORT + 2 and stems("\u200b" * 200_000) == set()
    words = " ".join(f"w{i:07d}" for i in range(50_000))
    assert len(stems(words)) <= 50_000 * (STEM - SHORT + 2)
    model = fit_names(TEXTS, LABELS)
    invisible = "\u200b" * 200_000 + "stavka" + "\u2060" * 200_000  # zero-width: cleaned away, the word stays
    got = model.scores(["stavka " * 150_000, words, invisible, "\u200b" * 200_000])
    assert got.labels[0] == ["stavka"] and got.labels[1] == [] and got.labels[2] == ["stavka"] and got.labels[3] == []


def test_the_calibration_judges_the_names_at_the_threshold_already_chosen():
    """The names only raise scores: re-choosing the threshold with them would trade the neighbours' proposals for
    theirs, so their step keeps the threshold chosen before it (here 0.6, though 0.45 and below would propose
    the neighbours' labels too)."""
    from dataclasses import dataclass

    from newsmon.schemas.scoring import ScoringParams
    from newsmon.shared.scoring import Retrieval
    from newsmon.shared.scoring.calibration import CalibrationRun, calibration_set
    from newsmon.shared.scoring.calibration.run import gold_matrix

    @dataclass
    class Hit:
        article_id: str
        similarity: float
        labels: tuple

    texts = [f"Stavka in {w}" for w in ("delavci", "vlada", "sindikat", "plače")] * 5
    gold = [("stavka", "delo")] * 20
    memory = MemoryArticles(None, texts, gold)
    r = Retrieval.from_neighbours([[Hit("a", 0.9, ("delo",)), Hit("b", 0.9, ("drugo",))]] * 20)
    cal = calibration_set(memory, r)
    vocab = LabelVocab()
    r.label_matrix(vocab)
    vocab.extend(["stavka"])
    Yt = gold_matrix(cal.gold, vocab)
    params = ScoringParams(top_k=2, tau=0.1, threshold=0.6)
    run = CalibrationRun(cal, r, Yt, vocab.labels, params)
    LabelNamesComponent().calibrate(run)
    steps = run.steps
    assert steps[-1]["params"]["threshold"] == 0.6
    assert steps[-1]["kept"] and steps[-1]["micro_f1"] > 0  # stavka (named in every text) is proposed


def test_the_gate_lets_the_names_speak_only_where_the_neighbours_are_unsure():
    """sentinews_sl holds desk articles (two broad labels, whatever they mention) beside keyword articles (labels
    named in the text): the names must not add a keyword to an article the neighbours place firmly among the desk
    articles, and must still add it where they are unsure."""
    comp = LabelNamesComponent()
    ev = TopLabels([["banka"], ["banka"], ["banka"]], np.full((3, 1), 0.8, dtype=np.float32))
    before = np.array([[0.9, 0.1], [0.3, 0.2], [0.5, 0.0]], dtype=np.float32)  # sure, unsure, at the gate
    vocab = LabelVocab(["gospodarstvo", "ekonomija"])
    gated = comp.mix(before.copy(), vocab, ev, LabelNamesOptions(weight=1.0, unsure_below=0.5))
    assert vocab.labels[2] == "banka"
    assert gated[:, 2].tolist() == pytest.approx([0.0, 0.8, 0.0])  # below the gate only (0.5 is not below 0.5)
    assert np.array_equal(gated[:, :2], before)  # never lowers a score
    vocab = LabelVocab(["gospodarstvo", "ekonomija"])
    open_ = comp.mix(before.copy(), vocab, ev, LabelNamesOptions(weight=1.0))
    assert open_[:, 2].tolist() == pytest.approx([0.8, 0.8, 0.8])  # without a gate: every article
    tried = {(o.weight, o.unsure_below) for o in comp.grid()}
    assert (1.0, None) in tried and {g for _w, g in tried} >= {None, 0.3, 0.5, 0.9}  # the calibration chooses
