"""The loop, replayed (issue 41 item 3): a corpus's test articles stream in file order, each decided with its gold
labels into the knowledge memory (what a moderator's accepted decision stores), and every ``--every`` decisions the
real nightly job runs (:func:`newsmon.training_jobs.nightly.run_nightly`: mine hard negatives -> train the
candidate -> calibrate the candidate and production -> the gate on their calibrated ``newsmon`` rows -> promote or
refuse). Per night, on the next night's articles (a "day"): micro-F1 and subset accuracy of

- **newsmon, retrained nightly**: the production scorer of a home the nightly job runs on (the promoted model and
  its calibration records when the gate promotes; production's own recalibration when it refuses);
- **newsmon, never retrained**: a copy of the same home taken before the first night, fed the same decisions, no
  nightly job (its calibration record stays the one of day 0);
- **Annif** (``--project``, default the Omikuji ensemble, :mod:`newsmon.shared.predictors.annif_peer`) retrained
  every night on the train split plus the decided articles, and never retrained
  (:func:`replay_annif.replay_annif`, the same code as the adaptive replay);

with the gate's verdict and reason and the nightly job's wall time. Within a day both newsmon arms propose for each
article before its decision is stored, then store it, so the next article can retrieve it (as the workers do);
Annif only learns at night.

Splits: day 0's memory is the train split, calibrated as ``memory build --calibrate`` calibrates it. The validation
split is halved in file order (:func:`night_corpus`): the first half is what the calibrations (day 0's, the
nightly job's two) and the adapter's early stopping read, the second half is the gate's held-out set (the nightly
corpus's ``test`` split), so the gate never reads the stream (the stream's future articles would leak; its past ones
are in the memory the candidate trained on). Nothing of the stream is used before its day.

Does a refused night change production? The nightly job calibrates production beside the candidate
(:func:`newsmon.training_jobs.gate.calibrated_row`), which writes a calibration record for production's collection
whether or not the candidate is promoted, and the workers read the collection's record
(:meth:`newsmon.shared.classifier.Classifier.resolved`): the table's "production record" column shows the record
the retrained arm scored each day with, so a refused night whose record changed did change production.

Usage (about 8 minutes a night on 2 cores with the default encoder; ``nice`` it on a shared machine)::

    nice python benchmarks/nightly_replay.py --data ../shared/data/sentinews_sl --every 44
    python benchmarks/replay_annif.py --nightly --data ../shared/data/sentinews_sl --every 44   # the same
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from record import BenchmarkRecord, run_name
from replay_annif import replay_annif

from newsmon.shared.config import Settings
from newsmon.shared.data import Article, Corpus, load_corpus
from newsmon.shared.metrics import classification_metrics
from newsmon.shared.predictors import LabelVocab

#: The Annif project the replay runs by default: the ensemble of the two Omikuji projects.
DEFAULT_PROJECT = "annif_ensemble"
#: The arms, in the table's order.
ARMS = ("newsmon retrained", "newsmon never", "Annif retrained", "Annif never")


def days(n: int, every: int, nights: int | None = None) -> list[tuple[int, int]]:
    """The stream's days: ``[start, stop)`` article ranges of ``every`` decisions, at most ``nights + 1`` of them
    (a night runs between two days); a remainder shorter than half a day joins the last day (133 articles in days
    of 44: 44, 44, 45).

    Raises:
        ValueError: ``every`` < 1, or fewer than two days (no night to measure).
    """
    if every < 1:
        raise ValueError(f"--every must be >= 1, got {every}")
    out = [(s, min(s + every, n)) for s in range(0, n, every)]
    if len(out) > 1 and 2 * (out[-1][1] - out[-1][0]) < every:
        out[-2:] = [(out[-2][0], n)]
    if nights is not None:
        out = out[:nights + 1]
    if len(out) < 2:
        raise ValueError(f"{n} stream articles in days of {every}: no night between two days")
    return out


def night_corpus(corpus: Corpus) -> tuple[Corpus, list[Article], list[Article]]:
    """The corpus the nightly job reads: the train split, the first half of the labelled validation split (file
    order) as its validation split (calibrations, early stopping) and the second half as its test split (the gate's
    held-out articles); also those two halves.

    Raises:
        ValueError: fewer than 2 labelled validation articles.
    """
    val = [a for a in corpus.split("validation") if a.labels]
    if len(val) < 2:
        raise ValueError(f"{corpus.path}: the replay needs >= 2 labelled validation articles (calibration and gate)")
    half = (len(val) + 1) // 2
    calibration, gate = val[:half], [a.model_copy(update={"split": "test"}) for a in val[half:]]
    return Corpus(corpus.path, corpus.split("train") + calibration + gate), calibration, gate


def figures(gold: Sequence[Sequence[str]], proposed: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-F1 ``uF1`` and subset accuracy ``Acc`` (%, one decimal) of label sets, over the labels either side
    names."""
    vocab = LabelVocab()
    Y = vocab.encode([tuple(g) for g in gold])
    Z = vocab.encode([tuple(p) for p in proposed])
    Y.resize(Z.shape)
    m = classification_metrics(Y, Z)
    return {"uF1": round(100 * m["uF1"], 1), "Acc": round(100 * m["Acc"], 1)}


