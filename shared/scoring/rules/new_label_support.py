"""The new-label rule: a label the calibration never saw (one confirmed by moderators since, so no leave-one-out
could weigh it) is proposed when at least ``support`` of the first ``neighbours`` neighbours carry it at cosine >=
``similarity``. A memory of thousands of articles holding 2 of a new label's 3 confirmations among an article's 20
nearest is strong evidence, which the softmax share of a label among k = 100 neighbours never shows.

The calibration chooses its options by a replay of new labels on the calibration articles
(:func:`new_label_replay`), not by the calibration objective: it
changes nothing for the calibration articles themselves (every label of their memory is known).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.retrieval import Retrieval
from newsmon.shared.scoring.rules.base import DecisionRule, DecisionState, register_rule
from newsmon.shared.scoring.rules.tail_support import tail_support


class NewLabelOptions(Options):
    """The new-label rule's options."""

    support: int = Field(2, ge=1, le=100, description="Close neighbours that must carry the new label.")
    neighbours: int = Field(20, ge=1, le=200, description="The first neighbours the rule looks at.")
    similarity: float = Field(0.8, ge=-1, le=1, allow_inf_nan=False, description="Their minimum cosine.")


#: The new-label rule's options (support, neighbours, minimum cosine), and the replay that chooses among them:
#: labels with NEW_LABEL_ARTICLES memory articles, each hidden but for NEW_LABEL_CONFIRMATIONS of them.
NEW_LABEL_GRID = tuple(itertools.product((2, 3), (10, 20, 30, 50), (0.8, 0.85, 0.9)))
NEW_LABEL_ARTICLES = (6, 60)
NEW_LABEL_CONFIRMATIONS = 3


