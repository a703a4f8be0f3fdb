"""The classifier service object: encoder + knowledge memory (one collection per language and model version)
+ simplified RAE-XMC. Used by the CLI (``memory build``, ``suggest``) and by the classifier worker.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from tqdm import tqdm

from newsmon.schemas import NeighbourRef, ProposedLabel, ScoringInfo
from newsmon.shared.adapter import read_adapter
from newsmon.shared.config import RaeSettings, Settings
from newsmon.shared.data import Article
from newsmon.shared.encoder import Encoder, encoder_identity, resolve_model
from newsmon.shared.memory import KnowledgeMemory, MemoryRouter, SearchFilter, shared_router
from newsmon.shared.calibration import CalibrationStore, effective_scoring, record_id
from newsmon.shared.predictors.lexical import TermVectors, fuse
from newsmon.shared.predictors import LabelScore, LabelVocab, Proposal, Retrieval, explain, newsmon_decision
from newsmon.shared.predictors.head_model import HeadModel, HeadScores
from newsmon.shared.predictors.label_keys import LabelHits, LabelKeys
from newsmon.shared.predictors.rules import neighbours_needed
from newsmon.shared.promotion import effective_encoder_settings

log = structlog.get_logger(__name__)

#: Article text kept in each memory point's payload (characters), so the nightly job can re-embed the memory
#: with a new model version without the original corpus.
TEXT_PAYLOAD_CHARS = 20_000

#: Labels below the threshold a proposal carries as ``candidates`` for the moderator (the wire allows 20).
CANDIDATES = 20


def proposed_labels(items: Sequence[LabelScore]) -> list[ProposedLabel]:
    """Scored labels as the wire's :class:`~newsmon.schemas.ProposedLabel` (``source = "retrieval"``): each
    with its supporting neighbours, their similarity clipped to [-1, 1] and their titles, the decision rule that
    proposed it and its own threshold."""
    return [ProposedLabel(label=x.label, score=float(x.score), decided_by=x.decided_by, threshold=x.threshold,
                          neighbours=[NeighbourRef(article_id=a, similarity=float(np.clip(sim, -1, 1)), title=title)
                                      for (a, sim), title in zip(x.neighbours,
                                                                 [*x.titles, *[None] * len(x.neighbours)])])
            for x in items]


def scoring_info(rae: RaeSettings, calibration: str | None = None) -> ScoringInfo:
    """The parameters a proposal was scored with (``calibration``: the id of the calibration record they came
    from), for the wire."""
    return ScoringInfo(predictor="newsmon", top_k=rae.top_k, tau=rae.tau, threshold=rae.threshold,
                       calibration=calibration, floor=rae.floor, set_vote=rae.set_vote,
                       tail_support=rae.tail_support, new_label_support=rae.new_label_support,
                       label_lambda=rae.label_lambda,
                       bucket_thresholds=list(rae.bucket_thresholds) if rae.bucket_thresholds else None,
                       label_thresholds=len(rae.label_thresholds or {}), label_count=rae.label_count,
                       head_weight=rae.head_weight)


@dataclass
class BuildReport:
    """What ``memory build`` did: articles upserted per language, seconds spent embedding and upserting."""

    upserted: dict[str, int]
    embed_s: float
    upsert_s: float


def model_identity(settings: Settings) -> tuple[str, int]:
    """(model version, embedding dimension) of the encoder in production (the promoted one, else
    ``encoder.model``, under the effective ``encoder.runtime``) without loading its weights; a local checkpoint's
    ``config.json`` is read directly (no transformers, no torch: ``memory stats`` and the memory updater stay
    light). An adapter model's version is its base encoder's plus the adapter's suffix, as ``Encoder.model_id``."""
    enc = effective_encoder_settings(settings)
    path = resolve_model(enc.model, settings.home)
    adapter = read_adapter(path)
    suffix = ""
    if adapter is not None:
        path, suffix = resolve_model(adapter.base_model, settings.home), adapter.suffix
    config = Path(path) / "config.json"
    if config.is_file():
        return encoder_identity(path, enc) + suffix, int(json.loads(config.read_text())["hidden_size"])
    from transformers import AutoConfig  # deferred: transformers takes seconds to import (a hub id)

    return encoder_identity(path, enc) + suffix, int(AutoConfig.from_pretrained(path).hidden_size)


