"""The page shell: header with navigation, job and time-range pickers; the page body; the refresh timer.

`dcc.Location(refresh="callback-nav")` lets callbacks change the URL without a reload,
so the query string is the single source of the selection (bookmarkable, shareable).
"""

from __future__ import annotations

from dataclasses import dataclass

from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.selection import RANGE_LABELS


@dataclass(frozen=True, kw_only=True)
class PageSpec:
    path: str
    label: str
    question: str


PAGES: tuple[PageSpec, ...] = (
    PageSpec(path="/overview", label="Overview", question="Which jobs run, and are they healthy?"),
    PageSpec(path="/heatmap", label="Heatmap", question="Which machine is slow, in which phase?"),
    PageSpec(path="/host", label="Host", question="What is wrong with this machine?"),
    PageSpec(path="/network", label="Network", question="Where did traffic drop or stop?"),
    PageSpec(path="/alerts", label="Alerts", question="What fired, and on what evidence?"),
    PageSpec(path="/parallel", label="3D view", question="Which rank, stage or DP group is slow?"),
    PageSpec(path="/notifications", label="Notifications", question="Who was told what, and what is muted?"),
    PageSpec(path="/recovery", label="Recovery", question="What broke, what was done, and what did it cost?"),
    PageSpec(path="/goodput", label="Goodput", question="Where did the time go, and who cost it?"),
)


def nav_id(spec: PageSpec) -> str:
    return "nav-" + spec.path.strip("/")


def action_bar(enabled: bool) -> Component:
    """The Recovery page's action inputs and confirmation, outside the page body so a refresh keeps them; shown on
    /recovery only (`actions_ui.show_bar`), and read-only without its inputs: nothing to type where nothing acts."""
    off = not enabled
    fields: list[Component] = [
        dcc.Input(id="rec-token", type="password", placeholder="action token", className="rec-input", disabled=off),
        dcc.Input(id="rec-name", type="text", placeholder="your name", className="rec-input", disabled=off),
        dcc.Input(id="rec-reason", type="text", placeholder="reason (required)", className="rec-reason", disabled=off),
    ]
    inputs: list[Component] = [html.Div(fields, id="action-inputs", className="action-inputs", hidden=off)]
    if off:
        inputs.insert(0, html.Span("read-only (no VIGIL_DASHBOARD_ACTION_TOKEN)", className="rec-mode"))
    return html.Div([*inputs, html.Span(id="rec-result", className="rec-result", role="status"),
                     dcc.ConfirmDialog(id="rec-confirm"), dcc.Store(id="rec-pending")],
                    id="action-bar", className="action-bar", hidden=True)


def shell(refresh_s: float, default_range: str, actions: bool = False) -> Component:
    return html.Div([
        dcc.Location(id="url", refresh="callback-nav"),
        dcc.Interval(id="tick", interval=int(refresh_s * 1000), n_intervals=0),
        html.Header([
            html.Div([html.Span("vigil", className="brand"), html.Span("training fleet", className="brand-sub")],
                     className="brand-box"),
            html.Nav([dcc.Link(p.label, href=p.path, id=nav_id(p), className="nav-link") for p in PAGES],
                     className="nav"),
            html.Div([
                dcc.Dropdown(id="job-select", placeholder="latest job", clearable=True, className="job-select"),
                dcc.Dropdown(id="range-select", value=default_range, clearable=False, className="range-select",
                             options=[{"label": lbl, "value": k} for k, lbl in RANGE_LABELS.items()]),
            ], className="pickers"),
        ], className="top"),
        html.Div([html.H2(id="page-title"), html.Span(id="updated", className="updated")], className="title-row"),
        action_bar(actions),
        dcc.Loading(html.Main(id="page"), type="dot", delay_show=800),
    ], className="app")
