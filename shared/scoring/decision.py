"""Scores and decisions of ``m`` articles from their neighbours: RAE-XMC (eq. 8), the score components mixed in
(:mod:`newsmon.shared.scoring.components`, in the order of ``params.components``), then the decision rules
(:mod:`newsmon.shared.scoring.rules`, in the order of ``params.rules``), and the proposals with their evidence
(:func:`explain`). The one implementation behind every path that proposes or measures: the
:class:`~newsmon.shared.scoring.scorer.Scorer` (workers, ``suggest``, the HTTP API, the demo, ``eval``) and the
calibration's search call :func:`decide`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from newsmon.schemas.scoring import ScoringCore, registered
from newsmon.shared.scoring.components import MixContext, get_component
from newsmon.shared.scoring.rae_xmc import rae_xmc_scores
from newsmon.shared.scoring.retrieval import Explained, LabelScore, LabelVocab, Retrieval, cut_title
from newsmon.shared.scoring.rules import DecisionState, get_rule


@dataclass
class Decision:
    """What :func:`decide` decided for ``m`` articles over ``L`` labels.

    Attributes:
        scores: ``(m, L)`` float32 scores (RAE-XMC with the components mixed in).
        proposed: ``(m, L)`` bool, the proposals.
        thresholds: ``(L,)`` float64, each label's threshold (with the label-count rule its minimum score).
        decided_by: ``(m, L)`` int8 code of the rule that proposed each label (its index among the registered rule
            names; -1 where none did); None unless asked for. A rule that replaces an article's proposals (the
            label-set vote, the label count) owns the labels it chose; a rule that adds labels owns only those no
            earlier rule proposed.
        abstained: per article, why the rules proposed nothing on purpose (None: they did not abstain).
    """

    scores: np.ndarray
    proposed: np.ndarray
    thresholds: np.ndarray
    decided_by: np.ndarray | None = None
    abstained: list[str | None] = field(default_factory=list)


def neighbours_needed(params: ScoringCore) -> int:
    """Neighbours per article that :func:`decide` reads with ``params``: k and each rule's window."""
    return max([params.top_k] + [get_rule(s.name).neighbours_needed(s.parsed()) for s in params.rules])


def retrieval_size(params: ScoringCore) -> tuple[int, int]:
    """(dense neighbours, lexical neighbours) to retrieve for ``params``: hybrid retrieval fuses the dense top-N
    united with the lexical top-N (N = ``lexical_candidates``), or the dense top-N alone without the lexical search
    (``lexical_search`` false, a :class:`ScoringParams` field); dense search alone reads k and the rules'
    windows."""
    k = neighbours_needed(params)
    if not params.lexical_weight:
        return k, 0
    lexical = params.lexical_candidates if getattr(params, "lexical_search", True) else 0
    return max(k, params.lexical_candidates), lexical


def mixed_scores(retrieval: Retrieval, vocab: LabelVocab, params: ScoringCore,
                 evidence: Mapping[str, Any] | None = None, label_counts: Mapping[str, int] | None = None
                 ) -> np.ndarray:
    """``(m, L)`` float32 scores of :func:`scores_and_context` (the context built only where a component reads
    it)."""
    return scores_and_context(retrieval, vocab, params, evidence, label_counts)[0]