def label_sets(Z: np.ndarray, vocab: LabelVocab) -> list[tuple[str, ...]]:
    """The rows of an ``(m, L)`` bool decision matrix as label sets."""
    return [tuple(vocab.labels[j] for j in np.flatnonzero(row)) for row in Z]


@dataclass
class Night:
    """One night: the gate's verdict and the job's wall time (None for day 1, before any night)."""

    promoted: bool | None = None
    reason: str = ""
    seconds: float | None = None
    stages: dict = field(default_factory=dict)


@dataclass
class Day:
    """One day of the stream: its article range, each arm's proposals, the records newsmon scored with."""

    start: int
    stop: int
    proposed: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    records: dict[str, list[str]] = field(default_factory=dict)
    model: dict[str, str] = field(default_factory=dict)
    night: Night = field(default_factory=Night)  # the night before this day


def rows(stream: Sequence[Article], days_: Sequence[Day]) -> list[list]:
    """The table: per day (the night before it), each arm's micro-F1 / subset accuracy on the day's articles, the
    gate's verdict, whether the retrained arm's calibration record changed overnight, the job's wall time; then the
    days after a night together."""
    out = []
    prev_records: list[str] | None = None
    for i, d in enumerate(days_):
        gold = [a.labels for a in stream[d.start:d.stop]]
        cells = []
        for arm in ARMS:
            f = figures(gold, d.proposed[arm])
            cells += [f["uF1"], f["Acc"]]
        rec = d.records.get("newsmon retrained", [])
        changed = "–" if prev_records is None else ("yes" if rec != prev_records else "no")
        prev_records = rec
        verdict = "–" if d.night.promoted is None else ("promoted" if d.night.promoted else "refused")
        out.append([f"{i} -> day {i + 1} ({d.start + 1}–{d.stop})", *cells, verdict, changed,
                    "–" if d.night.seconds is None else round(d.night.seconds)])
    after = [d for d in days_ if d.night.promoted is not None]
    if after:
        gold = [a.labels for d in after for a in stream[d.start:d.stop]]
        cells = []
        for arm in ARMS:
            f = figures(gold, [p for d in after for p in d.proposed[arm]])
            cells += [f["uF1"], f["Acc"]]
        out.append([f"days 2–{len(days_)} ({after[0].start + 1}–{after[-1].stop})", *cells, "", "", ""])
    return out


COLUMNS = ["night -> day (articles)", "newsmon nightly uF1", "Acc", "newsmon never uF1", "Acc",
           "Annif nightly uF1", "Acc", "Annif never uF1", "Acc", "gate", "production record changed",
           "nightly job s"]


