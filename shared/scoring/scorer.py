"""The scorer: one object turns ``m`` articles (texts, languages, embeddings) into proposals with their evidence
(:class:`newsmon.schemas.Proposal`, the wire's type, which every path passes on unchanged in shape), from one
parameter model (:class:`~newsmon.schemas.scoring.ScoringParams`). Every path that proposes or measures calls it:
the classifier worker and ``POST /v1/suggest`` (through the article pipeline), ``newsmon suggest``, the demo,
``eval``'s ``newsmon`` row (:class:`newsmon.shared.predictors.newsmon.NewsmonPredictor`, a thin adapter; it reads
the scores and decisions, :meth:`Scorer.matrix`) and the benchmarks. The numpy state (:class:`Scored`, the
:class:`~newsmon.shared.scoring.decision.Decision`) and the evidence's working form
(:class:`~newsmon.shared.scoring.retrieval.Explained`) stay inside.

Per article: the parameters of its language (:class:`Resolved`: a calibration record's, or the defaults and why),
the neighbours (searched in the knowledge memory by a :class:`NeighbourSource`, or given, offline), hybrid
retrieval's fusion (:func:`newsmon.shared.scoring.lexical.fuse`), the label registry's names (``relabel``), each
component's evidence from its per-memory model (the parameters and the models of a language: a
:class:`RecordSource`), then
:func:`newsmon.shared.scoring.decision.decide` and :func:`~newsmon.shared.scoring.decision.explain`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from newsmon.schemas import Proposal
from newsmon.schemas.scoring import ScoringInfo, ScoringParams
from newsmon.shared.scoring.components import Queries, get_component
from newsmon.shared.scoring.decision import Decision, decide, explain, neighbours_needed, retrieval_size
from newsmon.shared.scoring.lexical import TermVectors, fuse
from newsmon.shared.scoring.reasons import retrieval_reason
from newsmon.shared.scoring.retrieval import Explained, LabelVocab, Retrieval, display_title
from newsmon.shared.scoring.wire import to_proposal

Relabel = Callable[[tuple[str, ...]], tuple[str, ...]]

#: Labels below the threshold a proposal carries as ``candidates`` for the moderator (the wire allows 20).
CANDIDATES = 20
#: The memory's closest articles carrying a proposed label that none of the article's neighbours carries, shown as
#: its evidence (found by one search for the label, :meth:`Scorer.propose`).
CARRIERS = 3


@dataclass(frozen=True)
class Resolved:
    """The parameters articles of one language are scored with, and where they came from.

    Attributes:
        params: the parameters; record: the id of the calibration record they came from (None: none);
        known_labels: the labels that record saw (None: no record; the new-label rule is then off);
        source: ``calibration``, ``calibration+settings``, ``settings`` or ``defaults``; note: why, when it is not
        a calibration record alone (e.g. no record for the language's collection); memory_language: the ISO 639-1
        code of the language memory the record calibrates (the score components' models are that memory's; it
        differs from the article's language when a language without a record of its own borrows the record of
        the largest memory searched with it; None: the article's own).
    """

    params: ScoringParams
    record: str | None = None
    known_labels: frozenset[str] | None = None
    source: str = "defaults"
    note: str | None = None
    memory_language: str | None = None

    def wire(self) -> ScoringInfo:
        """The wire form (``LabelProposal.scoring``)."""
        return self.params.to_wire(self.record, self.source, self.note)


class NeighbourSource(Protocol):
    """Where the neighbours come from (the knowledge memory, routed by language)."""

    def search(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int, exclude: Sequence[str],
               texts: Sequence[str] | None, lexical_k: int, keep: Callable[[Retrieval], Retrieval] | None = None
               ) -> tuple[Retrieval, list[tuple[str, ...]]]:
        """The top-``top_k`` labelled neighbours of ``(m, d)`` vectors (hybrid with ``texts`` and ``lexical_k``),
        and per article the collections searched; with ``keep``, what ``keep`` keeps of them (the fusion's top-k:
        only those need their labels and titles read)."""

    def carriers(self, vectors: np.ndarray, langs: Sequence[str | None], label: str, n: int,
                 exclude: Sequence[str]) -> list[list[Any]]:
        """Per vector, the ``n`` closest memory articles that carry ``label`` (objects with ``article_id``,
        ``similarity`` and ``payload``), most similar first."""


class ModelSource(Protocol):
    """The per-memory models of the score components, and the memory's label counts
    (:mod:`newsmon.shared.scoring.models`: :class:`~newsmon.shared.scoring.models.MemoryModels`,
    :class:`~newsmon.shared.scoring.models.FittedModels`)."""

    def get(self, lang: str | None, record: str | None, params: ScoringParams, counts: bool
            ) -> tuple[dict[str, Any], dict[str, int] | None]:
        """(the models of ``params``' components of ``lang``'s memory under calibration record ``record``, by
        component name; memory articles per label when ``counts``)."""


class RecordSource(Protocol):
    """What the scorer scores a language's articles with: the parameters and where they came from (a calibration
    record, the settings, the defaults), and the score components' models of the memory the record calibrates.
    The live one reads the calibration records of the language memories
    (:class:`newsmon.shared.classifier.MemoryRecords`); ``eval`` and the calibration have one record
    (:class:`OneRecord`)."""

    def resolved(self, lang: str | None) -> Resolved:
        """The parameters of articles in ``lang`` (ISO 639-1; None: unknown) and where they came from."""

    def models(self, lang: str | None, record: str | None, params: ScoringParams, counts: bool
               ) -> tuple[dict[str, Any], dict[str, int] | None]:
        """As :meth:`ModelSource.get`: the models of ``params``' components of ``lang``'s memory under calibration
        record ``record`` (the id of :attr:`Resolved.record`), and the memory's label counts when ``counts``."""


@dataclass(frozen=True)
class OneRecord:
    """A :class:`RecordSource` with one record for every language: ``eval``'s row, the calibration's replay,
    tests.

    Attributes:
        resolution: the parameters every article is scored with; source: the components' models (one memory:
            :class:`~newsmon.shared.scoring.models.FittedModels`, or per language).
    """

    resolution: Resolved
    source: ModelSource

    def resolved(self, lang: str | None) -> Resolved:
        return self.resolution

    def models(self, lang: str | None, record: str | None, params: ScoringParams, counts: bool
               ) -> tuple[dict[str, Any], dict[str, int] | None]:
        return self.source.get(lang, record, params, counts)


@dataclass
class Scored:
    """The decision for some articles of a batch (those at ``idx``), with what it was made from."""

    idx: list[int]
    decision: Decision
    vocab: LabelVocab
    retrieval: Retrieval
    searched: list[tuple[str, ...]]
    resolved: Resolved
    lang: str | None = None
    evidence: dict[str, Any] | None = None  # each component's evidence (under the registry's names)


class Scorer:
    """One assembly (see the module docstring).

    Args:
        records: each language's parameters and the components' models of its memory (:class:`RecordSource`);
        neighbours: the knowledge memory's search (None: the neighbours must be given to each call);
        terms: the term-vector cache of hybrid retrieval.
    """

    def __init__(self, records: RecordSource, neighbours: NeighbourSource | None = None,
                 terms: TermVectors | None = None) -> None:
        self.records = records
        self.neighbours = neighbours
        self.terms = terms if terms is not None else TermVectors()

    def warm_up(self, lang: str | None) -> Resolved:
        """Load what the first batch of ``lang``'s articles would load on its way: the parameters its record gives
        (:meth:`RecordSource.resolved`) and its score components' models (:meth:`RecordSource.models`, as
        :meth:`score` asks for them; the live source then freezes what the process holds out of the cyclic
        collector, :mod:`newsmon.shared.heap`). A worker calls it when it starts, so its first batch costs what a
        warm one does (at a million points with the calibrated record: 261-270 ms instead of 664-1,097, the warm-up
        itself 0.4 s at start; ``benchmarks/scale_restart.py --vary warm-up``). Returns the parameters resolved.

        Raises:
            what :meth:`score` would raise for them (an unreadable record, a model that cannot be loaded)."""
        res = self.records.resolved(lang)
        self._models(lang, res, res.params)
        return res

    def _models(self, lang: str | None, res: Resolved, params: ScoringParams
                ) -> tuple[dict[str, Any], dict[str, int] | None]:
        """The models of ``params``' components of the memory ``res`` calibrates, under its record, and its label
        counts when a rule needs them (what :meth:`warm_up` loads ahead and :meth:`_group` scores with)."""
        return self.records.models(res.memory_language or lang, res.record, params, needs_counts(params))

    def score(self, texts: Sequence[str], langs: Sequence[str | None], vectors: np.ndarray | None,
              exclude: Sequence[str] = (), relabel: Relabel | None = None, retrieval: Retrieval | None = None,
              resolved: Resolved | None = None, vocab: LabelVocab | None = None) -> list[Scored]:
        """Score ``m`` articles, grouped by language and parameters.

        Args:
            texts / langs: the articles; vectors: their ``(m, d)`` float32 query embeddings (needed by the search
                and by components that read embeddings); exclude: article ids never used as neighbours;
            relabel: the label registry's names applied to everything the memory says (renames, retired labels);
            retrieval: the articles' neighbours when already retrieved (offline; at least what the parameters
                read); resolved: parameters for every article instead of each language's; vocab: the vocabulary
                every group starts from (offline: the training labels first, so columns line up).

        Raises:
            ValueError: no neighbour source and no ``retrieval``.
        """
        by_lang: dict[str | None, Resolved] = {}
        groups: dict[str | None, tuple[str | None, Resolved, list[int]]] = {}
        for i, lang in enumerate(langs):
            if lang not in by_lang:  # resolved once per language and call
                by_lang[lang] = resolved if resolved is not None else self.records.resolved(lang)
            groups.setdefault(lang, (lang, by_lang[lang], []))[2].append(i)
        return [self._group(lang, res, idx, texts, vectors, exclude, relabel, retrieval, vocab)
                for lang, res, idx in groups.values()]

    def propose(self, texts: Sequence[str], langs: Sequence[str | None], vectors: np.ndarray | None,
                exclude: Sequence[str] = (), relabel: Relabel | None = None, candidates: int = CANDIDATES,
                retrieval: Retrieval | None = None, resolved: Resolved | None = None) -> list[Proposal]:
        """The :class:`~newsmon.schemas.Proposal` of each article, in order (:meth:`score`, then
        :func:`~newsmon.shared.scoring.decision.explain`, each label's evidence and ``reason``
        (:meth:`complete_evidence`), then the wire's types, :func:`~newsmon.shared.scoring.wire.to_proposal`):
        its labels and ``candidates`` (at most ``candidates``), the collections ``searched``, the parameters
        (``scoring``: :meth:`Resolved.wire`) and ``abstained``. The one proposal type of every path: what the
        article pipeline passes on and puts on the wire (:meth:`newsmon.schemas.LabelProposal.of`).

        Raises:
            ValueError: as :meth:`score`.
        """
        out: dict[int, Proposal] = {}
        for g in self.score(texts, langs, vectors, exclude, relabel, retrieval, resolved):
            explained = explain(g.retrieval, g.decision, g.vocab, g.resolved.params.top_k, candidates=candidates)
            self.complete_evidence(g, explained, vectors, exclude)
            scoring = g.resolved.wire()  # one per group: its proposals share it
            for i, e, names in zip(g.idx, explained, g.searched):
                out[i] = to_proposal(e, names, scoring)
        return [out[i] for i in range(len(texts))]  # the groups partition the articles

    def complete_evidence(self, g: Scored, props: list[Explained], vectors: np.ndarray | None,
                          exclude: Sequence[str]) -> None:
        """Complete the evidence of the proposals of group ``g`` and say why, in words: a proposed label that none of
        the first k neighbours carries gets the score components that gave it a share (its score is theirs: the
        neighbours after the first k a rule's wider window reads add nothing to it); one that no retrieved neighbour
        carries also gets the memory's :data:`CARRIERS` closest articles that carry it (one search per such label);
        then every label and candidate its ``reason``
        (:func:`~newsmon.shared.scoring.reasons.retrieval_reason`)."""
        # a label none of the first k neighbours carries: the components that gave it a share are named, whether
        # its evidence is the neighbours after the first k (a rule with a wider window) or found by a search
        unsupported = [(pos, x) for pos, p in enumerate(props) for x in p.labels if not x.carriers]
        lacking = [(pos, x) for pos, x in unsupported if not x.neighbours]
        if unsupported and g.evidence:
            own = {}
            for spec in g.resolved.params.components:
                comp = get_component(spec.name)
                if not comp.READS_CONTEXT and spec.name in g.evidence:
                    zeros = np.zeros((len(g.idx), len(g.vocab)), dtype=np.float32)
                    own[spec.name] = comp.mix(zeros, g.vocab, g.evidence[spec.name], spec.parsed())
            for pos, x in unsupported:
                c = g.vocab.index.get(x.label)
                x.components = [n for n, o in own.items() if c is not None and c < o.shape[1] and o[pos, c] > 0]
        find = getattr(self.neighbours, "carriers", None)
        need: dict[str, list[int]] = {}
        for pos, x in lacking:
            need.setdefault(x.label, []).append(pos)
        if find is not None and vectors is not None:
            for label, rows in need.items():
                hits = find(vectors[[g.idx[r] for r in rows]], [g.lang] * len(rows), label, CARRIERS, exclude)
                for r, found in zip(rows, hits):
                    x = next(y for y in props[r].labels if y.label == label)
                    x.neighbours = [(h.article_id, float(np.clip(h.similarity, -1, 1))) for h in found]
                    x.titles = [display_title(getattr(h, "payload", None)) for h in found]
                    x.searched = bool(found)
        params = g.resolved.params
        for p in props:
            for proposed, items in ((True, p.labels), (False, p.candidates)):
                for x in items:
                    x.reason = retrieval_reason(x.score, x.threshold, x.decided_by, proposed, x.carriers, x.window,
                                                x.neighbours, params, x.beyond, x.searched, x.components)

    def matrix(self, texts: Sequence[str], langs: Sequence[str | None], vectors: np.ndarray | None,
               retrieval: Retrieval, resolved: Resolved, vocab: LabelVocab) -> tuple[np.ndarray, np.ndarray]:
        """``(m, L)`` float32 scores and ``(m, L)`` bool proposals over ``vocab``'s first ``L`` labels (``eval``)."""
        L = len(vocab)
        S, P = np.zeros((len(texts), L), dtype=np.float32), np.zeros((len(texts), L), dtype=bool)
        for g in self.score(texts, langs, vectors, retrieval=retrieval, resolved=resolved, vocab=vocab):
            S[g.idx], P[g.idx] = g.decision.scores[:, :L], g.decision.proposed[:, :L]
        return S, P

    def _group(self, lang: str | None, res: Resolved, idx: list[int], texts: Sequence[str],
               vectors: np.ndarray | None, exclude: Sequence[str], relabel: Relabel | None,
               retrieval: Retrieval | None, vocab: LabelVocab | None) -> Scored:
        params, known = res.params, res.known_labels
        k = neighbours_needed(params)
        gtexts = [texts[i] for i in idx]
        gvecs = vectors[idx] if vectors is not None else None
        r, searched = self._neighbours(params, idx, gtexts, gvecs, [lang] * len(idx), exclude, retrieval,
                                       lambda found: fuse(found, gtexts, params.lexical_weight, k, self.terms))
        if relabel is not None:
            known, params = relabelled(r, known, params, relabel)
        models, counts = self._models(lang, res, params)
        evidence = {}
        for spec in params.components:
            comp, opts = get_component(spec.name), spec.parsed()
            ev = comp.evidence(models[spec.name], Queries(gtexts, gvecs), opts)
            evidence[spec.name] = comp.relabel(ev, relabel) if relabel is not None else ev
        if counts is not None and relabel is not None:
            counts = relabel_counts(counts, relabel)
        v = LabelVocab(vocab.labels) if vocab is not None else LabelVocab()
        d = decide(r, v, params, evidence, counts, known, gtexts, reasons=True)
        return Scored(idx, d, v, r, searched, res, lang, evidence)

    def _neighbours(self, params: ScoringParams, idx: list[int], texts: list[str], vectors: np.ndarray | None,
                    langs: list[str | None], exclude: Sequence[str], given: Retrieval | None,
                    keep: Callable[[Retrieval], Retrieval]) -> tuple[Retrieval, list[tuple[str, ...]]]:
        """The neighbours kept (``keep``: the fusion's top-k) of the candidates the parameters read: from the
        retrieval ``given``, or searched (then only the kept ones' payloads are read) and the collections searched."""
        n, lexical_k = retrieval_size(params)
        if given is not None:  # retrieved with what the parameters read, or more (by cosine, best first)
            rows = given.rows(idx)
            # without the lexical search the candidates are the dense top-n alone: the first n by cosine
            return keep(rows if lexical_k else rows.head(n)), [()] * len(idx)
        if self.neighbours is None or vectors is None:
            raise ValueError("no neighbours: give a retrieval, or a neighbour source and the articles' vectors")
        return self.neighbours.search(vectors, langs, n, exclude, texts if lexical_k else None, lexical_k, keep)


def needs_counts(params: ScoringParams) -> bool:
    """Whether scoring with ``params`` reads the memory's label counts (the bucket thresholds, a component that
    reads the others: :class:`~newsmon.shared.scoring.components.MixContext`)."""
    return params.bucket_thresholds is not None or any(get_component(s.name).READS_CONTEXT for s in params.components)


def relabelled(r: Retrieval, known: frozenset[str] | None, params: ScoringParams, relabel: Relabel
               ) -> tuple[frozenset[str] | None, ScoringParams]:
    """Apply the label registry to the neighbours' labels of ``r`` (in place) and return (the known labels under
    their new names, ``params`` with its ``label_thresholds`` under the new names). A renamed label keeps counting
    as known and keeps its own threshold (two labels merged under one name: the lower of theirs); a retired
    label's threshold goes."""
    if known is not None:
        seen = {lb for row in r.labels for lbs in row for lb in lbs}
        known = frozenset(x for lb in seen if lb in known for x in relabel((lb,)))
    r.labels = [[relabel(lbs) for lbs in row] for row in r.labels]
    if not params.label_thresholds:
        return known, params
    own: dict[str, float] = {}
    for lb, t in params.label_thresholds.items():
        for x in relabel((lb,)):
            own[x] = min(t, own.get(x, t))
    return known, params.model_copy(update={"label_thresholds": own})


def relabel_counts(counts: dict[str, int], relabel: Relabel) -> dict[str, int]:
    """Memory articles per label under the label registry's names (a renamed label's articles count for the new
    name, a retired label's for none)."""
    out: dict[str, int] = {}
    for lb, c in counts.items():
        for x in relabel((lb,)):
            out[x] = out.get(x, 0) + c
    return out
