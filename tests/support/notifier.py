"""Notifier fixtures: a webhook receiver on a loopback port, and the notifier service on the test's
broker topics and database, with timings short enough for tests (a real clock: nothing is slept).

The conftest of a folder that uses them re-exports them (tests/notify, tests/security); `SECRET` is the webhook's."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.receiver import Receiver
from tests.support.signed import sealed
from vigil.contract import Event
from vigil.kafka.producer import EventProducer
from vigil.service import StackContext
from vigil.settings import VigilSettings

SECRET = "t3st-s3cret"
FAST = {"group_wait_s": 0.5, "group_interval_s": 0.5, "repeat_interval_s": 3600, "tick_s": 0.1,
        "retry_base_s": 0.05, "retry_max_s": 0.4, "dashboard_url": "http://dash.example"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.up()
    yield r
    r.down()


@pytest.fixture
def ctx(topics: VigilSettings, clickhouse_dsn: str, database: str) -> StackContext:
    from vigil.clickhouse.client import connect

    return StackContext(settings=topics, bootstrap=str(topics.kafka_bootstrap), clickhouse_dsn=clickhouse_dsn,
                        clickhouse=connect(clickhouse_dsn, database=database))


@pytest.fixture
def notifier(ctx: StackContext, receiver: Receiver) -> Iterator[Callable[..., Any]]:
    """`notifier(**settings)` starts a NotifyService sending to `receiver` (as 'oncall'); all are stopped after."""
    from vigil.notify.service import NotifyService
    from vigil.notify.settings import NotifySettings

    started: list[NotifyService] = []
    group = f"notify-{uuid.uuid4().hex[:8]}"

    def start(**overrides: Any) -> NotifyService:
        receivers = {"oncall": {"kind": "webhook", "url": receiver.url, "secret": SECRET}}
        svc = NotifyService(ctx, NotifySettings(**{"receivers": receivers, "group_id": group, **FAST, **overrides}))
        svc.start()
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


@pytest.fixture
def publish(ctx: StackContext) -> Callable[..., None]:
    producer = EventProducer(settings=ctx.settings, bootstrap=ctx.bootstrap)

    def send(*events: Event) -> None:  # the test plays the analyzer and the operator: it signs as they do
        producer.send(sealed(ctx.settings.home, events))
        producer.flush()

    return send
