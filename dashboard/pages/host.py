"""Host — what is wrong with this machine?

Its alerts, its hardware fault history (what its kernel, NVML and sysfs reported; its cordons), phase times
against its peers, heartbeats, NIC throughput per port,
GPU utilisation / temperature / clocks / throttle reasons, and recent classified log lines.
"""

from __future__ import annotations

import json

from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.components import graph, notice, panel, selector, table
from vigil.dashboard.figures.host import gpu_figure, heartbeat_figure, nic_figure, phase_figure
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import alerts as qa
from vigil.dashboard.queries import faults as qf
from vigil.dashboard.queries import heatmap as qh
from vigil.dashboard.queries import host as q
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.selection import page_href


def _time(ms: object) -> str:
    return to_dt(int(ms)).strftime("%H:%M:%S")  # type: ignore[call-overload]


def _identity(v: PageView, host: str) -> Component:
    assert v.window is not None
    hv = q.host_view(v.store, v.window, host, max_points=v.settings.max_points)
    ident = hv.identity
    facts = [] if ident is None else [
        ("ip", ident["ip"]), ("pod", ident["pod"]), ("node", ident["node"]), ("agent", ident["agent_version"]),
        ("GPUs", ident["gpus"]), ("processes running", f"{ident['procs_running']}/{ident['procs_total']}"),
        ("last heartbeat (UTC)", to_dt(int(ident["last_ms"])).strftime("%Y-%m-%d %H:%M:%S")),
        ("behind job clock", f"{(v.job.last_ms - int(ident['last_ms'])) / 1000:.1f} s" if v.job else "-"),
    ]
    logs = [[_time(r["t_ms"]), r["rank"] if r["rank"] is not None else "-", r["category"],
             html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["message"],
             r["repeats"]] for r in hv.logs]
    counts = [[r["category"], html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["lines"],
               _time(r["last_ms"])] for r in hv.log_counts]
    exits = [[_time(r["t_ms"]), r["rank"], r["exit_code"], r["signal"], r["summary"]] for r in hv.exits]
    return html.Div([
        html.Dl([item for k, val in facts for item in (html.Dt(k), html.Dd(str(val)))], className="facts")
        if facts else notice("no heartbeat from this host in the job's history"),
        graph(heartbeat_figure(hv), id="host-heartbeats"),
        graph(nic_figure(hv), id="host-nics"),
        graph(gpu_figure(hv), id="host-gpus"),
        html.H4("log lines by category"),
        table(["category", "severity", "lines", "last"], counts, empty="no classified log lines in this range"),
        html.H4("recent log lines"),
        table(["time", "rank", "category", "severity", "message", "repeats"], logs, id="host-logs",
              empty="no log lines in this range"),
        html.H4("process exits"),
        table(["time", "rank", "exit code", "signal", "summary"], exits, empty="no process exits in this range"),
    ])


def _alerts(v: PageView, host: str) -> Component:
    rows = qa.current(v.store, qa.AlertFilter(job=v.job.job_id if v.job else None, host=host))
    return table(["status", "severity", "alert", "subject", "summary", "last seen"], [[
        r["status"], html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["alert"], r["subject"],
        html.Details([html.Summary(r["summary"]), html.Pre(json.dumps(json.loads(r["evidence"] or "{}"), indent=1))]),
        _time(r["last_ms"])] for r in rows], id="host-alerts", empty="no alerts for this host")


def _faults(v: PageView, host: str) -> Component:
    assert v.job is not None
    fh = qf.fault_history(v.store, v.job.job_id, host)
    facts = [[r["category"], r["xid"] if r["xid"] is not None else "-", r["gpu"] if r["gpu"] is not None else "-",
              r["sources"], html.Span(r["severity"], className=f"sev sev-{r['severity']}"), r["action"] or "-",
              r["lines"], _time(r["first_ms"]), _time(r["last_ms"]), r["message"]] for r in fh.facts]
    cordons = [[to_dt(int(r["t_ms"])).strftime("%Y-%m-%d %H:%M:%S"), r["action"], r["actor"], r["job_id"],
                r["incident_id"], r["reason"]] for r in fh.cordons]
    return html.Div([
        table(["category", "xid", "GPU", "source", "severity", "catalog action", "lines", "first", "last", "latest"],
              facts, id="host-faults", empty="no hardware fault reported by this host's kernel, NVML or sysfs"),
        html.H4("cordons"),
        table(["time (UTC)", "action", "by", "job", "incident", "reason"], cordons, id="host-cordons",
              empty="never cordoned"),
    ])


def _phases(v: PageView, host: str) -> Component:
    assert v.window is not None
    return graph(phase_figure(qh.host_phases(v.store, v.window, host), host), id="host-phases")


def _picker(v: PageView) -> Component:
    assert v.job is not None and v.window is not None
    hosts = q.job_hosts(v.store, v.job.job_id)
    worst = [] if v.sel.host else qh.phase_matrix(v.store, v.window, rows=5, mode="worst").hosts
    return html.Div([
        selector("host", [(h, h) for h in hosts], v.sel.host, label="host", placeholder="pick a host"),
        html.Span(["slowest hosts: "] + [dcc.Link(h, href=page_href("/host", v.sel, host=h), className="chip")
                                         for h in worst], className="hint") if worst else None,
    ], className="controls")


def render(v: PageView) -> Component:
    if v.job is None:
        return notice("no job selected")
    host = v.sel.host
    parts = [panel(None, lambda: _picker(v))]
    if not host:
        parts.append(notice("pick a host, or click a cell of the heatmap"))
        return html.Div(parts)
    parts += [
        panel(f"Alerts — {host}", lambda: _alerts(v, host), id="host-alerts-panel"),
        panel(f"Hardware fault history — {host}", lambda: _faults(v, host), id="host-faults-panel"),
        panel("Phase times", lambda: _phases(v, host)),
        panel(f"Host {host}", lambda: _identity(v, host), id="host-panel"),
    ]
    return html.Div(parts)
