"""Network — where did traffic drop or stop?

The NICs that fell furthest below the fleet median (or one host's NICs), with stall
segments shaded and listed; a row links to the host.
"""

from __future__ import annotations

from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.components import graph, notice, panel, selector, table
from vigil.dashboard.figures.network import network_figure
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import host as qh
from vigil.dashboard.queries import network as q
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.selection import page_href


def _body(v: PageView) -> Component:
    assert v.job is not None and v.window is not None
    nv = q.network_view(v.store, v.window, max_points=v.settings.max_points, host=v.sel.host)
    title = (f"{v.sel.host}: NIC throughput vs fleet ({nv.bucket_s} s buckets)" if v.sel.host else
             f"lowest NICs vs fleet median ({nv.bucket_s} s buckets)")
    stalls = [[html.Span(s.kind, className=f"sev sev-{'critical' if s.kind == 'stop' else 'warning'}"),
               dcc.Link(s.host, href=page_href("/host", v.sel, host=s.host)), s.device,
               to_dt(s.start_ms).strftime("%H:%M:%S"), to_dt(s.end_ms).strftime("%H:%M:%S"),
               f"{(s.end_ms - s.start_ms) / 1000:.0f} s", f"{100 * s.min_ratio:.0f}%"] for s in nv.stalls]
    return html.Div([
        html.Div(selector("host", [(h, h) for h in qh.job_hosts(v.store, v.job.job_id)], v.sel.host, label="host",
                          placeholder="lowest NICs of the fleet"), className="controls"),
        graph(network_figure(nv, title=title), id="network-graph"),
        html.H4(f"stalls (below {100 * nv.drop:.0f}% of the fleet median)"),
        table(["kind", "host", "device", "from (UTC)", "to", "for", "lowest"], stalls, id="stalls-table",
              empty="no NIC fell below the threshold in this range"),
    ])


def render(v: PageView) -> Component:
    if v.job is None:
        return notice("no job selected")
    return panel(f"Network — {v.job.job_id}", lambda: _body(v), id="network-panel")
