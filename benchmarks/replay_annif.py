"""The adaptive advantage, measured: the test articles arrive in order, each decision is fed back, and a share of
the labels appears only mid-stream; newsmon (its memory grows with every decision) against Annif retrained every
N articles (issue 25 item 3).

Setup: a seeded share (``--new-share``) of the labels that occur at least twice in the test split is hidden from the
train and validation splits (those articles stay, without the label): these labels are *new*, they exist only
from their first test article on, as the labels a newsroom adds every month. Then the test articles are replayed in
file order, one at a time:

- **newsmon**: the ``newsmon`` predictor calibrated on the replay's own train and validation splits as ``eval``
  calibrates it (``--calibrate``: every lever with the models it judged, stacking's included), or with the
  parameters an ``eval`` run calibrated (``--params``: its ``results.json``, its models fitted on the train split;
  not for a component fitted by the calibration) or else the settings' (known labels: the train split's);
  each article is searched in the knowledge memory as the workers do (hybrid, by language), scored, decided, and
  then stored in the memory with its gold labels (the moderator's decision), so the next article can retrieve it
  and its labels at once. Nothing is retrained.
- **Annif** (``--project``, default Omikuji Parabel; limit and threshold chosen on validation by micro-F1 once,
  as ``eval`` does) retrained every ``--every`` articles on the train split plus the test articles decided so far
  (the simulated nightly job), and once never retrained.

Reported: micro-F1 over the whole stream, and the new labels' micro precision / recall / F1 over their
occurrences after their first one (the first cannot be known by anyone), with each method's wall time.

Usage (``--params``: the ``results.json`` of a ``newsmon eval --methods newsmon ...`` run; without it, the settings'
scoring parameters, what runs before any calibration)::

    python benchmarks/replay_annif.py --data ../shared/data/sentinews_sl --calibrate

``--nightly`` runs the nightly replay instead (``benchmarks/nightly_replay.py``, issue 41 item 3: the real nightly
job every N decisions, its gate's verdicts, newsmon retrained and never, Annif retrained and never, per night)::

    nice python benchmarks/replay_annif.py --nightly --data ../shared/data/sentinews_sl --every 44
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from record import BenchmarkRecord, run_name

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.classifier import TEXT_PAYLOAD_CHARS
from newsmon.shared.config import Settings
from newsmon.shared.data import Article, load_corpus
from newsmon.shared.encoder import Encoder
from newsmon.shared.evaluation.neighbours import _eval_memory_settings, retrieve_neighbours, search_by_language
from newsmon.shared.memory import MemoryRouter
from newsmon.shared.metrics import classification_metrics
from newsmon.shared.predictors import LabelVocab, NewsmonPredictor, QueryBatch, TrainingSet
from newsmon.shared.predictors.annif_peer import (
    AnnifWorkspace,
    annif_executable,
    choose_limit_threshold,
    decide_limit_threshold,
)
from newsmon.shared.scoring.components import get_component
from newsmon.shared.scoring.decision import neighbours_needed


def hide_new_labels(train: list[Article], val: list[Article], test: list[Article], share: float, seed: int
                    ) -> tuple[set[str], list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The new labels (a seeded ``share`` of the test labels with >= 2 test articles, at least one) and the
    train / validation label sets without them."""
    counts: dict[str, int] = {}
    for a in test:
        for lb in a.labels:
            counts[lb] = counts.get(lb, 0) + 1
    pool = sorted(lb for lb, c in counts.items() if c >= 2)
    rng = np.random.default_rng(seed)
    new = set(rng.choice(pool, max(1, round(share * len(pool))), replace=False).tolist()) if pool else set()
    strip = lambda arts: [tuple(lb for lb in a.labels if lb not in new) for a in arts]  # noqa: E731
    return new, strip(train), strip(val)


