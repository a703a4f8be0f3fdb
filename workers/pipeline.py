"""The article path, one method per stage, in order:

``validate`` -> ``near_duplicates`` -> ``embed`` -> ``retrieve_and_score`` -> ``match_rules`` -> ``store_pending``
-> ``emit`` (:meth:`ArticlePipeline.propose` runs the middle five; the worker, ``POST /v1/suggest`` and
``newsmon suggest`` share it, the last two through :mod:`newsmon.workers.proposing`)

:class:`ArticlePipeline` is the classifier worker's service object; the worker
(:mod:`newsmon.workers.classifier_worker`) only moves messages, offsets and errors. Every dependency call goes through
the ``call`` it is given (the worker's error policy, :meth:`newsmon.workers.policy.DependencyCalls.call`).

Per batch the knowledge memory is hit by: one ``get`` per language for the originals of the near-copies found,
read again after the pending points are written (none when there are none), one batched ``search`` per language
of the batch (plus one per other language for a language whose memory is too small to stand alone, and a count
for it), one ``get`` and one ``upsert`` per language for the pending points, and, when a label rule matched a
label retrieval did not propose, one ``count`` per language and such label (its confirmed examples). The language
collections are listed at most once per batch. The worker runs ``validate``, the index part of
``near_duplicates`` and ``embed`` of the next batch ahead (:mod:`newsmon.workers.ahead`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import structlog
from confluent_kafka import Message

from newsmon.schemas import (ArticleEvent, DeadLetterReason, DeadLetterStage, InvalidEvent, LabelProposal, Proposal,
                             Timings, parse_event)
from newsmon.shared.classifier import Classifier
from newsmon.shared.scoring.records import CalibrationUnreadable
from newsmon.shared.config import Settings
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.memory import SearchFilter, UnknownLanguageError, catch_up, replaced_router
from newsmon.shared.promotion import promoted_calibration
from newsmon.shared.text import article_text
from newsmon.workers.copies import Duplicate, duplicate_proposal, inherited_labels, link_copies
from newsmon.workers.pending import recheck_originals, write_pending
from newsmon.workers.labels import LabelRegistry, RegistryState
from newsmon.workers.model_follower import ModelFollower
from newsmon.workers.observability import BATCH_SECONDS, BATCH_SIZE
from newsmon.workers.kwe_stage import RuleBook, RuleOutcome, apply_rules, count_examples

log = structlog.get_logger(__name__)


def call_directly(what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """The trivial error policy: call ``fn`` once (outside a worker)."""
    return fn(*args, **kwargs)


@dataclass
class ArticleItem:
    """One valid article of a batch and what the stages found for it.

    Attributes:
        msg: the consumed message; event: the parsed event; text: title + body, cleaned
        (:func:`newsmon.shared.text.clean_text`, what every stage reads) and cut to ``max_text_chars``;
        duplicate: set by ``near_duplicates``; vector: ``(d,)`` float32 query embedding (set by ``embed``);
        proposal: what is proposed for it (:class:`~newsmon.schemas.Proposal`, the scorer's, or its decided
        original's for a near-copy; set by ``retrieve_and_score``, its labels and candidates revised by
        ``match_rules``, which sets rules: what the label rules did; put on the wire by ``emit``); revision: the
        proposal's revision and stored: whether its pending point was written (``store_pending``).
    """

    msg: Message
    event: ArticleEvent
    text: str
    duplicate: Duplicate | None = None
    vector: np.ndarray | None = None
    proposal: Proposal = field(default_factory=Proposal)
    rules: RuleOutcome | None = None
    revision: int = 0
    stored: bool = False

    @property
    def reuses(self) -> bool:
        """Whether it is a near-copy that takes its original's decided labels (no model call)."""
        return self.duplicate is not None and self.duplicate.decided


@dataclass
class ArticleBatch:
    """The valid articles of one micro-batch; ``size`` counts every consumed message; ``seconds`` the stages."""

    size: int
    items: list[ArticleItem]
    started: float = field(default_factory=time.perf_counter)
    seconds: dict[str, float] = field(default_factory=lambda: {"dedup": 0.0, "embed": 0.0, "search_score": 0.0,
                                                               "rules": 0.0})
    registry: RegistryState | None = None  # the label registry's snapshot the batch was scored with
    hits: dict | None = None  # id(item) -> (original id, Jaccard) from the near-duplicate index, once checked
    #: whether its articles are kept: indexed as near-duplicate originals and stored as pending points (the worker,
    #: ``POST /v1/suggest``); False for ``newsmon suggest``, which reads the index and writes nothing
    keep: bool = True

    @property
    def fresh(self) -> list[ArticleItem]:
        """The articles that need the model: all but the near-copies of a decided original."""
        return [it for it in self.items if not it.reuses]


