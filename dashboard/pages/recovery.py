"""Recovery — what broke, what the controller did about it, how long it took, what it cost?

Per job: goodput (the effective training time ratio and the recoveries that cost it), each
recovery as incident -> plan -> steps with their timings -> outcome (detect, decide, pause,
diagnose, restart, checkpoint load, steps lost), the job's agents, the hosts cordoned now and
the operator requests, the unverified claims (decisions that failed the signing gate, marked as such), and the resource advisor's latest advice (recommended node count, curve,
hot/starved hosts, data-loader share, how the previous advice scored). Buttons (cordon, evict, uncordon, approve) carry their request in their
id (`{"type": "rec-act", ...}`); they are disabled unless the dashboard may act (see
dashboard/actions.py, which checks again on the server), and every click asks for confirmation
(the action bar in the shell: token, name, reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dash import html
from dash.development.base_component import Component

from vigil.dashboard.components import notice, panel, stat, table
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.pages.claims import claims_panel
from vigil.dashboard.queries import advice as qa
from vigil.dashboard.queries import recovery as q
from vigil.dashboard.queries.claims import RECOVERY as RECOVERY_CLAIMS

READ_ONLY = "read-only: set VIGIL_DASHBOARD_ACTION_TOKEN to allow actions"
TIMINGS = (("detect", "detect_s"), ("decide", "decide_s"), ("pause", "pause_s"), ("diagnose", "diagnose_s"),
           ("restart", "restart_s"), ("checkpoint load", "checkpoint_load_s"), ("total", "total_s"))


def _t(v: Any) -> str:
    return v.strftime("%m-%d %H:%M:%S") if isinstance(v, datetime) and v.year > 1970 else "-"


def _s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f} s"


def button(v: PageView, action: str, target: str, job: str, label: str | None = None) -> Component:
    """An action button; disabled (with the reason as its title) when the dashboard is read-only."""
    return html.Button(label or action, id={"type": "rec-act", "action": action, "target": target, "job": job},
                       className=f"act act-{action}", disabled=not v.actions,
                       title=f"{action} {target}" if v.actions else READ_ONLY)


def _goodput(v: PageView, job: str, recs: list[q.Recovery]) -> Component:
    g = q.goodput(v.store, job, recs)
    if g is None:
        return notice("no goodput yet: the job has no completed step")
    lost = sum(c["steps_lost"] or 0 for c in g.costs)
    cards = [stat("effective training time ratio", f"{g.ratio:.1%}",
                  title="distinct steps x ideal step time (median + 3 MAD rule) / wall clock (vigil.contract.goodput)"),
             stat("steps x ideal step time / wall", f"{g.iterations} x {g.step_ms:.0f} ms / {g.wall_s:.0f} s"),
             stat("recoveries", str(len(g.costs))),
             stat("steps lost", str(lost), tone="warning" if lost else "")]
    rows = [[html.Code(c["incident_id"]), c["result"], _s(c["total_s"]),
             "-" if c["steps_lost"] is None else str(c["steps_lost"]), _s(c["lost_s"])] for c in g.costs]
    return html.Div([html.Div(cards, className="stats", id="goodput-stats"),
                     table(["recovery", "result", "down", "steps lost", "cost (down + lost steps)"], rows,
                           id="goodput-costs", empty="no recovery cost this job anything")])


def _recovery(v: PageView, job: str, r: q.Recovery, resumable: bool) -> Component:
    o = r.outcome
    result = str(o["result"]) if o else ("skipped" if r.skipped else "in progress")
    head = [html.Code(r.incident_id), html.Span(f" [{r.cls or '-'}] {r.category} {r.cause}".rstrip()),
            html.Span(result, className=f"status status-{'resolved' if result == 'resumed' else 'firing'}")]
    if r.awaiting_approval:
        head.append(button(v, "approve", r.incident_id, job, "approve"))
    if resumable:
        head.append(button(v, "approve", f"{r.incident_id}/resume", job, "resume (approve)"))
    body: list[Any] = [html.Div(head, className="rec-head"), html.P(r.skipped or r.summary, className="rec-summary")]
    if r.culprits:
        body.append(html.P("culprits: " + ", ".join(r.culprits)))
    if o is not None:
        timing = [stat(label, _s(o[key])) for label, key in TIMINGS]
        timing.append(stat("steps lost", "-" if o["steps_lost"] is None else str(o["steps_lost"]),
                           title=f"last step {o['last_step']}, resumed from checkpoint {o['checkpoint_step']} "
                                 f"at step {o['first_step']}"))
        body.append(html.Div(timing, className="stats rec-timings"))
        where = []
        if o["cordoned"]:
            where.append("cordoned " + ", ".join(o["cordoned"]))
        if o["hosts"]:
            where.append("resumed on " + ", ".join(o["hosts"]))
        if o["checkpoint_step"] is not None:
            where.append(f"from checkpoint step {o['checkpoint_step']} (first step {o['first_step']})")
        if where:
            body.append(html.P("; ".join(where)))
    rows = [[s["action"], s["target"], html.Span(s["state"], className=f"step-{s['state']}"),
             _t(s["began"]), _t(s["ended_at"]),
             "-" if s["duration_ms"] is None else f"{float(s['duration_ms']) / 1000:.1f} s",
             s["end_reason"] or s["last_reason"]] for s in r.steps]
    body.append(table(["step", "target", "status", "started (UTC)", "ended (UTC)", "took", "reason"], rows,
                      empty="no steps yet"))
    return html.Div(body, className="recovery")


def _recoveries(v: PageView, job: str, recs: list[q.Recovery]) -> Component:
    if not recs:
        return notice("no recoveries for this job (it is not under recovery control, or nothing went wrong)")
    halted = q.halted(recs)
    return html.Div([_recovery(v, job, r, r is halted) for r in recs], id="recoveries")


def _copies(m: Mapping[str, Any]) -> str:
    """Its ranks' snapshot copies: pushed to the buddy (and the newest step it holds), staged from peers, refused."""
    if not m["buddy"] and not m["pushed"] and not m["staged"]:
        return "-"
    out = f"{m['pushed']} to {m['buddy'] or '-'} ({m['pushed_bytes'] / 2**20:,.0f} MiB"
    out += f", step {m['buddy_step']})" if m["buddy_step"] is not None else ")"
    if m["staged"]:
        out += f"; {m['staged']} staged"
    refused = {k: n for k, n in dict(m["refused"] or {}).items() if n}
    if refused:
        out += "; refused " + ", ".join(f"{k} {n}" for k, n in sorted(refused.items()))
    return out


