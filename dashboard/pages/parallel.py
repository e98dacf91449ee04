"""3D view — which rank, stage or data-parallel group is slow, and who caused the job's incident?

Each rank's mean phase (or step) time over the selected time range (at most 50 of its steps,
evenly spaced), laid out by its (dp, pp, tp) coordinates; by default the phase where one rank
stands out most. Each rank's state is marked: the culprit of the job's incident outlined,
its victims and exited ranks dimmed, slow ranks labelled. Clicking a rank (or `?rank=N`)
selects it: its place in the layout, its state and own message, and the ranks of its tensor-,
pipeline- and data-parallel groups (outlined in the figure). The step window can be
downloaded as a Chrome/Perfetto trace (one track per rank, grouped by data-parallel replica).
"""

from __future__ import annotations

from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.components import graph, notice, panel, selector, table
from vigil.dashboard.figures.parallel import parallel_figure
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import heatmap as qh
from vigil.dashboard.queries import incidents as qi
from vigil.dashboard.queries import parallel as q
from vigil.dashboard.selection import page_href

GROUP_NAMES = {"tp": "tensor-parallel group", "pp": "pipeline-parallel group", "dp": "data-parallel group"}
MAX_STATE_ROWS = 64


def _incident_banner(v: PageView, incident: qi.IncidentRow | None) -> Component:
    if incident is None:
        return html.Div()
    who = ", ".join(p.who for p in incident.culprits) or "culprit unknown"
    return html.Div([
        html.Span(incident.status, className=f"status status-{'firing' if incident.status == 'open' else 'resolved'}"),
        html.Strong(f" {incident.category}: "), html.Span(f"{who} — {incident.summary}"), " ",
        dcc.Link("see it on the alerts page", href=page_href("/alerts", v.sel)),
    ], className="incident-banner", id="parallel-incident")


def _rank_panel(v: PageView, pv: q.ParallelView, states: dict[int, q.RankState], rank: int | None) -> Component:
    cell = next((r for r in pv.ranks if r.rank == rank), None)
    if cell is None:
        return html.Div(notice("click a rank (or pick one above) to see its place and its groups"), id="rank-panel")
    st = states.get(cell.rank)
    groups = q.groups_of(pv.ranks, cell.rank)
    lines = [html.Li([html.Strong(f"{GROUP_NAMES[k]}: "), ", ".join(f"r{r}" for r in members),
                      html.Span(f" ({len(members)} ranks)", className="muted")], className=f"group group-{k}")
             for k, members in groups.items()]
    return html.Div([
        html.H4(f"rank {cell.rank} on {cell.host}"),
        html.P([f"dp {cell.dp} · pp {cell.pp} · tp {cell.tp} · ", html.Strong(st.state if st else "training"),
                f": {st.message}" if st and st.message else "",
                " · ", dcc.Link(f"open {cell.host}", href=page_href("/host", v.sel, host=cell.host))]),
        html.Ul(lines, className="groups"),
    ], id="rank-panel")


def _states_table(pv: q.ParallelView, states: dict[int, q.RankState]) -> Component:
    cells = {r.rank: r for r in pv.ranks}
    shown = sorted((s for s in states.values() if s.state != "training" or len(states) <= 16),
                   key=lambda s: (q.STATE_ORDER.index(s.state), s.rank))[:MAX_STATE_ROWS]
    rows = [[f"r{s.rank}", cells[s.rank].host if s.rank in cells else "",
             f"{cells[s.rank].dp}/{cells[s.rank].pp}/{cells[s.rank].tp}" if s.rank in cells else "",
             html.Span(s.state, className=f"rank-state state-{s.state}"), s.message] for s in shown]
    return table(["rank", "host", "dp/pp/tp", "state", "its own message"], rows, id="rank-states",
                 empty="every rank is training")


def _body(v: PageView) -> Component:
    assert v.job is not None and v.window is not None
    phases = qh.phases(v.store, v.window)
    phase = v.sel.phase if v.sel.phase in phases or v.sel.phase == q.STEP else None
    pv = q.parallel_view(v.store, v.window, phase=phase)
    found = qi.incidents(v.store, job=v.job.job_id, range_s=v.sel.range_seconds, limit=1)
    incident = found[0] if found else None
    states = q.rank_states(pv, incident, q.exits(v.store, v.window))
    rank = int(v.sel.rank) if v.sel.rank is not None and v.sel.rank.isdigit() else None
    groups = q.groups_of(pv.ranks, rank) if rank is not None else {}
    options = [(q.STEP, "whole step"), *((p, p) for p in phases)]
    return html.Div([
        _incident_banner(v, incident),
        html.Div([
            selector("phase", options, phase, label="phase", placeholder=f"auto ({pv.phase or 'step'})"),
            selector("rank", [(str(r.rank), f"rank {r.rank} ({r.host})") for r in pv.ranks], v.sel.rank,
                     label="rank", placeholder="select a rank"),
            html.Button("Download trace (Perfetto)", id="trace-download-button", className="button"),
            dcc.Download(id="trace-download"),
        ], className="controls"),
        graph(parallel_figure(pv, job=v.job.job_id, states=states, selected=rank, groups=groups),
              id={"type": "host-click", "page": "parallel"}),
        _rank_panel(v, pv, states, rank),
        _states_table(pv, states),
    ])


def render(v: PageView) -> Component:
    if v.job is None:
        return notice("no job selected")
    return panel(f"3D-parallel view — {v.job.job_id}", lambda: _body(v), id="parallel-panel")