class ArticlePipeline:
    """The article path of the classifier worker: a method per stage (see the module docstring).

    Args:
        settings: all settings; classifier: encoder + memory router (replaced when a model is promoted);
        dedup: the near-duplicate index (Redis-backed when replicas share it); registry: the label registry
        (definitions, renames, retired labels); call: how dependency calls are made (the worker's error policy).
    """

    def __init__(self, settings: Settings, classifier: Classifier, dedup: NearDuplicateIndex,
                 registry: LabelRegistry, call: Callable = call_directly):
        self.settings = settings
        self.classifier = classifier
        self.dedup = dedup
        self.registry = registry
        self.call = call
        self.rulebook = RuleBook()
        self.follower = ModelFollower(settings, lambda: self.classifier.model_version, self._switch,
                                      self._catch_up_replaced)

    # -- between batches --------------------------------------------------------------------------
    def follow_promotion(self) -> bool:
        """When the nightly job promoted another model (:class:`~newsmon.workers.model_follower.ModelFollower`):
        load it, copy into its collections the points stored since the memory was re-embedded (pending articles,
        later decisions; the newer decision wins, see :func:`newsmon.shared.memory.catch_up`), and use it from
        this batch on. A process started after the promotion catches up from the version the promotion record
        says it replaced, once. Returns whether the model changed."""
        return self.follower.follow()

    def _switch(self, rec: dict) -> bool:
        """Load the promoted model, catch its memories up from the one in use, and serve it."""
        started = time.perf_counter()
        new = Classifier(self.settings)
        copied = catch_up(self.classifier.router, new.router, new.encoder)
        old, self.classifier = self.classifier, new
        if old.owns_encoder:
            old.encoder.close()
        log.info("switched to the promoted model", old=old.model_version, new=new.model_version,
                 caught_up=copied, seconds=round(time.perf_counter() - started, 1),
                 calibration=self._promoted_records(rec))
        return True

    def _promoted_records(self, rec: dict | None) -> dict[str, str | None]:
        """Language -> the calibration record the new model is scored with (:meth:`Classifier.resolved
        <newsmon.shared.classifier.Classifier.resolved>`: the one stored under its collection); a warning names
        each language whose record is not the one the promotion named (a later ``newsmon tune`` replaced it,
        say)."""
        named = promoted_calibration(rec)
        loaded: dict[str, str | None] = {}
        for lang in self.classifier.languages():
            try:
                loaded[lang] = self.classifier.resolved(lang).record
            except CalibrationUnreadable as exc:  # the batch that reads it pauses the worker and says so
                loaded[lang] = f"unreadable: {exc.path}"
        for lang, rid in named.items():
            if loaded.get(lang) != rid:
                log.warning("the promoted model's calibration record is not the one the promotion named",
                            language=lang, named=rid, loaded=loaded.get(lang))
        return loaded

    def _catch_up_replaced(self, rec: dict | None) -> None:
        old = replaced_router(self.settings, rec, self.classifier.model_version)
        if old is not None:
            copied = catch_up(old, self.classifier.router, self.classifier.encoder)
            log.info("caught up from the replaced model", old=old.model_version, caught_up=copied)

    def check_dependencies(self) -> None:
        """Touch the memory, the label registry and the near-duplicate index; raises when one is down."""
        clf = self.classifier
        for lang in clf.router.languages(refresh=True)[:1]:
            clf.memory(lang).count(SearchFilter(labelled=True))
        self.registry.snapshot()
        self.dedup.count()

    # -- the stages -------------------------------------------------------------------------------
    def propose(self, batch: ArticleBatch, stage: Callable[..., AbstractContextManager] | None = None) -> None:
        """The stages between ``validate`` and ``emit``, in order, for a batch with valid articles (``store_pending``
        only when the batch is kept, :attr:`ArticleBatch.keep`); each runs inside ``stage(<its DeadLetterStage>)``
        when given (the worker's: it names the stage of a failure and holds the stage to its time budget)."""
        for name, run in ((DeadLetterStage.NEAR_DUPLICATES, self.near_duplicates),
                          (DeadLetterStage.EMBED, self.embed),
                          (DeadLetterStage.RETRIEVE_AND_SCORE, self.retrieve_and_score),
                          (DeadLetterStage.LABEL_RULES, self.match_rules),
                          # before the proposals: a moderator can only decide on a produced proposal
                          (DeadLetterStage.STORE_PENDING, self.store_pending)):
            if name is DeadLetterStage.STORE_PENDING and not batch.keep:
                continue
            with (stage(name) if stage is not None else nullcontext()):
                run(batch)

    def validate(self, msgs: list[Message]) -> tuple[ArticleBatch, list[tuple[Message, InvalidEvent]]]:
        """Parse every message as an :class:`ArticleEvent` and clean its text (:func:`~newsmon.shared.text.clean_text`:
        the one normalisation every later stage reads). Returns the batch of valid articles and the rejected
        messages with why (an :class:`InvalidEvent`: its reason code and text; too large, invalid JSON, schema
        violation, unknown ``schema_version``, empty text, also once cleaned). No dependency is called."""
        w = self.settings.worker
        BATCH_SIZE.observe(len(msgs))
        batch = ArticleBatch(size=len(msgs), items=[])
        rejected: list[tuple[Message, InvalidEvent]] = []
        for m in msgs:
            raw = m.value()
            if raw is not None and len(raw) > w.max_message_bytes:
                rejected.append((m, InvalidEvent(f"too large: {len(raw)} bytes > worker.max_message_bytes "
                                                 f"{w.max_message_bytes}", "ArticleEvent", DeadLetterReason.TOO_LARGE)))
                continue
            try:
                ev = parse_event(ArticleEvent, raw)
            except InvalidEvent as exc:
                rejected.append((m, exc))
                continue
            text = article_text(ev.text, w.max_text_chars)
            if not text.strip():
                rejected.append((m, InvalidEvent("empty text: title and body hold nothing visible once cleaned "
                                                 "(markup, invisible characters)", "ArticleEvent",
                                                 DeadLetterReason.SCHEMA_VIOLATION)))
                continue
            batch.items.append(ArticleItem(m, ev, text))
        return batch, rejected

    def refuse_unknown_languages(self, batch: ArticleBatch) -> list[tuple[Message, InvalidEvent]]:
        """Take the articles in a language the memory has no collection for out of ``batch`` (nothing is created
        for them) and return them with why, naming the languages there are (reason ``unknown_language``)."""
        refused: list[tuple[Message, InvalidEvent]] = []
        for it in list(batch.items):
            try:
                self.call("memory", self.classifier.router.check_language, it.event.lang)
            except UnknownLanguageError as exc:
                refused.append((it.msg, InvalidEvent(str(exc), "ArticleEvent", DeadLetterReason.UNKNOWN_LANGUAGE)))
                batch.items.remove(it)
        return refused

    def near_duplicates(self, batch: ArticleBatch) -> None:
        """Check each article against the near-duplicate index (adding the new ones; done already when
        :meth:`index_near_copies` ran ahead), then read the originals found from the memory (one ``get`` per
        language); an article whose original is stored, or is an earlier article of the same batch (the index
        holds it, the memory not yet), gets a :class:`~newsmon.workers.copies.Duplicate`; it needs no model call when
        its original's labels were decided (:attr:`ArticleItem.reuses`)."""
        t0 = time.perf_counter()
        if batch.hits is None:
            self.index_near_copies(batch)
        if batch.hits:
            found = self.call("memory", self.classifier.router.find_many, [h[0] for h in batch.hits.values()], True)
            link_copies(batch.items, batch.hits, found)
        batch.seconds["dedup"] += time.perf_counter() - t0

    def index_near_copies(self, batch: ArticleBatch) -> None:
        """The index part of :meth:`near_duplicates` into ``batch.hits`` (a batch not kept is only looked up:
        its articles are not indexed); no memory call, so it may run ahead, while the previous batch is finished.
        The language collections are listed again, once per batch."""
        self.classifier.router.new_batch()
        batch.hits = {}
        for it in batch.items:
            if batch.keep:
                hit = self.call("near-duplicate index", self.dedup.check_and_add, it.event.article_id, it.text)
            else:
                hit = self.call("near-duplicate index", self.dedup.find, it.text, it.event.article_id)
            if hit is not None:
                batch.hits[id(it)] = hit

    def embed(self, batch: ArticleBatch) -> None:
        """Embed the articles that need the model (``query`` role) and have no vector from the embedding
        ahead (:mod:`newsmon.workers.ahead`), one encoder call per batch."""
        fresh = [it for it in batch.fresh if it.vector is None]
        if not fresh:
            return
        t0 = time.perf_counter()
        vectors = self.call("encoder", self.classifier.encoder.encode, [it.text for it in fresh], "query")
        for it, v in zip(fresh, vectors):
            it.vector = v
        batch.seconds["embed"] += time.perf_counter() - t0

    def retrieve_and_score(self, batch: ArticleBatch) -> None:
        """Propose labels: RAE-XMC over the retrieved neighbours for the articles that need the model (neighbour
        labels mapped through the label registry), the original's decided labels for the near-copies of a decided
        original (its confirmed and added labels, none when it was reviewed, a corpus article's labels;
        :func:`newsmon.workers.copies.inherited_labels`; scored by the estimated Jaccard)."""
        snapshot = batch.registry = self.call("label registry", self.registry.snapshot)

        def relabel(labels):
            return self.registry.apply(labels, snapshot)

        fresh = batch.fresh
        if fresh:
            t0 = time.perf_counter()
            props, _ = self.call("memory search", self.classifier.propose, [it.text for it in fresh],
                                 [it.event.lang for it in fresh], vectors=np.stack([it.vector for it in fresh]),
                                 exclude=[it.event.article_id for it in fresh], relabel=relabel)
            batch.seconds["search_score"] = time.perf_counter() - t0
            for it, p in zip(fresh, props):
                it.proposal = p
        for it in batch.items:
            d = it.duplicate
            if it.reuses and d is not None and d.point is not None:
                it.proposal = duplicate_proposal(d.original_id, relabel(inherited_labels(d.point) or ()), d.jaccard,
                                                 d.point)

    def match_rules(self, batch: ArticleBatch) -> None:
        """Apply the label rules of the registry snapshot the batch is scored with to the articles that are not
        near-copies (:func:`newsmon.workers.kwe_stage.apply_rules`, each article's proposal revised): evidence on
        the labels whose KwE matched,
        retrieval proposals the definition refuses dropped, rule-only proposals for labels with fewer than
        ``labels.min_examples`` confirmed examples, the other matched labels among the candidates."""
        fresh, state = batch.fresh, batch.registry
        if not fresh or state is None or not state.definitions:
            return
        t0 = time.perf_counter()
        index = self.rulebook.index(state)
        enough = self.settings.labels.min_examples
        router = self.classifier.router

        def examples(names):
            return self.call("memory count", count_examples, router, names, enough)

        done = apply_rules([(it.text, it.event, it.proposal) for it in fresh], state, index, examples, enough,
                           self.settings.scoring.threshold)
        for it, (proposal, outcome) in zip(fresh, done):
            it.proposal, it.rules = proposal, outcome
        batch.seconds["rules"] = time.perf_counter() - t0

    def store_pending(self, batch: ArticleBatch) -> None:
        """Keep each article's embedding in the memory as a pending point (no labels, the proposal in its
        payload) before its proposal is produced, so a moderator decision never needs the model. Articles
        already moderated (labelled, or with a decision) are left as they are; one stored before gets the next
        proposal ``revision``. Then read the originals of the near-copies again: a decision that landed since
        they were read changes what the copies are proposed (the memory updater revises only the copies it
        finds stored)."""
        self.call("memory write", self._store, batch)

    def _store(self, batch: ArticleBatch) -> None:
        with self.classifier.router.write_lock:  # one step for the memory updater of this process
            write_pending(self.classifier.router, batch.fresh, [it for it in batch.items if it.reuses])
            if any(it.duplicate is not None for it in batch.items):
                recheck_originals(self.classifier.router, batch.items,
                                  lambda labels: self.registry.apply(labels, batch.registry))

    def emit(self, batch: ArticleBatch) -> list[tuple[Message, LabelProposal]]:
        """The :class:`LabelProposal` of every valid article, with its consumed message, in batch order: its
        :attr:`ArticleItem.proposal` with the article's envelope (:meth:`LabelProposal.of`: the first
        ``limits.proposal_labels`` labels; ``memory_version`` the collections searched, else the collection of the
        article's language, or of its decided original's for a near-copy that takes its labels)."""
        now = datetime.now(timezone.utc)
        total_ms = 1000 * (time.perf_counter() - batch.started)
        sec, cap = batch.seconds, self.settings.limits.proposal_labels
        out = []
        for it in batch.items:
            _ts_type, ts = it.msg.timestamp()
            queue_ms = max(0.0, now.timestamp() * 1000 - ts) if ts and ts > 0 else 0.0
            lang = it.duplicate.lang if it.reuses and it.duplicate else it.event.lang
            out.append((it.msg, LabelProposal.of(
                it.proposal, article_id=it.event.article_id, revision=it.revision, max_labels=cap,
                duplicate_of=it.duplicate.original_id if it.duplicate else None,
                model_version=self.classifier.model_version,
                memory_version="+".join(it.proposal.searched) or self.classifier.collection(lang),
                timings=Timings(batch_size=batch.size, queue_ms=queue_ms, dedup_ms=1000 * sec["dedup"],
                                embed_ms=1000 * sec["embed"], search_ms=1000 * sec["search_score"],
                                score_ms=1000 * sec["rules"], total_ms=total_ms),
                produced_at=now)))
        return out

    def observe(self, batch: ArticleBatch) -> None:
        """Record the batch's stage timings (``newsmon_batch_seconds``), after its proposals were produced."""
        for stage in ("dedup", "embed", "search_score", "rules"):
            BATCH_SECONDS.labels(stage).observe(batch.seconds[stage])
        BATCH_SECONDS.labels("total").observe(time.perf_counter() - batch.started)
