"""The Kafka topics newsmon uses: their layout (``kafka.topic_partitions``, ``replication_factor``,
``min_insync_replicas``), created by ``newsmon topics create`` (or at worker start-up with
``kafka.create_topics``), and checked by every worker at start-up.

A worker refuses to start (:class:`~newsmon.workers.base.StartupError`, one line naming the topic and what to
run) when a topic it uses is missing and creation is off, or has another partition count than
``topic_partitions``: the partition count bounds the classifier replicas that share the work, and changing it
later moves keys (article ids) between partitions. Tansu, the demo's broker, cannot add partitions
(``create_partitions``); neither does newsmon.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from newsmon.shared.config import KafkaSettings
from newsmon.shared.logs import RateLimitedLogBridge
from newsmon.workers.base import StartupError

CREATE_HINT = "run `newsmon topics create` with the same NEWSMON_KAFKA__* settings (the chart: topicsJob.enabled)"


@dataclass(frozen=True)
class TopicState:
    """One topic as the broker reports it: ``partitions`` None when it does not exist; ``replicas`` the
    replication factor of its first partition."""

    name: str
    partitions: int | None
    replicas: int | None = None


def topics_of_roles(kafka: KafkaSettings, roles: Iterable[str]) -> list[str]:
    """The topics the workers of ``roles`` read or write (dead-letter topics included), in a stable order."""
    out: list[str] = []
    for role in roles:
        if role == "classifier":
            out += [kafka.topic_articles, kafka.topic_proposals, f"{kafka.topic_articles}.dlq"]
        elif role == "memory-updater":
            out += [kafka.topic_decisions, kafka.topic_label_events, kafka.topic_proposals,
                    f"{kafka.topic_decisions}.dlq", f"{kafka.topic_label_events}.dlq"]
    return list(dict.fromkeys(out))


def admin_client(kafka: KafkaSettings) -> AdminClient:
    """An AdminClient on the settings' connection, its librdkafka logs sent through structlog (rate-limited)."""
    return AdminClient({**kafka.client_config(), "logger": RateLimitedLogBridge("kafka.admin")})


def describe(kafka: KafkaSettings, topics: Sequence[str], timeout_s: float,
             admin: AdminClient | None = None) -> list[TopicState]:
    """The state of ``topics`` from one metadata request.

    Raises:
        StartupError: no broker of ``bootstrap_servers`` answered within ``timeout_s`` seconds (the message
            names the address and the librdkafka reason).
    """
    admin = admin or admin_client(kafka)
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        reason = err.str() if isinstance(err, KafkaError) else str(err)
        # the librdkafka lines queued meanwhile (one FAIL per connection attempt) are what this line sums up:
        # they are not served (admin.poll), so they are never printed
        raise StartupError(f"cannot reach Kafka at {kafka.bootstrap_servers} (NEWSMON_KAFKA__BOOTSTRAP_SERVERS) "
                           f"within {timeout_s:g} s: {reason}") from None
    admin.poll(0)  # serve the queued librdkafka log lines (through structlog, rate-limited)
    states = []
    for name in topics:
        t = meta.topics.get(name)
        if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            states.append(TopicState(name, None))
            continue
        first = t.partitions.get(0)
        states.append(TopicState(name, len(t.partitions), len(first.replicas) if first is not None else None))
    return states


def check_topics(kafka: KafkaSettings, topics: Sequence[str], timeout_s: float) -> list[TopicState]:
    """Verify that ``topics`` exist with ``kafka.topic_partitions`` partitions each; returns their states.

    Raises:
        StartupError: Kafka unreachable, a topic missing (the message says to run ``newsmon topics create``) or
            with another partition count (the message names the topic, both counts and the two ways out).
    """
    states = describe(kafka, topics, timeout_s)
    missing = [s.name for s in states if s.partitions is None]
    if missing:
        raise StartupError(f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                           f"{'do' if len(missing) > 1 else 'does'} not exist on Kafka at {kafka.bootstrap_servers}"
                           f": {CREATE_HINT}, or set NEWSMON_KAFKA__CREATE_TOPICS=true to create "
                           f"{'them' if len(missing) > 1 else 'it'} at start-up")
    _check_partitions(kafka, states)
    return states


def _check_partitions(kafka: KafkaSettings, states: Sequence[TopicState]) -> None:
    want = kafka.topic_partitions
    for s in states:
        if s.partitions is not None and s.partitions != want:
            raise StartupError(
                f"topic {s.name} has {s.partitions} partitions but NEWSMON_KAFKA__TOPIC_PARTITIONS is {want}: set "
                f"NEWSMON_KAFKA__TOPIC_PARTITIONS={s.partitions} to use the topic as it is, or give it {want} "
                f"partitions (kafka-topics.sh --alter --partitions {want}; keys move between partitions) and start "
                "again")


def create_topics(kafka: KafkaSettings, topics: Sequence[str], timeout_s: float = 30.0) -> list[str]:
    """Create the missing ``topics`` with the settings' layout; idempotent. Returns the topics created.

    Each gets ``topic_partitions`` partitions, ``replication_factor`` replicas (the broker's default when
    unset) and, when set, the topic config ``min.insync.replicas``. An existing topic is left as it is.

    Raises:
        StartupError: Kafka unreachable, a topic could not be created, or an existing topic has another
            partition count.
    """
    admin = admin_client(kafka)
    states = describe(kafka, topics, timeout_s, admin)
    _check_partitions(kafka, states)
    config = {"min.insync.replicas": str(kafka.min_insync_replicas)} if kafka.min_insync_replicas else {}
    new = [NewTopic(s.name, num_partitions=kafka.topic_partitions,
                    replication_factor=kafka.replication_factor or -1, config=config)
           for s in states if s.partitions is None]
    if not new:
        return []
    created = []
    for topic, fut in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            fut.result(timeout_s)
            created.append(topic)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # created meanwhile by another process
            reason = err.str() if isinstance(err, KafkaError) else str(exc)
            raise StartupError(f"cannot create topic {topic} on Kafka at {kafka.bootstrap_servers}: {reason}") from None
    admin.poll(0)
    # a topic created meanwhile by someone else may have another layout
    _check_partitions(kafka, describe(kafka, topics, timeout_s, admin))
    return created


def prepare_topics(kafka: KafkaSettings, roles: Iterable[str], timeout_s: float) -> None:
    """Start-up step of the workers: create the topics of ``roles`` when ``kafka.create_topics`` is on, else
    check them (:func:`check_topics`).

    Raises:
        StartupError: as :func:`create_topics` / :func:`check_topics`.
    """
    topics = topics_of_roles(kafka, roles)
    if kafka.create_topics:
        create_topics(kafka, topics, timeout_s)
    else:
        check_topics(kafka, topics, timeout_s)


def ensure_topics(client_config: dict, topics: Iterable[str], partitions: int = 1, timeout_s: float = 15.0) -> None:
    """Create the topics that do not exist yet with ``partitions`` each and the broker's default replication
    (tests and benchmarks on a single local broker).

    Raises:
        RuntimeError: a topic could not be created.
    """
    admin = AdminClient({**client_config, "logger": RateLimitedLogBridge("kafka.admin")})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    new = [NewTopic(t, num_partitions=partitions, replication_factor=-1) for t in topics if t not in existing]
    if not new:
        return
    for topic, fut in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            fut.result(timeout_s)
        except Exception as exc:  # noqa: BLE001
            err = exc.args[0] if exc.args else None
            if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RuntimeError(f"cannot create topic {topic}: {exc}") from exc
