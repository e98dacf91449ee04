"""Receiver formats: the notification document as each kind of receiver expects it.

    webhook        the document itself (README: "Notification payload"), signed
    slack          an incoming-webhook message: `text` (the fallback line) and Block Kit `blocks`
                   (header, summary with the culprit, the alerts, a button to the dashboard)
    pagerduty      an Events API v2 event: `trigger` / `resolve`, `dedup_key` = the incident id
                   (or the group key), `payload.summary/source/severity/custom_details`, `links`
    alertmanager   Prometheus Alertmanager's webhook payload (version "4"), so receivers built for
                   Alertmanager (ticket bridges, chat relays) work unchanged

`render` runs once, when the decision is taken, and its bytes are stored: they hold no
secret. `finalize` adds what is secret just before sending (PagerDuty's routing key).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import urlparse

from vigil.notify.payload import encode
from vigil.notify.settings import Receiver, ReceiverKind

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of a firing alert
_SLACK_ALERTS = 10
_EMOJI = {"critical": ":red_circle:", "error": ":large_orange_circle:", "warning": ":large_yellow_circle:",
          "info": ":large_blue_circle:"}


def render(kind: ReceiverKind, doc: dict[str, Any]) -> bytes:
    if kind == "slack":
        return encode(slack(doc))
    if kind == "pagerduty":
        return encode(pagerduty(doc))
    if kind == "alertmanager":
        return encode(alertmanager(doc))
    return encode(doc)


def finalize(receiver: Receiver, body: bytes) -> bytes:
    """The bytes to send: the stored body, with the receiver's secret fields added."""
    if receiver.kind != "pagerduty":
        return body
    return encode({"routing_key": receiver.routing_key, **json.loads(body)})


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _culprit(doc: dict[str, Any]) -> str:
    inc = doc.get("incident")
    if inc and inc.get("culprits"):
        c = inc["culprits"][0]
        rank = f" rank {c['rank']}" if c.get("rank") is not None else ""
        msg = f": {c['message']}" if c.get("message") else ""
        return f"{c['host']}{rank}{msg}"
    firing = [a for a in doc["alerts"] if a["status"] == "firing"] or doc["alerts"]
    return f"{firing[0]['host']} ({firing[0]['subject']})" if firing else ""


def slack(doc: dict[str, Any]) -> dict[str, Any]:
    status = doc["status"]
    summary = doc["incident"]["summary"] if doc.get("incident") else doc["title"].split(": ", 1)[-1]
    lines = [f"{_EMOJI.get(doc['severity'], '')} *{_esc(status.upper())}* · {_esc(doc['severity'])} · "
             f"job `{_esc(doc['job_id'])}`",
             _esc(summary)]
    if culprit := _culprit(doc):
        lines.append(f"*Culprit:* {_esc(culprit)}")
    alerts = [f"• {_esc(a['status'])} *{_esc(a['alert'])}* {_esc(a['subject'])}: {_esc(a['summary'])}"
              for a in doc["alerts"][:_SLACK_ALERTS]]
    if doc["alerts_total"] > _SLACK_ALERTS:
        alerts.append(f"… and {doc['alerts_total'] - _SLACK_ALERTS} more")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": doc["title"][:150], "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:3000]}},
    ]
    if alerts:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(alerts)[:3000]}})
    blocks.append({"type": "actions", "elements": [
        {"type": "button", "text": {"type": "plain_text", "text": "Open in vigil"}, "url": doc["links"]["dashboard"]},
        {"type": "button", "text": {"type": "plain_text", "text": "Alerts of the job"}, "url": doc["links"]["alerts"]}]})
    blocks.append({"type": "context", "elements": [
        {"type": "mrkdwn", "text": _esc(f"vigil · {doc['reason']} · group {doc['group']['key']} · #{doc['sequence']}")[:3000]}]})
    # every field escaped: the top-level text (the notification's) is mrkdwn too, and a forged alert's title,
    # name or status must not mention <!channel> or plant a link
    return {"text": _esc(doc["title"])[:3000], "blocks": blocks, "unfurl_links": False}