def calibrated(s: Settings, train: list[Article], train_labels: list[tuple[str, ...]], val: list[Article],
               val_labels: list[tuple[str, ...]], test: list[Article], vocab: LabelVocab) -> NewsmonPredictor:
    """The ``newsmon`` predictor calibrated as ``eval`` calibrates it (the train split leave-one-out plus the
    validation split, every lever and its per-record models, stacking's included), on the replay's own splits: the
    new labels hidden, as a calibration before they existed."""
    hidden = [a.model_copy(update={"labels": tuple(lbs)}) for a, lbs in zip(train, train_labels, strict=True)]
    hidden_val = [a.model_copy(update={"labels": tuple(lbs)}) for a, lbs in zip(val, val_labels, strict=True)]
    pred = NewsmonPredictor.from_settings(s)
    k, lex = pred.neighbours_needed(), pred.lexical_neighbours_needed()
    nb = retrieve_neighbours(s, hidden, test, hidden_val, k, bool(val), k, False, {"timings": {}}, lex)
    return pred.fit(TrainingSet([a.text for a in train], vocab.encode(train_labels, grow=False), vocab,
                                retrieval=nb.train_loo, validation=nb.validation,
                                validation_labels=vocab.encode(val_labels, grow=False) if val else None,
                                validation_texts=[a.text for a in val], vectors=nb.train_vecs,
                                validation_vectors=nb.val_vecs))


def replay_newsmon(s: Settings, params: ScoringParams | NewsmonPredictor, train: list[Article],
                   train_labels: list[tuple[str, ...]], test: list[Article], vocab: LabelVocab
                   ) -> tuple[np.ndarray, float]:
    """newsmon's ``(m, L)`` proposals for the test articles in order, each stored with its gold labels after its
    decision; and the wall time (s). ``params``: fixed parameters (the components' models fitted on the train
    split), or a predictor already calibrated (:func:`calibrated`: its models, the ones it judged)."""
    enc = Encoder(s.encoder, s.home)
    try:
        P = enc.encode([a.text for a in train] + [a.text for a in test], role="passage")
        Q = enc.encode([a.text for a in test], role="query")
    finally:
        enc.close()
    t0 = time.perf_counter()
    n_train = len(train)
    Y_train = vocab.encode(train_labels, grow=False)
    pred = params if isinstance(params, NewsmonPredictor) else NewsmonPredictor(params).fit(
        TrainingSet([a.text for a in train], Y_train, vocab, vectors=P[:n_train]))
    k, lex = pred.neighbours_needed(), pred.lexical_neighbours_needed()
    out = np.zeros((len(test), len(vocab)), dtype=bool)
    with tempfile.TemporaryDirectory(prefix="newsmon-replay-") as tmp:
        router = MemoryRouter(_eval_memory_settings(s, tmp), enc.model_id, P.shape[1])
        try:
            _store(router, train, P[:n_train], train_labels)
            for i, a in enumerate(test):
                r = search_by_language(router, Q[i:i + 1], [a.lang], k, s.memory.min_language_articles,
                                       texts=[a.text] if lex else None, lexical_k=lex)
                _s, proposed = pred.score_and_decide(QueryBatch([a.text], [a.lang], Q[i:i + 1], r))
                out[i, :proposed.shape[1]] = proposed[0]
                _store(router, [a], P[n_train + i:n_train + i + 1], [a.labels])  # the decision, fed back
        finally:
            router.close()
    return out, time.perf_counter() - t0


def _store(router: MemoryRouter, arts: list[Article], vecs: np.ndarray, labels: list[tuple[str, ...]]) -> None:
    for lang in sorted({a.lang for a in arts}):
        idx = [i for i, a in enumerate(arts) if a.lang == lang]
        router.memory(lang).upsert([arts[i].id for i in idx], vecs[idx], [labels[i] for i in idx],
                                   [{"lang": lang, "text": arts[i].text[:TEXT_PAYLOAD_CHARS]} for i in idx])


