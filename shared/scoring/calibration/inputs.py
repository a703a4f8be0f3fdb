"""The calibration's articles and what the scorer knows of them: their neighbours, gold labels and texts, and
each score component's evidence from models of the memory they are scored against (:class:`CalibrationSet`).

The articles are the memory's own labelled articles, each scored without itself (leave-one-out neighbours, the
components' :meth:`~newsmon.shared.scoring.components.ScoreComponent.held_out_evidence`), then the validation
articles (neighbours in the whole memory, the components' models of the whole memory). Built the same way by the
calibration job (``newsmon tune``, the nightly job, the demo) and by ``eval``'s ``newsmon`` row
(:func:`calibration_set`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from newsmon.shared.heap import trim_heap
from newsmon.shared.scoring.components import MemoryArticles, Queries, components, get_component
from newsmon.shared.scoring.objective import Objective
from newsmon.shared.scoring.retrieval import Retrieval


def allowed_components(names: Sequence[str] | None) -> frozenset[str] | None:
    """The components the calibration may try (``calibration.components``) as :attr:`CalibrationSet.only`; None for
    every registered one.

    Raises:
        ValueError: a name no component is registered under (the message lists the registered ones)."""
    if names is None:
        return None
    for name in names:
        try:
            get_component(name)
        except KeyError as e:
            raise ValueError(f"calibration.components: {e.args[0]}") from None
    return frozenset(names)


@dataclass
class CalibrationSet:
    """``n`` calibration articles.

    Attributes:
        retrieval: their neighbours (dense top-K with the lexical candidates and texts when hybrid retrieval can
            be tried); gold: their ``n`` label sets; texts: their ``n`` texts (None: no hybrid retrieval).
        memory: the memory's articles the components' models are fitted on (None: no component is tried).
        held_out: how many of the articles are ``memory``'s own, first (scored without themselves);
        validation: the other articles (texts and query vectors), after them.
        label_counts: memory articles per label (None: no bucket or per-label thresholds are tried).
        known_labels: the memory's labels (the calibration record's ``labels``).
        given: per component name, its evidence for the ``n`` articles as a function of the options, instead of
            models fitted on ``memory`` (the component is then tried whether or not there is a memory).
        objective: what the calibration maximises on these articles (:class:`Objective`).
        only: the names of the components the calibration may try (``calibration.components``; None: every one).
        hybrid: whether the calibration tries hybrid retrieval (``calibration.hybrid``; it needs the texts too).
        models: the components' models fitted on ``memory`` so far, by (component, model key): the ones the
            calibration judged, which the workers and ``eval`` then use.
    """

    retrieval: Retrieval
    gold: list[tuple[str, ...]]
    texts: list[str] | None = None
    memory: MemoryArticles | None = None
    held_out: int = 0
    validation: Queries | None = None
    label_counts: dict[str, int] | None = None
    known_labels: set[str] | None = None
    given: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    objective: Objective = field(default_factory=Objective)
    only: frozenset[str] | None = None
    hybrid: bool = True
    models: dict[tuple, Any] = field(default_factory=dict, repr=False)
    _evidence: dict[tuple, Any] = field(default_factory=dict, repr=False)

    def components(self) -> list[Any]:
        """The registered components the calibration can try: those :attr:`only` names (all without it) whose inputs
        (``NEEDS``: embeddings, texts) the memory and the validation articles have."""
        return [c for c in self._usable() if self.only is None or c.name in self.only]

    def _usable(self) -> list[Any]:
        """The registered components whose inputs the calibration articles have (or whose evidence is given)."""
        if self.memory is None or not len(self.memory):
            return [c for c in components() if c.name in self.given]
        have = set()
        if self.memory.vectors is not None and (self.validation is None or self.validation.vectors is not None):
            have.add("vectors")
        if any(self.memory.texts):
            have.add("texts")
        return [c for c in components() if set(c.NEEDS) <= have or c.name in self.given]

    def evidence(self, component: Any, options: Any) -> Any:
        """Component ``component``'s evidence with ``options`` for the ``n`` articles (each model key fitted and
        scored once): the memory's own articles held out, then the validation articles; for a component fitted by
        the calibration, what its step kept (:meth:`cross_fitted`).

        Raises:
            ValueError: a component fitted by the calibration before its step ran."""
        if component.name in self.given:
            return self.given[component.name](options)
        key = (component.name, component.model_key(options))
        if key not in self._evidence and component.FITTED_BY_CALIBRATION:
            raise ValueError(f"{component.name} is cross-fitted by the calibration's component step; it has not run")
        if key not in self._evidence:
            model = self.models.get(key)
            if model is None:
                model = self.models[key] = component.fit(self.memory, options)
            parts = []
            if self.held_out:
                parts.append(component.held_out_evidence(model, self._held_out_memory(), options))
            if self.validation is not None and len(self.validation.texts):
                parts.append(component.evidence(model, self.validation, options))
            self._evidence[key] = component.concat(parts)
            trim_heap()  # what fitting and scoring freed (newsmon.shared.heap.trim_heap)
        return self._evidence[key]

    def cross_fitted(self, component: Any, options: Any, evidence: Any, model: Any) -> None:
        """Keep the evidence of a component fitted by the calibration (``FITTED_BY_CALIBRATION``) for these
        articles, cross-fitted, and its model fitted on all of them (the one the record stores)."""
        key = (component.name, component.model_key(options))
        self._evidence[key], self.models[key] = evidence, model

    def _held_out_memory(self) -> MemoryArticles:
        m = self.memory
        if self.held_out == len(m):
            return m
        return MemoryArticles(m.vectors[:self.held_out], m.texts[:self.held_out], m.labels[:self.held_out])


def calibration_set(memory: MemoryArticles, loo: Retrieval | None, validation: Retrieval | None = None,
                    validation_gold: Sequence[Sequence[str]] = (), validation_queries: Queries | None = None,
                    held_out: bool = True, validation_ids: Sequence[str] | None = None) -> CalibrationSet:
    """The calibration articles of a memory: its own articles scored leave-one-out (``loo``: their neighbours
    among the others, in the order of ``memory``), then the validation articles (``validation``: their neighbours,
    with their gold labels and texts/vectors). ``held_out=False`` leaves the memory's own articles out (an adapted
    model, trained on them, would flatter itself there); its models are still fitted on the whole memory.

    Both parts are put in the order of their article ids (``memory.ids``, ``validation_ids``; kept as given where
    unknown), so the calibration (its folds, the order its models see the articles in) does not depend on the
    order the memory was scrolled or the corpus read in.

    Raises:
        ValueError: no calibration article.
    """
    order, memory = memory.by_id()
    if loo is not None and len(order):
        loo = loo.rows(order)
    if validation is not None and validation_ids is not None and len(validation_gold):
        v = sorted(range(len(validation_gold)), key=lambda i: validation_ids[i])
        validation, validation_gold = validation.rows(v), [validation_gold[i] for i in v]
        if validation_queries is not None:
            q = validation_queries
            validation_queries = Queries([q.texts[i] for i in v], q.vectors[v] if q.vectors is not None else None,
                                         q.extra)
    parts, gold, texts = [], [], []
    if held_out and loo is not None and len(memory):
        parts.append(loo)
        gold += list(memory.labels)
        texts += list(memory.texts)
    if validation is not None and len(validation_gold):
        parts.append(validation)
        gold += [tuple(g) for g in validation_gold]
        texts += list(validation_queries.texts if validation_queries is not None else [""] * len(validation_gold))
    if not parts:
        raise ValueError("calibration needs labelled articles with neighbours")
    r = Retrieval.concat(parts)
    known = {lb for labels in memory.labels for lb in labels} | {lb for row in r.labels for x in row for lb in x}
    return CalibrationSet(r, gold, texts, memory, len(memory) if parts[0] is loo else 0,
                          validation_queries if validation is not None else None, memory.label_counts(), known)