def _source(doc: dict[str, Any]) -> str:
    """The host it is about: the incident's first culprit, else the first alert's host."""
    inc = doc.get("incident")
    if inc and inc.get("culprits"):
        return str(inc["culprits"][0]["host"])
    return str(doc["alerts"][0]["host"]) if doc["alerts"] else str(doc["job_id"])


def dedup_key(doc: dict[str, Any]) -> str:
    key = doc.get("incident_id") or doc["group"]["key"]
    return key if len(key) <= 255 else "vigil-" + hashlib.sha256(key.encode()).hexdigest()


def pagerduty(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["status"] == "resolved":
        return {"event_action": "resolve", "dedup_key": dedup_key(doc)}
    inc = doc.get("incident")
    return {
        "event_action": "trigger", "dedup_key": dedup_key(doc),
        "payload": {
            "summary": doc["title"][:1024], "source": _source(doc),
            "severity": doc["severity"], "timestamp": doc["created_at"], "component": doc["job_id"],
            "group": doc["job_id"], "class": inc["category"] if inc else doc["alerts"][0]["alert"] if doc["alerts"] else "",
            "custom_details": {"reason": doc["reason"], "key": doc["key"], "incident": inc,
                               "alerts": [{k: a[k] for k in ("status", "severity", "alert", "host", "subject", "summary")}
                                          for a in doc["alerts"][:20]], "alerts_total": doc["alerts_total"]}},
        "links": [{"href": doc["links"]["dashboard"], "text": "vigil dashboard"},
                  {"href": doc["links"]["alerts"], "text": "alerts of the job"}],
        "client": "vigil", "client_url": doc["links"]["alerts"],
    }


def _am_alert(labels: dict[str, str], annotations: dict[str, str], status: str, starts: str, ends: str,
              url: str, fingerprint: str) -> dict[str, Any]:
    return {"status": status, "labels": labels, "annotations": annotations, "startsAt": starts,
            "endsAt": ends if status == "resolved" else ZERO_TIME, "generatorURL": url,
            "fingerprint": hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    return {k: v for k, v in maps[0].items() if all(m.get(k) == v for m in maps[1:])}


def alertmanager(doc: dict[str, Any]) -> dict[str, Any]:
    alerts = []
    if inc := doc.get("incident"):
        labels = {"alertname": "incident", "job": doc["job_id"], "severity": inc["severity"],
                  "category": inc["category"], "cause": inc["cause"], "incident_id": inc["incident_id"]}
        if inc.get("culprits"):
            labels["host"] = inc["culprits"][0]["host"]
        ends = doc["created_at"] if inc["status"] == "resolved" else ZERO_TIME
        alerts.append(_am_alert(labels, {"summary": inc["summary"], "culprit": _culprit(doc)},
                                "resolved" if inc["status"] == "resolved" else "firing", inc["first_sign"], ends,
                                doc["links"]["dashboard"], inc["incident_id"]))
    for a in doc["alerts"]:
        labels = {"alertname": a["alert"], "job": doc["job_id"], "host": a["host"], "severity": a["severity"],
                  "subject": a["subject"], "vigil_fingerprint": a["fingerprint"]}
        if doc.get("incident_id"):
            labels["incident_id"] = doc["incident_id"]
        alerts.append(_am_alert(labels, {"summary": a["summary"], "evidence": json.dumps(a["evidence"], sort_keys=True)},
                                a["status"], a["first_seen"], a["last_seen"], a["url"], a["fingerprint"]))
    base = urlparse(doc["links"]["alerts"])
    return {
        "version": "4", "groupKey": doc["group"]["key"], "truncatedAlerts": max(0, doc["alerts_total"] - len(doc["alerts"])),
        "status": doc["status"], "receiver": doc["receiver"], "groupLabels": dict(doc["group"]["labels"]),
        "commonLabels": _common([x["labels"] for x in alerts]),
        "commonAnnotations": _common([x["annotations"] for x in alerts]),
        "externalURL": f"{base.scheme}://{base.netloc}", "alerts": alerts,
    }
