"""Payload shapes against the receivers' documented fields (Slack incoming webhooks + Block Kit, PagerDuty
Events API v2, Alertmanager webhook v4, vigil's own v1 document), signing, retry verdicts, settings."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.notify.decide import Clock
from tests.notify.events import alert, incident, straggler, xid
from vigil.notify.formats import alertmanager, finalize, pagerduty, render, slack
from vigil.notify.payload import Notification
from vigil.notify.sender import backoff_s, verdict_of
from vigil.notify.settings import NotifySettings
from vigil.notify.signing import signature, signed_headers, verify
from vigil.settings import SettingsError

pytestmark = pytest.mark.pure


def notifications() -> list[Notification]:
    """An incident (firing, resolved) and a group of two alerts (firing, resolved): the shapes that exist."""
    exits = [alert("j", "process_exit", f"h{i}/rank{i}", severity="error") for i in range(3)]
    inc = incident("j", "j/crash_cascade/h0", "h0", alerts=[a.fingerprint for a in exits], victims=["h1", "h2"])
    c = Clock()
    c.feed(*exits, inc, straggler("j", "h7"), straggler("j", "h8"))
    c.at(10)
    c.feed(inc.model_copy(update={"status": "resolved", "ts": inc.ts + timedelta(seconds=50), "event_id": "r" * 16}),
           straggler("j", "h7", status="resolved", at=50), straggler("j", "h8", status="resolved", at=50))
    c.at(100)
    assert sorted((bool(n.doc["incident"]), n.status) for n in c.sent) == [
        (False, "firing"), (False, "resolved"), (True, "firing"), (True, "resolved")]
    return c.sent


def rfc3339(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- vigil.notification v1 (docs/notifications.md "Notification payload") -------------------------------------------

V1_FIELDS = {"schema", "version", "key", "receiver", "status", "reason", "sequence", "group", "title", "job_id",
             "severity", "incident", "incident_id", "alerts", "alerts_total", "counts", "links", "created_at"}
V1_ALERT_FIELDS = {"fingerprint", "alert", "subject", "host", "status", "severity", "summary", "first_seen",
                   "last_seen", "evidence", "role", "muted_by", "url"}


def test_the_webhook_document_has_the_documented_v1_fields() -> None:
    for n in notifications():
        doc = json.loads(render("webhook", n.doc))
        assert set(doc) == V1_FIELDS and (doc["schema"], doc["version"]) == ("vigil.notification", 1)
        assert doc["key"] == n.key and doc["status"] in ("firing", "resolved") and doc["sequence"] >= 1
        assert set(doc["group"]) == {"key", "route", "labels"} and set(doc["links"]) == {"dashboard", "alerts"}
        assert doc["alerts"] and all(set(a) >= V1_ALERT_FIELDS for a in doc["alerts"])
        assert all(a["role"] in ("alert", "listed", "victim") for a in doc["alerts"])
        rfc3339(doc["created_at"])


# --- Slack incoming webhook: https://api.slack.com/messaging/webhooks, Block Kit reference -------------

SLACK_TOP = {"text", "blocks", "attachments", "thread_ts", "mrkdwn", "unfurl_links", "unfurl_media"}
SLACK_BLOCKS = {"header", "section", "actions", "context", "divider"}


def test_slack_message_follows_incoming_webhook_and_block_kit_limits() -> None:
    for n in notifications():
        msg = slack(n.doc)
        assert set(msg) <= SLACK_TOP and isinstance(msg["text"], str) and 0 < len(msg["text"]) <= 40000
        assert 0 < len(msg["blocks"]) <= 50
        for b in msg["blocks"]:
            assert b["type"] in SLACK_BLOCKS
            if b["type"] == "header":
                assert b["text"]["type"] == "plain_text" and 0 < len(b["text"]["text"]) <= 150
            if b["type"] == "section":
                assert b["text"]["type"] in ("mrkdwn", "plain_text") and 0 < len(b["text"]["text"]) <= 3000
            if b["type"] == "actions":
                assert 0 < len(b["elements"]) <= 25
                for e in b["elements"]:
                    assert e["type"] == "button" and e["text"]["type"] == "plain_text" and len(e["text"]["text"]) <= 75
                    assert e["url"].startswith("http://dash.example/") and len(e["url"]) <= 3000
            if b["type"] == "context":
                assert 0 < len(b["elements"]) <= 10 and all(e["type"] in ("mrkdwn", "plain_text") for e in b["elements"])
    inc = next(n for n in notifications() if n.doc["incident"] and n.status == "firing")
    text = json.dumps(slack(inc.doc))
    assert "*Culprit:* h0 rank 5: RuntimeError: CUDA error: uncorrectable NVLink" in text
    assert "http://dash.example/host?job=j&host=h0" in text


def test_slack_escapes_what_mrkdwn_would_read_as_markup() -> None:
    c = Clock()
    c.feed(alert("j", "error_log", "h1/<script>"))
    (n,) = c.at(10)
    message = slack(n.doc)
    sections = [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]
    assert "<script>" not in "".join(sections) and "&lt;script&gt;" in "".join(sections)
    n.doc["title"], n.doc["alerts"][0]["alert"] = "<!channel> <https://evil|vigil>", "<!here>"
    message = slack(n.doc)  # a forged alert's every field: the notification's top-level text included
    shown = message["text"] + "".join(b["text"]["text"] for b in message["blocks"] if b["type"] == "section")
    assert "<!" not in shown and "<https" not in shown and "&lt;!channel&gt;" in message["text"]


# --- PagerDuty Events API v2: https://developer.pagerduty.com/docs/events-api-v2/trigger-events/ --------

PD_TOP = {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client", "client_url"}
PD_PAYLOAD = {"summary", "source", "severity", "timestamp", "component", "group", "class", "custom_details"}


def test_pagerduty_events_trigger_and_resolve_by_dedup_key() -> None:
    from vigil.notify.settings import Receiver

    pd = Receiver(name="pd", kind="pagerduty", url="https://events.pagerduty.com/v2/enqueue", secret=None,
                  routing_key="R0UTING", timeout_s=5, concurrency=1, max_pending=10)
    for n in notifications():
        stored = render("pagerduty", n.doc)
        assert b"R0UTING" not in stored  # the routing key is a secret: added only when sending
        event = json.loads(finalize(pd, stored))
        assert set(event) <= PD_TOP and event["routing_key"] == "R0UTING" and len(event["dedup_key"]) <= 255
        expected_key = n.doc["incident_id"] or n.doc["group"]["key"]
        assert event["dedup_key"] == expected_key
        if n.status == "resolved":
            assert event == {"routing_key": "R0UTING", "event_action": "resolve", "dedup_key": expected_key}
            continue
        p = event["payload"]
        assert event["event_action"] == "trigger" and set(p) <= PD_PAYLOAD
        assert {"summary", "source", "severity"} <= set(p) and 0 < len(p["summary"]) <= 1024 and p["source"]
        assert p["severity"] in ("critical", "error", "warning", "info") and isinstance(p["custom_details"], dict)
        rfc3339(p["timestamp"])
        assert all(set(link) == {"href", "text"} for link in event["links"])
    firing_incident = next(n for n in notifications() if n.doc["incident"] and n.status == "firing")
    assert pagerduty(firing_incident.doc)["payload"]["source"] == "h0"


# --- Alertmanager webhook: https://prometheus.io/docs/alerting/latest/configuration/#webhook_config ------

AM_TOP = {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels", "commonLabels",
          "commonAnnotations", "externalURL", "alerts"}
AM_ALERT = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}


def _str_map(m: Any) -> bool:
    return isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in m.items())


def test_alertmanager_webhook_payload_version_4() -> None:
    for n in notifications():
        doc = alertmanager(n.doc)
        assert set(doc) == AM_TOP and doc["version"] == "4" and doc["status"] == n.status
        assert isinstance(doc["groupKey"], str) and isinstance(doc["truncatedAlerts"], int)
        assert all(_str_map(doc[k]) for k in ("groupLabels", "commonLabels", "commonAnnotations"))
        assert doc["externalURL"] == "http://dash.example" and doc["alerts"]
        for a in doc["alerts"]:
            assert set(a) == AM_ALERT and a["status"] in ("firing", "resolved")
            assert _str_map(a["labels"]) and _str_map(a["annotations"]) and "alertname" in a["labels"]
            rfc3339(a["startsAt"])
            assert (a["endsAt"] == "0001-01-01T00:00:00Z") == (a["status"] == "firing")
            assert len(a["fingerprint"]) == 16 and int(a["fingerprint"], 16) >= 0
    inc = alertmanager(next(n for n in notifications() if n.doc["incident"] and n.status == "firing").doc)
    assert inc["alerts"][0]["labels"]["alertname"] == "incident" and inc["commonLabels"]["job"] == "j"


# --- signing, verdicts, backoff ---------------------------------------------------------------------------

def test_signature_verifies_and_rejects_a_tampered_body_and_a_stale_timestamp() -> None:
    body = b'{"status":"firing"}'
    headers = signed_headers(b"k3y", 1_800_000_000, body)
    assert headers["X-Vigil-Signature"] == signature(b"k3y", 1_800_000_000, body)
    assert verify(b"k3y", headers, body, now=1_800_000_010)
    assert not verify(b"k3y", headers, body.replace(b"firing", b"resolved"), now=1_800_000_010)
    assert not verify(b"other", headers, body, now=1_800_000_010)
    assert not verify(b"k3y", headers, body, now=1_800_000_000 + 301)  # a replay, minutes later
    assert not verify(b"k3y", {}, body, now=1_800_000_000)


def test_only_429_and_5xx_are_retried_and_backoff_doubles_within_the_cap() -> None:
    assert [verdict_of(s) for s in (200, 202, 204)] == ["delivered"] * 3
    assert [verdict_of(s) for s in (429, 500, 502, 503)] == ["retry"] * 4
    assert [verdict_of(s) for s in (301, 400, 401, 403, 404, 410, 413)] == ["failed"] * 7
    rng = random.Random(1)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (30, 60.0)):
        delays = [backoff_s(attempt, 1.0, 60.0, rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(set(delays)) > 100  # jittered


# --- settings ------------------------------------------------------------------------------------------------

def test_receivers_and_routes_from_the_config_file_with_secrets_from_files(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hook.secret").write_text("sup3r-s3cret\n")
    (tmp_path / "pd.key").write_text("PDKEY123")
    (tmp_path / "vigil.toml").write_text(f"""
