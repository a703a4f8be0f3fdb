"""One calibration in progress (:class:`CalibrationRun`): what a score component's or a decision rule's
``calibrate`` hook reads (the calibration articles, the neighbours chosen so far, the parameters kept so far with
their proposals and figures, the evidence of the components kept) and what it calls (scores, decisions, and
:meth:`CalibrationRun.offer`, which judges a lever by :mod:`.selection` and records the step). The calibration
itself (:mod:`.search`) names no component and no rule: each owns its step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from newsmon.schemas.scoring import ScoringParams
from newsmon.shared.heap import trim_heap
from newsmon.shared.scoring.calibration.choice import Choice
from newsmon.shared.scoring.calibration.inputs import CalibrationSet
from newsmon.shared.scoring.calibration.selection import HOLDS, measure, verdict
from newsmon.shared.scoring.components import MixContext
from newsmon.shared.scoring.decision import decide, decide_scores, scores_and_context
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval
from newsmon.shared.scoring.rules import get_rule

#: The thresholds the calibration tries (k and tau: :mod:`.search`).
GRID_THRESHOLD = tuple(float(t) for t in np.round(np.arange(0.10, 0.76, 0.05), 2))

#: (micro-F1, subset accuracy, macro-F1) on the calibration articles.
Parts = tuple[float, float, float]


def gold_matrix(label_sets: Sequence[Sequence[str]], vocab: LabelVocab) -> np.ndarray:
    """``(n, L)`` bool gold over ``vocab`` (labels the memory never saw get columns of their own)."""
    return np.asarray(vocab.encode([tuple(x) for x in label_sets]).todense()).astype(bool)


def pad(a: np.ndarray, L: int) -> np.ndarray:
    """``(m, L)``: ``a`` cut or padded with zero columns to ``L``."""
    return a[:, :L] if a.shape[1] >= L else np.pad(a, ((0, 0), (0, L - a.shape[1])))


def updated(params: ScoringParams, **fields: Any) -> ScoringParams:
    """``params`` with ``fields`` replaced (validated)."""
    return ScoringParams(**{**params.model_dump(), **fields})


class CalibrationRun:
    """The state of one calibration (see the module docstring).

    Attributes:
        cal: the calibration articles; retrieval: their neighbours as the parameters kept so far retrieve them
        (after the lexical fusion when it was kept); Y: ``(n, L)`` bool gold over ``labels`` (every label the
        neighbours, the components and the gold sets name); params / parts / proposed: the parameters kept so far,
        their figures and their ``(n, L)`` bool proposals; evidence: per component kept, its evidence for the
        articles; steps: the ablation, one entry per lever tried.
    """

    #: The thresholds a lever that re-chooses the threshold tries.
    THRESHOLDS = GRID_THRESHOLD

    def __init__(self, cal: CalibrationSet, retrieval: Retrieval, Y: np.ndarray, labels: list[str],
                 params: ScoringParams, evidence: Mapping[str, Any] | None = None) -> None:
        self.cal, self.retrieval, self.Y, self.labels = cal, retrieval, Y, labels
        self.judge = cal.objective
        self.params = params
        self.evidence: dict[str, Any] = dict(evidence or {})
        self.proposed = self.decide(params)
        self.parts: Parts = self.judge.parts(Y, self.proposed)
        self.steps: list[dict[str, Any]] = []
        self._scores: tuple[str, np.ndarray] | None = None

    @property
    def L(self) -> int:
        return self.Y.shape[1]

    def vocab(self) -> LabelVocab:
        """A fresh vocabulary of the run's labels (a mix may extend the one it is given)."""
        return LabelVocab(self.labels)

    def scores(self, params: ScoringParams | None = None, evidence: Mapping[str, Any] | None = None) -> np.ndarray:
        """``(n, L)`` float32 mixed scores of ``params`` (default: the parameters kept so far, computed once while
        they are kept) with ``evidence`` (default: the kept components')."""
        if params is None and evidence is None:
            key = self.params.model_dump_json()
            if self._scores is None or self._scores[0] != key:
                self._scores = (key, self._mixed(self.params, self.evidence))
            return self._scores[1]
        return self._mixed(params or self.params, self.evidence if evidence is None else evidence)

    def _mixed(self, params: ScoringParams, evidence: Mapping[str, Any]) -> np.ndarray:
        return pad(scores_and_context(self.retrieval, self.vocab(), params, evidence, self.cal.label_counts)[0],
                   self.L)

    def scores_and_context(self) -> tuple[np.ndarray, MixContext]:
        """The kept parameters' ``(n, L)`` scores and what a component mixed in after them reads
        (:class:`~newsmon.shared.scoring.components.MixContext`)."""
        mixed, context = scores_and_context(self.retrieval, self.vocab(), self.params, self.evidence,
                                            self.cal.label_counts, context=True)
        assert context is not None  # asked for
        return pad(mixed, self.L), context

    def decide(self, params: ScoringParams, evidence: Mapping[str, Any] | None = None,
               scores: np.ndarray | None = None, retrieval: Retrieval | None = None) -> np.ndarray:
        """``(n, L)`` bool proposals of ``params`` (the scorer's decision) with ``evidence`` (default: the kept
        components') on ``retrieval`` (default: the run's); ``scores``: the mixed scores of ``params`` when already
        at hand (only the rules then run)."""
        ev = self.evidence if evidence is None else evidence
        r = self.retrieval if retrieval is None else retrieval
        if scores is None:
            P = decide(r, self.vocab(), params, ev, self.cal.label_counts).proposed
        else:
            P = decide_scores(r, self.vocab(), params, scores, self.cal.label_counts).proposed
        return pad(P, self.L)

    def use_retrieval(self, retrieval: Retrieval) -> None:
        """Score from now on with ``retrieval`` (a fusion the run kept)."""
        self.retrieval, self._scores = retrieval, None

    def value(self, P: np.ndarray) -> float:
        """The objective of ``(n, L)`` bool proposals."""
        return self.judge(self.Y, P)

    def choice(self, rows: np.ndarray | None = None, prior: Mapping[str, Any] | None = None) -> Choice:
        """An empty :class:`~.choice.Choice` on the run's articles (or the ``rows`` of them, a bool mask) and
        objective, with ``prior`` (the option taken when within the noise of the best: a hook's default options,
        :meth:`~newsmon.schemas.scoring.Options.defaults`): a hook adds its grid's options to it and takes the one
        :meth:`~.choice.Choice.pick` gives (the prior when within the noise of the best, else the centre of those
        within it; not the best: the same record on re-splits of the same corpus)."""
        return Choice(self.judge, len(self.Y) if rows is None else int(np.count_nonzero(rows)), prior=prior)

    def with_rule(self, name: str, options: Any, params: ScoringParams | None = None) -> ScoringParams:
        """The kept parameters (or ``params``) with rule ``name`` (``options``) in place of its earlier options, the
        rules in the order they run (each rule's ``ORDER``)."""
        base = params or self.params
        specs = [s for s in base.rules if s.name != name] + [{"name": name, "options": options.model_dump()}]
        names = [s["name"] if isinstance(s, dict) else s.name for s in specs]
        order = sorted(range(len(specs)), key=lambda i: (get_rule(names[i]).ORDER, i))
        return updated(base, rules=[specs[i] for i in order])

    def with_fields(self, **fields: Any) -> ScoringParams:
        """The kept parameters with ``fields`` replaced."""
        return updated(self.params, **fields)

    def with_component(self, name: str, options: Any, **fields: Any) -> ScoringParams:
        """The kept parameters with component ``name`` (``options``) mixed in last (in place of its earlier
        options), and ``fields`` replaced."""
        specs = [s for s in self.params.components if s.name != name] + [{"name": name,
                                                                          "options": options.model_dump()}]
        return updated(self.params, components=specs, **fields)

    def offer(self, name: str, params: ScoringParams, proposed: np.ndarray, rule: str = HOLDS,
              evidence: dict[str, Any] | None = None, judged: np.ndarray | None = None, **extra: Any) -> bool:
        """Judge lever ``name`` (:func:`.selection.measure` and :func:`.selection.verdict` by ``rule``, on ``judged``
        when its lift must be judged on other proposals than the ones it keeps, e.g. cross-fitted ones), record the
        step, and keep ``params`` with their ``proposed`` (and the components' ``evidence``) when the verdict says
        so. Returns whether it was kept."""
        lift = measure(self.judge, self.Y, proposed if judged is None else judged, self.proposed)
        v = verdict(lift, self.judge.protect, rule)
        parts = self.judge.parts(self.Y, proposed)
        self.record(name, params, parts, v.kept, why=v.why, lift=lift.json(),
                    lift_interval=list(lift.figures["objective"][1:]), **extra)
        if v.kept:
            self.params, self.parts, self.proposed = params, parts, proposed
            if evidence is not None:
                self.evidence = evidence
        return v.kept

    def record(self, name: str, params: ScoringParams, parts: Parts, kept: bool, **extra: Any) -> None:
        """Add a step to the ablation: its name, parameters, figures on the calibration articles, whether it was
        kept (and whatever else the step says: ``why``, its ``lift``, a replay's figures)."""
        self.steps.append({"step": name, "params": params.model_dump(mode="json"), "micro_f1": parts[0],
                           "subset_accuracy": parts[1], "macro_f1": parts[2], "objective": self.judge.value(parts),
                           "kept": kept, **extra})
        trim_heap()  # the step's freed memory back to the system (newsmon.shared.heap.trim_heap)