def replay_annif(s: Settings, project: str, every: int | None, train: list[Article], Y_train: sp.csr_matrix,
                 val: list[Article], Y_val: sp.csr_matrix, test: list[Article], Y_test: sp.csr_matrix,
                 vocab: LabelVocab) -> tuple[np.ndarray, float, dict]:
    """Annif's ``(m, L)`` proposals for the test articles in order, retrained every ``every`` articles on train plus
    the test articles before (None: never); wall time (s) and the chosen limit / threshold."""
    t0 = time.perf_counter()
    ws = AnnifWorkspace(annif_executable(s.home), len(vocab))
    ws.load_vocab(vocab.labels)
    texts = [a.text for a in train]
    ws.write_corpus(texts, Y_train)
    sources = ("annif_parabel", "annif_bonsai") if project == "annif_ensemble" else (project,)
    for p in sources:
        ws.train(p)
    limit, threshold, _ = choose_limit_threshold(ws.suggest(project, [a.text for a in val])[0], Y_val)
    out = np.zeros((len(test), len(vocab)), dtype=bool)
    step = every or len(test)
    retrains = 0
    for start in range(0, len(test), step):
        if start and every:
            ws.write_corpus(texts + [a.text for a in test[:start]], sp.vstack([Y_train, Y_test[:start]]))
            for p in sources:
                ws.train(p, again=True)
            retrains += 1
        chunk = test[start:start + step]
        out[start:start + len(chunk)] = decide_limit_threshold(ws.suggest(project, [a.text for a in chunk])[0],
                                                               limit, threshold)
    shutil.rmtree(ws.root, ignore_errors=True)
    return out, time.perf_counter() - t0, {"limit": limit, "threshold": threshold, "retrains": retrains}


def new_label_mask(test: list[Article], new: set[str], vocab: LabelVocab) -> np.ndarray:
    """``(m, L)`` bool: the new labels' columns on the test articles after each label's first test article."""
    mask = np.zeros((len(test), len(vocab)), dtype=bool)
    first: dict[str, int] = {}
    for i, a in enumerate(test):
        for lb in a.labels:
            first.setdefault(lb, i)
    for lb in new:
        mask[first[lb] + 1:, vocab.index[lb]] = True
    return mask


