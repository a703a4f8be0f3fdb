"""``newsmon topics create|check``: the admin commands of the Kafka topics (the chart's topics Job runs
``topics create``).

Each command imports what it runs inside its function (deferred): at the top of the module the Kafka client
would load for every ``newsmon`` call.
"""

from __future__ import annotations

import json

from newsmon.cli.common import fail, settings_from_env


def _topics(s) -> list[str]:
    """The topics of both roles; ends the command when no broker is configured (an embedded one would be
    gone with this command)."""
    from newsmon.broker import NO_KAFKA
    from newsmon.workers.topics import topics_of_roles  # deferred: see the module docstring

    if not s.kafka.bootstrap_servers:
        fail(NO_KAFKA)
    return topics_of_roles(s.kafka, ("classifier", "memory-updater"))


def topics_create() -> None:
    """Create the missing topics and their .dlq with the layout settings (idempotent).

    The layout: NEWSMON_KAFKA__TOPIC_PARTITIONS, __REPLICATION_FACTOR and __MIN_INSYNC_REPLICAS. Fails on an
    existing topic with another partition count. Prints the topics as JSON."""
    from newsmon.workers.base import StartupError  # deferred: see the module docstring
    from newsmon.workers.topics import create_topics, describe

    s = settings_from_env()
    k = s.kafka
    try:
        created = create_topics(k, _topics(s), timeout_s=max(30.0, s.worker.startup_timeout_s))
        states = describe(k, _topics(s), s.worker.startup_timeout_s)
    except StartupError as exc:
        fail(str(exc), 1)
    print(json.dumps({"bootstrap_servers": k.bootstrap_servers, "created": created,
                      "topics": {t.name: {"partitions": t.partitions, "replicas": t.replicas} for t in states},
                      "replication_factor": k.replication_factor or "broker default",
                      "min_insync_replicas": k.min_insync_replicas or "broker default"}, indent=2))


def topics_check() -> None:
    """Check the topics as a worker does at start-up.

    Every topic must exist with NEWSMON_KAFKA__TOPIC_PARTITIONS partitions; exits 1 with the reason otherwise."""
    from newsmon.workers.base import StartupError  # deferred: see the module docstring
    from newsmon.workers.topics import check_topics

    s = settings_from_env()
    try:
        states = check_topics(s.kafka, _topics(s), s.worker.startup_timeout_s)
    except StartupError as exc:
        fail(str(exc), 1)
    print(json.dumps({"bootstrap_servers": s.kafka.bootstrap_servers, "topics": {
        t.name: {"partitions": t.partitions, "replicas": t.replicas} for t in states}}, indent=2))
