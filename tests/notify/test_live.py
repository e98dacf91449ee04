"""The notifier on the real broker and engine, delivering to a real HTTP receiver on a loopback port."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.notify.events import alert, incident, straggler, xid
from tests.support.notifier import SECRET
from tests.support.receiver import Receiver, signed_by
from tests.support.waiting import wait_until
from vigil.dashboard.app import RENDERERS
from vigil.dashboard.callbacks import render_page
from vigil.dashboard.settings import DashboardSettings
from vigil.notify.signing import verify
from vigil.service import StackContext

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]


def consumed(svc: Any, n: int) -> Callable[[], bool]:
    return lambda: svc.health()["events"] >= n


def settled(svc: Any, ticks: int = 8) -> Callable[[], bool]:
    """Several ticks past now (group wait and interval are 0.5 s, a tick 0.1 s): anything due was decided."""
    target = svc.ticks + ticks
    return lambda: svc.ticks >= target


def log_rows(ctx: StackContext) -> list[dict[str, Any]]:
    sql = ("SELECT key, receiver, status, state, attempts, http_status, latency_ms, title "
           "FROM notify_deliveries FINAL ORDER BY created, seq")
    res = ctx.clickhouse.query(sql)
    return [dict(zip(res.column_names, r, strict=True)) for r in res.result_rows]


def test_a_straggler_and_an_xid_arrive_once_each_signed_then_resolve(notifier: Any, publish: Any, receiver: Receiver,
                                                                     ctx: StackContext) -> None:
    svc = notifier()
    wait_until(svc.ready.is_set, 60, "the notifier to restore and start")
    publish(straggler("j", "h1"), xid("j", "h2"))
    wait_until(lambda: len(receiver.delivered()) == 2, 60, "two notifications")
    publish(straggler("j", "h1", at=30), xid("j", "h2", at=30))  # re-published while they fire
    wait_until(consumed(svc, 4), 30, "the re-published alerts")
    wait_until(settled(svc), 30, "a few ticks")
    assert len(receiver.all()) == 2
    publish(straggler("j", "h1", at=60, status="resolved"), xid("j", "h2", at=60, status="resolved"))
    wait_until(lambda: len(receiver.delivered()) == 4, 60, "two resolves")

    reqs = receiver.all()
    docs = [r.json() for r in reqs]
    assert len(reqs) == 4 and len({r.key for r in reqs}) == 4
    assert sorted((d["alerts"][0]["alert"], d["status"]) for d in docs) == [
        ("error_log", "firing"), ("error_log", "resolved"), ("straggler", "firing"), ("straggler", "resolved")]
    assert [d["status"] for d in docs[:2]] == ["firing", "firing"]
    for r, d in zip(reqs, docs, strict=True):
        assert r.headers["Content-Type"] == "application/json" and r.key == d["key"]
        assert signed_by(SECRET.encode(), r), "the receiver's own HMAC check"
        tampered = r.body.replace(b'"job_id":"j"', b'"job_id":"k"')
        assert tampered != r.body and not signed_by(SECRET.encode(), r, body=tampered), "a tampered body is rejected"
        assert verify(SECRET.encode(), r.headers, r.body, now=float(r.headers["X-Vigil-Timestamp"]))
    rows = log_rows(ctx)
    assert [(r["state"], r["attempts"], r["http_status"]) for r in rows] == [("delivered", 1, 200)] * 4
    assert all(r["latency_ms"] > 0 for r in rows) and {r["key"] for r in rows} == {r.key for r in reqs}

    svc.stop()  # a restart reads the log back: nothing is decided or sent again
    again = notifier()
    wait_until(again.ready.is_set, 60, "the restarted notifier")
    wait_until(settled(again), 30, "a few ticks after the restart")
    assert len(receiver.all()) == 4 and again.health()["decided"] == 0


def test_a_receiver_that_was_down_gets_everything_after_in_order_once_per_key(notifier: Any, publish: Any,
                                                                                receiver: Receiver) -> None:
    receiver.status = 503
    svc = notifier()
    wait_until(svc.ready.is_set, 60, "the notifier to start")
    a = xid("j", "h1")
    publish(a)
    wait_until(lambda: len(receiver.all()) >= 2, 30, "the first notification to be refused (503) and retried")
    receiver.down()  # now it refuses connections
    publish(straggler("j", "h2"), alert("j", "heartbeat_loss", "h3", severity="critical"))
    wait_until(lambda: svc.health()["decided"] == 3, 30, "two more notifications decided")
    publish(xid("j", "h1", at=20, status="resolved"))
    wait_until(lambda: svc.health()["decided"] == 4, 30, "the resolve decided")
    retries = svc.health()["receivers"]["oncall"]["retries"]
    wait_until(lambda: svc.health()["receivers"]["oncall"]["retries"] > retries, 30, "retries against a closed port")
    assert svc.health()["receivers"]["oncall"]["pending"] == 4
    receiver.status = 200
    receiver.up()
    wait_until(lambda: len(receiver.delivered()) == 4, 60, "the backlog delivered")
    wait_until(settled(svc), 30, "a few ticks")

    delivered = receiver.delivered()
    order = [(d["alerts"][0]["alert"], d["status"]) for d in (r.json() for r in delivered)]
    assert order[0] == ("error_log", "firing") and order[-1] == ("error_log", "resolved")
    assert sorted(order[1:3]) == [("heartbeat_loss", "firing"), ("straggler", "firing")]
    keys = [r.key for r in delivered]
    assert len(set(keys)) == 4, "each key delivered exactly once"
    refused = [r for r in receiver.all() if r.answered == 503]
    assert refused and {r.key for r in refused} == {keys[0]}, "the retries carried the same key"
    assert all(r.body == delivered[0].body for r in refused), "and the same body"
    assert svc.health()["receivers"]["oncall"] | {"pending": 0, "delivered": 4, "failed": 0} == \
        svc.health()["receivers"]["oncall"]


def test_a_20_alert_incident_is_one_notification_and_silences_mute(notifier: Any, publish: Any, receiver: Receiver,
                                                                    ctx: StackContext) -> None:
    from vigil.dashboard.queries import notifications as q
    from vigil.dashboard.store import Store
    from vigil.notify.silences import new_silence

    svc = notifier(group_wait_s=3.0)
    wait_until(svc.ready.is_set, 60, "the notifier to start")
    hosts = [f"h{i:02d}" for i in range(20)]
    exits = [alert("big", "process_exit", f"{h}/rank{i}", severity="error") for i, h in enumerate(hosts)]
    inc = incident("big", "big/crash_cascade/h00", "h00", alerts=[a.fingerprint for a in exits], victims=hosts[1:])
    mute = new_silence({"kind": "straggler"}, timedelta(hours=1), "known slow node", "test", datetime.now(UTC))
    publish(*exits, inc, mute)
    wait_until(lambda: len(receiver.delivered()) == 1, 60, "the incident's notification")
    publish(straggler("big", "h30"))
    wait_until(consumed(svc, 23), 30, "the straggler alert")
    wait_until(settled(svc, 40), 30, "its group wait to pass")
    (req,) = receiver.all()
    doc = req.json()
    assert doc["incident_id"] == inc.incident_id and doc["alerts_total"] == 20 and doc["status"] == "firing"
    assert doc["incident"]["culprits"][0]["host"] == "h00" and svc.health()["silences_active"] == 1
    # its /metrics: one sent to oncall, the straggler held by the silence, the 20 exits in the incident's page
    got = svc.metrics.registry.get_sample_value
    assert got("vigil_notifications_sent_total", {"receiver": "oncall", "channel": "webhook"}) == 1
    states = {s: got("vigil_notify_alerts", {"state": s}) for s in ("paging", "silenced", "inhibited")}
    assert states["silenced"] == 1 and (states["paging"] or 0) + (states["inhibited"] or 0) == 20, states
    assert 'vigil_notifications_sent_total{channel="webhook",receiver="oncall"} 1.0' in \
        httpx.get(svc.health()["metrics_url"], timeout=10).text

    store = Store(client=ctx.clickhouse)
    (sil,) = q.silences(store)
    assert (sil["silence_id"], sil["state"], sil["created_by"]) == (mute.silence_id, "active", "test")
    (row,) = q.deliveries(store, job="big")
    assert (row["state"], row["receiver"], row["attempts"]) == ("delivered", "oncall", 1)
    (summary,) = q.summary(store)
    assert (summary["receiver"], summary["delivered"], summary["pending"]) == ("oncall", 1, 0)
    body, title = render_page(store, DashboardSettings(), RENDERERS, "/notifications", "?job=big")
    text = str(body.to_plotly_json())
    assert title.startswith("Notifications") and "store-error" not in text
    assert doc["title"] in text and req.key in text and mute.silence_id in text and "known slow node" in text
