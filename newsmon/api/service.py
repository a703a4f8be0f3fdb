"""What the HTTP API does, without HTTP: propose labels through the classifier's own pipeline, read the label
registry, publish label events, test a label's rule.

The API never writes the registry: a label change is a :class:`~newsmon.schemas.LabelEvent` produced to the
``label-events`` topic (acknowledged by the broker before the answer), which the memory updater applies, so
the topic stays the single path of truth for every replica.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from pydantic import ValidationError

from newsmon.api.changes import LabelChanges
from newsmon.api.models import DecisionSent, LabelChange, LabelTest, LabelTestResult, LabelView, TestedArticle
from newsmon.schemas import (
    ArticleEvent,
    InvalidEvent,
    LabelDefinition,
    LabelEvent,
    LabelProposal,
    ModeratorDecision,
    parse_event,
)
from newsmon.shared.classifier import Classifier
from newsmon.shared.config import Settings, reveal
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.kwe import ArticleMeta, LabelRuleIndex, RuleFilters
from newsmon.shared.logs import RateLimitedLogBridge
from newsmon.shared.scoring.records import CalibrationUnreadable
from newsmon.shared.text import article_text, cut_at_word, tokenize
from newsmon.workers.kafka_io import make_producer, read_latest
from newsmon.workers.kwe_stage import article_meta, count_examples, rule_evidence, rule_of_definition
from newsmon.workers.labels import LabelRegistry, RegistryState, open_registry
from newsmon.workers.pipeline import ArticlePipeline

log = structlog.get_logger(__name__)

__all__ = ["ApiError", "ApiService", "build_service"]

HEADING_CHARS = 120  # what a title-less article is shown by: the start of its text, cut at a word


class NotLoaded(Exception):
    """The label registry has not applied every label event yet (readiness)."""


class ApiError(Exception):
    """A request the API refuses: ``status`` (4xx / 503), ``detail`` (one readable line), ``errors`` (each
    problem as a dict), ``headers`` (e.g. ``Retry-After``)."""

    def __init__(self, status: int, detail: str, errors: list[dict] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.errors, self.headers = status, detail, errors or [], headers


class ApiService:
    """The API's service object.

    Args:
        settings: all settings; pipeline: the classifier's article pipeline (its classifier, near-duplicate index
            and label registry are the ones proposals use); producer: the Kafka producer for label events;
        journal: the embedded broker's journal (:class:`newsmon.journal.BrokerJournal`): a label event or decision
            is answered only once it is on disk there.
    """

    def __init__(self, settings: Settings, pipeline: ArticlePipeline, producer: Producer, journal: Any = None):
        self.settings = settings
        self.journal = journal
        self.pipeline = pipeline
        self.registry: LabelRegistry = pipeline.registry
        self.producer = producer
        self._lock = threading.Lock()  # one suggest batch at a time through the pipeline
        self._lock_offsets = threading.Lock()
        self._offsets: Consumer | None = None  # reads the memory updater's committed offsets (never joins)
        self.changes = LabelChanges(self)  # every label change goes through it

    # -- proposals ---------------------------------------------------------------------------------
    def suggest(self, articles: list[dict], publish: bool = False) -> list[LabelProposal]:
        """Proposals for article events (JSON objects, validated exactly as on the articles topic), through the
        classifier's stages, alone (the HTTP route batches requests: :func:`newsmon.api.batcher.suggest_many`); each
        article is stored as a pending point, so a moderator decision on it works. With ``publish`` the proposals are
        also produced to the proposals topic (:meth:`publish_proposals`).

        Raises:
            ApiError: 413 for too many or too large articles, 422 for an invalid one or one in a language the
                knowledge memory has no collection for (all reasons listed, the memory's languages named), 503 while
                a calibration record does not parse, or when ``publish`` and the broker does not acknowledge a
                proposal.
        """
        from newsmon.api.batcher import suggest_many  # the batcher imports this module

        out = suggest_many(self, [articles])[0]
        if isinstance(out, Exception):
            raise out
        if publish:
            self.publish_proposals(out)
        return out

    def publish_proposals(self, proposals: list[LabelProposal]) -> None:
        """Produce each proposal to the proposals topic, as the classifier worker produces it (the moderation tool
        and the console's queue get it): acknowledged by the broker, and on disk in the embedded broker's journal
        when there is one, before it returns (``POST /v1/suggest?publish=true``).

        Raises:
            ApiError: 503 when the broker does not acknowledge a proposal (or the journal does not have it) within
                ``api.publish_timeout_s``.
        """
        if proposals:
            self._produce(self.settings.kafka.topic_proposals, proposals, "proposal")

    # -- labels ------------------------------------------------------------------------------------
    def state(self) -> RegistryState:
        """The registry as of now."""
        return self.registry.snapshot()

    def examples(self, label: str, state: RegistryState) -> int:
        """Confirmed examples of ``label`` (or an old name of it) in the knowledge memory."""
        found = count_examples(self.pipeline.classifier.router, {label: state.names_of(label)}, 1 << 30)
        return found[label]

    def view(self, label: str) -> LabelView:
        """The registry's view of ``label``.

        Raises:
            ApiError: 404 when neither the registry nor the memory knows the label.
        """
        state = self.state()
        examples = self.examples(label, state)
        if not state.knows(label) and not examples:
            raise ApiError(404, f"unknown label {label!r}: no definition, rename or retirement, and no example "
                                "in the knowledge memory")
        status = "renamed" if label in state.renamed else "retired" if label in state.retired else "active"
        return LabelView(label=label, status=status, definition=state.definitions.get(label),
                         renamed_to=state.renamed.get(label), renamed_from=list(state.names_of(label)[1:]),
                         examples=examples, registry_version=state.version)

    def publish(self, event: LabelEvent) -> LabelChange:
        """Produce ``event`` to the label-events topic and wait for the broker's acknowledgement.

        Raises:
            ApiError: 503 when the broker does not acknowledge within ``api.publish_timeout_s``.
        """
        topic = self.settings.kafka.topic_label_events
        msg = self._produce(topic, [event], "label event")[0]
        log.info("label event published", action=event.action, label=event.label, actor=event.actor)
        return LabelChange(event=event, topic=topic, partition=msg.partition(), offset=msg.offset())

    def _produce(self, topic: str, events: list, what: str) -> list[Message]:
        """Produce ``events`` (keyed as on the wire) to ``topic`` and flush once; the broker's acknowledged messages
        (by partition and offset), each on disk in the embedded broker's journal when there is one.

        Raises:
            ApiError: 503 when the broker does not acknowledge one within ``api.publish_timeout_s`` (or the journal
                does not have it).
        """
        done: list[tuple] = []
        timeout_s = self.settings.api.publish_timeout_s
        try:
            for event in events:
                self.producer.produce(topic, key=event.kafka_key(), value=event.to_bytes(),
                                      on_delivery=lambda err, msg: done.append((err, msg)))
            self.producer.flush(timeout_s)
        except (KafkaException, BufferError) as exc:
            raise ApiError(503, f"the {what} could not be published: {exc}") from exc
        errors = [err for err, _msg in done if err is not None]
        if len(done) < len(events) or errors:
            raise ApiError(503, f"the broker did not acknowledge the {what}: {errors[0] if errors else 'timeout'}")
        msgs = sorted((msg for _err, msg in done), key=lambda m: (m.partition(), m.offset()))
        for msg in msgs:
            if self.journal is not None and not self.journal.wait(msg.topic(), msg.partition(), msg.offset(),
                                                                  timeout_s):
                raise ApiError(503, f"the {what} was published but is not on disk in the embedded broker's journal "
                                    f"({self.journal.path}) after api.publish_timeout_s; send it again")
        return msgs

    def decide(self, decision: ModeratorDecision) -> DecisionSent:
        """Publish a moderator decision to the decisions topic (as the moderation tool does) and wait up to
        ``api.apply_wait_s`` seconds for the memory updater to apply it (the article in the memory carries the
        confirmed and added labels and none of the rejected ones).

        Raises:
            ApiError: 503 as :meth:`publish`.
        """
        topic = self.settings.kafka.topic_decisions
        msg = self._produce(topic, [decision], "decision")[0]
        log.info("decision published", article_id=decision.article_id, moderator=decision.moderator)
        keep = set(decision.accepted_labels)
        drop = {d.label for d in decision.decisions if d.action == "rejected"}
        router = self.pipeline.classifier.router
        deadline = time.monotonic() + self.settings.api.apply_wait_s
        applied = False
        while not applied and time.monotonic() < deadline:
            found = router.find(decision.article_id)
            if decision.undoes is not None:  # an undo: the memory remembers the decision it took back
                applied = found is not None and decision.undoes.isoformat() in (found[1].payload.get("undone") or ())
            else:
                applied = found is not None and keep <= set(found[1].labels) and not drop & set(found[1].labels)
            if not applied:
                time.sleep(0.05)
        return DecisionSent(decision=decision, topic=topic, partition=msg.partition(), offset=msg.offset(),
                            applied=applied)

    def change(self, action: str, label: str, actor: str | None = None, *, definition: LabelDefinition | None = None,
               new_label: str | None = None) -> LabelChange:
        """Change ``label``: checked against the registry and the changes not applied yet, then published
        (:meth:`newsmon.api.changes.LabelChanges.submit`, the one way of every path)."""
        return self.changes.submit(action, label, actor, definition=definition, new_label=new_label)

    def event(self, action: str, label: str, actor: str | None = None, **fields) -> LabelEvent:
        """The :class:`LabelEvent` ``action`` on ``label`` (``definition`` / ``new_label`` in ``fields``), now.

        Raises:
            ApiError: 422 when the event is not valid (a blank actor, say).
        """
        try:
            return LabelEvent(action=action, label=label, occurred_at=datetime.now(timezone.utc), actor=actor,
                              **{k: v for k, v in fields.items() if v is not None})
        except ValidationError as exc:
            errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
            raise ApiError(422, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors),
                           errors) from None

    def wait_applied(self, event: LabelEvent) -> bool:
        """Wait up to ``api.apply_wait_s`` seconds until the registry shows ``event`` applied (the memory updater
        consumed it), so a ``GET`` after the answer reads the write; True when it does."""
        deadline = time.monotonic() + self.settings.api.apply_wait_s
        while True:
            if applied(event, self.state()):
                return True
            if time.monotonic() >= deadline:
                log.info("label event not applied yet", action=event.action, label=event.label,
                         waited_s=self.settings.api.apply_wait_s)
                return False
            time.sleep(0.02)

    def test(self, label: str, body: LabelTest) -> LabelTestResult:
        """Which articles the label's rule (or ``body.definition``) matches: a posted text, or the latest
        articles of the articles topic.

        A text is read as the classifier's rules stage reads an article's (:func:`~newsmon.shared.text.article_text`:
        cleaned, cut to ``worker.max_text_chars``), and bounded as an article is (``worker.max_message_bytes``), so
        the test costs what one article does.

        Raises:
            ApiError: 404 when there is no definition to test; 413 for a text (with its title) larger than
                ``worker.max_message_bytes`` in UTF-8.
        """
        w = self.settings.worker
        if body.text is not None:
            size = len(body.text.encode("utf-8", "surrogatepass")) + len((body.title or "").encode("utf-8",
                                                                                                   "surrogatepass"))
            if size > w.max_message_bytes:
                raise ApiError(413, f"the text to test has {size} bytes; at most worker.max_message_bytes = "
                                    f"{w.max_message_bytes}, as for an article: send a shorter text")
        definition = body.definition or self.state().definitions.get(label)
        if definition is None:
            raise ApiError(404, f"label {label!r} has no definition to test: send one in `definition`")
        rule = rule_of_definition(label, definition)
        with_filters, bare = LabelRuleIndex([rule]), LabelRuleIndex([rule.model_copy(update={"filters":
                                                                                             RuleFilters()})])
        if body.text is not None:
            text = f"{body.title}\n{body.text}" if body.title else body.text
            meta = ArticleMeta(lang=body.lang, country=body.country, source=body.outlet, section=body.section)
            candidates = [(None, text, meta)]
        else:
            n = body.articles or self.settings.api.test_articles
            candidates = [(ev, ev.text, article_meta(ev)) for ev in self.latest_articles(n)]
        matched, kwe_matched = [], 0
        for ev, text, meta in candidates:
            tokens = tokenize(article_text(text, w.max_text_chars))  # what the classifier's rules stage reads
            kwe_matched += bool(bare.match(tokens))
            for m in with_filters.match(tokens, meta):
                heading = ev.title or cut_at_word(ev.body, HEADING_CHARS) if ev is not None else None  # title-less
                about = {} if ev is None else {"article_id": ev.article_id, "title": heading, "outlet": ev.outlet,
                                               "published_at": ev.published_at.isoformat()}
                matched.append(TestedArticle(lang=meta.lang, rule=rule_evidence(m, tokens), **about))
        return LabelTestResult(label=label, definition=definition, tested=len(candidates), kwe_matched=kwe_matched,
                               matched=matched)

    def latest_articles(self, n: int) -> list[ArticleEvent]:
        """The latest ``n`` valid article events of the articles topic, newest first (invalid ones skipped)."""
        out = []
        for m in read_latest(self.settings, self.settings.kafka.topic_articles, n):
            try:
                out.append(parse_event(ArticleEvent, m.value()))
            except InvalidEvent:
                continue
        return out

    # -- health ------------------------------------------------------------------------------------
    def ready(self) -> tuple[bool, dict]:
        """Whether the memory and the broker answer and the label registry is loaded: it answers, and the memory
        updater's group has applied (committed) every label event on the topic (a dict with the reason when
        not)."""
        checks = {}
        for name, fn in (("label registry", self.registry_loaded),
                         ("memory", lambda: self.pipeline.classifier.router.languages(refresh=True)),
                         ("calibration", self.calibrations_readable),
                         ("kafka", lambda: self.producer.list_topics(timeout=2))):
            try:
                fn()
                checks[name] = "ok"
            except Exception as exc:  # noqa: BLE001 -- any failure means not ready, with its reason
                plain = isinstance(exc, (NotLoaded, CalibrationUnreadable))
                checks[name] = str(exc) if plain else f"{type(exc).__name__}: {exc}"
        return all(v == "ok" for v in checks.values()), checks

    def calibrations_readable(self) -> None:
        """Read the calibration record of every language memory.

        Raises:
            CalibrationUnreadable: one does not parse (its path and how to recover).
        """
        clf = self.pipeline.classifier
        for lang in clf.router.languages():
            clf.calibrations.read(clf.collection(lang))

    def registry_loaded(self) -> None:
        """Check that the registry answers and that the memory updater's group committed every label event on
        the ``label-events`` topic (each is committed after it is applied).

        Raises:
            NotLoaded: label events not applied yet (how many); KafkaException: the broker did not answer.
        """
        self.registry.snapshot()
        behind = 0
        with self._lock_offsets:
            for tp in self._committed():
                low, high = self._offsets_consumer().get_watermark_offsets(tp, timeout=2)
                behind += max(0, high - max(tp.offset, low))
        if behind:
            raise NotLoaded(f"{behind} label events not applied yet by the memory updater "
                            f"({self.settings.kafka.updater_group})")

    def updater_committed(self) -> dict[int, int]:
        """Partition -> the memory updater's committed offset on the label-events topic (the next event it reads;
        negative when it has committed none).

        Raises:
            KafkaException: the broker did not answer.
        """
        with self._lock_offsets:
            return {tp.partition: tp.offset for tp in self._committed()}

    def _committed(self) -> list[TopicPartition]:
        """The memory updater's committed offset of each partition of the label-events topic (lock held)."""
        topic, c = self.settings.kafka.topic_label_events, self._offsets_consumer()
        meta = c.list_topics(topic, timeout=2).topics[topic]
        return c.committed([TopicPartition(topic, p) for p in meta.partitions], timeout=2)

    def _offsets_consumer(self) -> Consumer:
        """The consumer that reads the memory updater's committed offsets (never joins its group); made once."""
        if self._offsets is None:
            k = self.settings.kafka
            self._offsets = Consumer({**k.client_config(), "group.id": k.updater_group,
                                      "enable.auto.commit": False, "logger": RateLimitedLogBridge("kafka.api")})
        return self._offsets

    def close(self) -> None:
        """Flush the producer (label events already acknowledged are unaffected)."""
        self.producer.flush(5)
        if self._offsets is not None:
            self._offsets.close()


