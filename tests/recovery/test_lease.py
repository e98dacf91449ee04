"""One active controller per cluster: the Kafka consumer-group lease, with two controllers in one process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from vigil.cordons import CordonRegistry
from vigil.recovery.backends.local import LocalBackend
from vigil.recovery.controller.lease import Lease
from vigil.recovery.controller.service import RecoveryService
from vigil.recovery.settings import RecoverySettings
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka


def test_exactly_one_controller_leads_and_a_standby_takes_over(topics: VigilSettings, broker_bootstrap: str,
                                                               tmp_path: Path) -> None:
    backend = LocalBackend(CordonRegistry(tmp_path / "cordons.json"))
    services = [RecoveryService(topics, broker_bootstrap, RecoverySettings(), backend=backend) for _ in range(2)]
    try:
        services[0].start()
        wait_until(lambda: services[0].health()["leading"], 60, "the first controller to lead")
        services[1].start()
        deadline = time.monotonic() + 12  # through the rebalance the second one's join causes
        while time.monotonic() < deadline:
            assert not all(s.health()["leading"] for s in services), "two controllers led at once"
            time.sleep(0.05)
        wait_until(lambda: sum(s.health()["leading"] for s in services) == 1, 60, "one leader")
        leader, standby = sorted(services, key=lambda s: not s.health()["leading"])
        assert standby.health()["ok"] and standby.health()["caught_up"]  # it folds the log while it waits
        leader.stop()
        wait_until(lambda: standby.health()["leading"], 60, "the standby to take the lease")
    finally:
        for s in services:
            s.stop()


def test_a_controller_stopped_while_joining_does_not_hold_the_lease_from_the_next(topics: VigilSettings,
                                                                                  broker_bootstrap: str) -> None:
    """A controller stopped during its start (its group join in flight) leaves cleanly and never claims: on the
    embedded broker a member that left mid-join held the group's rebalance, and with it any leader, for minutes."""
    early = Lease(settings=topics, bootstrap=broker_bootstrap, group="lease-join")
    for _ in range(5):  # about a second of its lease thread
        early.poll(0.2)
    assert not early.leading, "it led already: the test would not stop it mid-join"
    early.close()
    assert early.epoch == 0 and not early.leading, "a lease assigned while leaving was claimed"
    later = Lease(settings=topics, bootstrap=broker_bootstrap, group="lease-join")
    try:
        def polled() -> bool:
            later.poll(0.2)
            return later.leading
        wait_until(polled, 45, "the next controller to lead")
    finally:
        later.close()


def test_epochs_survive_a_recreated_lease_topic(topics: VigilSettings, broker_bootstrap: str) -> None:
    """An embedded broker restarted empty recreates the lease topic: the next leader's epoch must still exceed the
    last one agents obeyed, or they refuse it as stale. Within one topic, each claim outranks the one before."""
    def lead(settings: VigilSettings) -> int:
        lease = Lease(settings=settings, bootstrap=broker_bootstrap, group="lease-epochs")
        try:
            def polled() -> bool:
                lease.poll(0.2)
                return lease.leading
            wait_until(polled, 45, "the lease")
            return lease.epoch
        finally:
            lease.close()

    first, second = lead(topics), lead(topics)
    assert second > first > 1
    recreated = topics.model_copy(update={"topic_prefix": topics.topic_prefix + "again."})  # an empty lease topic
    assert lead(recreated) > second
