"""Notifications — who was told what, did it arrive, and what is muted?

The notifier's delivery log (what, to whom, attempts, state, latency from decision to
delivery, the receiver's last answer), a summary per receiver, and the silences. The shared
job picker filters the log; the range counts back from now (wall clock: deliveries happen
in real time, whatever the job's event time).
"""

from __future__ import annotations

import json

from dash import html
from dash.development.base_component import Component

from vigil.dashboard.components import panel, stat, table
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import notifications as q
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.selection import RANGE_LABELS

_STATE_TONE = {"delivered": "status-resolved", "pending": "status-firing", "failed": "status-firing",
               "expired": "status-firing", "dropped": "status-firing"}


def _when(ms: object) -> str:
    return to_dt(int(ms)).strftime("%m-%d %H:%M:%S") if ms else "-"  # type: ignore[call-overload]


def _receivers(v: PageView) -> Component:
    rows = q.summary(v.store, job=v.sel.job, range_s=v.sel.range_seconds)
    total = {k: sum(int(r[k]) for r in rows) for k in ("pending", "delivered", "failed", "lost")}
    cards = [stat("delivered", str(total["delivered"])),
             stat("pending", str(total["pending"]), tone="warning" if total["pending"] else ""),
             stat("failed / lost", str(total["failed"] + total["lost"]),
                  tone="critical" if total["failed"] + total["lost"] else "")]
    body = [[r["receiver"], r["kind"], r["pending"], r["delivered"], r["failed"], r["lost"], r["attempts"],
             f"{float(r['p50_latency_ms']) / 1000:.1f} s" if r["delivered"] else "-",
             _when(r["last_delivered_ms"]), _when(r["oldest_pending_ms"]) if r["pending"] else "-", r["last_error"]]
            for r in rows]
    return html.Div([html.Div(cards, className="stats"), table(
        ["receiver", "kind", "pending", "delivered", "failed", "expired/dropped", "attempts", "median latency",
         "last delivered", "oldest pending", "last error"], body, id="receivers-table",
        empty="nothing sent in this range (receivers: VIGIL_NOTIFY_WEBHOOK_URL or [notify.receivers])")])


def _log(v: PageView) -> Component:
    rows = [[_when(r["created_ms"]), r["receiver"], html.Span(r["status"], className=f"status status-{r['status']}"),
             r["reason"], html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["title"],
             html.Span(r["state"], className=_STATE_TONE.get(str(r["state"]), "")), r["attempts"],
             r["http_status"] or "-", f"{float(r['latency_ms']) / 1000:.1f} s" if r["state"] == "delivered" else "-",
             r["error"], html.Code(str(r["key"]))]
            for r in q.deliveries(v.store, job=v.sel.job, range_s=v.sel.range_seconds)]
    return table(["decided (UTC)", "to", "status", "reason", "severity", "what", "delivery", "attempts", "HTTP",
                  "latency", "last error", "idempotency key"], rows, id="deliveries-table",
                 empty="no notifications in this range")


def _silences(v: PageView) -> Component:
    rows = [[html.Code(str(r["silence_id"])), ", ".join(f"{k}={g}" for k, g in json.loads(r["matchers"]).items()),
             _when(r["starts_ms"]), _when(r["ends_ms"]), r["created_by"], r["reason"],
             html.Span(r["state"], className="status-firing" if r["state"] == "active" else "")]
            for r in q.silences(v.store)]
    return table(["id", "matches", "from (UTC)", "until (UTC)", "by", "reason", "state"], rows, id="silences-table",
                 empty="no silences (vigil silence add --match job=J --for 2h --reason ...)")


def render(v: PageView) -> Component:
    scope = f"{v.sel.job or 'all jobs'}, {RANGE_LABELS[v.sel.range]} (wall clock)"
    return html.Div([
        panel(f"Receivers — {scope}", lambda: _receivers(v), id="receivers-panel"),
        panel(f"Delivery log — {scope}", lambda: _log(v), id="deliveries-panel"),
        panel("Silences (active and pending)", lambda: _silences(v), id="silences-panel"),
    ])
