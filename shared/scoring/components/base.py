"""The score components' interface and registry: a component is a second predictor mixed into the RAE-XMC
scores of the neighbours (RAE-XMC's label keys, the head model, ...). :attr:`ScoringParams.components
<newsmon.schemas.scoring.ScoringCore.components>` lists the components mixed in, in order, each with its
options.

A component has three parts, so that the workers, ``eval`` and the calibration run the same code:

* :meth:`ScoreComponent.fit`: its **model** of a knowledge memory (:class:`MemoryArticles`: the memory's
  labelled articles), made once per calibration record and memory (the per-record model);
* :meth:`ScoreComponent.evidence`: what the model says about ``m`` articles (:class:`Queries`), and
  :meth:`ScoreComponent.held_out_evidence`, the same for the memory's own articles, each without itself (the
  calibration's leave-one-out);
* :meth:`ScoreComponent.mix`: the ``(m, L)`` scores with that evidence mixed in.

A new component is one module: a subclass decorated with :func:`register_component` (registered in
:data:`COMPONENTS`, the registry the wire reads its options from) and one test; the calibration tries its
:meth:`grid` after the components before it and keeps it when it lifts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from newsmon.schemas import scoring
from newsmon.schemas.registry import Registry
from newsmon.schemas.scoring import Options
from newsmon.shared.heap import trim_heap
from newsmon.shared.scoring.retrieval import LabelVocab

__all__ = ["COMPONENTS", "MemoryArticles", "MixContext", "Queries", "ScoreComponent", "components",
           "get_component", "register_component", "unregister_component"]

Relabel = Callable[[tuple[str, ...]], tuple[str, ...]]


@dataclass
class MemoryArticles:
    """The labelled articles of one knowledge memory that per-memory models are fitted on.

    Attributes:
        vectors: ``(n, d)`` float32 stored embeddings (None: not at hand); texts: ``n`` stored texts; labels: ``n``
        label sets; ids: ``n`` article ids (None: not at hand); total: the labelled articles of the whole memory
        when these ``n`` are a sample of it (None: these are all of them).
    """

    vectors: np.ndarray | None
    texts: list[str]
    labels: list[tuple[str, ...]]
    ids: list[str] | None = None
    total: int | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def by_id(self) -> tuple[np.ndarray, MemoryArticles]:
        """(the permutation ``(n,)`` that orders the articles by id, the articles in that order): the order every
        model is fitted in, whatever order the memory or the corpus listed them in (a solver that visits the
        articles in order, and the calibration's folds by position, then give the same result). Without ids: the
        identity."""
        if self.ids is None:
            return np.arange(len(self)), self
        ids = self.ids
        order = np.array(sorted(range(len(self)), key=lambda i: ids[i]), dtype=np.int64)
        return order, MemoryArticles(self.vectors[order] if self.vectors is not None else None,
                                     [self.texts[i] for i in order], [self.labels[i] for i in order],
                                     [ids[i] for i in order], self.total)

    def label_counts(self) -> dict[str, int]:
        """Memory articles per label (the frequency buckets of ``bucket_thresholds``); for a sample
        (``total > n``), the whole memory's counts estimated as the sample's times ``total / n``, rounded, at
        least 1."""
        out: dict[str, int] = {}
        for labels in self.labels:
            for lb in labels:
                out[lb] = out.get(lb, 0) + 1
        n = len(self.labels)
        if self.total is not None and n and self.total > n:
            scale = self.total / n
            out = {lb: max(1, round(c * scale)) for lb, c in out.items()}
        return out


@dataclass
class Queries:
    """``m`` articles to score: their texts and ``(m, d)`` float32 query embeddings (None for text-only use)."""

    texts: Sequence[str]
    vectors: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MixContext:
    """What a component that reads the others (:attr:`ScoreComponent.READS_CONTEXT`) sees beside the scores so far.

    Attributes:
        rae: ``(m, L)`` float32 scores of the neighbours alone (RAE-XMC); steps: the components mixed in before it
            (component, options, evidence), in order; counts: memory articles per label (None: not at hand, read
            as 0); nearest: ``(m,)`` float32 dense cosine of each article's most similar neighbour (0: none);
            carriers: per article, each label its first k neighbours carry -> (the best dense cosine of a neighbour
            carrying it, how many of the k carry it) (None: not at hand, read as none); set_size: ``(m,)`` float32
            mean label-set size of those k neighbours (how many labels the article may want; None: read as 0).
    """

    rae: np.ndarray
    steps: list[tuple[Any, Any, Any]] = field(default_factory=list)
    counts: Mapping[str, int] | None = None
    nearest: np.ndarray | None = None
    carriers: list[dict[str, tuple[float, int]]] | None = None
    set_size: np.ndarray | None = None

    def own_scores(self, vocab: LabelVocab, rows: np.ndarray, cols: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(the earlier components' names, ``(p, 2c)`` float32: for each of the ``c`` components its own score at the
        pairs ``rows, cols``, then that score over the article's best by that component, 0 where it has none),
        computing one component's ``(m, L)`` mix on zeros at a time."""
        c = len(self.steps)
        names, out = [], np.zeros((len(rows), 2 * c), dtype=np.float32)
        for j, (comp, opts, ev) in enumerate(self.steps):
            names.append(comp.name)
            own = comp.mix(np.zeros_like(self.rae), vocab, ev, opts)
            best = own.max(axis=1) if own.shape[1] else np.zeros(own.shape[0], np.float32)
            out[:, j] = own[rows, cols]
            out[:, c + j] = np.divide(out[:, j], best[rows], out=np.zeros(len(rows), np.float32),
                                      where=best[rows] > 0)
        return names, out


#: The seed of the two halves a component kept by ``"lifts"`` is judged on (:meth:`ScoreComponent.calibrate`).
CROSS_FIT_SEED = 13


class ScoreComponent(ABC):
    """A score component (see the module docstring).

    Class attributes:
        name: the registry name, also its name in the parameters and on the wire.
        Options: its options model; GRID: the options the calibration tries, in order.
        NEEDS: what its model and evidence read of the articles: ``"vectors"`` (embeddings), ``"texts"``.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[Options]] = Options
    GRID: ClassVar[tuple[dict[str, Any], ...]] = ()
    NEEDS: ClassVar[tuple[str, ...]] = ()
    #: Whether the calibration chooses the threshold again with the component (a mix that rescales every score);
    #: False for a component that only raises scores: judged at the threshold already chosen, so that it adds
    #: proposals instead of trading the neighbours' proposals for its own.
    RECHOOSES_THRESHOLD: ClassVar[bool] = True
    #: Whether its mix reads the other components (:meth:`mix_in_context`, with a :class:`MixContext`).
    READS_CONTEXT: ClassVar[bool] = False
    #: How the calibration keeps it (:mod:`newsmon.shared.scoring.calibration.selection`): ``"holds"``, it must lift
    #: the objective beyond the noise; ``"lifts"``, a prior in its favour: judged on proposals cross-fitted in two
    #: halves (its option chosen on one, judged on the other), it must lift at all.
    KEEP: ClassVar[str] = "holds"
    #: Whether its model is fitted by the calibration on the calibration articles' scores (``cross_fit``) instead
    #: of on the memory (:meth:`fit` then raises; the model must be stored with the record).
    FITTED_BY_CALIBRATION: ClassVar[bool] = False

    def model_key(self, options: Any) -> tuple:
        """The options the model depends on (the others only change the mix): one model is fitted per key."""
        return ()

    @abstractmethod
    def fit(self, memory: MemoryArticles, options: Any) -> Any:
        """The component's model of ``memory``."""

    @abstractmethod
    def evidence(self, model: Any, queries: Queries, options: Any) -> Any:
        """What ``model`` says about ``queries`` (an object :meth:`mix` reads)."""

    @abstractmethod
    def held_out_evidence(self, model: Any, memory: MemoryArticles, options: Any) -> Any:
        """:meth:`evidence` for the memory's own ``n`` articles, each from a model without it (leave-one-out or
        out of fold)."""

    @abstractmethod
    def concat(self, parts: Sequence[Any]) -> Any:
        """The evidence of several query sets, stacked in order."""

    @abstractmethod
    def relabel(self, evidence: Any, fn: Relabel) -> Any:
        """The evidence under the label registry's names (``fn`` maps a label tuple to its current names: a
        renamed label keeps its evidence, a retired one loses it)."""

    @abstractmethod
    def labels(self, evidence: Any, options: Any) -> list[str]:
        """The labels the evidence may add to the vocabulary (those not among the neighbours)."""

    @abstractmethod
    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: Any, options: Any) -> np.ndarray:
        """``(m, L)`` float32 scores with the evidence mixed in (``L = len(vocab)``; the vocabulary already holds
        :meth:`labels`)."""

    def mix_in_context(self, scores: np.ndarray, vocab: LabelVocab, evidence: Any, options: Any,
                       context: MixContext) -> np.ndarray:
        """:meth:`mix` for a component that reads the components before it (``READS_CONTEXT``); the others ignore
        ``context``."""
        return self.mix(scores, vocab, evidence, options)

    def cross_fit(self, scores: np.ndarray, vocab: LabelVocab, context: MixContext, options: Any, gold: np.ndarray
                  ) -> tuple[Any, Any]:
        """For a component fitted by the calibration (``FITTED_BY_CALIBRATION``): (its evidence for the ``m``
        calibration articles, each scored by a model fitted without it; the model fitted on all of them), from the
        ``(m, L)`` scores so far and the ``(m, >= L)`` bool gold.

        Raises:
            NotImplementedError: a component fitted on the memory (:meth:`fit`)."""
        raise NotImplementedError(f"{self.name} is fitted on the memory, not by the calibration")

    def grid(self) -> list[Any]:
        """The options the calibration tries."""
        return [self.Options(**g) for g in self.GRID]

    def calibrate(self, run: Any) -> None:
        """The calibration's step for this component (``run``: a
        :class:`~newsmon.shared.scoring.calibration.run.CalibrationRun`): one of its options (:meth:`grid`, with
        every threshold of ``run.THRESHOLDS`` when it re-chooses the threshold, else at the threshold already chosen),
        its default options when within the noise of the best, else the centre of those within it
        (:mod:`newsmon.shared.scoring.calibration.choice`), mixed in
        after the components kept before it, offered to the run (kept when it lifts beyond the
        noise: :mod:`newsmon.shared.scoring.calibration.selection`). A component fitted by the calibration
        (``FITTED_BY_CALIBRATION``) is cross-fitted on the calibration articles (:meth:`cross_fit`: each judged by a
        model fitted without it) and its model fitted on all of them is the one the record stores. Override it for
        a component calibrated another way; options the calibration tries are its :attr:`GRID`. A component kept by
        ``"lifts"`` (:attr:`KEEP`) is judged on proposals cross-fitted in two seeded halves (:data:`CROSS_FIT_SEED`):
        each half decided with the option chosen on the other (the option kept: the one chosen on all the articles)."""
        cal = run.cal
        before, context = run.scores_and_context()
        thresholds = run.THRESHOLDS if self.RECHOOSES_THRESHOLD else (run.params.threshold,)
        crossed = self.KEEP == "lifts"
        fold = np.random.default_rng(CROSS_FIT_SEED).permutation(len(run.Y)) % 2 == 0 if crossed else None
        prior = {**self.Options.defaults(), "threshold": run.params.threshold}  # taken when within the noise
        choice = run.choice(prior=prior)
        halves = {half: run.choice(fold == half, prior) for half in (True, False)} if fold is not None else {}
        for opt in self.grid():
            if self.FITTED_BY_CALIBRATION:
                ev, model = self.cross_fit(before, run.vocab(), context, opt, run.Y)
                cal.cross_fitted(self, opt, ev, model)
            else:
                ev = cal.evidence(self, opt)
            S = self.mix_in_context(before.copy(), run.vocab(), ev, opt, context) if self.READS_CONTEXT else \
                self.mix(before.copy(), run.vocab(), ev, opt)
            S = S[:, :run.L] if S.shape[1] >= run.L else np.pad(S, ((0, 0), (0, run.L - S.shape[1])))
            choice.add_scores(run.Y, S, thresholds, opt.model_dump(), (opt, ev))
            for half, on in halves.items():
                on.add_scores(run.Y[fold == half], S[fold == half], thresholds, opt.model_dump(), (opt, ev))
            del S
            trim_heap()  # the option's scores and counts freed (newsmon.shared.heap.trim_heap)
        if not choice.options:
            return
        (opt, ev), thr = choice.pick()[2]
        trial, tried = run.with_component(self.name, opt, threshold=thr), {**run.evidence, self.name: ev}
        judged = self._crossed(run, fold, halves) if fold is not None else None
        run.offer(f"+ {self.name}", trial, run.decide(trial, tried), rule=self.KEEP, evidence=tried, judged=judged)

    def _crossed(self, run: Any, fold: np.ndarray, halves: dict[bool, Any]) -> np.ndarray:
        """``(n, L)`` bool proposals of the component judged on articles its option was not chosen on (``KEEP``
        ``"lifts"``): the calibration articles in two seeded halves (``fold``), each decided with the option and
        threshold the choice of the other half takes (``halves``: per half, its
        :class:`~newsmon.shared.scoring.calibration.choice.Choice`)."""
        P = run.proposed.copy()
        for chosen_on, applied in ((True, ~fold), (False, fold)):
            if not halves[chosen_on].options or not applied.any():
                continue
            (opt, ev), thr = halves[chosen_on].pick()[2]
            trial = run.with_component(self.name, opt, threshold=thr)
            P[applied] = run.decide(trial, {**run.evidence, self.name: ev})[applied]
        return P

    @abstractmethod
    def save(self, model: Any, folder: Path) -> None:
        """Write ``model`` into the empty ``folder`` (the calibration stores the models it judged with its
        record)."""

    @abstractmethod
    def load(self, folder: Path) -> Any:
        """The model :meth:`save` wrote into ``folder``.

        Raises:
            OSError, ValueError: a missing or unreadable model.
        """


#: The registered components (the wire's registry of components, :data:`newsmon.schemas.scoring.COMPONENTS`):
#: ``@register_component`` registers one (an instance of the class, under ``cls.name``; ValueError for no name,
#: one that is not snake case or one taken by another class), ``get_component(name)`` finds it (KeyError for an
#: unknown name, listing the registered ones), ``components()`` lists them in registration order (the order the
#: calibration tries them in), ``unregister_component(name)`` forgets one (a test that registered its own).
COMPONENTS: Registry[ScoreComponent] = scoring.COMPONENTS
register_component = COMPONENTS.register
get_component = COMPONENTS.get
components = COMPONENTS.values
unregister_component = COMPONENTS.remove
