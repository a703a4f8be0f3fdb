"""Topic creation at worker start-up (``kafka.create_topics``)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topics(client_config: dict, topics: Iterable[str], partitions: int = 1, timeout_s: float = 15.0) -> None:
    """Create the topics that do not exist yet (``partitions`` each, replication factor 1 on a single broker).

    Raises:
        RuntimeError: a topic could not be created.
    """
    admin = AdminClient(dict(client_config))
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics if t not in existing]
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