[notify]
group_wait_s = 5
[notify.receivers.oncall]
url = "https://hooks.example.com/vigil?token=t0k3n"
secret_file = "{tmp_path / 'hook.secret'}"
[notify.receivers.pd]
kind = "pagerduty"
routing_key_file = "{tmp_path / 'pd.key'}"
[[notify.routes]]
job = "llama-*"
min_severity = "error"
receivers = ["pd", "oncall"]
continue = true
""")
    monkeypatch.setenv("VIGIL_CONFIG", str(tmp_path / "vigil.toml"))
    monkeypatch.setenv("VIGIL_NOTIFY_GROUP_INTERVAL_S", "7")
    s = NotifySettings.load()
    r = s.resolved_receivers()
    assert (s.group_wait_s, s.group_interval_s, s.routes[0].continue_) == (5, 7, True)
    assert r["oncall"].secret == b"sup3r-s3cret" and r["pd"].routing_key == "PDKEY123"
    shown = repr(s) + str(s) + repr(r) + str(s.model_dump())
    assert "sup3r" not in shown and "PDKEY" not in shown and "t0k3n" not in shown
    assert repr(r["oncall"]) == "Receiver('oncall', webhook, https://hooks.example.com, signed=True)"


def test_bad_receiver_settings_name_the_setting_never_the_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_NOTIFY_RECEIVERS", json.dumps({"x": {"kind": "slack", "url_file": str(tmp_path / "no")}}))
    with pytest.raises(SettingsError, match=r"VIGIL_NOTIFY_RECEIVERS.*url_file=.*/no: cannot read"):
        NotifySettings.load()
    monkeypatch.setenv("VIGIL_NOTIFY_RECEIVERS", json.dumps({"x": {"url": "ftp://h/p0ss", "secret": "hush-hush"}}))
    with pytest.raises(SettingsError, match="url must be http") as err:
        NotifySettings.load()
    assert "hush-hush" not in str(err.value) and "p0ss" not in str(err.value)
    monkeypatch.setenv("VIGIL_NOTIFY_RECEIVERS", "{}")
    monkeypatch.setenv("VIGIL_NOTIFY_ROUTES", json.dumps([{"receivers": ["nobody"]}]))
    with pytest.raises(SettingsError, match=r"unknown receivers \['nobody'\]"):
        NotifySettings.load()


def test_one_env_var_makes_a_receiver_for_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_NOTIFY_WEBHOOK_URL", "http://127.0.0.1:9000/hook")
    monkeypatch.setenv("VIGIL_NOTIFY_WEBHOOK_SECRET", "abc")
    s = NotifySettings.load()
    assert list(s.resolved_receivers()) == ["webhook"] and s.default_route_receivers() == ["webhook"]
    c = Clock(s)
    c.feed(xid("j", "h1"))
    assert [n.receiver for n in c.at(60)] == ["webhook"]
