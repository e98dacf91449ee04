"""Alerts — incidents with the alerts they group, the other alerts, and the history of state changes.

An incident names its culprit (host, rank, its own message) and victims; the alerts linked
to it are listed under it (victims' demoted: they do not page on their own). Alerts of no
incident follow, then every state change, then the unverified claims (alert events that failed the signing
gate, marked as such). Filterable by job, kind, severity, host, status;
the shared time range applies (anchored at each job's latest event): what was last seen in
it or is still firing / open.
"""

from __future__ import annotations

import json

from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.components import notice, panel, selector, stat, table
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.pages.claims import claims_panel
from vigil.dashboard.queries import alerts as q
from vigil.dashboard.queries import incidents as qi
from vigil.dashboard.queries.claims import ALERTS as ALERT_CLAIMS
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.selection import RANGE_LABELS, SEVERITIES, STATUSES, page_href
from vigil.dashboard.store import Row


def _when(ms: object) -> str:
    return to_dt(int(ms)).strftime("%m-%d %H:%M:%S")  # type: ignore[call-overload]


def _evidence(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw or "{}"), indent=1, sort_keys=True)
    except ValueError:
        return raw


def _filter(v: PageView) -> q.AlertFilter:
    return q.AlertFilter(job=v.sel.job, kind=v.sel.kind, severity=v.sel.severity, host=v.sel.host,
                         status=v.sel.status, range_s=v.sel.range_seconds)


def _controls(v: PageView) -> Component:
    opts = q.options(v.store, v.sel.job)
    return html.Div([
        selector("kind", [(k, k) for k in opts.kinds], v.sel.kind, label="alert"),
        selector("severity", [(s, s) for s in SEVERITIES], v.sel.severity, label="severity"),
        selector("host", [(h, h) for h in opts.hosts], v.sel.host, label="host"),
        selector("status", [(s, s) for s in STATUSES], v.sel.status, label="status"),
    ], className="controls")


def _severity(r: Row) -> Component:
    sev = str(r["severity"])
    try:
        before = json.loads(str(r["evidence"]) or "{}").get("severity_before")
    except ValueError:
        before = None
    label = f"{sev} (was {before})" if before else sev
    return html.Span(label, className=f"sev sev-{sev}", title="demoted: a victim of its incident" if before else "")


def _alert_row(v: PageView, r: Row) -> list[object]:
    return [
        html.Span(r["status"], className=f"status status-{r['status']}"), _severity(r), r["alert"],
        dcc.Link(r["host"], href=page_href("/host", v.sel.with_(job=str(r["job_id"])), host=r["host"]))
        if r["host"] else "",
        r["subject"], html.Details([html.Summary(str(r["summary"])), html.Pre(_evidence(str(r["evidence"])))]),
        _when(r["first_ms"]), _when(r["last_ms"]), r["job_id"],
    ]


ALERT_COLUMNS = ["status", "severity", "alert", "host", "subject", "summary (click for evidence)", "first seen",
                 "last seen", "job"]


def _party(v: PageView, job: str, p: qi.Party) -> Component:
    host = dcc.Link(p.host, href=page_href("/host", v.sel.with_(job=job), host=p.host))
    rank = f" rank {p.rank}" if p.rank is not None else " (whole host)"
    return html.Span([host, rank, ": " if p.message else "", html.Code(p.message) if p.message else ""])


def _incident(v: PageView, i: qi.IncidentRow, alerts: list[Row], n: int) -> Component:
    head = html.Div([
        html.Span(i.status, className=f"status status-{'firing' if i.status == 'open' else 'resolved'}"),
        html.Span(i.severity, className=f"sev sev-{i.severity}"), html.Strong(i.category),
        html.Span(f"cause: {i.cause}", className="incident-cause"),
        html.Span(f"{i.confidence} evidence", className=f"incident-confidence confidence-{i.confidence}"),
        html.Span(f"first sign {_when(i.first_ms)} · detected {_when(i.detected_ms)}", className="incident-when"),
        html.Span(i.job_id, className="incident-job"),
    ], className="incident-head")
    victims = ", ".join(p.who for p in i.victims[:32]) + (f" (+{len(i.victims) - 32} more)" if len(i.victims) > 32
                                                         else "")
    linked = sorted(alerts, key=lambda r: (r.get("role") != "culprit", str(r["fingerprint"])))
    return html.Div([
        head, html.P(i.summary, className="incident-summary"),
        html.Div([html.Span("culprit ", className="incident-label"), *[_party(v, i.job_id, c) for c in i.culprits]]
                 if i.culprits else [html.Span("culprit unknown", className="incident-label")],
                 className="incident-culprit"),
        html.Div([html.Span(f"victims ({len(i.victims)}) ", className="incident-label"), victims or "none"],
                 className="incident-victims"),
        table(["role", *ALERT_COLUMNS], [[r.get("role") or "", *_alert_row(v, r)] for r in linked],
              empty="no linked alert matches the filters", class_name="grid incident-alerts"),
        html.Div(f"incident id {i.incident_id}", className="incident-id"),
    ], className=f"incident incident-{i.status}", id=f"incident-{n}")


def _incidents(v: PageView) -> Component:
    f = _filter(v)
    found = qi.incidents(v.store, job=f.job, range_s=f.range_s)
    if not found:
        return html.Div(notice("no incidents: nothing has been grouped under a culprit"), id="incidents-list")
    by_incident: dict[str, list[Row]] = {}
    for r in q.current(v.store, f):
        if r.get("incident_id"):
            by_incident.setdefault(str(r["incident_id"]), []).append(r)
    return html.Div([_incident(v, i, by_incident.get(i.incident_id, []), n) for n, i in enumerate(found)],
                    id="incidents-list")


def _current(v: PageView) -> Component:
    f = _filter(v)
    counts = q.counts(v.store, q.AlertFilter(job=f.job, kind=f.kind, host=f.host, range_s=f.range_s))
    cards = [stat(f"{sev} firing", str(counts.get((sev, "firing"), 0)),
                  tone=sev if counts.get((sev, "firing")) else "") for sev in SEVERITIES]
    shown = {i.incident_id for i in qi.incidents(v.store, job=f.job, range_s=f.range_s)}
    rows = [_alert_row(v, r) for r in q.current(v.store, f) if str(r.get("incident_id") or "") not in shown]
    return html.Div([html.Div(cards, className="stats"), table(ALERT_COLUMNS, rows, id="alerts-table",
                                                               empty="no alerts outside incidents match")])


def _history(v: PageView) -> Component:
    rows = [[_when(r["t_ms"]), html.Span(r["status"], className=f"status status-{r['status']}"),
             html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["alert"], r["subject"], r["summary"],
             r["job_id"]] for r in q.history(v.store, _filter(v))]
    return table(["time (UTC)", "status", "severity", "alert", "subject", "summary", "job"], rows,
                 id="alert-history", empty="no alert events match")


def render(v: PageView) -> Component:
    scope = f"{v.sel.job or 'all jobs'}, {RANGE_LABELS[v.sel.range]}"
    return html.Div([
        panel(None, lambda: _controls(v)),
        panel(f"Incidents — {scope} (and all still open)", lambda: _incidents(v), id="incidents-panel"),
        panel(f"Alerts of no incident — {scope} (and all still firing)", lambda: _current(v), id="alerts-panel"),
        panel(f"History (every state change, {RANGE_LABELS[v.sel.range]})", lambda: _history(v), id="history-panel"),
        claims_panel(v, ALERT_CLAIMS, v.sel.job),
    ])
