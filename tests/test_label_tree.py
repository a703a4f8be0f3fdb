"""The label tree (Omikuji's Parabel / Bonsai over the memory's TF-IDF, mixed into the newsmon scores): it learns
labels that the words decide, its out-of-fold scores come from trees without the article, it follows the label
registry, and the mix is computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from newsmon.shared.scoring import LabelVocab, MemoryArticles
from newsmon.shared.scoring.components.label_tree import (LabelTreeComponent, LabelTreeOptions, TopLabels, fit_tree,
                                                          out_of_fold)

TOPICS = {"banke": "banka kredit obresti depozit posojilo", "šport": "tekma gol trener igralec prvenstvo",
          "vreme": "dež sneg temperatura veter napoved", "politika": "vlada minister poslanci zakon stranka"}
FILLER = "danes včeraj je bil so in v na z za po pri od".split()


def corpus(n: int, seed: int) -> tuple[list[str], list[tuple[str, ...]]]:
    """Articles of one or two topics, each topic told by its words among common ones."""
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    texts, labels = [], []
    for _ in range(n):
        picked = sorted({str(x) for x in rng.choice(names, size=int(rng.integers(1, 3)), replace=False)})
        words = [w for t in picked for w in rng.choice(TOPICS[t].split(), 4)] + list(rng.choice(FILLER, 12))
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(tuple(picked))
    return texts, labels


@pytest.mark.parametrize("tree", ["parabel", "bonsai"])
def test_the_tree_learns_labels_the_words_decide(tree):
    texts, labels = corpus(400, 1)
    model = fit_tree(texts, labels, tree)
    held, truth = corpus(60, 2)
    got = model.scores(held)
    assert got.scores.shape == (60, 4) and got.scores.dtype == np.float32
    right = [set(lb for lb, p in zip(row, ps) if p > 0.5) == set(t) for row, ps, t in zip(got.labels, got.scores,
                                                                                         truth)]
    assert np.mean(right) >= 0.9
    assert fit_tree([], [], tree).scores(["x"]).labels == [[]]  # nothing to learn: no labels


def test_out_of_fold_scores_come_from_trees_without_the_article():
    texts, labels = corpus(200, 3)
    oof = out_of_fold(texts, labels, "parabel", folds=5)
    rest = [i for i in range(200) if i % 5 != 0]
    fold0 = fit_tree([texts[i] for i in rest], [labels[i] for i in rest], "parabel").scores(texts[::5])
    for i, row in enumerate(range(0, 200, 5)):  # Omikuji's clustering is not seeded: two trees differ a little
        want = dict(zip(fold0.labels[i], fold0.scores[i]))
        assert dict(zip(oof.labels[row], oof.scores[row])) == pytest.approx(want, abs=0.05)


def test_the_mix_and_the_registry_by_hand():
    comp, opts = LabelTreeComponent(), LabelTreeOptions(weight=0.5)
    ev = TopLabels([["b", "c"]], np.array([[0.8, 0.4]], dtype=np.float32))
    vocab = LabelVocab(["a", "b"])
    mixed = comp.mix(np.array([[0.6, 0.2]], dtype=np.float32), vocab, ev, opts)
    assert vocab.labels == ["a", "b", "c"] and mixed[0].tolist() == pytest.approx([0.3, 0.5, 0.2])
    renamed = ev.relabel(lambda t: tuple({"c": "b"}.get(x, x) for x in t))  # c merged into b: the higher
    assert renamed.labels == [["b"]] and renamed.scores[0, 0] == pytest.approx(0.8)
    gone = ev.relabel(lambda t: tuple(x for x in t if x != "b"))
    assert gone.labels == [["c"]] and gone.scores[0].tolist() == pytest.approx([0.4, 0.0])
    both = TopLabels.concat([ev, TopLabels([["a"]], np.array([[0.9]], dtype=np.float32))])
    assert both.labels == [["b", "c"], ["a"]] and both.scores.shape == (2, 2)
    memory = MemoryArticles(None, *corpus(120, 4))
    model = comp.fit(memory, opts)
    assert comp.model_key(opts) == ("parabel",) and set(model.labels) == set(TOPICS)