def neighbour_codes(ids: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``np.unique(ids.astype(str), return_index=True, return_inverse=True)`` of an ``(m, K)`` object array of
    article ids, with the inverse as ``(m, K)``: (the distinct ids sorted, each one's first position in the flattened
    array, each entry's code), without the fixed-width unicode copy of every entry and its sorted copy (on
    reuters21578_en's 9,508 x 200 neighbours, a few hundred MB at the end of the calibration: its peak)."""
    m, K = ids.shape
    flat = [str(x) for x in ids.reshape(-1).tolist()]
    uniq = sorted(set(flat))
    index = {u: c for c, u in enumerate(uniq)}
    codes = np.fromiter((index[x] for x in flat), dtype=np.intp, count=len(flat))
    first = np.full(len(uniq), len(flat), dtype=np.intp)
    np.minimum.at(first, codes, np.arange(len(flat), dtype=np.intp))
    return uniq, first, codes.reshape(m, K)


def new_label_replay(retrieval: Retrieval, gold: list[tuple[str, ...]], options=NEW_LABEL_GRID,
                     articles: tuple[int, int] = NEW_LABEL_ARTICLES, confirmations: int = NEW_LABEL_CONFIRMATIONS,
                     seed: int = 13) -> tuple[dict[Any, tuple[int, int, int]], int]:
    """Replay of new labels on calibration articles: every label carried by ``articles`` (min, max) of the memory
    articles seen among the neighbours is kept on ``confirmations`` of them (seeded choice: the moderators'
    confirmations) and hidden on the others; each option ``(support, neighbours, cosine)`` of the new-label rule
    then proposes the label for a query when at least ``support`` of its first ``neighbours`` neighbours are
    confirmations at cosine >= ``cosine`` (:attr:`Retrieval.cosine`). Option ``None`` is the reference rule
    "a confirmation is the nearest neighbour" (1-NN). A query that is itself a confirmation is not left out (the
    retrieval carries no query ids), a small optimism shared by every option.

    Returns:
        ({option: (true positives, false positives, false negatives)} over all replayed labels and queries,
        the number of labels replayed).
    """
    m, K = retrieval.ids.shape
    n_max = min(K, max((o[1] for o in options), default=1))
    uniq, first, codes = neighbour_codes(retrieval.ids)
    flat = [lbs for row in retrieval.labels for lbs in row]
    carriers: dict[str, list[int]] = {}
    for code, (uid, at) in enumerate(zip(uniq, first)):
        for lb in flat[at] if uid else ():
            carriers.setdefault(lb, []).append(code)
    queries_with: dict[str, list[int]] = {}
    for i, labels in enumerate(gold):
        for lb in labels:
            queries_with.setdefault(lb, []).append(i)
    cos = np.nan_to_num(retrieval.cosine[:, :n_max], neginf=-1.0)
    tallies = {o: [0, 0, 0] for o in [None, *options]}
    rng = np.random.default_rng(seed)
    replayed = 0
    for lb in sorted(carriers):
        if not articles[0] <= len(carriers[lb]) <= articles[1]:
            continue
        replayed += 1
        confirmed = rng.choice(carriers[lb], confirmations, replace=False)
        hit = np.isin(codes[:, :n_max], confirmed)
        g = np.zeros(m, dtype=bool)
        g[queries_with.get(lb, [])] = True
        for o in tallies:
            pred = hit[:, 0] if o is None else (hit[:, :o[1]] & (cos[:, :o[1]] >= o[2])).sum(axis=1) >= o[0]
            t = tallies[o]
            t[0] += int((pred & g).sum())
            t[1] += int((pred & ~g).sum())
            t[2] += int((~pred & g).sum())
    return {o: tuple(t) for o, t in tallies.items()}, replayed



@register_rule
class NewLabelSupport(DecisionRule):
    """The new-label rule (see the module docstring); needs the calibration record's labels (without a record no
    label counts as new and the rule proposes nothing)."""

    name = "new_label_support"
    Options = NewLabelOptions
    ORDER = 40
    CALIBRATE_AT = 80
    #: Judged by the replay (:func:`new_label_replay`), not by the calibration articles' figures.
    REPLAY = True

    def apply(self, state: DecisionState, options: NewLabelOptions) -> None:
        if state.known_labels is None:
            return
        new = np.array([lb not in state.known_labels for lb in state.vocab.labels], dtype=bool)
        if not new.any():
            return
        extra = tail_support(state.retrieval, state.vocab, options.support, options.neighbours,
                             options.similarity) & new[None, :]
        state.propose(extra, self.name)

    def neighbours_needed(self, options: NewLabelOptions) -> int:
        return options.neighbours

    def grid(self, calibration: Any = None) -> list[Any]:
        return [NewLabelOptions(support=s, neighbours=n, similarity=c) for s, n, c in NEW_LABEL_GRID]

    def calibrate(self, run: Any) -> None:
        """The option with the best F1 (then precision) in the new-label replay (:func:`new_label_replay`) on the
        calibration articles' neighbours, kept when its F1 beats the 1-NN rule's on the same replay; recorded with
        the replay's figures (it changes nothing for the calibration articles themselves: every label of their
        memory is known)."""
        keyed = {(o.support, o.neighbours, o.similarity): o for o in self.grid()}
        tallies, n_labels = new_label_replay(run.retrieval, run.cal.gold, tuple(keyed))
        best = max(keyed, key=lambda o: (_f1(*tallies[o]), tallies[o][0] / max(1, tallies[o][0] + tallies[o][1])))
        kept = n_labels > 0 and _f1(*tallies[best]) > _f1(*tallies[None])
        trial = run.with_rule(self.name, keyed[best])
        tp, fp, fn = tallies[best]
        replay = {"labels": n_labels, "precision": tp / max(1, tp + fp), "recall": tp / max(1, tp + fn),
                  "f1": _f1(tp, fp, fn), "one_nn_f1": _f1(*tallies[None])}
        why = (f"new-label replay F1 {replay['f1']:.3f} against 1-NN's {replay['one_nn_f1']:.3f} over {n_labels} "
               "labels") if n_labels else "no label for a new-label replay"
        run.record(f"+ {self.name}", trial, run.parts, kept, why=why, replay=replay)
        if kept:
            run.params = trial


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2.0 * tp / (2 * tp + fp + fn) if tp else 0.0