def scores_and_context(retrieval: Retrieval, vocab: LabelVocab, params: ScoringCore,
                       evidence: Mapping[str, Any] | None = None, label_counts: Mapping[str, int] | None = None,
                       context: bool = False) -> tuple[np.ndarray, MixContext | None]:
    """``(m, L)`` float32 scores: RAE-XMC over the neighbours' labels with each component of ``params`` mixed in
    (``evidence``: per component name, what its model says about the ``m`` articles; ``label_counts``: memory
    articles per label, read by a component that reads the others, :class:`MixContext`). ``vocab`` grows by the
    neighbours' labels, then by the labels the components bring; ``L = len(vocab)`` after the call. With the
    :class:`MixContext` after every component of ``params`` when ``context`` is asked for or a component reads it
    (else None): what a component added after them would read (the calibration's step for it).

    Raises:
        ValueError: a component of ``params`` without evidence.
    """
    rows = retrieval.label_matrix(vocab)
    steps = []
    for spec in params.components:
        if evidence is None or spec.name not in evidence:
            raise ValueError(f"score component {spec.name!r} is on but has no evidence for these articles")
        comp, opts = get_component(spec.name), spec.parsed()
        vocab.extend(comp.labels(evidence[spec.name], opts))
        steps.append((comp, opts, evidence[spec.name]))
    L = len(vocab)
    scores = rae_xmc_scores(retrieval.sims, rows, params.top_k, params.tau, 1.0, L) if L else np.zeros(
        (retrieval.sims.shape[0], 0), dtype=np.float32)
    ctx = (mix_context(retrieval, scores, label_counts, params.top_k)
           if L and (context or any(c.READS_CONTEXT for c, _o, _e in steps)) else None)
    for comp, opts, ev in (steps if L else []):
        if ctx is not None and comp.READS_CONTEXT:
            scores = comp.mix_in_context(scores, vocab, ev, opts, ctx)
        else:
            scores = comp.mix(scores, vocab, ev, opts)
        if ctx is not None:
            ctx.steps.append((comp, opts, ev))
    return scores, ctx


def mix_context(retrieval: Retrieval, rae: np.ndarray, label_counts: Mapping[str, int] | None, k: int
                ) -> MixContext:
    """The :class:`MixContext` of ``m`` articles: their ``(m, L)`` RAE-XMC scores, the label counts, each
    article's most similar neighbour (dense cosine; 0 without neighbours) and what its first ``k`` neighbours carry
    (``m * k`` label sets: who carries each label, their mean size); the components are added as they are mixed
    in."""
    cos = retrieval.cosine
    finite = np.where(np.isfinite(cos), cos, 0.0)
    nearest = (finite.max(axis=1) if cos.size else np.zeros(cos.shape[0])).astype(np.float32)
    carriers: list[dict[str, tuple[float, int]]] = []
    set_size = np.zeros(len(retrieval.labels), dtype=np.float32)
    for i, row in enumerate(retrieval.labels):
        seen: dict[str, tuple[float, int]] = {}
        first = [labels for labels in row[:k] if labels]
        for j, labels in enumerate(row[:k]):
            c = float(finite[i, j])
            for lb in labels:
                best, n = seen.get(lb, (c, 0))
                seen[lb] = (max(best, c), n + 1)
        carriers.append(seen)
        set_size[i] = sum(len(x) for x in first) / len(first) if first else 0.0
    return MixContext(rae, [], label_counts, nearest, carriers, set_size)


def decide(retrieval: Retrieval, vocab: LabelVocab, params: ScoringCore, evidence: Mapping[str, Any] | None = None,
           label_counts: Mapping[str, int] | None = None, known_labels: Collection[str] | None = None,
           texts: Sequence[str] | None = None, reasons: bool = False) -> Decision:
    """Scores (:func:`mixed_scores`) and the decision of the rules of ``params``, in order.

    Args:
        retrieval: the articles' neighbours (K >= :func:`neighbours_needed`), after hybrid retrieval's fusion.
        vocab: the label vocabulary (grows; ``L = len(vocab)`` after the call).
        evidence: per component of ``params``, its evidence for the articles.
        label_counts: memory articles per label (bucket thresholds); known_labels: the labels the calibration
            saw (the new-label rule serves the others; None: no label counts as new); texts: the article texts
            (rules that read them); reasons: also say which rule proposed each label.

    Raises:
        ValueError: ``top_k < 1``, ``tau <= 0``, or a component without evidence.
    """
    scores = mixed_scores(retrieval, vocab, params, evidence, label_counts)
    return decide_scores(retrieval, vocab, params, scores, label_counts, known_labels, texts, reasons)