def stream_day(s: Settings, arts: Sequence[Article]) -> tuple[list[tuple[str, ...]], list[str], str]:
    """Propose for each article with production's scorer (the workers' :meth:`Classifier.propose`), then store it
    with its gold labels (the moderator's accepted decision), in order. Returns the proposals, the calibration
    records they were scored with and the model version."""
    from newsmon.shared.classifier import Classifier  # deferred: loads the encoder stack

    clf = Classifier(s)
    try:
        proposed, used = [], set()
        for a in arts:
            p = clf.propose([a.text], [a.lang])[0][0]
            proposed.append(tuple(sorted(p.label_set)))
            if p.scoring is not None and p.scoring.calibration:
                used.add(p.scoring.calibration)
            clf.add_articles([a])
        return proposed, sorted(used), clf.model_version
    finally:
        clf.close()


def build_day0(s: Settings, corpus: Corpus, calibration: Sequence[Article], train_limit: int | None) -> dict:
    """Day 0: the train split in the memory, calibrated as ``memory build --calibrate`` (on the validation half the
    nightly job calibrates on). Returns the record ids per language and the seconds."""
    from newsmon.shared.classifier import Classifier
    from newsmon.training_jobs.calibrate_memory import calibrate_memory

    t0 = time.perf_counter()
    clf = Classifier(s)
    try:
        clf.add_articles([a for a in corpus.split("train") if a.labels][:train_limit], progress=True)
        done = calibrate_memory(clf, calibration, written_by="memory build", corpus=str(corpus.path))
    finally:
        clf.close()
    from newsmon.shared.scoring.records import record_id

    return {"records": {lang: record_id(c.record) for lang, c in done.items()},
            "seconds": round(time.perf_counter() - t0, 1)}


def annif_arms(peer: Settings, project: str, every: int, corpus: Corpus, calibration: Sequence[Article],
               stream: Sequence[Article], train_limit: int | None) -> tuple[dict, dict]:
    """Annif's proposals for the stream, retrained every ``every`` articles and never (``replay_annif``), as label
    sets per arm; and the chosen limits / thresholds and wall times."""
    train = [a for a in corpus.split("train") if a.labels][:train_limit]
    vocab = LabelVocab(lb for a in train for lb in a.labels)
    vocab.extend(lb for a in [*calibration, *stream] for lb in a.labels)
    Y_train = vocab.encode([a.labels for a in train], grow=False)
    Y_val = vocab.encode([a.labels for a in calibration], grow=False)
    Y_test = sp.csr_matrix(vocab.encode([a.labels for a in stream], grow=False).toarray() > 0, dtype=np.float32)
    out, info = {}, {}
    for arm, ev in (("Annif retrained", every), ("Annif never", None)):
        Z, secs, chosen = replay_annif(peer, project, ev, train, Y_train, list(calibration), Y_val, list(stream),
                                       Y_test, vocab)
        out[arm] = label_sets(Z, vocab)
        info[arm] = {**chosen, "seconds": round(secs, 1)}
    return out, info


