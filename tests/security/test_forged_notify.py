"""Forged silences and incidents through the real broker into the real notifier: nothing muted, nobody paged.

A job's owner produces, with a plain confluent-kafka producer and no key, a silence of every job
for a hundred years and an incident of another job; then the analyzer's genuine (signed) alert
follows. The genuine alert pages, the forged incident does not, the silence mutes nothing, and
the notifier raises one `security` alert per refused kind, which pages too. A genuine alert re-published
days after it was signed (past its signed bound) is refused the same way and pages nobody.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.notify.events import incident, straggler
from tests.support.receiver import Receiver
from tests.support.waiting import wait_until
from vigil.contract import Event, Silence, encode_batch
from vigil.service import StackContext
from vigil.signing.freshness import stamp

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]


def forge(stack: StackContext, topic: str, events: list[Event]) -> None:
    """What the attacker can do: a plain producer, records in the wire format, no key."""
    p = Producer({"bootstrap.servers": stack.bootstrap})
    for e in events:
        p.produce(stack.settings.topic(topic), value=encode_batch([e]), key=e.host.encode())
    assert p.flush(15) == 0


def test_forged_silence_mutes_nothing_and_forged_incident_pages_nobody(
        notifier: Any, publish: Any, receiver: Receiver, ctx: StackContext) -> None:
    svc = notifier()
    wait_until(svc.ready.is_set, 60, "the notifier to start")
    now = datetime.now(UTC)
    mute_all = Silence(job_id="*", host="*", silence_id="forged", matchers={"job": "*"}, starts_at=now,
                       ends_at=now + timedelta(days=36500), created_by="mallory", reason="quiet please")
    fake = incident("other-job", "other-job/crash_cascade/h9", "h9", alerts=[])
    forge(ctx, "silences", [mute_all])
    forge(ctx, "incidents", [fake])
    publish(straggler("victim", "h1"))  # the analyzer's, signed

    def pages() -> list[dict[str, Any]]:
        return [r.json() for r in receiver.delivered()]

    wait_until(lambda: any("straggler" in str(d) and "victim" in str(d) for d in pages()), 60,
               "the genuine straggler to page")
    wait_until(lambda: sum("security" in str(d) for d in pages()) >= 1, 60, "the security alert to page")
    health = svc.health()
    assert health["silences_active"] == 0 and health["refused"] == 2
    assert not [d for d in pages() if d.get("incident_id") == fake.incident_id]
    security = [d for d in pages() if "security" in str(d)]
    assert any("refused incident" in str(d) for d in security) or any("refused silence" in str(d) for d in security)
    assert svc.gate.refusals.count == 2

    # a genuine alert signed three days ago (its bound: an hour then), re-published now: refused, never paged
    old = straggler("replayed", "h2").model_copy(update={"ts": now - timedelta(days=3)})
    publish(stamp(old, now=old.ts))
    wait_until(lambda: svc.gate.refusals.count == 3, 60, "the replayed alert to be refused")
    wait_until(lambda: any("expired" in str(d) and "replayed" in str(d) for d in pages()), 60,
               "the security alert of the replay to page")
    assert not [d for d in pages() if "straggler on h2" in str(d)]


def test_alerts_restore_folded_are_not_refused_when_the_group_reads_them_again(
        notifier: Any, publish: Any, ctx: StackContext) -> None:
    """After an outage the log holds a genuine alert dated hours before a newer one: restore folds both (rebuilding),
    then the group reads them again from its offsets: that is not a replay, so nothing is refused and no security
    alert is raised (review of 2026-12-07: the restore's clock made the older one look expired)."""
    now = datetime.now(UTC)
    old = straggler("backlog", "h3").model_copy(update={"ts": now - timedelta(hours=3)})
    publish(stamp(old, now=old.ts))
    publish(straggler("backlog", "h4").model_copy(update={"ts": now}))
    svc = notifier()
    wait_until(svc.ready.is_set, 60, "the notifier to start")
    wait_until(lambda: svc.health()["events"] >= 2, 60, "the group to read both alerts again")
    assert svc.gate.refusals.count == 0 and not svc._security
