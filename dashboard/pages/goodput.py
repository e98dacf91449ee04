"""Goodput — where did the job's time go, and who cost it?

The goodput ledger (vigil.contract.ledger, the one definition `vigil goodput` and the other pages read) of the
selected job over the rolling windows (5 min, 1 h, 1 day, the whole job; each ending at the job's latest event):
every category in seconds and share of the wall clock, the ETTR they imply; the slowdown charged to the hosts
that caused it (each links to its Host page); the checkpoint interval the ledger implies (Young/Daly from the
job's measured failures, save and restore cost) beside the job's current one; and the fleet's ledger in
GPU-hours over the picked range (every job's, windows ending at the fleet's latest event).
"""

from __future__ import annotations

from dash import dcc, html
from dash.development.base_component import Component

from vigil.contract.ckpt_interval import CheckpointInterval, describe
from vigil.contract.ledger import CATEGORIES, WINDOWS, Ledger
from vigil.dashboard.components import fmt_pct, notice, panel, stat, table
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries.ledger import checkpoint_interval, fleet_ledger, job_ledgers
from vigil.dashboard.selection import RANGE_LABELS, page_href


def _secs(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 3600:.1f} h" if v >= 36_000 else f"{v:,.0f} s" if v >= 10 else f"{v:.1f} s"


def _ledger(v: PageView, job: str, ledgers: dict[str, Ledger | None]) -> Component:
    shown = [(w, led) for w, led in ledgers.items() if led is not None]
    if not shown:
        return notice(f"{job}: no completed step yet")
    whole = shown[-1][1]
    cards = [stat("effective training time ratio", fmt_pct(whole.ettr)), stat("wall clock", _secs(whole.wall_s)),
             stat("slowdown", _secs(whole.seconds["slowdown"]), tone="warning" if whole.seconds["slowdown"] else ""),
             stat("sums to the wall clock", "yes" if whole.balanced() else f"+{_secs(whole.over_s)} overlap",
                  tone="" if whole.balanced() else "warning")]
    rows = [[k, *[f"{_secs(led.seconds[k])} ({led.seconds[k] / led.wall_s:.1%})" for _, led in shown]]
            for k in CATEGORIES]
    rows += [["wall clock", *[_secs(led.wall_s) for _, led in shown]],
             ["ETTR", *[fmt_pct(led.ettr) for _, led in shown]]]
    return html.Div([html.Div(cards, className="stats"),
                     table(["category", *[w for w, _ in shown]], rows, id="ledger-table")])


def _charged(v: PageView, ledgers: dict[str, Ledger | None]) -> Component:
    shown = [(w, led) for w, led in ledgers.items() if led is not None]
    hosts = sorted({h for _, led in shown for h in led.slowdown_by},
                   key=lambda h: -max(led.slowdown_by.get(h, 0.0) for _, led in shown))
    rows = [[dcc.Link(h, href=page_href("/host", v.sel, host=h)),
             *[_secs(led.slowdown_by.get(h)) if h in led.slowdown_by else "-" for _, led in shown]] for h in hosts[:20]]
    return table(["host", *[w for w, _ in shown]], rows, id="slowdown-hosts",
                 empty="no slowdown charged to a host (no host's compute ran longer than its peers')")


def _interval(ci: CheckpointInterval | None) -> Component:
    if ci is None:
        return notice("no completed step yet")
    ge = ">= " if ci.bound else ""
    cards = [stat("current interval", _secs(ci.current_s)),
             stat("availability-optimal", f"{ge}{_secs(ci.optimal_s)}" if ci.optimal_s is not None else "-",
                  title="Young/Daly: sqrt(2 x save cost x MTBF), refined"),
             stat("MTBF (measured)", f"{ge}{_secs(ci.mtbf_s)}", title=f"{ci.failures} failures"),
             stat("save blocks", _secs(ci.save_s)), stat("restore (downtime)", _secs(ci.restore_s)),
             stat("waste now / at optimum", f"{fmt_pct(ci.waste_current)} / "
                  f"{fmt_pct(None if ci.bound else ci.waste_optimal)}")]
    return html.Div([html.Div(cards, className="stats"), html.P(describe(ci), id="ckpt-interval-line")])


def _fleet(v: PageView) -> Component:
    f = fleet_ledger(v.store, v.sel.range_seconds)
    if f is None:
        return notice("no job has completed a step")
    rows = [[k, f"{f.gpu_hours[k]:,.2f}", f"{f.gpu_hours[k] / f.wall_gpu_hours:.1%}"] for k in CATEGORIES]
    rows.append(["GPUs' wall clock", f"{f.wall_gpu_hours:,.2f}", "100%"])
    cards = [stat("fleet ETTR", fmt_pct(f.ettr)), stat("GPU-hours", f"{f.wall_gpu_hours:,.2f}"),
             stat("jobs", str(len(f.jobs))), stat("GPUs", f"{sum(f.jobs.values()):,.0f}")]
    return html.Div([html.Div(cards, className="stats"),
                     table(["category", "GPU-hours", "share"], rows, id="fleet-table")])


def render(v: PageView) -> Component:
    if v.job is None:
        return notice("no job yet")
    job = v.job.job_id
    ledgers = job_ledgers(v.store, job, WINDOWS)
    return html.Div([
        panel(f"Where {job}'s wall clock went (rolling windows, ending at its latest event)",
              lambda: _ledger(v, job, ledgers), id="ledger-panel"),
        panel("Slowdown charged to the host that caused it", lambda: _charged(v, ledgers), id="charged-panel"),
        panel("Checkpoint interval the ledger implies", lambda: _interval(checkpoint_interval(v.store, job)),
              id="interval-panel"),
        panel(f"Fleet, GPU-hours — {RANGE_LABELS[v.sel.range]} of the fleet's clock", lambda: _fleet(v),
              id="fleet-panel"),
    ])
