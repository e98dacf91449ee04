"""Heatmap — which machine is slow, and in which phase?

Hosts x phases (or x step windows of one phase), colour = deviation from the peer
median, worst hosts on top. Clicking a cell opens that host's page.
"""

from __future__ import annotations

from dash import html
from dash.development.base_component import Component

from vigil.dashboard.components import graph, notice, panel, selector
from vigil.dashboard.figures.heatmap import heatmap_figure
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import heatmap as q


def _controls(v: PageView, phases: list[str], phase: str | None) -> Component:
    parts = [
        selector("view", [("phase", "hosts x phases"), ("window", "hosts x step windows")], v.sel.view,
                 kind="radio", label="view"),
        selector("rows", [("worst", f"worst {v.settings.heatmap_rows}"), ("all", "all hosts, worst first"),
                          ("name", "all hosts, by name")], v.sel.rows, kind="radio", label="rows"),
    ]
    if v.sel.view == "window":
        parts.append(selector("phase", [(p, p) for p in phases], phase, label="phase", placeholder="phase"))
    return html.Div(parts, className="controls")


def _body(v: PageView) -> Component:
    assert v.window is not None
    win, sel, n = v.window, v.sel, v.settings.heatmap_rows
    phases = q.phases(v.store, win)
    if sel.view == "window":
        by_phase = q.phase_matrix(v.store, win, rows=1, mode="worst")
        worst_phase = max(by_phase.cells, key=lambda c: abs(c.dev)).col if by_phase.cells else None
        phase = sel.phase if sel.phase in phases else worst_phase
        if phase is None:
            return html.Div([_controls(v, phases, None), notice("no phase timings in this time range")])
        m = q.window_matrix(v.store, win, phase=phase, rows=n, mode=sel.rows)
        title = f"'{phase}' time per host and step window ({m.steps_per_col} steps per column)"
    else:
        phase = None
        m = q.phase_matrix(v.store, win, rows=n, mode=sel.rows)
        title = "mean phase time per host"
    shown = f"{len(m.hosts)} of {m.hosts_total} hosts" if m.hosts_total else ""
    return html.Div([
        _controls(v, phases, phase),
        html.P([f"{title}; colour = deviation from the (lower) median of hosts in the same pipeline stage; in "
                "waiting phases (communication, bubbles) the waiting a host caused: red = the others waited for it. "
                f"{shown}. Click a cell to open the host."], className="hint"),
        graph(heatmap_figure(m, title=title), id={"type": "host-click", "page": "heatmap"}),
    ])


def render(v: PageView) -> Component:
    if v.job is None:
        return notice("no job selected")
    return panel(f"Phase-time heatmap — {v.job.job_id}", lambda: _body(v), id="heatmap-panel")
