"""Overview — which jobs run, and are they healthy?

Every job: latest step time and MFU with their trend over the chosen range (a
sparkline each), effective training time ratio so far, hosts reporting, firing alerts
by severity. The selected job: step time and MFU over the chosen range, charted; its
latest complete checkpoint (age in steps and event time) and what each save cost.
"""

from __future__ import annotations

from dash import dcc, html
from dash.development.base_component import Component

from vigil.contract.severity import WORST_FIRST
from vigil.dashboard.components import fmt_ms, fmt_pct, graph, notice, panel, sparkline, stat, table
from vigil.dashboard.figures.overview import step_figure
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import checkpoints as qc
from vigil.dashboard.queries import heatmap as qh
from vigil.dashboard.queries import overview as q
from vigil.dashboard.queries import trends as qt
from vigil.dashboard.queries.window import to_dt
from vigil.dashboard.selection import page_href


def _alerts_cell(alerts: dict[str, int]) -> Component:
    parts = [html.Span(f"{n} {sev}", className=f"sev sev-{sev}") for sev, n in alerts.items() if n]
    return html.Span(parts) if parts else html.Span("none", className="ok")


def _trend(values: list[float | None], fmt: str, cls: str) -> Component:
    known = [x for x in values if x is not None]
    if not known:
        return html.Span("-")
    span = f"{fmt.format(min(known))} - {fmt.format(max(known))}"
    return html.Span(sparkline(values), className=f"spark {cls}", title=f"{span} over {len(values)} buckets")


def _jobs_table(v: PageView) -> Component:
    health = q.job_health(v.store)
    trends = qt.job_trends(v.store, v.sel.range_seconds)
    rows = []
    for j in v.jobs:
        h = health.get(j.job_id)
        t = trends.get(j.job_id)
        link = dcc.Link(j.job_id, href=page_href("/overview", v.sel, job=j.job_id))
        reporting = "-" if h is None or not h.hosts_known else f"{h.hosts_reporting}/{max(h.hosts_known, j.n_hosts)}"
        rows.append([
            link, j.name, f"{j.world_size} GPUs" if j.world_size else "-",
            f"tp{j.tp} pp{j.pp} dp{j.dp}" if j.world_size else "-",
            "-" if h is None or h.last_step is None else str(h.last_step),
            fmt_ms(None if h is None else h.last_step_ms), _trend(t.step_ms if t else [], "{:,.0f} ms", "step"),
            fmt_pct(None if h is None else h.last_mfu),
            _trend([None if m is None else 100 * m for m in t.mfu] if t else [], "{:.1f}%", "mfu"),
            fmt_pct(None if h is None else h.ettr), reporting,
            _alerts_cell(h.alerts if h else {}), to_dt(j.last_ms).strftime("%Y-%m-%d %H:%M:%S"),
        ])
    return table(["job", "name", "size", "layout", "step", "step time", "step time trend", "MFU", "MFU trend", "ETTR",
                  "hosts reporting", "firing alerts", "latest event (UTC)"], rows, id="jobs-table",
                 empty="no jobs have reported yet")


def _job_detail(v: PageView) -> Component:
    assert v.job is not None and v.window is not None
    health = q.job_health(v.store).get(v.job.job_id)
    series = q.step_series(v.store, v.window, v.settings.max_points)
    cards = []
    if health is not None:
        firing = sum(health.alerts.values())
        worst = next((s for s in WORST_FIRST if health.alerts.get(s)), "")
        cards = [
            stat("effective training time ratio", fmt_pct(health.ettr),
                 tone="bad" if health.ettr is not None and health.ettr < 0.9 else "",
                 title="distinct steps x ideal step time (median + 3 MAD rule) / wall clock (vigil.contract.goodput)"),
            stat("median step time", fmt_ms(health.median_step_ms)),
            stat("latest MFU", fmt_pct(health.last_mfu)),
            stat("hosts reporting", f"{health.hosts_reporting}/{max(health.hosts_known, v.job.n_hosts)}",
                 tone="bad" if health.hosts_reporting < max(health.hosts_known, v.job.n_hosts) else ""),
            stat("firing alerts", str(firing), tone=worst),
        ]
    return html.Div([html.Div(cards, className="stats", id="job-stats"), graph(step_figure(series, v.job.job_id),
                                                                              id="step-graph")])


def _checkpoints(v: PageView) -> Component:
    """Where the job would resume from, and how much training each save blocked."""
    assert v.job is not None and v.window is not None
    last = qc.latest(v.store, v.job.job_id)
    saves = qc.saves(v.store, v.window)
    if last is None and not saves:
        return notice("no checkpoint events from this job (vigil.recovery.checkpoint emits them)")
    blocked = sorted(s.blocked_ms for s in saves if s.blocked_ms > 0)
    cards = [
        stat("latest complete checkpoint", "none" if last is None else f"step {last.step}",
             tone="bad" if last is None else "", title=None if last is None else last.path),
        stat("its age", "-" if last is None or last.age_steps is None else
             f"{last.age_steps} steps / {last.age_s:.0f} s", title="the job's latest step and event time since"),
        stat("blocked per save (median)", fmt_ms(blocked[len(blocked) // 2] if blocked else None),
             title="slowest rank's copy to host memory"),
        stat("failed / skipped saves", "-" if last is None else f"{last.failed} / {last.skipped}",
             tone="bad" if last is not None and last.failed else ""),
    ]
    rows = [[str(s.step), to_dt(s.t_ms).strftime("%H:%M:%S"), fmt_ms(s.blocked_ms), fmt_ms(s.persist_ms),
             f"{s.bytes / 2**20:,.0f} MiB",
             "failed" if s.failed else "committed" if s.committed else "persisting", s.error[:120]]
            for s in saves[:10]]
    return html.Div([html.Div(cards, className="stats", id="checkpoint-stats"),
                     table(["step", "time (UTC)", "blocked", "persist", "state", "outcome", "error"], rows,
                           id="checkpoint-saves", empty="no saves in this time range")])


def _slowest(v: PageView) -> Component:
    """The hosts furthest above their peers in any phase (the heatmap's top rows)."""
    assert v.window is not None
    m = qh.phase_matrix(v.store, v.window, rows=5, mode="worst")
    rows = []
    for h in m.hosts:
        worst = max((c for c in m.cells if c.host == h), key=lambda c: c.dev)
        rows.append([dcc.Link(h, href=page_href("/host", v.sel, host=h)), worst.col, f"{100 * worst.dev:+.1f}%",
                     fmt_ms(worst.mean_ms), fmt_ms(worst.median_ms)])
    return table(["host", "phase", "vs peers", "host mean", "peer median"], rows, id="slowest-hosts",
                 empty="no phase timings in this time range")


def render(v: PageView) -> Component:
    detail: Component
    if v.job is None:
        detail = notice("no job selected" if not v.jobs else f"job {v.sel.job!r} has no telemetry")
    else:
        detail = html.Div([
            panel(f"Job {v.job.job_id}", lambda: _job_detail(v), id="job-panel"),
            panel("Checkpoints", lambda: _checkpoints(v), id="checkpoint-panel"),
            panel("Slowest hosts (vs peers in the same pipeline stage)", lambda: _slowest(v), id="slowest-panel"),
        ])
    return html.Div([panel("Jobs", lambda: _jobs_table(v), id="jobs-panel"), detail])
