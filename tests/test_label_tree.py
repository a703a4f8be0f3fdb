"""The label tree (Parabel over the memory's TF-IDF, mixed into the newsmon scores): it learns labels that the
words decide, the same data give the same tree byte for byte, its out-of-fold scores come from trees without the
article, it follows the label registry, and the mix is computed by hand."""

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


def test_the_tree_learns_labels_the_words_decide():
    texts, labels = corpus(400, 1)
    model = fit_tree(texts, labels)
    held, truth = corpus(60, 2)
    got = model.scores(held)
    assert got.scores.shape == (60, 4) and got.scores.dtype == np.float32
    right = [set(lb for lb, p in zip(row, ps) if p > 0.5) == set(t) for row, ps, t in zip(got.labels, got.scores,
                                                                                         truth)]
    assert np.mean(right) >= 0.9
    assert fit_tree([], []).scores(["x"]).labels == [[]]  # nothing to learn: no labels


def test_a_tree_deep_enough_to_branch_is_the_same_tree_on_every_training(tmp_path):
    # 240 labels: the root splits (Parabel branches at 100 labels); two trainings store the same bytes and score
    # alike, and a tree stored by an earlier version (Omikuji's) is refused
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(600)]
    texts, labels = [], []
    for _ in range(900):
        own = [int(x) for x in rng.choice(240, size=2, replace=False)]
        words = [vocab[(3 * j + k) % 600] for j in own for k in range(3)] + list(rng.choice(vocab, 8))
        texts.append(" ".join(words))
        labels.append(tuple(f"l{j}" for j in own))
    comp = LabelTreeComponent()
    first, second = comp.fit(MemoryArticles(None, texts, labels), LabelTreeOptions()), fit_tree(texts, labels)
    assert len(first.model.roots) >= 1 and first.model.child_ptr[-1] > 0  # it branched
    for name, model in (("a", first), ("b", second)):
        (tmp_path / name).mkdir()
        comp.save(model, tmp_path / name)
    assert (tmp_path / "a" / "label_tree.npz").read_bytes() == (tmp_path / "b" / "label_tree.npz").read_bytes()
    back = comp.load(tmp_path / "a")
    assert back.scores(texts[:50]).labels == first.scores(texts[:50]).labels
    assert np.array_equal(back.scores(texts[:50]).scores, first.scores(texts[:50]).scores)
    (tmp_path / "a" / "omikuji").mkdir()
    with pytest.raises(ValueError, match="calibrate again"):
        comp.load(tmp_path / "a")


def test_out_of_fold_scores_come_from_trees_without_the_article():
    texts, labels = corpus(200, 3)
    oof = out_of_fold(texts, labels, folds=5)
    rest = [i for i in range(200) if i % 5 != 0]
    fold0 = fit_tree([texts[i] for i in rest], [labels[i] for i in rest]).scores(texts[::5])
    for i, row in enumerate(range(0, 200, 5)):  # the same tree: exactly its scores
        assert oof.labels[row] == fold0.labels[i]
        assert oof.scores[row, :len(fold0.labels[i])].tolist() == fold0.scores[i, :len(fold0.labels[i])].tolist()


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
    assert comp.model_key(opts) == () and set(model.labels) == set(TOPICS)


def test_the_beam_search_reads_one_product_and_scores_as_a_product_per_node_would():
    # every classifier's value comes from one sparse product per chunk of articles; each is the value a product of
    # its node's columns alone gives, bit for bit, so the beam search keeps the same labels with the same scores
    from newsmon.shared.scoring.components import parabel

    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(500)]
    texts, labels = [], []
    for _ in range(700):
        own = [int(x) for x in rng.choice(260, size=2, replace=False)]
        texts.append(" ".join([vocab[(7 * j + k) % 500] for j in own for k in range(3)] + list(rng.choice(vocab, 9))))
        labels.append(tuple(f"l{j}" for j in own))
    model = fit_tree(texts, labels)
    forest = model.model
    assert forest.child_ptr[-1] > 0  # it branched: the search goes through levels

    class PerNode(parabel.Forest):
        """The search as it was: one product of the articles in the beam with each visited node's columns."""

        products = 0

        def _outputs(self, Xb):
            return Xb  # the rows themselves: _log_scores below multiplies them

        def _log_scores(self, Xb, rows, node):
            PerNode.products += 1
            W = self.weights[:, self.out_ptr[node]:self.out_ptr[node + 1]].tocsr()
            s = np.asarray((Xb[rows] @ W).todense(), dtype=np.float64)
            return -np.square(np.maximum(0.0, 1.0 - s))

    reference = PerNode(forest.weights, forest.out_ptr, forest.child_ptr, forest.children, forest.label_ptr,
                        forest.labels, forest.roots, forest.n_labels, forest.n_features)
    X = model.features(texts[:300])
    counted = []
    real = parabel.Forest._outputs
    try:
        parabel.Forest._outputs = lambda self, Xb: counted.append(Xb.shape[0]) or real(self, Xb)
        for chunk in (1, 7, 256):
            parabel.PREDICT_CHUNK = chunk
            counted.clear()
            got = forest.predict(X, top=20)
            want = reference.predict(X, top=20)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            assert counted == [min(chunk, 300 - lo) for lo in range(0, 300, chunk)]  # one product per chunk
    finally:
        parabel.Forest._outputs = real
        parabel.PREDICT_CHUNK = 256
    assert PerNode.products > 3 * len(counted)  # the reference paid a product per visited node
