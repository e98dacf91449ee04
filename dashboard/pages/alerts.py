"""Alerts — current and past alerts with their evidence, filterable by job, kind, severity, host, status.

The shared time range applies (anchored at each job's latest event): incidents last seen in
it or still firing, and the state changes that happened in it.
"""

from __future__ import annotations

import json

from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.components import panel, selector, stat, table
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import alerts as q
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.selection import RANGE_LABELS, SEVERITIES, STATUSES, page_href


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


def _current(v: PageView) -> Component:
    f = _filter(v)
    counts = q.counts(v.store, q.AlertFilter(job=f.job, kind=f.kind, host=f.host, range_s=f.range_s))
    cards = [stat(f"{sev} firing", str(counts.get((sev, "firing"), 0)),
                  tone=sev if counts.get((sev, "firing")) else "") for sev in SEVERITIES]
    rows = [[
        html.Span(r["status"], className=f"status status-{r['status']}"),
        html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["alert"],
        dcc.Link(r["host"], href=page_href("/host", v.sel.with_(job=r["job_id"]), host=r["host"])) if r["host"] else "",
        r["subject"], html.Details([html.Summary(r["summary"]), html.Pre(_evidence(r["evidence"]))]),
        _when(r["first_ms"]), _when(r["last_ms"]), r["job_id"],
    ] for r in q.current(v.store, f)]
    return html.Div([html.Div(cards, className="stats"), table(
        ["status", "severity", "alert", "host", "subject", "summary (click for evidence)", "first seen", "last seen",
         "job"], rows, id="alerts-table", empty="no alerts match")])


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
        panel(f"Alerts — {scope} (and all still firing)", lambda: _current(v), id="alerts-panel"),
        panel(f"History (every state change, {RANGE_LABELS[v.sel.range]})", lambda: _history(v), id="history-panel"),
    ])