def decide_scores(retrieval: Retrieval, vocab: LabelVocab, params: ScoringCore, scores: np.ndarray,
                  label_counts: Mapping[str, int] | None = None, known_labels: Collection[str] | None = None,
                  texts: Sequence[str] | None = None, reasons: bool = False) -> Decision:
    """The decision of the rules of ``params`` on ``(m, L)`` scores already mixed (:func:`mixed_scores` with the
    same ``params``; ``vocab`` holds their ``L`` labels): what :func:`decide` does after mixing, for a caller that
    tries several rule sets on the same scores (the calibration)."""
    m = retrieval.sims.shape[0]
    state = DecisionState.start(retrieval, vocab, scores, params, reasons, label_counts=label_counts,
                                known_labels=known_labels, texts=texts)
    if scores.shape[1]:
        for spec in params.rules:
            get_rule(spec.name).apply(state, spec.parsed())
    return Decision(state.scores, state.proposed, state.thresholds, state.why,
                    state.abstained if len(state.abstained) == m else [None] * m)


def _label_score(retrieval: Retrieval, i: int, label: str, score: float, k: int, max_neighbours: int) -> LabelScore:
    """Label ``label`` of article ``i`` with up to ``max_neighbours`` of its first ``k`` neighbours that carry it,
    or, when none of those does (a label a rule with a wider window or a score component proposed), of the
    neighbours retrieved after them; with how many of the first ``k`` carry it."""
    first = min(k, retrieval.k)
    carriers = [j for j in range(first) if label in retrieval.labels[i][j]]
    js = carriers[:max_neighbours] or [j for j in range(first, retrieval.k)
                                       if label in retrieval.labels[i][j]][:max_neighbours]
    titles = [cut_title(retrieval.titles[i][j]) for j in js] if retrieval.titles is not None else []
    cos = retrieval.cosine  # the wire's `similarity` is the cosine, also after hybrid retrieval's fusion
    window = sum(1 for j in range(first) if retrieval.ids[i, j] != "")
    return LabelScore(label, score, [(str(retrieval.ids[i, j]), float(cos[i, j])) for j in js], titles,
                      carriers=len(carriers), window=window, beyond=bool(js) and not carriers)


def explain(retrieval: Retrieval, decision: Decision, vocab: LabelVocab, k: int | None = None,
            max_neighbours: int = 5, candidates: int = 0) -> list[Explained]:
    """Turn a :class:`Decision` into one :class:`~newsmon.shared.scoring.retrieval.Explained` per article (the
    scorer's working form of a proposal, :meth:`Scorer.propose <newsmon.shared.scoring.scorer.Scorer.propose>`):
    the proposed labels, best first, each with up to ``max_neighbours`` of the first ``k`` neighbours that carry it
    (most similar first), its own threshold and the rule that proposed it; and the best ``candidates`` labels with a
    score > 0 that were not proposed (for the moderator). A neighbour's similarity is its dense cosine
    (:attr:`Retrieval.cosine`)."""
    k = k or retrieval.k
    names = registered("rule")
    scores, proposed, why = decision.scores, decision.proposed, decision.decided_by
    out = []
    for i in range(scores.shape[0]):
        order = np.argsort(-scores[i], kind="stable")
        above = [c for c in order if proposed[i, c]]
        below = [c for c in order if not proposed[i, c] and scores[i, c] > 0][:candidates]
        labels, rest = [], []
        for cols, acc in ((above, labels), (below, rest)):
            for c in cols:
                x = _label_score(retrieval, i, vocab.labels[c], float(scores[i, c]), k, max_neighbours)
                x.threshold = float(decision.thresholds[c])
                if why is not None and why[i, c] >= 0:
                    x.decided_by = names[why[i, c]]
                acc.append(x)
        abstained = decision.abstained[i] if decision.abstained else None
        out.append(Explained(labels, candidates=rest, abstained=abstained))
    return out
