"""Topic administration and reachability checks against any Kafka-protocol cluster."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from vigil.contract.registry import TOPICS
from vigil.errors import Unreachable
from vigil.settings import VigilSettings

# librdkafka logs every refused connection; failures reach callers as exceptions instead.
RDKAFKA_LOG = logging.getLogger("vigil.kafka.rdkafka")
RDKAFKA_LOG.setLevel(logging.CRITICAL)


def client_config(settings: VigilSettings, bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG, **settings.kafka_extra_config()}


def admin_client(settings: VigilSettings, bootstrap: str) -> AdminClient:
    return AdminClient(client_config(settings, bootstrap))


def check_reachable(settings: VigilSettings, bootstrap: str, timeout: float = 5.0) -> list[str]:
    """The cluster's topic names; Unreachable naming the setting and address otherwise."""
    admin = admin_client(settings, bootstrap)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise unreachable(settings, bootstrap, exc) from None
    return sorted(meta.topics)


def unreachable(settings: VigilSettings, bootstrap: str, exc: KafkaException) -> Unreachable:
    """One line naming the setting and the address Kafka was not reachable at."""
    source = "VIGIL_KAFKA_BOOTSTRAP" if settings.kafka_bootstrap else "embedded broker"
    err = exc.args[0]
    reason = err.str() if isinstance(err, KafkaError) else str(err)
    return Unreachable(f"{source}={bootstrap}: Kafka not reachable ({reason})")


def ensure_topics(
    settings: VigilSettings, bootstrap: str, logical: Iterable[str] = TOPICS, timeout: float = 15.0,
    partitions: int | None = None,
) -> list[str]:
    """Create missing topics with the configured (or the given) partitions and retention; returns those created."""
    existing = set(check_reachable(settings, bootstrap, timeout))
    wanted = [settings.topic(t) for t in logical]
    new = [
        NewTopic(
            name, num_partitions=partitions or settings.topic_partitions, replication_factor=settings.topic_replication,
            config={"retention.ms": str(settings.topic_retention_ms)},
        )
        for name in wanted if name not in existing
    ]
    if not new:
        return []
    created = []
    admin = admin_client(settings, bootstrap)
    for name, fut in admin.create_topics(new, operation_timeout=timeout).items():
        try:
            fut.result(timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise Unreachable(f"creating topic {name} on {bootstrap}: {exc.args[0]}") from None
    return created