def applied(event: LabelEvent, state: RegistryState) -> bool:
    """Whether ``state`` shows ``event``: the definition stored and active, the label retired, the rename made."""
    if event.action in ("defined", "updated"):
        return state.definitions.get(event.label) == event.definition and event.label not in state.retired
    if event.action == "retired":
        return event.label in state.retired
    if event.action == "renamed":
        return state.renamed.get(event.label) == event.new_label
    return event.label not in state.retired  # added


def build_service(settings: Settings, classifier: Classifier | None = None, registry: LabelRegistry | None = None,
                  dedup: NearDuplicateIndex | None = None, journal: Any = None) -> ApiService:
    """An :class:`ApiService` from the settings, sharing ``classifier`` / ``registry`` / ``dedup`` when given (the
    workers of the same process); otherwise opened from the settings (Qdrant server, Redis). ``journal``: see
    :class:`ApiService`."""
    w = settings.worker
    classifier = classifier or Classifier(settings)
    registry = registry or open_registry(reveal(w.redis_url), f"{w.redis_namespace}:labels")
    dedup = dedup or NearDuplicateIndex(threshold=w.dedup_threshold, redis_url=reveal(w.redis_url),
                                        boilerplate_min_docs=w.dedup_boilerplate_min_docs,
                                        namespace=f"{w.redis_namespace}:dedup")
    pipeline = ArticlePipeline(settings, classifier, dedup, registry)
    return ApiService(settings, pipeline, make_producer(settings, "newsmon-api"), journal)