def _hosts(v: PageView, job: str) -> Component:
    rows = [[m["host"], m["agent_state"], m["gen"], "-" if m["step"] is None else m["step"], _copies(m), _t(m["seen"]),
             html.Span([button(v, "cordon", str(m["host"]), job), button(v, "evict", str(m["host"]), job)])]
            for m in q.members(v.store, job)]
    return table(["host", "agent", "generation", "last step", "snapshot copies", "last report (UTC)", ""], rows,
                 id="rec-hosts", empty="no agents of this job reported (vigil run --nodes MIN:MAX ...)")


def _cordons(v: PageView, job: str) -> Component:
    rows = [[c["target"], c["job"], c["who"], c["why"], c["incident"] or "-", _t(c["at"]),
             button(v, "uncordon", str(c["target"]), job)] for c in q.cordons(v.store)]
    return table(["host", "job", "by", "why", "incident", "since (UTC)", ""], rows, id="rec-cordons",
                 empty="no host is cordoned")


def _requests(v: PageView, job: str) -> Component:
    rows = [[_t(r["asked"]), r["action"], r["target"], r["who"], r["state"], r["why"]]
            for r in q.requests(v.store, job)]
    return table(["asked (UTC)", "action", "host", "by", "status", "reason / result"], rows, id="rec-requests",
                 empty="no operator requests")


def _advice(v: PageView, job: str) -> Component:
    a = qa.latest(v.store, job)
    if a is None:
        return notice(f"no advice recorded: `vigil advise --job {job} --publish` records one")
    nodes = "-" if a["nodes"] is None else str(a["nodes"])
    cards = [stat("recommended nodes", nodes, tone="" if a["nodes"] == a["current"] else "warning",
                  title="where throughput stops scaling" + (" (still scaling)" if a["still_scaling"] else "")),
             stat("now", "-" if a["current"] is None else str(a["current"])),
             stat("predicted throughput", "-" if a["predicted"] is None else f"{float(a['predicted']):,.0f}/s"),
             stat("data loader", "-" if a["data_share"] is None else f"{float(a['data_share']):.1%} of step time")]
    if a["scored"]:
        sc = a["scored"]
        cards.append(stat("previous advice", f"{float(sc['error_pct']):+.1f} %",
                          title=f"{sc['advice_id']}: predicted {float(sc['predicted']):,.0f}/s on {sc['nodes']} "
                                f"nodes, measured {float(sc['measured']):,.0f}/s"))
    rows = [[p["nodes"], f"{float(p['throughput']):,.0f}", p["steps"]] for p in a["curve"]]
    hosts = [f"hot: {', '.join(a['hot'])}" if a["hot"] else "", f"starved: {', '.join(a['starved'])}"
             if a["starved"] else ""]
    return html.Div([html.Div(cards, className="stats", id="advice-stats"),
                     html.P(f"{a['advice_id']} at {_t(a['ts'])} UTC; " + ("; ".join(h for h in hosts if h)
                                                                         or "no hot or starved host")),
                     table(["nodes", "throughput /s", "steps"], rows, id="advice-curve", empty="no curve"),
                     html.Ul([html.Li(r) for r in a["reasons"]], id="advice-reasons")])


def render(v: PageView) -> Component:
    job = v.sel.job or (v.job.job_id if v.job else None)
    if job is None:
        return notice("no job yet")
    cache: dict[str, list[q.Recovery]] = {}

    def recs() -> list[q.Recovery]:
        if "r" not in cache:
            cache["r"] = q.recoveries(v.store, job)
        return cache["r"]

    return html.Div([
        html.P("" if v.actions else READ_ONLY, className="rec-mode", id="rec-mode"),
        panel(f"Goodput — {job}", lambda: _goodput(v, job, recs()), id="goodput-panel"),
        panel("Recoveries (newest first)", lambda: _recoveries(v, job, recs()), id="recoveries-panel"),
        panel("Resource advice (latest)", lambda: _advice(v, job), id="advice-panel"),
        panel("Hosts of the job", lambda: _hosts(v, job), id="rec-hosts-panel"),
        panel("Cordoned hosts (all jobs)", lambda: _cordons(v, job), id="rec-cordons-panel"),
        panel("Operator requests", lambda: _requests(v, job), id="rec-requests-panel"),
        claims_panel(v, RECOVERY_CLAIMS, job),
    ])
