"""Shared fixtures: the real embedded broker and the real ClickHouse engine on loopback.

One broker and one chdb engine per test session (chdb allows one engine per
process); each test gets its own topic prefix and its own database, so tests
never see each other's data. With VIGIL_TEST_CONTAINERS=1 (a machine with a
Docker engine) the same tests run against Apache Kafka and a ClickHouse server
started through testcontainers instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import FIXTURE_TTL_DAYS
from vigil.settings import VigilSettings

CONTAINERS = os.environ.get("VIGIL_TEST_CONTAINERS") == "1"
# Fixtures carry fixed dates (2026-11-01 ...): the wire's freshness window must not age them out.
# The window itself is tested with its default (tests/backbone/test_contract.py sets it back).
os.environ.setdefault("VIGIL_CONTRACT_MAX_AGE_DAYS", "36500")


@pytest.fixture(scope="session")
def broker_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if CONTAINERS:
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as kafka:
            yield kafka.get_bootstrap_server()
        return
    from vigil.kafka.broker import EmbeddedBroker

    broker = EmbeddedBroker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log")
    broker.start()
    yield broker.bootstrap
    broker.stop()


@pytest.fixture(scope="session")
def clickhouse_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if CONTAINERS:
        from testcontainers.clickhouse import ClickHouseContainer

        with ClickHouseContainer() as ch:
            host, port = ch.get_container_host_ip(), ch.get_exposed_port(8123)
            yield f"http://{ch.username}:{ch.password}@{host}:{port}"
        return
    yield f"chdb://{tmp_path_factory.mktemp('chdb')}"


@pytest.fixture
def settings(tmp_path: Path, broker_bootstrap: str, clickhouse_dsn: str) -> VigilSettings:
    """Settings isolated to this test: own home (with a key set), own topic prefix."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    from vigil.signing import KeyStore

    KeyStore(tmp_path / "home" / "keys").ensure()  # signing on, as under `vigil up`: services sign and verify
    return VigilSettings(
        home=tmp_path / "home", kafka_bootstrap=broker_bootstrap, clickhouse_dsn=clickhouse_dsn,
        topic_prefix=prefix, topic_partitions=2,
    )


@pytest.fixture
def topics(settings: VigilSettings, broker_bootstrap: str) -> VigilSettings:
    """`settings` with every vigil topic created on the broker."""
    from vigil.kafka.admin import ensure_topics

    ensure_topics(settings, broker_bootstrap)
    return settings


@pytest.fixture
def database(clickhouse_dsn: str) -> str:
    """A fresh, migrated database on the session's ClickHouse; returns its name."""
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    name = f"t_{uuid.uuid4().hex[:10]}"
    migrate_all(connect(clickhouse_dsn, database=name), FIXTURE_TTL_DAYS)
    return name
