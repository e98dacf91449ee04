"""What the notifier decides, on a made-up clock: grouping, group wait / interval / repeat, incidents and
their victims, routing, silences. No broker, no engine: the Decider the service wraps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.notify.decide import Clock, settings
from tests.notify.events import T0, alert, incident, straggler, xid
from vigil.notify.matchers import alert_labels
from vigil.notify.payload import Notification
from vigil.notify.routing import Router
from vigil.notify.silences import expired, new_silence

pytestmark = pytest.mark.pure

def brief(ns: list[Notification]) -> list[tuple[str, str, str]]:
    return [(n.receiver, n.status, n.reason) for n in ns]


def test_an_alert_notifies_once_after_the_group_wait_then_resolves_once() -> None:
    c = Clock()
    c.feed(straggler("j", "h1", at=0))
    assert c.at(0) == [] and c.at(9) == []
    (n,) = c.at(10)
    assert brief([n]) == [("oncall", "firing", "new")] and n.doc["title"] == "[FIRING] j: straggler on h1/forward"
    assert n.doc["alerts"][0]["url"] == "http://dash.example/heatmap?job=j"
    c.feed(straggler("j", "h1", at=20))  # the analyzer re-publishes while it fires
    assert c.at(11) == [] and c.at(30) == []
    c.feed(straggler("j", "h1", status="resolved", at=40))
    assert c.at(40) == []  # at most one notification per group interval (60 s after the first)
    (r,) = c.at(70)
    assert brief([r]) == [("oncall", "resolved", "resolved")] and r.doc["title"].startswith("[RESOLVED] j:")
    assert r.key != n.key and c.at(200) == []


def test_a_straggler_and_an_xid_are_two_groups_with_their_own_pages() -> None:
    c = Clock()
    c.feed(straggler("j", "h1"), xid("j", "h2"))
    ns = sorted(c.at(10), key=lambda n: n.title)
    assert [n.doc["alerts"][0]["alert"] for n in ns] == ["error_log", "straggler"]
    assert ns[0].doc["links"]["dashboard"] == "http://dash.example/host?job=j&host=h2"
    assert ns[0].severity == "critical"


def test_a_group_that_grows_is_updated_and_repeats_only_while_re_published() -> None:
    c = Clock()
    c.feed(straggler("j", "h1"), straggler("j", "h2"))
    (first,) = c.at(10)
    assert first.doc["title"] == "[FIRING:2] j: 2 straggler alerts on h1, h2" and len(first.doc["alerts"]) == 2
    c.feed(straggler("j", "h3", at=15))
    assert c.at(20) == []
    (update,) = c.at(70)
    assert brief([update]) == [("oncall", "firing", "update")] and update.doc["counts"]["firing"] == 3
    assert update.seq == 2 and first.seq == 1
    assert c.at(70 + 3600) == []  # nothing re-published since the update: no repeat
    repeat = c.feed(*(straggler("j", h, at=3000) for h in ("h1", "h2", "h3")))
    assert brief(repeat) == [("oncall", "firing", "repeat")]


def test_a_twenty_alert_incident_is_one_notification_and_one_resolve() -> None:
    hosts = [f"h{i:02d}" for i in range(20)]
    exits = [alert("j", "process_exit", f"{h}/rank{i}", severity="error") for i, h in enumerate(hosts)]
    inc = incident("j", "j/crash_cascade/h00", "h00", alerts=[a.fingerprint for a in exits], victims=hosts[1:], at=3)
    c = Clock()
    c.feed(*exits)
    assert c.at(0) == []
    c.feed(inc)  # arrives within the group wait: the alerts go with it
    (n,) = c.at(10)
    assert n.doc["incident_id"] == inc.incident_id and n.doc["alerts_total"] == 20
    assert n.doc["incident"]["culprits"][0]["host"] == "h00" and n.doc["incident"]["victims_total"] == 19
    assert {a["role"] for a in n.doc["alerts"]} == {"listed"}
    assert n.doc["links"]["dashboard"] == "http://dash.example/host?job=j&host=h00"
    c.feed(inc.model_copy(update={"status": "resolved", "ts": inc.ts + timedelta(seconds=100), "event_id": "x" * 16}))
    (r,) = c.at(200)
    assert (r.status, r.doc["incident_id"]) == ("resolved", inc.incident_id)
    assert c.at(400) == [] and len(c.sent) == 2


def test_an_alert_paged_before_its_incident_arrived_is_resolved_into_it() -> None:
    c = Clock(settings(group_interval_s=0))
    a = xid("j", "h1")
    c.feed(a)
    (alone,) = c.at(10)
    (moved,) = c.feed(incident("j", "inc-1", "h1", alerts=[a.fingerprint], at=20))
    assert (moved.status, moved.group_key) == ("resolved", alone.group_key)
    assert moved.doc["alerts"][0]["note"] == "now part of incident inc-1"
    (inc,) = c.at(20)
    assert (inc.status, inc.doc["incident_id"], inc.doc["alerts"][0]["fingerprint"]) == ("firing", "inc-1", a.fingerprint)


def test_victims_of_an_open_incident_do_not_page_on_their_own() -> None:
    c = Clock()
    inc = incident("j", "inc-1", "h1", alerts=[], victims=["h2", "h3"])
    victim = alert("j", "heartbeat_loss", "h2", severity="critical")
    other = alert("j", "heartbeat_loss", "h9", severity="critical")
    c.feed(inc, victim, other, alert("k", "heartbeat_loss", "h2"))  # the same host name in another job pages
    ns = c.at(10)
    by_group = {n.doc["incident_id"] or n.doc["job_id"]: n for n in ns}
    assert set(by_group) == {"inc-1", "j", "k"}
    assert [(a["subject"], a["role"]) for a in by_group["inc-1"].doc["alerts"]] == [("h2", "victim")]
    assert [a["subject"] for a in by_group["j"].doc["alerts"]] == ["h9"]
    c.feed(inc.model_copy(update={"status": "resolved", "ts": inc.ts + timedelta(seconds=50), "event_id": "y" * 16}))
    later = c.at(100)  # the incident ended but its victim still fires: now it pages on its own (job group grows)
    assert sorted(brief(later)) == [("oncall", "firing", "update"), ("oncall", "resolved", "resolved")]


def test_an_alert_naming_its_incident_in_the_evidence_goes_with_it() -> None:
    c = Clock()
    c.feed(alert("j", "collective_hang", "h4/pg0", incident_id="inc-7"), incident("j", "inc-7", "h4", alerts=[]))
    (n,) = c.at(10)
    assert n.doc["incident_id"] == "inc-7" and [a["role"] for a in n.doc["alerts"]] == ["listed"]


def test_routes_first_match_wins_unless_continue_and_the_default_takes_the_rest() -> None:
    hook = {"kind": "webhook", "url": "http://127.0.0.1:9/x"}
    s = settings(receivers={"pd": {"kind": "pagerduty", "routing_key": "k"}, "slack": hook, "all": hook, "ops": hook},
                 routes=[{"name": "page", "job": "llama-*", "min_severity": "error", "receivers": ["pd"]},
                         {"name": "perf", "kind": ["straggler", "mfu_*"], "receivers": ["slack"], "continue": True},
                         {"name": "lab", "host": "lab-*", "labels": {"phase": "back*"}, "receivers": ["all"]}],
                 default_receivers=["ops"])
    router = Router(s)

    def route(a: Any) -> list[tuple[str, tuple[str, ...]]]:
        return [(m.route, m.receivers) for m in router.route(alert_labels(a))]

    assert route(xid("llama-70b", "h1")) == [("page", ("pd",))]
    assert route(straggler("llama-70b", "h1")) == [("perf", ("slack",))]  # a warning: not paged
    lab = alert("exp", "straggler", "lab-3/backward", phase="backward")
    assert route(lab) == [("perf", ("slack",)), ("lab", ("all",))]
    assert route(alert("exp", "mfu_drift", "job")) == [("perf", ("slack",))]
    assert route(xid("exp", "h1")) == [("default", ("ops",))]
    assert Router(settings()).route(alert_labels(xid("x", "h")))[0].receivers == ("oncall",)  # no routes: everyone


def test_a_silence_mutes_while_active_and_never_swallows_the_resolve() -> None:
    c = Clock()
    now = T0 + timedelta(seconds=0)
    mute = new_silence({"job": "j", "kind": "straggler"}, timedelta(seconds=100), "draining h1", "alice", now)
    c.feed(mute, straggler("j", "h1"), xid("j", "h1"))
    assert [n.doc["alerts"][0]["alert"] for n in c.at(10)] == ["error_log"]
    assert c.at(99) == []
    assert c.at(101) == []  # the silence ended while it still fires: it pages after a group wait from now
    (late,) = c.at(111)
    assert late.doc["alerts"][0]["alert"] == "straggler"
    again = new_silence({"host": "h1"}, timedelta(hours=1), "maintenance", "bob", T0 + timedelta(seconds=200))
    c.feed(again)
    assert c.at(300) == []  # muted, not ended: no resolve
    ended = c.feed(straggler("j", "h1", status="resolved", at=400), xid("j", "h1", status="resolved", at=400))
    assert brief(ended) == [("oncall", "resolved", "resolved")] * 2
    c.feed(expired(again, T0 + timedelta(seconds=500)))
    assert c.d.state.silences.active(T0 + timedelta(seconds=501)) == []


def test_a_silence_on_incidents_mutes_the_incident() -> None:
    c = Clock()
    c.feed(new_silence({"kind": "incident", "category": "crash_*"}, timedelta(hours=1), "game day", "carol", T0),
           incident("j", "inc-1", "h1", alerts=[]))
    assert c.at(10) == [] and c.d.groups_firing == 0


def test_what_no_route_and_no_default_takes_is_not_sent() -> None:
    c = Clock(settings(routes=[{"job": "other", "receivers": ["oncall"]}]))
    c.feed(xid("j", "h1"))
    assert c.at(10) == []


def test_restart_with_the_log_decides_nothing_again() -> None:
    c = Clock()
    events = [straggler("j", "h1"), xid("j", "h2")]
    c.feed(*events)
    sent = c.at(10)
    fresh = Clock()
    fresh.feed(*events, *events)  # the whole log read again after a restart, twice
    for n in sent:
        fresh.d.log.record(n.group_key, n.receiver, n.sent())
    assert fresh.at(11) == [] and fresh.at(500) == []


def test_datetimes_in_documents_are_utc_iso() -> None:
    c = Clock()
    c.feed(straggler("j", "h1"))
    (n,) = c.at(10)
    assert n.doc["created_at"].endswith("Z") and datetime.fromisoformat(n.doc["created_at"]).tzinfo == UTC


def test_a_decision_taken_again_after_a_failed_save_keeps_its_key() -> None:
    c = Clock()
    c.feed(straggler("j", "h1"))
    first = c.d.decide(T0.timestamp() + 10)  # not recorded: its save failed
    again = c.d.decide(T0.timestamp() + 11)
    assert [n.key for n in first] == [n.key for n in again] and first[0].created < again[0].created
    c.d.record(again)
    c.feed(straggler("j", "h1", status="resolved", at=100))
    (resolve,) = c.at(100)
    assert resolve.seq == 2 and resolve.key != again[0].key
