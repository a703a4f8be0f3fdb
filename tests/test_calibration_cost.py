"""The calibration's speed-ups compute what the computations they replace computed, bit for bit (the calibration
record and the eval figures must not move): the lexical cosines of a whole retrieval against the per-query
reference, the threshold sweep's bins against ``searchsorted`` of every score, the RAE-XMC aggregate against its
sparse product built from triplets, the head model's out-of-fold probabilities against a tokenisation per fold."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from newsmon.shared.scoring.components import head_model
from newsmon.shared.scoring.lexical import TermVectors, _candidate_rows, fuse, lexical_cosines, local_tfidf_cosine
from newsmon.shared.scoring.objective import bins
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval, aggregate
from newsmon.shared.terms import sparse_terms

WORDS = ("vlada", "proračun", "krka", "dobiček", "stavka", "plača", "delavci", "sindikat", "banka", "obresti",
         "nogomet", "tekma", "zmaga", "občina", "šola", "zdravnik", "bolnišnica", "volitve", "stranka", "minister")


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, rng.integers(0, 14)))


def _reference(r: Retrieval, texts: list[str], terms: TermVectors) -> np.ndarray:
    """The per-query computation lexical_cosines replaced (one local_tfidf_cosine per query)."""
    Q = terms.rows(texts)
    out = np.zeros(r.sims.shape, dtype=np.float32)
    for i in range(r.sims.shape[0]):
        present = np.flatnonzero(np.isfinite(r.sims[i]))
        if len(present):
            out[i, present] = local_tfidf_cosine(Q[i], _candidate_rows(r, i, present, terms))
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(1, 12), st.integers(0, 10_000))
def test_lexical_cosines_equal_the_per_query_reference_bit_for_bit(m, K, seed):
    """Candidates with stored terms (shared objects, as the memory's search returns them) and without (their texts
    tokenised, cached by id), missing candidates, empty texts, an id-less candidate, repeated articles."""
    rng = np.random.default_rng(seed)
    pool = [f"a{j}" for j in range(15)]
    texts = {a: _text(rng) for a in pool}
    stored = dict(zip(pool, sparse_terms([texts[a] for a in pool]), strict=True))
    ids = np.full((m, K), "", dtype=object)
    sims = np.full((m, K), -np.inf, dtype=np.float32)
    cand_texts, cand_terms = [], []
    for i in range(m):
        n = int(rng.integers(0, K + 1))
        picked = rng.choice(pool, n, replace=False).tolist()
        if n and rng.random() < 0.2:
            picked[-1] = ""  # a candidate without an id: its text is read, never cached
        ids[i, :n] = picked
        sims[i, :n] = np.sort(rng.random(n).astype(np.float32))[::-1]
        with_terms = rng.random() < 0.6
        cand_texts.append([texts.get(a, "kratko besedilo") for a in picked] + [""] * (K - n))
        cand_terms.append([stored.get(a) if with_terms and rng.random() < 0.7 else None for a in picked]
                          + [None] * (K - n))
    r = Retrieval(ids, sims, [[()] * K for _ in range(m)], None, cand_texts, terms=cand_terms)
    queries = [_text(rng) for _ in range(m)]
    want = _reference(r, queries, TermVectors())
    got = lexical_cosines(r, queries, TermVectors())
    assert got.dtype == np.float32 and np.array_equal(got.view(np.int32), want.view(np.int32))
    terms = TermVectors()
    given_rows = lexical_cosines(r, queries, terms, terms.rows(queries))
    assert np.array_equal(given_rows.view(np.int32), want.view(np.int32))


def test_lexical_cosines_of_a_query_row_with_repeated_terms_fall_back_to_the_reference():
    r = Retrieval(np.array([["a", "b"]], dtype=object), np.array([[0.9, 0.8]], dtype=np.float32), [[(), ()]], None,
                  [["vlada proračun", "krka dobiček vlada"]])
    from newsmon.shared.terms import N_FEATURES, term_rows

    cols = term_rows(["vlada krka"]).indices
    Q = sp.csr_matrix((np.array([1.0, 0.5, 1.0], np.float32), np.array([cols[0], cols[0], cols[1]]),
                       np.array([0, 3])), shape=(1, N_FEATURES))
    assert not Q.has_canonical_format
    terms = TermVectors()
    want = local_tfidf_cosine(Q[0], _candidate_rows(r, 0, np.arange(2), terms))
    assert np.array_equal(lexical_cosines(r, ["unused"], terms, Q)[0], want)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
def test_bins_equal_searchsorted_of_every_score(seed, below_zero):
    rng = np.random.default_rng(seed)
    S = rng.random((7, 11)).astype(np.float32)
    S[rng.random(S.shape) < 0.6] = 0.0
    S[0, 0], S[1, 1], S[2, 2] = -0.0, 0.1, np.float32(0.35)
    t = np.round(np.arange(-0.2 if below_zero else 0.1, 0.76, 0.05), 2).astype(np.float64)
    got = bins(S, t)
    want = np.searchsorted(t, S.astype(np.float64), side="left")
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert bins(np.zeros((0, 3), np.float32), t).shape == (0, 3)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 9), st.integers(0, 10_000))
def test_aggregate_equals_the_product_built_from_triplets(m, K, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, K + 1))
    L = 13
    Y = sp.csr_matrix((rng.random((m * K, L)) < 0.3).astype(np.float32))
    w = rng.random((m, k))
    w[rng.random(w.shape) < 0.2] = 0.0
    rows = np.repeat(np.arange(m), k)
    cols = (np.arange(m)[:, None] * K + np.arange(k)[None, :]).reshape(-1)
    W = sp.csr_matrix((w.reshape(-1), (rows, cols)), shape=(m, m * K))
    want = np.asarray((W @ sp.csr_matrix((Y.data, Y.indices, Y.indptr), shape=(m * K, L + 2))).todense(),
                      dtype=np.float32)
    got = aggregate(w, Y, K, L + 2)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


def test_head_out_of_fold_tokenises_once_and_equals_a_tokenisation_per_fold(monkeypatch):
    rng = np.random.default_rng(3)
    texts = [_text(rng) + " , ." * int(rng.integers(0, 3)) for _ in range(60)]
    labels = [tuple(lb for lb, p in (("a", 0.5), ("b", 0.3), ("c", 0.05)) if rng.random() < p) for _ in texts]

    def reference(c: float, folds: int = 5) -> np.ndarray:
        full = head_model.HeadModel(c, 10).fit(texts, labels)
        out = np.zeros((len(texts), len(full.labels)), dtype=np.float32)
        fold = np.arange(len(texts)) % folds
        for f in range(folds):
            held, rest = np.flatnonzero(fold == f), np.flatnonzero(fold != f)
            part = head_model.HeadModel(c, max(1, 10 * (folds - 1) // folds)).fit(
                [texts[i] for i in rest], [labels[i] for i in rest]).scores([texts[i] for i in held])
            cols = {lb: j for j, lb in enumerate(part.labels)}
            for j, lb in enumerate(full.labels):
                if lb in cols:
                    out[held, j] = part.probs[:, cols[lb]]
        return out

    want = reference(10.0)
    calls = []
    real = head_model.style_rows
    monkeypatch.setattr(head_model, "style_rows", lambda t: calls.append(len(t)) or real(t))
    got = head_model.out_of_fold(texts, labels, 10.0, full=head_model.HeadModel(10.0, 10).fit(texts, labels))
    assert got.labels == ["a", "b"] and np.array_equal(got.probs, want)
    assert calls == [len(texts)] * 2  # the full model's fit, then the folds' one tokenisation


@pytest.mark.parametrize("n", [0, 1])
def test_lexical_cosines_of_no_queries_or_no_candidates(n):
    r = Retrieval(np.full((n, 0), "", dtype=object), np.zeros((n, 0), np.float32), [[] for _ in range(n)], None,
                  [[] for _ in range(n)])
    assert lexical_cosines(r, ["x"] * n).shape == (n, 0)


def test_label_tree_out_of_fold_tokenises_once_and_equals_a_tokenisation_per_fold(monkeypatch):
    from newsmon.shared.scoring.components import label_tree

    rng = np.random.default_rng(5)
    texts = [_text(rng) for _ in range(40)]
    labels = [tuple(lb for lb, p in (("a", 0.5), ("b", 0.3), ("c", 0.2)) if rng.random() < p) for _ in texts]
    want = label_tree.top_labels_out_of_fold(texts, labels, lambda t, ls, held: _tree_tokenising_each_time(
        label_tree, t, ls, held))
    calls = []
    real = label_tree.term_rows
    monkeypatch.setattr(label_tree, "term_rows", lambda t: calls.append(len(t)) or real(t))
    got = label_tree.out_of_fold(texts, labels)
    assert got.labels == want.labels and np.array_equal(got.scores, want.scores)
    assert calls == [len(texts)]


def _tree_tokenising_each_time(label_tree, texts, label_sets, held):
    """fit_tree and scores as they were: the texts tokenised for the document frequencies, again for the
    features, and the held-out texts for their scores."""
    from newsmon.shared.scoring.components.parabel import train_forest
    from newsmon.shared.terms import term_rows

    labels = sorted({lb for ls in label_sets for lb in ls})
    X = term_rows(list(texts))
    df = np.bincount(X.indices, minlength=X.shape[1])
    columns = np.flatnonzero(df >= 2)
    idf = (1.0 + np.log((1.0 + len(texts)) / (1.0 + df[columns]))).astype(np.float32)
    fitted = label_tree.LabelTree(None, labels, columns, idf)
    index = {lb: j for j, lb in enumerate(labels)}
    fitted.model = train_forest(fitted.features(texts), [sorted({index[lb] for lb in ls}) for ls in label_sets],
                                len(labels))
    return fitted.scores(held)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 9), st.integers(1, 12), st.integers(0, 10_000), st.booleans())
def test_the_sparse_sweep_equals_the_dense_sweep(n, L, seed, below_zero):
    """Rows with every label gold, none gold, gold labels not stored, stored zeros, scores on the thresholds: the
    calibration's per-article counts of sparse scores equal those of the dense ones and sum to the objective's
    sweep."""
    from newsmon.shared.scoring.calibration.choice import RowCounts
    from newsmon.shared.scoring.objective import Objective

    rng = np.random.default_rng(seed)
    S = rng.choice(np.array([0.0, 0.05, 0.1, 0.3, 0.35, 0.6, 0.9], np.float32), (n, L))
    S[rng.random(S.shape) < 0.4] = 0.0
    Y = rng.random((n, L)) < 0.3
    Y[0] = True
    stored = S != 0
    stored[rng.random(S.shape) < 0.2] = True  # explicit zeros among the stored scores
    rr, cc = np.nonzero(stored)
    Ssp = sp.csr_matrix((S[rr, cc], (rr, cc)), shape=(n, L), dtype=np.float32)
    t = np.round(np.arange(-0.2 if below_zero else 0.1, 0.76, 0.05), 2).astype(np.float64)
    swept = Objective().sweep(Y, S, t)
    sparse, dense = RowCounts.sweep(Y, Ssp, t), RowCounts.sweep(Y, S, t)
    for j in range(len(t)):
        assert sparse.parts(j) == dense.parts(j) == swept[j][:2]
    assert all((a == b).all() for a, b in ((sparse.tp, dense.tp), (sparse.size, dense.size), (sparse.ok, dense.ok)))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(0, 10_000))
def test_sparse_rae_xmc_scores_equal_the_dense_ones(m, K, seed):
    from newsmon.shared.scoring.rae_xmc import rae_xmc_scores, rae_xmc_scores_sparse

    rng = np.random.default_rng(seed)
    sims = np.sort(rng.random((m, K)).astype(np.float32), axis=1)[:, ::-1].copy()
    sims[:, int(rng.integers(1, K + 1)):] = -np.inf
    Y = sp.csr_matrix((rng.random((m * K, 7)) < 0.3).astype(np.float32))
    for k, tau in ((1, 0.05), (K, 0.01), (max(1, K // 2), 0.2)):
        dense = rae_xmc_scores(sims, Y, k, tau, 1.0, 9)
        got = rae_xmc_scores_sparse(sims, Y, k, tau, 1.0, 9)
        assert got.dtype == np.float32 and np.array_equal(got.toarray().view(np.int32), dense.view(np.int32))


def test_release_free_heap_hands_freed_memory_back():
    import sys

    from newsmon.shared.evaluation.usage import release_free_heap

    def rss_mib() -> float:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    before = rss_mib()
    held = [bytes(2000) + bytes([i % 256]) for i in range(100_000)]  # about 200 MB of malloc'd objects
    grown = rss_mib()
    del held
    trimmed = release_free_heap()
    after = rss_mib()
    assert grown - before > 100
    if trimmed:
        assert after < grown - 100, (before, grown, after)


@pytest.mark.slow  # the head model of reuters21578_en's train split, twice
def test_the_head_model_is_the_same_whatever_the_blas_thread_count(shared_data):
    """liblinear's logistic regression sums dot products with BLAS, which splits long vectors across its threads:
    the model must not depend on how many there are (reuters21578_en's head model, 16,000 columns: coefficients
    1 ulp apart with 1 and 2 threads before)."""
    from threadpoolctl import threadpool_limits

    from newsmon.shared.data import load_corpus

    train = load_corpus(shared_data / "reuters21578_en").split("train")
    texts, labels = [a.text for a in train], [tuple(a.labels) for a in train]
    rows = head_model.style_rows(texts)
    models = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            models.append(head_model.HeadModel(1.0, 400).fit(texts, labels, rows))
    assert len(models[0].columns) > 10_000 and len(models[0].labels) >= 5
    assert np.array_equal(models[0].coef, models[1].coef)
    assert np.array_equal(models[0].intercept, models[1].intercept)


def _trim_modules():
    """The modules that call :func:`newsmon.shared.heap.trim_heap` (each imported it by name)."""
    from newsmon.shared.predictors import newsmon as predictor
    from newsmon.shared.scoring.calibration import inputs, run, search
    from newsmon.shared.scoring.components import base, label_tree, stacking

    return (predictor, inputs, run, search, base, head_model, label_tree, stacking)


def test_handing_the_heap_back_changes_nothing_in_the_calibration(monkeypatch):
    """The calibration hands the heap's free pages back after each step, grid, evidence, option and fold (glibc's
    ``malloc_trim``): the same record and the same test scores as with the calls made no-ops, and they are made."""
    from dataclasses import dataclass

    from newsmon.shared.predictors import QueryBatch, TrainingSet, get_predictor
    from newsmon.shared.scoring.retrieval import LabelVocab

    @dataclass
    class Hit:
        article_id: str
        similarity: float
        labels: tuple

    rng = np.random.default_rng(5)
    n, topics = 240, ("vlada", "krka", "nogomet", "banka")
    gold = [tuple(sorted({topics[int(rng.integers(4))] for _ in range(int(rng.integers(1, 3)))})) for _ in range(n)]
    texts = [" ".join([*(g for g in gold[i] for _ in range(3)), *rng.choice(WORDS, 8)]) for i in range(n)]
    vecs = rng.normal(size=(n, 8)).astype(np.float32)
    for i, g in enumerate(gold):
        vecs[i, [topics.index(t) for t in g]] += 2.0
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"a{i:03d}" for i in range(n)]
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :30]
    loo = Retrieval.from_neighbours([[Hit(ids[j], float(sims[i, j]), gold[j]) for j in order[i]] for i in range(n)])
    vocab = LabelVocab(sorted(topics))
    train = TrainingSet(texts, vocab.encode(gold), vocab, retrieval=loo, ids=ids)
    train.vectors = vecs
    test = QueryBatch(texts[:20], ["sl"] * 20, vectors=vecs[:20], retrieval=loo.rows(range(20)))

    def fitted() -> tuple[str, bytes]:
        p = get_predictor("newsmon").fit(train)
        scores, decided = p.score_and_decide(test)
        return json.dumps(p.calibration.steps, sort_keys=True, default=str), scores.tobytes() + decided.tobytes()

    calls = []
    for module in _trim_modules():
        monkeypatch.setattr(module, "trim_heap", lambda: calls.append(1) or True)
    counted = fitted()
    assert len(calls) > 10
    steps = [s["step"] for s in json.loads(counted[0])]
    assert {"+ head_model", "+ label_tree", "+ stacking", "+ lexical fusion"} <= set(steps), steps
    for module in _trim_modules():
        monkeypatch.setattr(module, "trim_heap", lambda: False)
    assert fitted() == counted
    monkeypatch.undo()
    assert fitted() == counted  # the real calls


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 10_000))
def test_neighbour_codes_equal_np_unique_of_the_unicode_ids(m, K, seed):
    """The new-label replay's id codes (missing neighbours' "" included) are those np.unique gave it."""
    from newsmon.shared.scoring.rules.new_label_support import neighbour_codes

    rng = np.random.default_rng(seed)
    ids = np.array([["" if rng.random() < 0.2 else f"reuters-{rng.integers(0, 15)}" for _ in range(K)]
                    for _ in range(m)], dtype=object)
    uniq, first, codes = np.unique(ids.astype(str), return_index=True, return_inverse=True)
    got = neighbour_codes(ids)
    assert got[0] == list(uniq) and np.array_equal(got[1], first)
    assert np.array_equal(got[2], codes.reshape(m, K))


def _fuse_per_query(retrieval: Retrieval, lex: np.ndarray, weight: float, k: int) -> Retrieval:
    """The per-query loop ``fuse`` replaced (its code before 7 December)."""
    m, n = retrieval.sims.shape
    ids, sims, cos, labels, texts, stored = [], [], [], [], [], []
    for i in range(m):
        present = np.flatnonzero(np.isfinite(retrieval.sims[i]))
        fused = np.full(n, -np.inf, dtype=np.float32)
        fused[present] = (1.0 - weight) * retrieval.sims[i, present] + weight * lex[i, present]
        order = np.argsort(-fused, kind="stable")[:k]
        ids.append(retrieval.ids[i, order])
        sims.append(fused[order])
        cos.append(retrieval.cosine[i, order])
        labels.append([retrieval.labels[i][j] for j in order])
        texts.append([retrieval.texts[i][j] for j in order])
        stored.append([retrieval.terms[i][j] for j in order])
    return Retrieval(np.array(ids, dtype=object).reshape(m, -1), np.array(sims, dtype=np.float32).reshape(m, -1),
                     labels, None, texts, np.array(cos, dtype=np.float32).reshape(m, -1), stored)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 12), st.integers(1, 14), st.sampled_from([0.2, 0.3, 0.5, 0.7, 1.0]),
       st.integers(0, 10_000))
def test_fuse_of_every_query_at_once_equals_the_per_query_loop(m, K, k, weight, seed):
    """Missing candidates (-inf), ties of the fused score (kept in the candidates' order), k above and below K,
    float64 lexical cosines: the same neighbours, fused scores and cosines, bit for bit."""
    rng = np.random.default_rng(seed)
    sims = np.full((m, K), -np.inf, dtype=np.float32)
    for i in range(m):
        n = int(rng.integers(0, K + 1))
        sims[i, :n] = np.sort(rng.choice([0.5, 0.6, 0.7], n) if rng.random() < 0.3 else rng.random(n))[::-1]
    ids = np.array([[f"a{i}-{j}" for j in range(K)] for i in range(m)], dtype=object)
    r = Retrieval(ids, sims, [[(f"l{j % 3}",) for j in range(K)] for _ in range(m)], None,
                  [[f"t{j}" for j in range(K)] for _ in range(m)], terms=[[None] * K for _ in range(m)])
    lex = rng.choice([0.0, 0.25, 0.5], (m, K)) if rng.random() < 0.3 else rng.random((m, K))
    for lexical in (lex, lex.astype(np.float32)):
        want, got = _fuse_per_query(r, lexical, weight, k), fuse(r, [""] * m, weight, k, lexical=lexical)
        assert np.array_equal(got.ids, want.ids) and got.ids.dtype == object
        assert got.sims.dtype == np.float32 and np.array_equal(got.sims.view(np.int32), want.sims.view(np.int32))
        assert np.array_equal(got.cosines.view(np.int32), want.cosines.view(np.int32))
        assert got.labels == want.labels and got.texts == want.texts and got.terms == want.terms


def _encode_one_by_one(vocab: LabelVocab, label_sets, grow: bool = True) -> sp.csr_matrix:
    """The loop ``LabelVocab.encode`` replaced (its code before 7 December)."""
    known: dict = {}
    indptr, indices = [0], []
    for labels in label_sets:
        key = labels if isinstance(labels, tuple) else tuple(labels)
        cols = known.get(key)
        if cols is None:
            if grow:
                vocab.extend(key)
            cols = known[key] = sorted({vocab.index[lb] for lb in key if lb in vocab.index})
        indices.extend(cols)
        indptr.append(len(indices))
    return sp.csr_matrix((np.ones(len(indices), dtype=np.float32), np.asarray(indices, dtype=np.int64),
                          np.asarray(indptr, dtype=np.int64)), shape=(len(label_sets), len(vocab)), dtype=np.float32)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=4), max_size=30), st.booleans(), st.booleans(),
       st.lists(st.sampled_from("abcxyz"), max_size=3))
def test_encode_of_each_distinct_set_once_equals_the_loop(sets, as_tuples, grow, known):
    """Repeated, empty and unordered sets with repeated labels, lists or tuples, labels the vocabulary has and has
    not, growing or not: the same matrix (indices, order, shape) and the same vocabulary after it."""
    label_sets = [tuple(s) for s in sets] if as_tuples else [list(s) for s in sets]
    a, b = LabelVocab(known), LabelVocab(known)
    want, got = _encode_one_by_one(a, label_sets, grow), b.encode(label_sets, grow)
    assert a.labels == b.labels and got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)