class Classifier:
    """Proposes labels for articles from the knowledge memory (RAE-XMC eq. 8).

    Args:
        settings: encoder, memory and RAE-XMC settings.
        encoder: an already loaded :class:`newsmon.shared.encoder.Encoder` (default: load the production one).
        router: the memories of the encoder's model version (default: this process's shared router).

    The memory of language ``lang`` is the collection ``<prefix>_<lang>_<model version>`` (embedded engine
    under ``settings.memory_path`` or the Qdrant server at ``settings.memory.url``). An article whose language
    memory holds fewer than ``memory.min_language_articles`` labelled articles is searched in every collection
    of this model version, the hits merged by similarity (cross-lingual retrieval; see
    :meth:`MemoryRouter.search_languages`).
    """

    def __init__(self, settings: Settings, encoder: Encoder | None = None, router: MemoryRouter | None = None):
        self.settings = settings
        self.owns_encoder = encoder is None  # a given encoder is the caller's to close
        self.encoder = encoder or Encoder(effective_encoder_settings(settings), settings.home)
        self.model_version = self.encoder.model_id
        self.router = router or shared_router(settings, self.model_version, self.encoder.dim)
        self.terms = TermVectors()  # hybrid retrieval's term vectors of memory articles, by id
        self.calibrations = CalibrationStore(settings, self.router.server_client() if settings.memory.url else None)
        # (what, language) -> (the calibration record id and options it was built under, the label keys or the
        # head model built from the memory)
        self._per_record: dict[tuple[str, str], tuple[tuple, Any]] = {}
        self._keys_lock = threading.Lock()

    # -- memory -------------------------------------------------------------------------------------
    def collection(self, lang: str) -> str:
        """The collection name of ``lang`` for this model version."""
        return self.router.collection(lang)

    def memory(self, lang: str) -> KnowledgeMemory:
        """The knowledge memory of one language (opened on first use)."""
        return self.router.memory(lang)

    def languages(self) -> list[str]:
        """Languages that have a collection of this model version."""
        return self.router.languages()

    def add_articles(self, articles: Sequence[Article], progress: bool = False, batch: int = 64) -> BuildReport:
        """Embed (``passage`` role) and upsert labelled articles into their language's memory.

        Idempotent: an article id already present is overwritten with the new vector, labels and payload.
        """
        done: dict[str, int] = {}
        embed_s = upsert_s = 0.0
        bar = tqdm(total=len(articles), desc="memory build", unit="art", disable=not progress)
        for start in range(0, len(articles), batch):
            chunk = list(articles[start:start + batch])
            t0 = time.perf_counter()
            vecs = self.encoder.encode([a.text for a in chunk], role="passage")
            embed_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            for lang in sorted({a.lang for a in chunk}):
                idx = [i for i, a in enumerate(chunk) if a.lang == lang]
                self.memory(lang).upsert(
                    [chunk[i].id for i in idx], vecs[idx], [chunk[i].labels for i in idx],
                    [{"lang": lang, "title": chunk[i].title, "source": chunk[i].source,
                      "text": chunk[i].text[:TEXT_PAYLOAD_CHARS]} for i in idx])
                done[lang] = done.get(lang, 0) + len(idx)
            upsert_s += time.perf_counter() - t0
            bar.update(len(chunk))
        bar.close()
        return BuildReport(done, embed_s, upsert_s)

    # -- proposals ----------------------------------------------------------------------------------
    def retrieve(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int,
                 exclude: Sequence[str] = ()) -> Retrieval:
        """Top-k labelled neighbours of ``(m, d)`` float32 query vectors, routed by language
        (:meth:`MemoryRouter.search_languages`: a language's own memory, merged with the other languages' while
        it holds fewer than ``memory.min_language_articles`` labelled articles)."""
        return self.retrieve_routed(vectors, langs, top_k, exclude)[0]

    def retrieve_routed(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int,
                        exclude: Sequence[str] = (), texts: Sequence[str] | None = None,
                        lexical_k: int = 0) -> tuple[Retrieval, list[tuple[str, ...]]]:
        """:meth:`retrieve`, and per query the names of the collections searched; with ``texts`` and
        ``lexical_k`` hybrid (``top_k + lexical_k`` candidates, see :meth:`MemoryRouter.search_languages`)."""
        flt = SearchFilter(labelled=True, exclude_ids=tuple(exclude))
        rows, searched = self.router.search_languages(vectors, langs, top_k, flt,
                                                      self.settings.memory.min_language_articles, texts, lexical_k)
        return Retrieval.from_neighbours(rows, top_k + (lexical_k if texts is not None else 0)), searched

    def scoring(self, lang: str | None) -> tuple[RaeSettings, str | None, frozenset[str] | None]:
        """The scoring parameters for articles in ``lang``: the calibration record of that language's collection
        (``newsmon tune``), every field set explicitly in ``settings.rae`` taking precedence
        (:func:`newsmon.shared.calibration.effective_scoring`). Returns (parameters, record id or None, the labels
        the record saw or None: the others are new labels for the new-label rule)."""
        record = self.calibrations.read(self.collection(lang)) if lang else None
        params, _source = effective_scoring(self.settings, record)
        if record is None:
            return params, None, None
        return params, record_id(record), record.known_labels

    def label_keys(self, lang: str, record: str) -> LabelKeys:
        """The label keys of ``lang``'s memory (:mod:`newsmon.shared.predictors.label_keys`: per label the sum of
        its labelled articles' embeddings), built by one scroll of the collection on first use under calibration
        record ``record`` and kept until another record is read: the keys follow each calibration, the
        neighbours carry every later decision at once."""
        def build() -> tuple[LabelKeys, dict]:
            keys = LabelKeys(self.encoder.dim)
            for p in self.memory(lang).scroll(SearchFilter(labelled=True), with_vectors=True):
                keys.add(p.vector, [p.labels])
            return keys, {"labels": len(keys)}

        return self._built_per_record("label keys built", lang, (record,), build)

    def head_model(self, lang: str, record: str, c: float) -> HeadModel:
        """The head model of ``lang``'s memory (:mod:`newsmon.shared.predictors.head_model`: a logistic regression
        per label on >= 100 memory articles, inverse regularisation ``c``), fitted on the memory's stored texts by
        one scroll of the collection on first use under calibration record ``record`` and kept until another
        record is read (as the label keys are; the calibration chose it on the same memory)."""
        def build() -> tuple[HeadModel, dict]:
            texts, labels = [], []
            for p in self.memory(lang).scroll(SearchFilter(labelled=True)):
                texts.append(str(p.payload.get("text") or ""))
                labels.append(tuple(p.labels))
            model = HeadModel(c).fit(texts, labels)
            return model, {"labels": len(model.labels), "articles": len(texts)}

        return self._built_per_record("head model fitted", lang, (record, c), build)

    def _built_per_record(self, what: str, lang: str, key: tuple, build: Callable[[], tuple[Any, dict]]) -> Any:
        """What ``build()`` makes from ``lang``'s memory (a value and the fields to log), made on first use under
        ``key`` (the calibration record id and the options it depends on) and kept until another key is asked
        for; logged as ``what`` with its seconds."""
        with self._keys_lock:
            hit = self._per_record.get((what, lang))
            if hit is None or hit[0] != key:
                t0 = time.perf_counter()
                value, fields = build()
                hit = self._per_record[(what, lang)] = (key, value)
                log.info(what, collection=self.collection(lang), **fields, seconds=round(time.perf_counter() - t0, 2))
            return hit[1]

    def propose(self, texts: Sequence[str], langs: Sequence[str | None] | None = None,
                rae: RaeSettings | None = None, vectors: np.ndarray | None = None,
                exclude: Sequence[str] = (),
                relabel: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None,
                candidates: int = CANDIDATES) -> tuple[list[Proposal], np.ndarray]:
        """Label proposals for ``m`` articles: retrieve (hybrid: the dense candidates fused with a lexical
        similarity when ``lexical_weight > 0``, :func:`newsmon.shared.predictors.lexical.fuse`), score with RAE-XMC
        (eq. 8) and decide with the product's rules (:func:`newsmon.shared.predictors.newsmon_decision`), with each
        language's calibrated
        parameters (:meth:`scoring`).

        Args:
            texts: article texts; langs: ISO 639-1 per article (None: search every language);
            rae: parameters for every article, replacing the calibration and the settings;
            vectors: ``(m, d)`` float32 embeddings when already computed (``query`` role);
            exclude: article ids never used as neighbours; relabel: a function applied to each neighbour's
            label tuple before scoring (the label registry: renames, retired labels); candidates: how many of
            the best labels not proposed each proposal keeps (``Proposal.candidates``).

        Returns:
            (proposals, each with its ``searched`` collections, ``scoring`` parameters, ``calibration`` id and
            ``candidates``; the ``(m, d)`` float32 query embeddings).
        """
        langs = list(langs) if langs is not None else [None] * len(texts)
        if vectors is None:
            vectors = self.encoder.encode(list(texts), role="query")
        groups: dict[str, tuple[RaeSettings, str | None, frozenset[str] | None, list[int]]] = {}
        for i, lang in enumerate(langs):
            params, cal, known = (rae, None, None) if rae is not None else self.scoring(lang)
            groups.setdefault(params.model_dump_json() + str(cal), (params, cal, known, []))[3].append(i)
        out: list[Proposal | None] = [None] * len(texts)
        for params, cal, known, idx in groups.values():
            k = neighbours_needed(params)
            n = max(k, params.lexical_candidates) if params.lexical_weight else k
            hybrid = [texts[i] for i in idx] if params.lexical_weight else None
            r, searched = self.retrieve_routed(vectors[idx], [langs[i] for i in idx], n, exclude, hybrid,
                                               params.lexical_candidates if params.lexical_weight else 0)
            r = fuse(r, [texts[i] for i in idx], params.lexical_weight, k, self.terms)
            decide = params
            if relabel is not None:
                known, decide = _relabelled(r, known, params, relabel)
            hits, counts, head = self._memory_parts(langs[idx[0]], cal, params, vectors[idx],
                                                    [texts[i] for i in idx], relabel)
            vocab = LabelVocab()
            d = newsmon_decision(r, vocab, decide, known, hits, counts, reasons=True, head=head)
            for i, p, names in zip(idx, explain(r, d.scores, vocab, params.threshold, params.top_k,
                                                candidates=candidates, proposed=d.proposed, decided_by=d.decided_by,
                                                thresholds=d.thresholds), searched):
                p.searched, p.scoring, p.calibration = names, params, cal
                out[i] = p
        return out, vectors

    def _memory_parts(self, lang: str | None, cal: str | None, params: RaeSettings, vectors: np.ndarray,
                      texts: list[str], relabel: Callable[[tuple[str, ...]], tuple[str, ...]] | None
                      ) -> tuple[LabelHits | None, dict[str, int] | None, HeadScores | None]:
        """What the decision reads from ``lang``'s memory under calibration record ``cal`` (none without one): the
        ``(m, d)`` queries' nearest label keys, the memory articles per label, the head model's probabilities of
        the ``m`` texts; under the label registry's names when ``relabel`` is given."""
        hits = counts = head = None
        if (params.label_lambda or params.bucket_thresholds) and cal is not None and lang is not None:
            keys = self.label_keys(lang, cal)
            hits = keys.top(vectors, params.label_keys) if params.label_lambda else None
            counts = keys.label_counts()
            if relabel is not None:
                hits = hits.relabel(relabel) if hits is not None else None
                counts = _relabel_counts(counts, relabel)
        if params.head_weight and cal is not None and lang is not None:
            head = self.head_model(lang, cal, params.head_c).scores(texts)
            head = head.relabel(relabel) if relabel is not None else head
        return hits, counts, head

    def close(self) -> None:
        """Close the memories and the embedding cache."""
        self.router.close()
        self.calibrations.close()
        self.encoder.close()


def _relabelled(r: Retrieval, known: frozenset[str] | None, params: RaeSettings,
                relabel: Callable[[tuple[str, ...]], tuple[str, ...]]) -> tuple[frozenset[str] | None, RaeSettings]:
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


def _relabel_counts(counts: dict[str, int], relabel: Callable[[tuple[str, ...]], tuple[str, ...]]) -> dict[str, int]:
    """Memory articles per label under the label registry's names (a renamed label's articles count for the new
    name, a retired label's for none)."""
    out: dict[str, int] = {}
    for lb, c in counts.items():
        for x in relabel((lb,)):
            out[x] = out.get(x, 0) + c
    return out
