"""3D view — is the slowness one rank, one host, one pipeline stage or one data-parallel group?

Each rank's mean phase (or step) time over the selected time range (at most 50 of its
steps, evenly spaced), laid out by its (dp, pp, tp) coordinates; clicking a rank opens its host.
A waiting phase (grad_sync, bubble, ...) shows the waiting each rank caused, not what it suffered.
"""

from __future__ import annotations

from dash import html
from dash.development.base_component import Component

from vigil.dashboard.components import graph, notice, panel, selector
from vigil.dashboard.figures.parallel import parallel_figure
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import heatmap as qh
from vigil.dashboard.queries import parallel as q


def _body(v: PageView) -> Component:
    assert v.job is not None and v.window is not None
    phases = qh.phases(v.store, v.window)
    phase = v.sel.phase if v.sel.phase in phases else None
    waiting = phase is not None and phase in qh.waiting_phases(v.store, v.window)
    pv = q.parallel_view(v.store, v.window, phase=phase, waiting=waiting)
    return html.Div([
        html.Div(selector("phase", [(p, p) for p in phases], phase, label="phase", placeholder="whole step"),
                 className="controls"),
        graph(parallel_figure(pv, job=v.job.job_id), id={"type": "host-click", "page": "parallel"}),
    ])


def render(v: PageView) -> Component:
    if v.job is None:
        return notice("no job selected")
    return panel(f"3D-parallel view — {v.job.job_id}", lambda: _body(v), id="parallel-panel")