def figures(Y: np.ndarray, Z: np.ndarray, mask: np.ndarray) -> list:
    """Stream micro-F1 and macro-F1 (%), then the new labels' micro P / R / F1 (%) within ``mask``."""
    m = classification_metrics(Y, Z)
    tp, fp, fn = int((Z & Y & mask).sum()), int((Z & ~Y & mask).sum()), int((~Z & Y & mask).sum())
    pct = lambda x: round(100 * x, 1)  # noqa: E731
    return [pct(m["uF1"]), pct(m["F1"]), pct(tp / (tp + fp)) if tp + fp else "–",
            pct(tp / (tp + fn)) if tp + fn else "–", pct(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else "–"]


def replay(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    s = Settings(data=Path(args.data))
    corpus = load_corpus(s.data)
    train, val = corpus.split("train")[:args.train_limit], corpus.split("validation")
    test = corpus.split("test")[:args.test_limit]
    new, train_labels, val_labels = hide_new_labels(train, val, test, args.new_share, args.seed)
    vocab = LabelVocab(lb for labels in train_labels for lb in labels)
    vocab.extend(lb for a in test for lb in a.labels)
    Y_test = vocab.encode([a.labels for a in test], grow=False).toarray() > 0
    Y_train, Y_val = vocab.encode(train_labels, grow=False), vocab.encode(val_labels, grow=False)
    mask = new_label_mask(test, new, vocab)
    calibration_s = None
    if args.calibrate:
        t0 = time.perf_counter()
        pred = calibrated(s, train, train_labels, val, val_labels, test, vocab)
        calibration_s, params = round(time.perf_counter() - t0, 1), pred.resolved.params
        Z, secs = replay_newsmon(s, pred, train, train_labels, test, vocab)
    else:
        if args.params:
            report = json.loads(Path(args.params).read_text())["methods"]["newsmon"]["params"]
            params = ScoringParams(**{k: v for k, v in report.items() if k in ScoringParams.model_fields})
        else:
            params = s.scoring  # what the workers run without a calibration record
        fitted_by_calibration = [c.name for c in params.components if get_component(c.name).FITTED_BY_CALIBRATION]
        if fitted_by_calibration:
            raise SystemExit(f"--params names {fitted_by_calibration}, whose model the calibration fits on its own "
                             "articles (not in results.json): use --calibrate")
        Z, secs = replay_newsmon(s, params, train, train_labels, test, vocab)
    rows = []
    rows.append(["newsmon (each decision fed back)", *figures(Y_test, Z, mask), round(secs, 1)])
    chosen = {}
    for every in [*args.every, None]:
        Z, secs, chosen[str(every)] = replay_annif(s, args.project, every, train, Y_train, val, Y_val, test,
                                                   sp.csr_matrix(Y_test.astype(np.float32)), vocab)
        name = f"Annif {args.project.removeprefix('annif_')}, " + (f"retrained every {every}" if every else
                                                                  "never retrained")
        rows.append([name, *figures(Y_test, Z, mask), round(secs, 1)])
    n_new = int(mask.any(axis=0).sum())
    rec.data.update(new_labels=sorted(new), new_label_occurrences_after_first=int((Y_test & mask).sum()),
                    test_articles=len(test), annif=chosen, newsmon_params=params.model_dump(mode="json",
                                                                                          exclude_defaults=True),
                    params_from="calibrated on the replay's splits" if args.calibrate else
                    args.params or "settings (no calibration)", calibration_s=calibration_s,
                    k=neighbours_needed(params))
    rec.table(f"Replay of the test split in order ({args.data})",
              ["method", "stream micro-F1", "stream macro-F1", "new-label P", "new-label R", "new-label F1",
               "wall s"], rows,
              note=f"{len(train)} train articles; {len(test)} test articles in file order; {len(new)} new labels "
                   f"({n_new} seen again after their first article), hidden from train and validation "
                   f"(share {args.new_share}, seed {args.seed}); "
                   "new-label figures over their occurrences after the first. Figures in %.")


def main() -> None:
    if "--nightly" in sys.argv[1:]:  # the nightly replay's own options (nightly_replay.py)
        from nightly_replay import main as nightly_main

        nightly_main([a for a in sys.argv[1:] if a != "--nightly"])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nightly", action="store_true",
                    help="the nightly replay instead (nightly_replay.py: the real nightly job every --every "
                         "decisions, newsmon retrained and never, Annif retrained and never, per night; its options)")
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--params", help="results.json of a newsmon eval run (its newsmon row's calibrated parameters; "
                                     "default: the settings' scoring parameters, what runs without a calibration)")
    ap.add_argument("--calibrate", action="store_true",
                    help="calibrate newsmon on the replay's own train (leave-one-out) and validation splits, as eval "
                         "does, the new labels hidden (needed when the calibration keeps stacking)")
    ap.add_argument("--train-limit", type=int, default=None,
                    help="only the first N train articles (the memory and Annif's training set; a small machine)")
    ap.add_argument("--test-limit", type=int, default=None, help="only the first N test articles of the stream")
    ap.add_argument("--project", default="annif_parabel",
                    choices=["annif_tfidf", "annif_parabel", "annif_bonsai", "annif_ensemble"])
    ap.add_argument("--every", type=int, nargs="+", default=[25], help="retrain Annif every N test articles")
    ap.add_argument("--new-share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    with BenchmarkRecord(run_name("replay_annif", args.data)) as rec:
        replay(args, rec)


if __name__ == "__main__":
    main()