def replay(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    from newsmon.training_jobs.nightly import run_nightly  # deferred: loads the training stack

    corpus = load_corpus(Path(args.data))
    stream = [a for a in corpus.split("test") if a.labels][:args.test_limit]
    plan = days(len(stream), args.every, args.nights)
    stream = stream[:plan[-1][1]]
    nightly, calibration, gate = night_corpus(corpus)
    peer = Settings(home=Path(args.peer_home)) if args.peer_home else Settings()
    work = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="newsmon-nightly-replay-"))
    homes = {"newsmon retrained": work / "retrained", "newsmon never": work / "never"}
    arms = {arm: Settings(home=h, data=Path(args.data)) for arm, h in homes.items()}
    for s in arms.values():
        s.memory.path = Path(s.home) / "memory"
    t0 = time.perf_counter()
    annif, annif_info = annif_arms(peer, args.project, args.every, corpus, calibration, stream, args.train_limit)
    rec.data["annif"] = {"project": args.project, **annif_info, "seconds": round(time.perf_counter() - t0, 1)}
    rec.data["day0"] = build_day0(arms["newsmon retrained"], corpus, calibration, args.train_limit)
    shutil.copytree(homes["newsmon retrained"], homes["newsmon never"])  # the same day 0, no night after it
    log: list[Day] = []
    for i, (start, stop) in enumerate(plan):
        day = Day(start, stop)
        if i:
            t0 = time.perf_counter()
            rep = run_nightly(arms["newsmon retrained"], nightly, source="memory")
            day.night = Night(rep.rollout["promoted"], rep.rollout["reason"], time.perf_counter() - t0,
                              {k: round(v, 1) for k, v in rep.seconds.items()})
            rec.data.setdefault("nights", []).append({
                "night": i, "promoted": rep.rollout["promoted"], "reason": rep.rollout["reason"],
                "seconds": round(day.night.seconds, 1), "stages": day.night.stages,
                "candidate": {k: rep.rollout["candidate"].get(k) for k in ("uF1", "Acc", "records", "model_version")},
                "current": {k: rep.rollout["current"].get(k) for k in ("uF1", "Acc", "records", "model_version")},
                "adapter": {k: v for k, v in rep.adapter.items() if k != "mining"}, "mining": rep.mining})
            print(f"night {i}: {rep.rollout['reason']} ({day.night.seconds:.0f} s)", flush=True)
        for arm, s in arms.items():
            day.proposed[arm], day.records[arm], day.model[arm] = stream_day(s, stream[start:stop])
        for arm in ("Annif retrained", "Annif never"):
            day.proposed[arm] = annif[arm][start:stop]
        log.append(day)
        rec.data.setdefault("days", []).append({"day": i + 1, "articles": [start, stop], "records": day.records,
                                               "model": day.model, "figures": {
                                                   arm: figures([a.labels for a in stream[start:stop]],
                                                                day.proposed[arm]) for arm in ARMS}})
    refused_changed = [n for n, d in enumerate(log) if d.night.promoted is False
                       and d.records["newsmon retrained"] != log[n - 1].records["newsmon retrained"]]
    rec.data.update(every=args.every, stream_articles=len(stream), gate_articles=len(gate),
                    calibration_articles=len(calibration), work=str(work),
                    refused_nights_changing_production=refused_changed)
    rec.table(f"Nightly replay of the test split in order ({args.data})", COLUMNS, rows(stream, log),
              note=f"{len(stream)} test articles in file order, a night every {args.every} decisions; each row: the "
                   "models after that night on the next day's articles (micro-F1 / subset accuracy, %); day 1 is "
                   f"before any night. Gate: the nightly job's calibrated newsmon rows on {len(gate)} held-out "
                   f"validation articles (the other {len(calibration)} calibrate). Annif: {args.project}, limit "
                   "and threshold chosen once on the calibration half. 'production record changed': the retrained "
                   "arm scored with another calibration record than the day before.")
    if not args.home:
        shutil.rmtree(work, ignore_errors=True)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The replay's options (shared with ``replay_annif.py --nightly``)."""
    ap.add_argument("--every", type=int, default=44, help="decisions per day: the nightly job runs after each day")
    ap.add_argument("--nights", type=int, default=None, help="at most N nights (default: as the stream allows)")
    ap.add_argument("--project", default=DEFAULT_PROJECT,
                    choices=["annif_tfidf", "annif_parabel", "annif_bonsai", "annif_ensemble"])
    ap.add_argument("--home", default=None, help="keep the two newsmon homes here (default: a temporary folder)")
    ap.add_argument("--peer-home", default=None,
                    help="the home whose peers/annif environment runs Annif (default: the settings' home)")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--train-limit", type=int, default=None, help="only the first N train articles")
    ap.add_argument("--test-limit", type=int, default=None, help="only the first N test articles of the stream")
    add_arguments(ap)
    args = ap.parse_args(argv)
    run(args)


def run(args: argparse.Namespace) -> None:
    """Run the replay of ``args`` (``--data``, ``--train-limit``, ``--test-limit`` and :func:`add_arguments`'s)
    inside its record ``nightly_replay.<corpus>``."""
    with BenchmarkRecord(run_name("nightly_replay", args.data)) as rec:
        replay(args, rec)


if __name__ == "__main__":
    main()
